//! A loopback HTTPS proxy between clients (the `hangar run` replicas of a chaos run) and the
//! kube-apiserver of a control plane, which injects the apiserver's own failure modes on
//! demand.
//!
//! [`FaultProxy::start`] listens on `127.0.0.1:<free port>` and serves the control plane's
//! own apiserver certificate (`<dir>/pki/apiserver.crt`: SAN 127.0.0.1, signed by the control
//! plane's CA), so a copy of a kubeconfig of that control plane with only `server:` changed
//! ([`FaultProxy::rewrite_kubeconfig`]) works unchanged.
//!
//! **Identity:** every request is forwarded with the credentials of the kubeconfig the proxy
//! was started with (the control plane's admin client certificate, `system:masters`), not the
//! caller's: a TLS client certificate cannot be forwarded, and the proxy does not ask for one.
//! The chaos run's replicas use that same admin kubeconfig, so their identity and RBAC are what
//! they would be without the proxy; a client with another identity would be upgraded to admin.
//!
//! Responses stream: a watch (`?watch=true`, `?watch=1`) is relayed event by event as the
//! apiserver sends it. The faults, switched at run time through [`Faults`] (a cheap `Arc`
//! handle):
//! - [`Faults::disconnect_watches`]: every watch stream open now ends (cleanly, as the
//!   apiserver ends one at its timeout); clients must watch again.
//! - [`Faults::set_watch_gone`]: while on, a new watch request that carries a resourceVersion
//!   (other than `0`, which means "any") is answered as kube-apiserver answers one whose
//!   version was compacted away: HTTP 200 with one `ERROR` event whose object is a `Status`
//!   with code 410 and reason `Expired` ("too old resource version"), then the end of the
//!   stream. A kube-rs watcher must list again.
//! - [`Faults::set_write_conflicts`]: while the rate is above 0, that share (drawn from a
//!   seeded RNG) of optimistic-concurrency writes — a PUT or a non-apply PATCH whose body
//!   carries a `resourceVersion`, subresources such as `/status` included — is answered
//!   `409 Conflict` with the apiserver's `Status` ("Operation cannot be fulfilled on …: the
//!   object has been modified; …") without reaching it. Writes without a resourceVersion and
//!   server-side apply never conflict this way on a real apiserver either, so they are left
//!   alone.
//! - [`Faults::set_writes_timing_out`]: while on, every write (POST, PUT, PATCH, DELETE) is
//!   answered as kube-apiserver answers one etcd did not commit in time: `504` with a
//!   `Status` of reason `Timeout`, without reaching it. Reads and watches still work, as
//!   they do from the apiserver's watch cache while etcd is slow or without a leader.
//! - [`Faults::set_deletes_timing_out`]: the same for DELETE requests alone, so that a client's
//!   deletions fail while what leads up to them (creations, annotations, statuses) works.
//! - [`Faults::set_watch_delay`]: while set for a resource, every byte of its watch streams
//!   (open ones too) reaches the client that long after the apiserver sent it, in order, as
//!   from an apiserver whose watch cache lags behind etcd under load. Writes and lists are
//!   answered at once, so a client's own writes are acknowledged long before its watch shows
//!   them.
//!
//! [`Faults::requests`] counts the requests the proxy forwarded, by verb and resource: its
//! clients' alone, which the apiserver's own metrics do not separate.
//!
//! When the apiserver cannot be reached (it is being restarted), a request is answered 503
//! with a `Status`, as a load balancer in front of it would.
//!
//! Bounded: at most [`MAX_CONNECTIONS`] connections at once (more are closed on accept), a
//! TLS handshake and request headers within [`HEADER_TIMEOUT`], a request body of at most
//! [`MAX_BODY_BYTES`], and an answer to a request that is not a watch within
//! [`REQUEST_TIMEOUT`].

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
use serde_json::json;
use tokio::sync::{Semaphore, watch};

use crate::control_plane::admin_client;

/// Connections open at once; more are closed as soon as they are accepted.
pub const MAX_CONNECTIONS: usize = 512;
/// For the TLS handshake and for each request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// For the apiserver's answer to a request that is not a watch (a watch's headers included).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest request body forwarded.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum FaultProxyError {
    /// A file could not be read or written.
    #[error("failed to {action} {path}: {source}")]
    Io {
        /// What we were doing.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The certificate or key is not usable.
    #[error("the serving certificate {path} is not usable: {reason}")]
    Tls {
        /// The certificate or key file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The kubeconfig is not usable.
    #[error("the kubeconfig {path} is not usable: {reason}")]
    Kubeconfig {
        /// The kubeconfig.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The faults in force and what they did; shared by the proxy and whoever injects.
#[derive(Clone, Debug)]
pub struct Faults {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Bumped by [`Faults::disconnect_watches`]; each open watch ends when it changes.
    disconnects: watch::Sender<u64>,
    watch_gone: std::sync::atomic::AtomicBool,
    writes_timing_out: std::sync::atomic::AtomicBool,
    deletes_timing_out: std::sync::atomic::AtomicBool,
    /// How long each watched resource's events are held back.
    watch_delays: Mutex<std::collections::BTreeMap<String, Duration>>,
    /// The conflict rate and the RNG it is drawn with.
    conflicts: Mutex<(f64, fastrand::Rng)>,
    forwarded: AtomicU64,
    /// Requests forwarded, by "VERB resource[/subresource]".
    requests: Mutex<std::collections::BTreeMap<String, u64>>,
    watches_open: AtomicU64,
    watches_cut: AtomicU64,
    gone: AtomicU64,
    conflicted: AtomicU64,
    timed_out: AtomicU64,
    unreachable: AtomicU64,
}

/// What the proxy did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Requests forwarded to the apiserver.
    pub forwarded: u64,
    /// Watch streams open now.
    pub watches_open: u64,
    /// Watch streams ended by [`Faults::disconnect_watches`].
    pub watches_cut: u64,
    /// Watches answered 410 Expired.
    pub gone: u64,
    /// Writes answered 409 Conflict.
    pub conflicted: u64,
    /// Writes answered 504 Timeout.
    pub timed_out: u64,
    /// Requests answered 503 because the apiserver could not be reached.
    pub unreachable: u64,
}

impl Faults {
    fn new(seed: u64) -> Self {
        Self {
            inner: Arc::new(Shared {
                disconnects: watch::channel(0).0,
                watch_gone: false.into(),
                writes_timing_out: false.into(),
                deletes_timing_out: false.into(),
                watch_delays: Mutex::default(),
                conflicts: Mutex::new((0.0, fastrand::Rng::with_seed(seed))),
                forwarded: 0.into(),
                requests: Mutex::default(),
                watches_open: 0.into(),
                watches_cut: 0.into(),
                gone: 0.into(),
                conflicted: 0.into(),
                timed_out: 0.into(),
                unreachable: 0.into(),
            }),
        }
    }

    /// Ends every watch stream open now; watches started afterwards are not affected.
    pub fn disconnect_watches(&self) {
        self.inner.disconnects.send_modify(|n| *n += 1);
    }

    /// While `on`, new watches that carry a resourceVersion get 410 Expired.
    pub fn set_watch_gone(&self, on: bool) {
        self.inner.watch_gone.store(on, Ordering::SeqCst);
    }

    /// The share (0 to 1) of optimistic-concurrency writes answered 409 Conflict; 0 is off.
    pub fn set_write_conflicts(&self, rate: f64) {
        self.inner.conflicts.lock().expect("conflicts").0 = rate.clamp(0.0, 1.0);
    }

    /// While `on`, every write is answered 504 Timeout without reaching the apiserver.
    pub fn set_writes_timing_out(&self, on: bool) {
        self.inner.writes_timing_out.store(on, Ordering::SeqCst);
    }

    /// While `on`, every DELETE is answered 504 Timeout without reaching the apiserver.
    pub fn set_deletes_timing_out(&self, on: bool) {
        self.inner.deletes_timing_out.store(on, Ordering::SeqCst);
    }

    /// Holds back every event of `resource`'s watches (its plural, such as `runners`) by
    /// `delay`; zero is off. Events already held keep the delay they got.
    pub fn set_watch_delay(&self, resource: &str, delay: Duration) {
        let mut delays = self.inner.watch_delays.lock().expect("watch delays");
        if delay.is_zero() {
            delays.remove(resource);
        } else {
            delays.insert(resource.to_owned(), delay);
        }
    }

    fn watch_delay(&self, resource: &str) -> Duration {
        let delays = self.inner.watch_delays.lock().expect("watch delays");
        delays.get(resource).copied().unwrap_or_default()
    }

    /// Switches every fault off (open watches stay open).
    pub fn clear(&self) {
        self.set_watch_gone(false);
        self.set_write_conflicts(0.0);
        self.set_writes_timing_out(false);
        self.set_deletes_timing_out(false);
        self.inner
            .watch_delays
            .lock()
            .expect("watch delays")
            .clear();
    }

    /// What the proxy did so far.
    pub fn counts(&self) -> Counts {
        let i = &self.inner;
        Counts {
            forwarded: i.forwarded.load(Ordering::Relaxed),
            watches_open: i.watches_open.load(Ordering::Relaxed),
            watches_cut: i.watches_cut.load(Ordering::Relaxed),
            gone: i.gone.load(Ordering::Relaxed),
            conflicted: i.conflicted.load(Ordering::Relaxed),
            timed_out: i.timed_out.load(Ordering::Relaxed),
            unreachable: i.unreachable.load(Ordering::Relaxed),
        }
    }

    /// The requests forwarded so far (answered by the apiserver, whatever its answer), by verb
    /// and resource: `"PATCH runners/status"`, `"POST pods"`, `"GET pods"` (one object),
    /// `"LIST pods"`, `"WATCH pods"`.
    pub fn requests(&self) -> std::collections::BTreeMap<String, u64> {
        self.inner.requests.lock().expect("requests").clone()
    }

    /// How many requests of `request` (as [`Faults::requests`] names them) were forwarded.
    pub fn forwarded(&self, request: &str) -> u64 {
        self.requests().get(request).copied().unwrap_or_default()
    }

    fn count_request(&self, method: &Method, path: &str, is_watch: bool) {
        let Some(t) = target(path) else {
            return;
        };
        let verb = match method {
            _ if is_watch => "WATCH",
            &Method::GET if t.name.is_none() => "LIST",
            other => other.as_str(),
        };
        let key = match t.subresource {
            Some(sub) => format!("{verb} {}/{sub}", t.resource),
            None => format!("{verb} {}", t.resource),
        };
        *self
            .inner
            .requests
            .lock()
            .expect("requests")
            .entry(key)
            .or_default() += 1;
    }

    fn conflict_now(&self) -> bool {
        let mut c = self.inner.conflicts.lock().expect("conflicts");
        let rate = c.0;
        rate > 0.0 && c.1.f64() < rate
    }
}

/// A running proxy; dropping it stops accepting (open connections end with their requests).
#[derive(Debug)]
pub struct FaultProxy {
    url: String,
    faults: Faults,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type ProxyBody = UnsyncBoxBody<Bytes, kube::Error>;

impl FaultProxy {
    /// Starts a proxy in front of the apiserver `kubeconfig` names, serving the certificate
    /// and key in `pki_dir` (`apiserver.crt`, `apiserver.key`, as [`crate::pki`] writes them).
    /// `seed` seeds the conflict draws.
    pub async fn start(
        kubeconfig: &Path,
        pki_dir: &Path,
        seed: u64,
    ) -> Result<Self, FaultProxyError> {
        let upstream = admin_client(kubeconfig)
            .await
            .map_err(|e| FaultProxyError::Kubeconfig {
                path: kubeconfig.to_owned(),
                reason: e.to_string(),
            })?;
        let tls = tls_acceptor(
            &pki_dir.join("apiserver.crt"),
            &pki_dir.join("apiserver.key"),
        )?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|source| FaultProxyError::Io {
                action: "bind",
                path: PathBuf::from("127.0.0.1:0"),
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| FaultProxyError::Io {
                action: "bind",
                path: PathBuf::from("127.0.0.1:0"),
                source,
            })?;
        let faults = Faults::new(seed);
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let task = tokio::spawn(accept(listener, tls, upstream, faults.clone(), slots));
        Ok(Self {
            url: format!("https://{addr}"),
            faults,
            task,
        })
    }

    /// A proxy in front of a test cluster's apiserver (its PKI is `pki/` beside its
    /// kubeconfig), and the cluster's admin client configuration pointed at the proxy.
    ///
    /// The configuration keeps kube's default of retrying 429, 503 and 504 inside the client
    /// (for minutes); set `default_retry = false` for a client that, like client-go, sees each
    /// answer the proxy gives.
    pub async fn in_front_of(
        cluster: &crate::TestCluster,
        seed: u64,
    ) -> Result<(Self, kube::Config), FaultProxyError> {
        let kubeconfig = cluster.kubeconfig();
        let invalid = |e: &dyn std::fmt::Display| FaultProxyError::Kubeconfig {
            path: kubeconfig.to_owned(),
            reason: e.to_string(),
        };
        let pki = kubeconfig
            .parent()
            .ok_or_else(|| invalid(&"no parent directory"))?
            .join("pki");
        let proxy = Self::start(kubeconfig, &pki, seed).await?;
        let mut config = crate::control_plane::admin_config(kubeconfig)
            .await
            .map_err(|e| invalid(&e))?;
        config.cluster_url = proxy.url.parse().map_err(|e| invalid(&e))?;
        Ok((proxy, config))
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The fault switches.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Writes to `out` a copy of the kubeconfig at `original` with every cluster's `server:`
    /// pointing at this proxy; nothing else changes.
    pub fn rewrite_kubeconfig(&self, original: &Path, out: &Path) -> Result<(), FaultProxyError> {
        let invalid = |reason: String| FaultProxyError::Kubeconfig {
            path: original.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(original).map_err(|source| FaultProxyError::Io {
            action: "read",
            path: original.to_owned(),
            source,
        })?;
        let mut config: serde_yaml::Value =
            serde_yaml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let clusters = config
            .get_mut("clusters")
            .and_then(serde_yaml::Value::as_sequence_mut)
            .ok_or_else(|| invalid("no clusters".to_owned()))?;
        for cluster in clusters {
            let server = cluster
                .get_mut("cluster")
                .and_then(serde_yaml::Value::as_mapping_mut)
                .ok_or_else(|| invalid("a cluster without `cluster:`".to_owned()))?;
            server.insert("server".into(), self.url.clone().into());
        }
        let text = serde_yaml::to_string(&config).map_err(|e| invalid(e.to_string()))?;
        std::fs::write(out, text).map_err(|source| FaultProxyError::Io {
            action: "write",
            path: out.to_owned(),
            source,
        })
    }
}

fn tls_acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, FaultProxyError> {
    let tls_err = |path: &Path, reason: String| FaultProxyError::Tls {
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| tls_err(cert, e.to_string()))?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| tls_err(key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| tls_err(cert, e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

async fn accept(
    listener: tokio::net::TcpListener,
    tls: tokio_rustls::TlsAcceptor,
    upstream: kube::Client,
    faults: Faults,
    slots: Arc<Semaphore>,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(tcp);
            continue;
        };
        let (tls, upstream, faults) = (tls.clone(), upstream.clone(), faults.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let Ok(Ok(io)) = tokio::time::timeout(HEADER_TIMEOUT, tls.accept(tcp)).await else {
                return;
            };
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                handle(upstream.clone(), faults.clone(), request)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(io), service)
                .await;
        });
    }
}

/// The request's path split as the apiserver routes it.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    /// API group, `""` for the core group.
    group: String,
    /// Resource (plural), without the subresource.
    resource: String,
    /// Object name, if the path names one.
    name: Option<String>,
    /// Subresource (`status`), if the path names one.
    subresource: Option<String>,
}

/// Parses `/api/v1/[namespaces/<ns>/]<resource>[/<name>[/<sub>]]` and the `/apis/<group>/…`
/// equivalent.
fn target(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => ((*group).to_owned(), rest),
        _ => return None,
    };
    let rest = match rest {
        // `namespaces/<ns>/<resource>…`, but `namespaces/<name>` is the Namespace itself.
        ["namespaces", _ns, resource, rest @ ..] => {
            let mut v = vec![*resource];
            v.extend_from_slice(rest);
            v
        }
        other => other.to_vec(),
    };
    let resource = (*rest.first()?).to_owned();
    Some(Target {
        group,
        resource,
        name: rest.get(1).map(|n| (*n).to_owned()),
        subresource: rest.get(2).map(|n| (*n).to_owned()),
    })
}

/// Whether the query asks for a watch, and the resourceVersion it names.
fn watch_query(path: &str, query: &str) -> (bool, Option<String>) {
    let mut watch = path.contains("/watch/");
    let mut rv = None;
    for (k, v) in url_pairs(query) {
        match k.as_str() {
            "watch" => watch = v == "true" || v == "1",
            "resourceVersion" => rv = Some(v),
            _ => {}
        }
    }
    (watch, rv)
}

fn url_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.replace("%2F", "/"))
        })
        .collect()
}

/// The `Status` kube-apiserver answers with.
/// An answer of `status` with the apiserver's `Status` body.
fn failure(status: StatusCode, reason: &str, message: &str) -> Response<ProxyBody> {
    full(status, status_body(status.as_u16(), reason, message, None))
}

fn status_body(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<serde_json::Value>,
) -> Bytes {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let (Some(details), Some(map)) = (details, status.as_object_mut()) {
        map.insert("details".to_owned(), details);
    }
    Bytes::from(status.to_string())
}

fn full(status: StatusCode, body: Bytes) -> Response<ProxyBody> {
    let mut response = Response::new(Full::new(body).map_err(|n| match n {}).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The 409 kube-apiserver answers an update whose resourceVersion is stale.
fn conflict(target: &Target) -> Response<ProxyBody> {
    let name = target.name.clone().unwrap_or_default();
    let qualified = if target.group.is_empty() {
        target.resource.clone()
    } else {
        format!("{}.{}", target.resource, target.group)
    };
    let message = format!(
        "Operation cannot be fulfilled on {qualified} \"{name}\": the object has been modified; \
         please apply your changes to the latest version and try again"
    );
    full(
        StatusCode::CONFLICT,
        status_body(
            409,
            "Conflict",
            &message,
            Some(json!({"name": name, "group": target.group, "kind": target.resource})),
        ),
    )
}

/// The watch kube-apiserver answers when the resourceVersion asked for was compacted: a 200
/// whose only event is an `ERROR` with a 410 `Expired` `Status`.
fn gone(rv: &str) -> Response<ProxyBody> {
    let status: serde_json::Value = serde_json::from_slice(&status_body(
        410,
        "Expired",
        &format!(
            "too old resource version: {rv} ({})",
            rv.parse::<u64>().unwrap_or(0) + 1
        ),
        None,
    ))
    .unwrap_or_default();
    let mut line = json!({"type": "ERROR", "object": status}).to_string();
    line.push('\n');
    full(StatusCode::OK, Bytes::from(line))
}

const HOP_BY_HOP: [header::HeaderName; 5] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::TE,
    header::HOST,
];

fn strip(headers: &mut HeaderMap) {
    for h in &HOP_BY_HOP {
        headers.remove(h);
    }
    headers.remove("keep-alive");
    headers.remove(header::AUTHORIZATION);
}

async fn handle(
    upstream: kube::Client,
    faults: Faults,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let Ok(body) = Limited::new(body, MAX_BODY_BYTES).collect().await else {
        return Ok(failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            "request body too large",
        ));
    };
    let body = body.to_bytes();
    let (is_watch, rv) = watch_query(&path, &query);

    if is_watch
        && faults.inner.watch_gone.load(Ordering::SeqCst)
        && let Some(rv) = rv.as_deref().filter(|rv| !rv.is_empty() && *rv != "0")
    {
        faults.inner.gone.fetch_add(1, Ordering::Relaxed);
        return Ok(gone(rv));
    }
    let write = matches!(
        parts.method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if (write && faults.inner.writes_timing_out.load(Ordering::SeqCst))
        || (parts.method == Method::DELETE
            && faults.inner.deletes_timing_out.load(Ordering::SeqCst))
    {
        faults.inner.timed_out.fetch_add(1, Ordering::Relaxed);
        return Ok(failure(
            StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            "Timeout: request did not complete within requested timeout - context deadline exceeded",
        ));
    }
    let apply = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/apply-patch"));
    let optimistic = matches!(parts.method, Method::PUT | Method::PATCH)
        && !apply
        && memchr(&body, b"\"resourceVersion\"");
    if optimistic
        && let Some(t) = target(&path).filter(|t| t.name.is_some())
        && faults.conflict_now()
    {
        faults.inner.conflicted.fetch_add(1, Ordering::Relaxed);
        return Ok(conflict(&t));
    }

    let method = parts.method.clone();
    strip(&mut parts.headers);
    let mut forward = Request::new(kube::client::Body::from(body.to_vec()));
    *forward.method_mut() = parts.method;
    *forward.uri_mut() = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/")
        .parse()
        .unwrap_or_default();
    *forward.headers_mut() = parts.headers;
    let answered = tokio::time::timeout(REQUEST_TIMEOUT, upstream.send(forward)).await;
    let response = match answered {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            faults.inner.unreachable.fetch_add(1, Ordering::Relaxed);
            return Ok(failure(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                &format!("the apiserver could not be reached: {e}"),
            ));
        }
        Err(_) => {
            return Ok(failure(
                StatusCode::GATEWAY_TIMEOUT,
                "Timeout",
                "the apiserver did not answer in time",
            ));
        }
    };
    faults.inner.forwarded.fetch_add(1, Ordering::Relaxed);
    faults.count_request(&method, &path, is_watch);
    let (mut parts, body) = response.into_parts();
    strip(&mut parts.headers);
    let body = if is_watch && parts.status.is_success() {
        let mut cut = faults.inner.disconnects.subscribe();
        let counted = OpenWatch::new(faults.clone());
        let stop = async move {
            let _ = cut.changed().await;
        };
        let frames = body
            .into_data_stream()
            .take_until(Box::pin(stop))
            .map(move |chunk| {
                let _still_open = &counted;
                chunk.map(Frame::data)
            });
        let resource = target(&path).map(|t| t.resource).unwrap_or_default();
        StreamBody::new(delayed(frames, faults, resource)).boxed_unsync()
    } else {
        body.boxed_unsync()
    };
    Ok(Response::from_parts(parts, body))
}

/// `frames` as they arrive, each held back by the watch delay of `resource` in force when it
/// arrived ([`Faults::set_watch_delay`]). The stream is read as fast as the apiserver sends,
/// so held frames do not add up: each arrives its delay after it was sent.
fn delayed<S, T>(
    frames: S,
    faults: Faults,
    resource: String,
) -> impl futures::Stream<Item = T> + Send + 'static
where
    S: futures::Stream<Item = T> + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let reader = tokio::spawn(frames.for_each(move |frame| {
        let due = tokio::time::Instant::now() + faults.watch_delay(&resource);
        // The client hung up: nothing left to relay.
        let _ = tx.unbounded_send((due, frame));
        async {}
    }));
    let abort_reader = AbortOnDrop(reader);
    rx.then(move |(due, frame)| {
        let _reader = &abort_reader;
        async move {
            tokio::time::sleep_until(due).await;
            frame
        }
    })
}

/// Aborts a task when dropped: a relay's reader ends with the client's stream.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Counts an open watch stream while it lives; a stream dropped after its disconnect counts
/// as cut.
struct OpenWatch {
    faults: Faults,
    seen: u64,
}

impl OpenWatch {
    fn new(faults: Faults) -> Self {
        faults.inner.watches_open.fetch_add(1, Ordering::Relaxed);
        let seen = *faults.inner.disconnects.borrow();
        Self { faults, seen }
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        let i = &self.faults.inner;
        i.watches_open.fetch_sub(1, Ordering::Relaxed);
        if *i.disconnects.borrow() != self.seen {
            i.watches_cut.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn memchr(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_group_resource_and_object() {
        let t = |group: &str, resource: &str, name: Option<&str>| Target {
            group: group.to_owned(),
            resource: resource.to_owned(),
            name: name.map(str::to_owned),
            subresource: None,
        };
        for (path, want) in [
            (
                "/api/v1/namespaces/a/pods/p1",
                Some(t("", "pods", Some("p1"))),
            ),
            (
                "/api/v1/namespaces/a/pods/p1/status",
                Some(Target {
                    subresource: Some("status".to_owned()),
                    ..t("", "pods", Some("p1"))
                }),
            ),
            ("/api/v1/namespaces/a", Some(t("", "namespaces", Some("a")))),
            ("/api/v1/nodes/n1", Some(t("", "nodes", Some("n1")))),
            (
                "/apis/coordination.k8s.io/v1/namespaces/b/leases/l",
                Some(t("coordination.k8s.io", "leases", Some("l"))),
            ),
            (
                "/apis/actions.summerwind.dev/v1alpha1/namespaces/b/runners",
                Some(t("actions.summerwind.dev", "runners", None)),
            ),
            ("/readyz", None),
        ] {
            assert_eq!(target(path), want, "{path}");
        }
    }

    #[test]
    fn watches_and_their_resource_versions_are_recognised() {
        assert_eq!(
            watch_query("/api/v1/pods", "watch=true&resourceVersion=12"),
            (true, Some("12".to_owned()))
        );
        assert_eq!(watch_query("/api/v1/pods", "watch=1"), (true, None));
        assert_eq!(
            watch_query("/api/v1/pods", "resourceVersion=12"),
            (false, Some("12".to_owned()))
        );
        assert_eq!(watch_query("/api/v1/watch/pods", ""), (true, None));
    }

    #[test]
    fn conflicts_follow_the_rate_and_the_seed() {
        let draw = |seed| {
            let f = Faults::new(seed);
            f.set_write_conflicts(0.3);
            (0..1000).filter(|_| f.conflict_now()).count()
        };
        let n = draw(7);
        assert!((200..400).contains(&n), "{n}");
        assert_eq!(n, draw(7));
        let off = Faults::new(7);
        assert!(!(0..100).any(|_| off.conflict_now()));
        off.set_write_conflicts(1.0);
        assert!((0..100).all(|_| off.conflict_now()));
    }
}
