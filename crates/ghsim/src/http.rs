//! Pieces every ghsim endpoint shares: GitHub's error body, pagination with `Link` headers.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use crate::world::SimError;

/// Where GitHub's error bodies point.
pub const DOCS_URL: &str = "https://docs.github.com/rest";

/// A GitHub-shaped error response (`basic-error`: `message`, `documentation_url`, `status`).
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Message.
    pub message: String,
}

impl ApiError {
    /// An error with a status and message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// 404 Not Found.
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not Found")
    }
}

impl From<SimError> for ApiError {
    fn from(e: SimError) -> Self {
        let status = match &e {
            SimError::NotFound => StatusCode::NOT_FOUND,
            SimError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            SimError::Forbidden(_) => StatusCode::FORBIDDEN,
            SimError::Conflict(_) => StatusCode::CONFLICT,
            SimError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            SimError::BadRequest(_) => StatusCode::BAD_REQUEST,
        };
        Self::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "message": self.message,
            "documentation_url": DOCS_URL,
            "status": self.status.as_u16().to_string(),
        });
        (self.status, Json(body)).into_response()
    }
}

/// `per_page` and `page` query parameters.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct PageQuery {
    /// Items per page (default 30, max 100).
    #[serde(default, deserialize_with = "number")]
    pub per_page: Option<usize>,
    /// Page number (from 1).
    #[serde(default, deserialize_with = "number")]
    pub page: Option<usize>,
}

/// A number that may arrive as a string: query structs embed [`PageQuery`] with
/// `#[serde(flatten)]`, which hands every query value over as a string.
fn number<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(usize),
        Text(String),
    }
    match Option::<Raw>::deserialize(de)? {
        None => Ok(None),
        Some(Raw::Number(n)) => Ok(Some(n)),
        Some(Raw::Text(t)) => t.parse().map(Some).map_err(serde::de::Error::custom),
    }
}

/// Cuts one page out of `items` and builds the `Link` header (`next`, `last`, `first`, `prev`),
/// with URLs under `public` and the request's path and query.
pub fn paginate<T>(
    items: Vec<T>,
    query: PageQuery,
    uri: &Uri,
    public: &Url,
) -> (Vec<T>, Option<HeaderValue>) {
    let per_page = query.per_page.unwrap_or(30).clamp(1, 100);
    let page = query.page.unwrap_or(1).max(1);
    let total = items.len();
    let last = total.div_ceil(per_page).max(1);
    let slice: Vec<T> = items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    if last == 1 {
        return (slice, None);
    }
    let link_to = |p: usize| {
        let mut url = public.clone();
        url.set_path(uri.path());
        let pairs: Vec<(String, String)> =
            url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                .filter(|(k, _)| k != "page")
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
        {
            let mut q = url.query_pairs_mut();
            q.clear();
            for (k, v) in &pairs {
                q.append_pair(k, v);
            }
            q.append_pair("page", &p.to_string());
        }
        url.to_string()
    };
    let mut rels = Vec::new();
    if page > 1 {
        rels.push(format!("<{}>; rel=\"prev\"", link_to(page - 1)));
    }
    if page < last {
        rels.push(format!("<{}>; rel=\"next\"", link_to(page + 1)));
        rels.push(format!("<{}>; rel=\"last\"", link_to(last)));
    }
    if page > 1 {
        rels.push(format!("<{}>; rel=\"first\"", link_to(1)));
    }
    (slice, HeaderValue::from_str(&rels.join(", ")).ok())
}

/// A JSON response with a status and an optional `Link` header.
pub fn json_response(status: StatusCode, body: Value, link: Option<HeaderValue>) -> Response {
    let mut response = (status, Json(body)).into_response();
    if let Some(link) = link {
        response.headers_mut().insert("link", link);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_links() {
        let public = Url::parse("http://127.0.0.1:9/").unwrap();
        let uri: Uri = "/orgs/o/actions/runners?per_page=2&page=2".parse().unwrap();
        let (items, link) = paginate(
            (1..=5).collect(),
            PageQuery {
                per_page: Some(2),
                page: Some(2),
            },
            &uri,
            &public,
        );
        assert_eq!(items, vec![3, 4]);
        let link = link.unwrap();
        let link = link.to_str().unwrap();
        assert!(
            link.contains(
                "<http://127.0.0.1:9/orgs/o/actions/runners?per_page=2&page=3>; rel=\"next\""
            ),
            "{link}"
        );
        assert!(link.contains("page=1>; rel=\"prev\""));
        assert!(link.contains("page=3>; rel=\"last\""));
        assert_eq!(
            hangar_github::client::next_link(link).unwrap(),
            "http://127.0.0.1:9/orgs/o/actions/runners?per_page=2&page=3"
        );
    }

    #[test]
    fn single_page_has_no_link_and_per_page_is_capped() {
        let public = Url::parse("http://x/").unwrap();
        let uri: Uri = "/r".parse().unwrap();
        let (items, link) = paginate(
            (1..=150).collect::<Vec<_>>(),
            PageQuery {
                per_page: Some(500),
                page: None,
            },
            &uri,
            &public,
        );
        assert_eq!(items.len(), 100);
        assert!(link.is_some());
        let (items, link) = paginate(vec![1], PageQuery::default(), &uri, &public);
        assert_eq!((items, link), (vec![1], None));
    }
}
