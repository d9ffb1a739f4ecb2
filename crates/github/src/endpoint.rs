//! Which host serves the REST API, and which URL runners are configured with.
//!
//! The rules are ARC's (see `arc.md` §2.4 and the scaleset client's `config.go`):
//! - `github.com` / `www.github.com` → API `https://api.github.com/`;
//! - GHE.com data residency, `<tenant>.ghe.com` → API `https://api.<tenant>.ghe.com/`;
//! - any other host is GitHub Enterprise Server → API `https://<host>/api/v3/`;
//! - legacy `GITHUB_ENTERPRISE_URL`: `/api/v3/` is appended unless the host starts with `api.`
//!   or contains `.api.` (it already names an API host);
//! - an explicit override (`GITHUB_URL`, a proxy, or ghsim) is used verbatim.
//!
//! The web URL is what `config.sh --url` receives (`https://github.com/<org>`); for GHES it is
//! the host without `/api/v3`.

use url::Url;

use crate::scope::Scope;

/// Why a GitHub URL was rejected.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The text is not an absolute URL.
    #[error("invalid GitHub URL {url:?}")]
    Invalid {
        /// The rejected input.
        url: String,
        /// The parser's complaint.
        #[source]
        source: url::ParseError,
    },
    /// The URL has no host or a non-HTTP scheme.
    #[error("GitHub URL {url:?} must be http(s) with a host")]
    NotHttp {
        /// The rejected input.
        url: String,
    },
}

/// The REST API base and the web base of one GitHub installation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    api: Url,
    web: Url,
}

impl Default for Endpoint {
    fn default() -> Self {
        Self::github_com()
    }
}

impl Endpoint {
    /// github.com.
    pub fn github_com() -> Self {
        Self {
            api: Url::parse("https://api.github.com/").expect("static URL"),
            web: Url::parse("https://github.com/").expect("static URL"),
        }
    }

    /// From the web URL of a GitHub installation (`https://github.com`,
    /// `https://tenant.ghe.com`, `https://ghes.example.com`), by the scaleset rules. Any path
    /// is ignored: pass a config URL like `https://github.com/org/repo` as well.
    pub fn from_web_url(url: &str) -> Result<Self, EndpointError> {
        let web = origin(url)?;
        let host = web.host_str().unwrap_or_default().to_ascii_lowercase();
        let mut api = web.clone();
        if host == "github.com" || host == "www.github.com" {
            return Ok(Self::github_com());
        } else if host.ends_with(".ghe.com") {
            api.set_host(Some(&format!("api.{host}")))
                .expect("a valid host stays valid with a prefix");
        } else {
            api.set_path("/api/v3/");
        }
        Ok(Self { api, web })
    }

    /// From legacy ARC's `GITHUB_ENTERPRISE_URL`: `/api/v3/` is appended to the URL unless its
    /// host already names an API host (starts with `api.` or contains `.api.`). The web URL is
    /// the URL's origin.
    pub fn from_enterprise_url(url: &str) -> Result<Self, EndpointError> {
        let mut api = parse(url)?;
        let host = api.host_str().unwrap_or_default().to_ascii_lowercase();
        if !api.path().ends_with('/') {
            let path = format!("{}/", api.path());
            api.set_path(&path);
        }
        let names_api = host.starts_with("api.") || host.contains(".api.");
        let has_api_path = api.path().ends_with("/api/v3/");
        if !names_api && !has_api_path {
            let path = format!("{}api/v3/", api.path());
            api.set_path(&path);
        }
        let web = origin(url)?;
        Ok(Self { api, web })
    }

    /// An explicit API base used verbatim (ARC's `GITHUB_URL`, an API proxy, or ghsim), with
    /// the web URL runners are configured with.
    pub fn custom(api: &str, web: &str) -> Result<Self, EndpointError> {
        let mut api = parse(api)?;
        if !api.path().ends_with('/') {
            let path = format!("{}/", api.path());
            api.set_path(&path);
        }
        Ok(Self {
            api,
            web: origin(web)?,
        })
    }

    /// The REST API base URL, ending in `/`.
    pub fn api_url(&self) -> &Url {
        &self.api
    }

    /// The web base URL, ending in `/`.
    pub fn web_url(&self) -> &Url {
        &self.web
    }

    /// An API URL from path segments (each percent-encoded as one segment).
    pub fn api(&self, segments: &[&str]) -> Url {
        let mut url = self.api.clone();
        url.path_segments_mut()
            .expect("http URLs have paths")
            .pop_if_empty()
            .extend(segments);
        url
    }

    /// The URL a runner of `scope` is configured with (`config.sh --url`).
    pub fn runner_config_url(&self, scope: &Scope) -> Url {
        let mut url = self.web.clone();
        let path = scope.config_path();
        url.path_segments_mut()
            .expect("http URLs have paths")
            .pop_if_empty()
            .extend(path.split('/'));
        url
    }
}

fn parse(url: &str) -> Result<Url, EndpointError> {
    let parsed = Url::parse(url.trim()).map_err(|source| EndpointError::Invalid {
        url: url.to_owned(),
        source,
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(EndpointError::NotHttp {
            url: url.to_owned(),
        });
    }
    Ok(parsed)
}

fn origin(url: &str) -> Result<Url, EndpointError> {
    let mut parsed = parse(url)?;
    parsed.set_path("/");
    parsed.set_query(None);
    parsed.set_fragment(None);
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_of(web: &str) -> String {
        Endpoint::from_web_url(web).unwrap().api_url().to_string()
    }

    #[test]
    fn hosted_and_server_urls() {
        assert_eq!(api_of("https://github.com"), "https://api.github.com/");
        assert_eq!(
            api_of("https://www.github.com/org"),
            "https://api.github.com/"
        );
        assert_eq!(
            api_of("https://octo.ghe.com/org/repo"),
            "https://api.octo.ghe.com/"
        );
        assert_eq!(
            api_of("https://ghes.example.com"),
            "https://ghes.example.com/api/v3/"
        );
        assert_eq!(api_of("http://ghes:8080/org"), "http://ghes:8080/api/v3/");
    }

    #[test]
    fn web_url_drops_the_path() {
        let e = Endpoint::from_web_url("https://ghes.example.com/org/repo").unwrap();
        assert_eq!(e.web_url().as_str(), "https://ghes.example.com/");
    }

    #[test]
    fn legacy_enterprise_url_rule() {
        let api = |u| {
            Endpoint::from_enterprise_url(u)
                .unwrap()
                .api_url()
                .to_string()
        };
        assert_eq!(
            api("https://ghes.example.com"),
            "https://ghes.example.com/api/v3/"
        );
        assert_eq!(
            api("https://ghes.example.com/api/v3"),
            "https://ghes.example.com/api/v3/"
        );
        assert_eq!(
            api("https://api.ghes.example.com"),
            "https://api.ghes.example.com/"
        );
        assert_eq!(
            api("https://x.api.example.com/"),
            "https://x.api.example.com/"
        );
    }

    #[test]
    fn custom_base_is_verbatim() {
        let e = Endpoint::custom("http://127.0.0.1:9000/proxy", "http://127.0.0.1:9000").unwrap();
        assert_eq!(
            e.api(&["orgs", "a b", "actions", "runners"]).as_str(),
            "http://127.0.0.1:9000/proxy/orgs/a%20b/actions/runners"
        );
    }

    #[test]
    fn runner_config_urls() {
        let e = Endpoint::github_com();
        assert_eq!(
            e.runner_config_url(&Scope::repo("o", "r")).as_str(),
            "https://github.com/o/r"
        );
        assert_eq!(
            e.runner_config_url(&Scope::enterprise("e")).as_str(),
            "https://github.com/enterprises/e"
        );
    }

    #[test]
    fn rejects_non_http() {
        assert!(Endpoint::from_web_url("ftp://x").is_err());
        assert!(Endpoint::from_web_url("github.com").is_err());
    }
}
