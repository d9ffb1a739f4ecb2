//! Requests as the fuzz run sends them, in-process, through the same `serve::answer` every
//! connection of Hangar's servers goes through (body limit with 413, then the axum router), and
//! a stand-in apiserver so that handlers which talk to Kubernetes run without a cluster.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use hangar::serve::Limits;
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};

/// Body limit of the servers under test: lower than the defaults (25 MB, 8 MiB) so that
/// over-limit bodies cost little to make; the code path is the same.
pub const BODY_LIMIT: usize = 256 * 1024;

/// One request.
#[derive(Clone, Debug)]
pub struct HttpInput {
    pub method: Method,
    pub path: String,
    /// In order; names may repeat. Values are bytes (not necessarily UTF-8).
    pub headers: Vec<(&'static str, Vec<u8>)>,
    pub body: Vec<u8>,
    /// Sent in chunks of unknown length, as with chunked transfer encoding, instead of as one
    /// buffer of known length.
    pub streamed: bool,
}

impl HttpInput {
    /// A POST of `body` to `path` with `headers`, in one buffer.
    pub fn post(path: &str, headers: Vec<(&'static str, Vec<u8>)>, body: Vec<u8>) -> Self {
        Self {
            method: Method::POST,
            path: path.to_owned(),
            headers,
            body,
            streamed: false,
        }
    }

    /// The values of header `name`, in order.
    pub fn header_values(&self, name: &str) -> impl Iterator<Item = &[u8]> {
        self.headers
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// The first value of `name`, as HeaderMap::get sees it.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.header_values(name).next()
    }

    /// Whether the declared `Content-Length` is over [`BODY_LIMIT`]: answered 413 before any
    /// handler runs.
    pub fn declared_over_limit(&self) -> bool {
        self.header("content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|d| d > BODY_LIMIT as u64)
    }

    /// Whether the body itself is over [`BODY_LIMIT`]: answered 413 once a handler reads it.
    pub fn body_over_limit(&self) -> bool {
        self.body.len() > BODY_LIMIT
    }

    /// Size for the allocation bound: body plus headers.
    pub fn size(&self) -> usize {
        self.body.len()
            + self
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>()
    }

    /// The request. Header values `HeaderValue` refuses (control characters, which hyper
    /// refuses before any handler) are never generated.
    pub fn request(&self) -> Request<Body> {
        let body = if self.streamed {
            let chunks: Vec<Result<Bytes, Infallible>> = self
                .body
                .chunks(16 * 1024)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            Body::from_stream(futures::stream::iter(chunks))
        } else {
            Body::from(self.body.clone())
        };
        let mut request = Request::builder()
            .method(self.method.clone())
            .uri(&self.path)
            .body(body)
            .expect("method and path are valid");
        for (name, value) in &self.headers {
            let value = HeaderValue::from_bytes(value).expect("generated header values are valid");
            request
                .headers_mut()
                .append(HeaderName::from_static(name), value);
        }
        request
    }

    /// The request for the failure file: headers shown as text (lossy), body kept apart.
    pub fn describe(&self) -> Value {
        json!({
            "method": self.method.as_str(),
            "path": self.path,
            "headers": self.headers.iter()
                .map(|(n, v)| json!([n, String::from_utf8_lossy(v)]))
                .collect::<Vec<_>>(),
            "streamed": self.streamed,
            "body_bytes": self.body.len(),
        })
    }
}

/// Answers `input` through `router` within the fuzz limits, as a connection would; returns
/// the status and the buffered response body.
pub async fn send(router: &Router, input: &HttpInput) -> (StatusCode, Bytes) {
    let limits = Limits::new(1, BODY_LIMIT);
    let Ok(response) = hangar::serve::answer(router.clone(), limits, input.request()).await;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    (status, body)
}

/// A Kubernetes client whose apiserver is a map from path to object: a GET or PATCH of a path
/// in it answers that object, every other request 404. No network, no cluster.
pub fn apiserver(objects: BTreeMap<String, Value>) -> kube::Client {
    let objects: Arc<BTreeMap<String, Bytes>> = Arc::new(
        objects
            .into_iter()
            .map(|(path, v)| (path, Bytes::from(serde_json::to_vec(&v).expect("JSON"))))
            .collect(),
    );
    let not_found = Bytes::from(
        serde_json::to_vec(
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404, "message": "not found"}),
        )
        .expect("JSON"),
    );
    let service = tower::service_fn(move |request: Request<kube::client::Body>| {
        let found = objects.get(request.uri().path()).cloned();
        let not_found = not_found.clone();
        async move {
            let (status, body) = match found {
                Some(body) => (StatusCode::OK, body),
                None => (StatusCode::NOT_FOUND, not_found),
            };
            let response = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(body))
                .expect("valid response");
            Ok::<_, Infallible>(response)
        }
    });
    kube::Client::new(service, "fuzz")
}

/// A header value of odd but valid bytes: visible ASCII, spaces and obs-text (non-UTF-8).
pub fn odd_header_value(rng: &mut fastrand::Rng) -> Vec<u8> {
    (0..rng.usize(0..=64))
        .map(|_| match rng.u32(0..4) {
            0 => rng.u8(0x80..=0xff),
            1 => b' ',
            _ => rng.u8(0x21..=0x7e),
        })
        .collect()
}
