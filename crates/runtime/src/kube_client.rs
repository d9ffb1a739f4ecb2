//! The Kubernetes client `hangar run` uses: kube's client over a stack assembled here (see
//! `stack`), with every apiserver answer counted by
//! method, status code and resource into [`crate::metrics::Metrics::kube_request`]
//! (`rest_client_requests_total`, controller-runtime's name): what the controller costs the
//! apiserver, per resource.
//!
//! Why at the transport: some calls fail on purpose without a trace — events are published in
//! the background and their errors dropped, reflectors retry failed watches by themselves — so
//! only the transport sees every answer. A permission the RBAC lacks shows up as `code="403"`,
//! whichever code path made the call; the chart tests run the binary with the chart's own
//! ServiceAccount and assert that no such series appears.
//!
//! **No retries inside the client.** kube's default client retries an answer of 429, 503 or
//! 504 up to 15 times with exponential back-off capped at 1000 s, so one call can stall for
//! minutes while the apiserver restarts: a reconcile stuck in it holds its object, and what it
//! writes was computed from a world minutes old. Hangar's client fails such a call at once,
//! as client-go does without a `Retry-After`; every caller already retries with its own
//! back-off from freshly observed state (reconcilers per object, the webhook batcher per
//! autoscaler, the elector every retry period).
//!
//! **Connections send at once** (`TCP_NODELAY`, see `stack`): the first request on a new
//! connection otherwise waited tens of milliseconds, and after a quiet spell every connection
//! is new.
//!
//! **At most [`IN_FLIGHT`] requests wait for an answer at once** (a watch counts until its
//! answer starts, not while it streams). Controllers reconcile many objects concurrently, and over
//! HTTP/1.1 each request under way is a connection of its own: scaling 1,000 runners at once
//! opened hundreds, each with its TLS session and buffers, which cost the apiserver handshakes
//! and the controller memory for nothing, because the apiserver answers no faster.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use kube::client::{Body, ClientBuilder};

use crate::metrics::Metrics;

/// A client for `config` whose requests are counted into `metrics`.
pub fn counted(config: kube::Config, metrics: Arc<Metrics>) -> Result<kube::Client, kube::Error> {
    Ok(stack(config)?
        .with_layer(&CountLayer(metrics))
        .with_layer(&bound())
        .build())
}

/// A client for `config` that makes each request once (see the module's contract).
pub fn uncounted(config: kube::Config) -> Result<kube::Client, kube::Error> {
    Ok(stack(config)?.with_layer(&bound()).build())
}

/// What kube's own client sends requests through, type-erased.
type Stack = tower::util::BoxService<
    http::Request<Body>,
    http::Response<Box<kube::client::DynBody>>,
    tower::BoxError,
>;

/// kube's client stack — TLS and credentials from the kubeconfig, its timeouts, base URI and
/// extra headers — without retries, and over connections that send each write at once
/// (`TCP_NODELAY`, which every Go client sets by default; kube's connector leaves Nagle's
/// algorithm on). The apiserver closes connections idle for 90 s, so after a quiet spell each
/// write opens a new one. Measured with the apiserver's audit log in a pool at `maxReplicas`
/// after 150 s of jobs, with Nagle on: a request reached the apiserver 45 ms after its
/// connection's TCP connect, and a replacement runner's pod create came 53 ms after its
/// Runner's create (9 ms with `TCP_NODELAY`).
///
/// Differences from kube's own stack: kube's per-request debug spans are left out, and its
/// error line per failed request is replaced by [`LogFailures`] (with method and path); the
/// expiry of a client certificate from an exec plugin is not recorded as the client's
/// `valid_until` (nothing reads it). If kube's `gzip` or `aws-lc-rs` features are ever
/// enabled, its decompression layer and crypto-provider set-up must be added here too. A
/// config with a proxy goes to kube's own builder, which this build cannot serve either (kube's
/// proxy features are off): it fails with kube's error, as before.
fn stack(mut config: kube::Config) -> Result<ClientBuilder<Stack>, kube::Error> {
    use kube::client::ConfigExt as _;
    use tower::ServiceExt as _;

    config.default_retry = false;
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config);
    }
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let mut connector =
        hyper_timeout::TimeoutConnector::new(config.rustls_https_connector_with_connector(tcp)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer_fn(LogFailures)
        .map_err(tower::BoxError::from)
        .service(http)
        .map_response(|response| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(
                    body,
                    tower::BoxError::from,
                )) as Box<kube::client::DynBody>
            })
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

/// Logs, at `warn`, each request that got no answer or a server error, with its method and
/// path. The watches and the event publisher retry or drop their errors by themselves; this is
/// where a failing apiserver still shows in the log.
#[derive(Clone, Debug)]
struct LogFailures<S>(S);

impl<S, B> tower::Service<http::Request<Body>> for LogFailures<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display + Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let (method, uri) = (request.method().clone(), request.uri().clone());
        let answer = self.0.call(request);
        Box::pin(async move {
            let answer = answer.await;
            match &answer {
                Ok(response) if response.status().is_server_error() => tracing::warn!(
                    %method,
                    path = uri.path(),
                    status = response.status().as_u16(),
                    "the apiserver answered with a server error"
                ),
                Err(error) => {
                    tracing::warn!(%method, path = uri.path(), %error, "apiserver request failed")
                }
                Ok(_) => {}
            }
            answer
        })
    }
}

/// Requests that may wait for an answer at once. A watch holds its permit until the
/// apiserver's answer starts (its headers), not while its events stream.
pub const IN_FLIGHT: usize = 64;

/// The bound on requests under way ([`IN_FLIGHT`]), FIFO: kube's client feeds its service
/// from one queue, so a request waits behind those made before it.
fn bound() -> tower::limit::ConcurrencyLimitLayer {
    tower::limit::ConcurrencyLimitLayer::new(IN_FLIGHT)
}

/// Wraps a service in [`Counted`].
#[derive(Clone, Debug)]
pub struct CountLayer(pub Arc<Metrics>);

impl<S> tower::Layer<S> for CountLayer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// A service that records the method and answer of every request it passes on.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B> tower::Service<http::Request<Body>> for Counted<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let method = request.method().to_string();
        let resource = resource_of(request.uri().path());
        let metrics = self.metrics.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            let code = match &answer {
                Ok(response) => response.status().as_str().to_owned(),
                Err(_) => "<error>".to_owned(),
            };
            metrics.kube_request(&method, &code, &resource);
            answer
        })
    }
}

/// The resource a request path is about, subresource included (`pods`, `pods/status`,
/// `runners/status`); `-` for paths that name none (discovery, `/version`). Its values are
/// bounded by the API's resources, so the label cannot explode.
pub fn resource_of(path: &str) -> String {
    // /api/v1/<rest> or /apis/<group>/<version>/<rest>
    let rest = if let Some(rest) = path.strip_prefix("/api/") {
        rest.split_once('/').map(|(_, r)| r)
    } else if let Some(rest) = path.strip_prefix("/apis/") {
        rest.splitn(3, '/').nth(2)
    } else {
        None
    };
    let Some(rest) = rest.filter(|r| !r.is_empty()) else {
        return "-".to_owned();
    };
    // namespaces/<ns>/<resource>/... is a namespaced resource; `namespaces`,
    // `namespaces/<name>` and `namespaces/<name>/status` are about namespaces themselves
    // (the last, like any subresource, is counted as `namespaces/status`).
    let rest = match rest
        .strip_prefix("namespaces/")
        .and_then(|r| r.split_once('/'))
    {
        Some((_, after)) if !after.is_empty() && after != "status" && after != "finalize" => after,
        _ => rest,
    };
    // <resource>[/<name>[/<subresource>]]
    let mut parts = rest.splitn(3, '/');
    let resource = parts.next().unwrap_or_default();
    match (parts.next(), parts.next()) {
        (Some(_name), Some(sub)) if !sub.is_empty() => format!("{resource}/{sub}"),
        _ => resource.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer as _, Service as _};

    #[test]
    fn requests_are_attributed_to_their_resource() {
        for (path, resource) in [
            ("/api/v1/pods", "pods"),
            ("/api/v1/namespaces/a/pods", "pods"),
            ("/api/v1/namespaces/a/pods/p-1", "pods"),
            ("/api/v1/namespaces/a/pods/p-1/status", "pods/status"),
            ("/api/v1/namespaces/a/pods/p-1/binding", "pods/binding"),
            ("/api/v1/namespaces", "namespaces"),
            ("/api/v1/namespaces/a", "namespaces"),
            ("/api/v1/namespaces/a/status", "namespaces/status"),
            ("/api/v1/nodes/n-1/status", "nodes/status"),
            (
                "/apis/actions.summerwind.dev/v1alpha1/namespaces/a/runners/r-1/status",
                "runners/status",
            ),
            (
                "/apis/actions.summerwind.dev/v1alpha1/runnerdeployments",
                "runnerdeployments",
            ),
            ("/apis/events.k8s.io/v1/namespaces/a/events", "events"),
            (
                "/apis/coordination.k8s.io/v1/namespaces/a/leases/x",
                "leases",
            ),
            ("/api/v1", "-"),
            ("/apis/apps/v1", "-"),
            ("/apis", "-"),
            ("/version", "-"),
        ] {
            assert_eq!(resource_of(path), resource, "{path}");
        }
    }

    /// The stack is assembled here rather than by kube: it must still send what kube's does.
    #[tokio::test]
    async fn requests_carry_the_kubeconfig_s_base_path_credentials_and_headers() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let apiserver = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                socket.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            let answer =
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
            socket.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8(head).unwrap().to_lowercase()
        });
        let mut config =
            kube::Config::new(format!("http://127.0.0.1:{port}/base").parse().unwrap());
        // A root of its own: without one, building the TLS configuration reads the machine's
        // trust store, which a minimal machine may not have.
        let root = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        config.root_cert = Some(vec![root.cert.der().to_vec()]);
        config.auth_info = serde_yaml::from_str("token: s3cret").unwrap();
        config.headers = vec![(
            http::HeaderName::from_static("x-hangar-test"),
            http::HeaderValue::from_static("1"),
        )];
        let client = uncounted(config).unwrap();
        let request = http::Request::get("/version").body(Vec::new()).unwrap();
        assert_eq!(client.request_text(request).await.unwrap(), "{}");
        let head = apiserver.await.unwrap();
        assert!(head.starts_with("get /base/version http/1.1\r\n"), "{head}");
        assert!(
            head.contains("\r\nauthorization: bearer s3cret\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nx-hangar-test: 1\r\n"), "{head}");
    }

    #[tokio::test]
    async fn at_most_so_many_requests_wait_for_an_answer_and_a_streaming_watch_is_not_one() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tower::ServiceExt;
        let (busy, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (b, m) = (busy.clone(), most.clone());
        let apiserver = tower::service_fn(move |request: http::Request<Body>| {
            let (busy, most) = (b.clone(), m.clone());
            async move {
                // A watch's answer starts at once; its events would follow in the body.
                if request
                    .uri()
                    .query()
                    .is_some_and(|q| q.contains("watch=true"))
                {
                    return Ok::<_, std::convert::Infallible>(http::Response::new(String::new()));
                }
                most.fetch_max(busy.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                busy.fetch_sub(1, Ordering::SeqCst);
                Ok(http::Response::new(String::new()))
            }
        });
        let service = tower::buffer::Buffer::new(bound().layer(apiserver), 1024);
        let request = |uri: &str| {
            http::Request::builder()
                .uri(uri)
                .body(Body::from(Vec::new()))
                .unwrap()
        };
        // More watches than permits, all of them streaming (their answers kept).
        let mut watches = Vec::new();
        for _ in 0..2 * IN_FLIGHT {
            let watch = service
                .clone()
                .oneshot(request("/api/v1/pods?watch=true&resourceVersion=1"));
            watches.push(watch.await.unwrap());
        }
        let calls: Vec<_> = (0..3 * IN_FLIGHT)
            .map(|_| {
                let service = service.clone();
                tokio::spawn(async move { service.oneshot(request("/api/v1/pods")).await })
            })
            .collect();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), IN_FLIGHT);
        drop(watches);
    }

    #[tokio::test]
    async fn every_answer_is_counted_by_method_and_code() {
        let metrics = Arc::new(Metrics::new());
        let apiserver = tower::service_fn(|request: http::Request<Body>| async move {
            let status = if request.uri().path().contains("secrets") {
                403
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(status)
                    .body(String::new())
                    .unwrap(),
            )
        });
        let mut service = CountLayer(metrics.clone()).layer(apiserver);
        for (method, path) in [
            ("GET", "/api/v1/pods"),
            ("GET", "/api/v1/namespaces/a/secrets"),
            ("POST", "/api/v1/namespaces/a/secrets"),
            ("GET", "/api/v1/pods"),
        ] {
            let request = http::Request::builder()
                .method(method)
                .uri(path)
                .body(Body::from(Vec::new()))
                .unwrap();
            service.call(request).await.unwrap();
        }
        let text = metrics.render(&crate::metrics::ScrapeState::default());
        for line in [
            "rest_client_requests_total{code=\"200\",method=\"GET\",resource=\"pods\"} 2",
            "rest_client_requests_total{code=\"403\",method=\"GET\",resource=\"secrets\"} 1",
            "rest_client_requests_total{code=\"403\",method=\"POST\",resource=\"secrets\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
