//! Serving HTTP to clients that may be hostile. The GitHub webhook, admission and
//! metrics/probe servers all run through [`serve`], each with [`Limits`] of its own:
//!
//! - **Connections**: at most [`Limits::max_connections`] at once, counted from `accept` (a TLS
//!   handshake in progress counts). One more is closed at once — over plain HTTP after a 503 —
//!   rather than queued: a client at the cap learns it in milliseconds, and the server's memory
//!   stays bounded.
//! - **Request heads**: the TLS handshake, and then each request head, must arrive within
//!   [`Limits::header_read_timeout`]; the clock starts when the connection opens, or when the
//!   previous response was written (so it also bounds idle keep-alive). A slow-loris client
//!   holds its connection that long at most, however slowly it trickles bytes.
//! - **Bodies**: a `Content-Length` over [`Limits::max_body_bytes`] is answered 413 before any
//!   of the body is read; a chunked body is read up to the limit, then answered 413 the same
//!   way. No handler ever sees more.
//! - **Requests**: reading the body and answering take at most [`Limits::request_timeout`],
//!   else 408.
//!
//! A 413 or 408 closes the connection: the rest of that body is never read. HTTP/1.1 only,
//! which is what GitHub, the apiserver's webhook client, Prometheus and the kubelet speak.
//!
//! Worst-case memory of a server is about `max_connections × max_body_bytes` (bodies are
//! buffered for signature checks and JSON parsing); lowering either bounds it.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use axum::response::IntoResponse;
use axum::{BoxError, Router};
use http_body_util::Limited;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt as _;
use tracing::{debug, warn};

/// Default bound on the TLS handshake and on reading each request head.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound on reading a request's body and answering it.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Refused connections are logged at most this often, so a flood cannot flood the log.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// What a plain-HTTP connection over the cap reads before it is closed.
const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\
content-type: text/plain\r\ncontent-length: 21\r\n\r\ntoo many connections\n";

/// What one server grants its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; one more is closed at once.
    pub max_connections: u32,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Bound on the TLS handshake, and on reading each request head (idle keep-alive included).
    pub header_read_timeout: Duration,
    /// Bound on reading a request's body and answering it.
    pub request_timeout: Duration,
}

impl Limits {
    /// `max_connections` and `max_body_bytes` with the default timeouts.
    pub const fn new(max_connections: u32, max_body_bytes: usize) -> Self {
        Self {
            max_connections,
            max_body_bytes,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// These limits with other timeouts.
    pub const fn with_timeouts(
        self,
        header_read_timeout: Duration,
        request_timeout: Duration,
    ) -> Self {
        Self {
            header_read_timeout,
            request_timeout,
            ..self
        }
    }
}

/// How an accepted TCP connection becomes a stream HTTP is spoken on.
pub trait Transport: Send + Sync + 'static {
    /// The stream.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Makes `tcp` ready for HTTP (a TLS handshake, say); bounded by the header timeout.
    fn handshake(&self, tcp: TcpStream) -> impl Future<Output = std::io::Result<Self::Io>> + Send;

    /// Lets go of a connection over the cap, without waiting for anything.
    fn refuse(&self, tcp: TcpStream) {
        drop(tcp);
    }
}

/// Plain HTTP: the TCP stream as it is.
#[derive(Clone, Copy, Debug, Default)]
pub struct Plain;

impl Transport for Plain {
    type Io = TcpStream;

    async fn handshake(&self, tcp: TcpStream) -> std::io::Result<TcpStream> {
        Ok(tcp)
    }

    fn refuse(&self, tcp: TcpStream) {
        // A fresh socket's send buffer is empty: this never blocks and almost always writes it
        // all. If not, the client sees the connection closed, which says the same.
        let _ = tcp.try_write(OVER_CAPACITY);
    }
}

/// Serves `router` over `transport` on `listener` within `limits`, until `shutdown`
/// completes; then stops accepting, lets each connection finish the request it is in, and
/// returns once all have closed or after the request timeout.
pub async fn serve<T: Transport>(
    listener: TcpListener,
    transport: T,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let router = prepare(router);
    let transport = Arc::new(transport);
    let slots = Arc::new(Semaphore::new(limits.max_connections as usize));
    let (stop, stopped) = watch::channel(false);
    let mut refusals = Refusals::default();
    let mut shutdown = pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(connection) => connection,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // pause rather than spin.
                    debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let connection = Connection {
                    peer,
                    router: router.clone(),
                    limits,
                    stopped: stopped.clone(),
                    _slot: slot,
                };
                tokio::spawn(connection.run(transport.clone(), tcp));
            }
            Err(_) => {
                transport.refuse(tcp);
                refusals.refused(peer, limits.max_connections, Instant::now());
            }
        }
    }
    let _ = stop.send(true);
    let drained = tokio::time::timeout(
        limits.request_timeout,
        slots.acquire_many(limits.max_connections),
    )
    .await;
    if drained.is_err() {
        debug!("connections still open at shutdown were dropped");
    }
}

/// `router` as [`serve`] runs it, for [`answer`]: the body limit is [`answer`]'s, for every
/// route; axum's own default (2 MB) would be a second, different one.
pub fn prepare(router: Router) -> Router {
    router.layer(DefaultBodyLimit::disable())
}

/// One accepted connection and what it holds: a slot under the cap, until it ends.
struct Connection {
    peer: SocketAddr,
    router: Router,
    limits: Limits,
    stopped: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
}

impl Connection {
    async fn run<T: Transport>(mut self, transport: Arc<T>, tcp: TcpStream) {
        let peer = self.peer;
        let io =
            match tokio::time::timeout(self.limits.header_read_timeout, transport.handshake(tcp))
                .await
            {
                Ok(Ok(io)) => io,
                Ok(Err(e)) => {
                    debug!(%peer, error = %e, "handshake failed");
                    return;
                }
                Err(_) => {
                    debug!(%peer, "handshake timed out");
                    return;
                }
            };
        let (router, limits) = (self.router.clone(), self.limits);
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            answer(router.clone(), limits, request)
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .serve_connection(TokioIo::new(io), service);
        let mut connection = pin!(connection);
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    debug!(%peer, error = %e, "connection ended");
                }
                return;
            }
            // Shutdown, or the server was dropped.
            _ = self.stopped.wait_for(|stop| *stop) => connection.as_mut().graceful_shutdown(),
        }
        let _ = connection.await;
    }
}

/// Answers one request through `router`, within `limits`: what every connection [`serve`]
/// accepts runs, and what in-process callers (the hostile-input fuzz run) drive with a body of
/// their own making.
pub async fn answer<B>(
    router: Router,
    limits: Limits,
    request: Request<B>,
) -> Result<Response<Body>, Infallible>
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let max = limits.max_body_bytes;
    if let Some(declared) = declared_too_large(request.headers(), max) {
        debug!(declared, max, "refused a request body over the limit");
        return Ok(closing(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body of {declared} bytes is over the limit of {max} bytes\n"),
        ));
    }
    let request = request.map(|body| Body::new(Limited::new(body, max)));
    let Ok(Ok(mut response)) =
        tokio::time::timeout(limits.request_timeout, router.oneshot(request)).await
    else {
        return Ok(closing(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "request not completed within {}s\n",
                limits.request_timeout.as_secs_f64()
            ),
        ));
    };
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
        // A streamed body hit the limit: the rest of it is never read.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(response)
}

/// The declared `Content-Length`, when it is over `max_body_bytes`. A missing or unreadable
/// one is `None`: hyper refuses unreadable ones itself, and a chunked body is cut off while it
/// streams.
pub fn declared_too_large(headers: &HeaderMap, max_body_bytes: usize) -> Option<u64> {
    let declared: u64 = headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (declared > max_body_bytes as u64).then_some(declared)
}

/// An answer after which the connection closes.
fn closing(status: StatusCode, reason: String) -> Response<Body> {
    (status, [(header::CONNECTION, "close")], reason).into_response()
}

/// Refused connections, logged at most every [`REFUSAL_LOG_INTERVAL`].
#[derive(Debug, Default)]
struct Refusals {
    since_logged: u64,
    logged: Option<Instant>,
}

impl Refusals {
    fn refused(&mut self, peer: SocketAddr, cap: u32, now: Instant) {
        self.since_logged += 1;
        if self
            .logged
            .is_none_or(|at| now.duration_since(at) >= REFUSAL_LOG_INTERVAL)
        {
            warn!(%peer, cap, refused = self.since_logged,
                  "connection limit reached: refusing connections");
            self.since_logged = 0;
            self.logged = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn only_a_declared_length_over_the_limit_is_refused_up_front() {
        let cases: [(&[&str], Option<u64>); 6] = [
            (&[], None),
            (&["100"], None),
            (&["1024"], None),
            (&["1025"], Some(1025)),
            (&["18446744073709551615"], Some(u64::MAX)),
            (&["lots"], None),
        ];
        for (values, want) in cases {
            let mut headers = HeaderMap::new();
            for v in values {
                headers.append(header::CONTENT_LENGTH, HeaderValue::from_str(v).unwrap());
            }
            assert_eq!(declared_too_large(&headers, 1024), want, "{values:?}");
        }
    }

    #[test]
    fn refusals_are_logged_at_most_every_interval() {
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let t0 = Instant::now();
        let mut r = Refusals::default();
        r.refused(peer, 1, t0);
        assert_eq!((r.since_logged, r.logged), (0, Some(t0)));
        r.refused(peer, 1, t0 + Duration::from_secs(1));
        r.refused(peer, 1, t0 + Duration::from_secs(2));
        assert_eq!((r.since_logged, r.logged), (2, Some(t0)));
        let later = t0 + REFUSAL_LOG_INTERVAL;
        r.refused(peer, 1, later);
        assert_eq!((r.since_logged, r.logged), (0, Some(later)));
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text).await;
        text
    }

    /// A request in flight at shutdown is answered; the server then returns and accepts no
    /// more.
    #[tokio::test]
    async fn shutdown_finishes_the_request_in_flight_then_stops() {
        let (release, released) = watch::channel(false);
        let router = Router::new().route(
            "/slow",
            axum::routing::get(move || {
                let mut released = released.clone();
                async move {
                    let _ = released.wait_for(|r| *r).await;
                    "done"
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            Plain,
            router,
            Limits::new(8, 1024),
            async {
                let _ = stopped.await;
            },
        ));
        let slow = tokio::spawn(get(addr, "/slow"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!server.is_finished(), "returned with a request in flight");
        release.send(true).unwrap();
        let answer = slow.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("done"), "{answer}");
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve returns once its connections closed")
            .unwrap();
        assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
    }

    /// Over plain HTTP a connection over the cap reads a 503 before it is closed.
    #[tokio::test]
    async fn a_connection_over_the_cap_reads_503() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let server = tokio::spawn(serve(
            listener,
            Plain,
            router,
            Limits::new(1, 1024),
            std::future::pending(),
        ));
        let held = TcpStream::connect(addr).await.unwrap();
        let answer = get(addr, "/").await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        drop(held);
        let answer = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let answer = get(addr, "/").await;
                if answer.starts_with("HTTP/1.1 200") {
                    return answer;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("a slot frees once the held connection closes");
        assert!(answer.ends_with("ok"), "{answer}");
        server.abort();
    }
}
