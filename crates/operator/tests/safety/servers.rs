//! Servers survive hostile clients: the GitHub webhook server, the admission server (HTTPS) and
//! the metrics/probe server, each on a real loopback socket with short limits, against clients
//! that hold connections open without finishing a request (slow-loris), declare or stream
//! bodies over the limit, stop sending a body half-way, or open more connections than allowed.
//!
//! One check list ([`survives_hostile_clients`]) runs against every server; a test lists every
//! check that failed, not only the first.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hangar::serve::Limits;
use hangar_github::Secret;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::support::{self, Harness};

/// Short limits, so that what a server closes it closes within seconds.
const HEADER_TIMEOUT: Duration = Duration::from_secs(3);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
const MAX_BODY: usize = 64 * 1024;
const MAX_CONNECTIONS: u32 = 320;
/// More held connections than a thread-per-connection server has threads, fewer than the cap.
const LORIS: usize = 300;
/// How long a normal request may take while the slow-loris connections are held.
const ANSWER_BOUND: Duration = Duration::from_secs(2);
/// Scheduling slack on a shared machine, on top of a timeout.
const SLACK: Duration = Duration::from_secs(4);

const SECRET: &str = "hangar-servers-test-secret";

fn limits() -> Limits {
    Limits {
        max_connections: MAX_CONNECTIONS,
        max_body_bytes: MAX_BODY,
        header_read_timeout: HEADER_TIMEOUT,
        request_timeout: REQUEST_TIMEOUT,
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Stream = Box<dyn Io>;

/// A server under test and how to talk to it.
struct Target {
    addr: SocketAddr,
    /// TLS client for an HTTPS server.
    tls: Option<TlsConnector>,
    /// A complete request the server answers with 200.
    normal: fn() -> Vec<u8>,
    /// Request line of requests with a body (`POST /path`).
    post: &'static str,
    /// What that route answers without reading the body, when it reads none (the metrics
    /// server's 405); `None` when it reads bodies.
    ignores_body: Option<u16>,
}

impl Target {
    /// A connection, TLS handshake done for an HTTPS server.
    async fn connect(&self) -> io::Result<Stream> {
        let tcp = TcpStream::connect(self.addr).await?;
        match &self.tls {
            None => Ok(Box::new(tcp)),
            Some(tls) => {
                let name = ServerName::IpAddress(self.addr.ip().into());
                Ok(Box::new(tls.connect(name, tcp).await?))
            }
        }
    }

    /// Sends the normal request on a fresh connection; its status.
    async fn normal_request(&self) -> Result<u16, String> {
        let mut stream = self.connect().await.map_err(|e| format!("connect: {e}"))?;
        stream
            .write_all(&(self.normal)())
            .await
            .map_err(|e| format!("write: {e}"))?;
        read_status(&mut stream).await
    }

    /// The head of a request with a body, up to the blank line.
    fn post_head(&self, body_headers: &str) -> String {
        format!(
            "{} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n{body_headers}\r\n",
            self.post, self.addr
        )
    }
}

/// Reads a response head; its status code.
async fn read_status(stream: &mut (impl AsyncRead + Unpin)) -> Result<u16, String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) => return Err(format!("closed after {} bytes of response", head.len())),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&head);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {text:?}"))
}

/// Whether the server closes `stream` within `within`: a read sees the end (or a reset) instead
/// of waiting. Bytes that arrive first (the rest of a response) are skipped.
async fn closed_within(stream: &mut (impl AsyncRead + Unpin), within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// Every check against `target`; panics with the list of those that failed.
async fn survives_hostile_clients(name: &str, target: &Target) {
    let mut failures = Vec::new();
    let mut check = |what: &str, outcome: Result<(), String>| match outcome {
        Ok(()) => eprintln!("{name}: {what}: ok"),
        Err(e) => {
            eprintln!("{name}: {what}: FAILED: {e}");
            failures.push(format!("{what}: {e}"));
        }
    };
    check(
        "a declared oversized body gets 413 unread",
        declared_oversized_body(target).await,
    );
    check(
        "a chunked oversized body is cut off with 413",
        chunked_oversized_body(target).await,
    );
    check(
        "a body that stops arriving is answered and closed",
        stalled_body(target).await,
    );
    check(
        "slow-loris connections neither delay a request nor stay open",
        slow_loris(target).await,
    );
    check(
        "a connection over the cap is refused at once",
        over_the_cap(target).await,
    );
    assert!(
        failures.is_empty(),
        "{name} does not survive hostile clients:\n- {}",
        failures.join("\n- ")
    );
}

/// Headers announcing a body over the limit, and no body: 413 comes before any of it is sent.
async fn declared_oversized_body(t: &Target) -> Result<(), String> {
    let mut stream = t.connect().await.map_err(|e| format!("connect: {e}"))?;
    let head = t.post_head(&format!("content-length: {}\r\n", MAX_BODY + 1));
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let status = tokio::time::timeout(Duration::from_secs(2), read_status(&mut stream))
        .await
        .map_err(|_| "no answer within 2 s: the server waits for the body".to_owned())??;
    if status != 413 {
        return Err(format!("answered {status}"));
    }
    Ok(())
}

/// A chunked body that never ends: the server stops reading at the limit, answers 413 (or
/// reads none of it) and closes the connection.
async fn chunked_oversized_body(t: &Target) -> Result<(), String> {
    let stream = t.connect().await.map_err(|e| format!("connect: {e}"))?;
    let (mut reader, mut writer) = tokio::io::split(stream);
    let head = t.post_head("transfer-encoding: chunked\r\n");
    writer
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let sent = Arc::new(AtomicUsize::new(0));
    let feeder = tokio::spawn({
        let sent = sent.clone();
        async move {
            let chunk = [b'x'; 16 * 1024];
            let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
            frame.extend_from_slice(&chunk);
            frame.extend_from_slice(b"\r\n");
            while writer.write_all(&frame).await.is_ok() {
                sent.fetch_add(chunk.len(), Ordering::Relaxed);
            }
        }
    });
    let status = tokio::time::timeout(Duration::from_secs(10), read_status(&mut reader)).await;
    feeder.abort();
    let sent = sent.load(Ordering::Relaxed);
    let status = status.map_err(|_| format!("no answer within 10 s, {sent} bytes sent"))??;
    let expected = t.ignores_body.unwrap_or(413);
    if status != expected {
        return Err(format!(
            "answered {status}, expected {expected} ({sent} bytes sent)"
        ));
    }
    if !closed_within(&mut reader, Duration::from_secs(2)).await {
        return Err(format!("answered {status} but kept reading the body"));
    }
    Ok(())
}

/// Headers announcing a small body of which only a part arrives: answered within the request
/// timeout, and the connection closed.
async fn stalled_body(t: &Target) -> Result<(), String> {
    let mut stream = t.connect().await.map_err(|e| format!("connect: {e}"))?;
    let head = t.post_head("content-length: 1000\r\n");
    stream
        .write_all(format!("{head}{{\"a\": ").as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let bound = REQUEST_TIMEOUT + SLACK;
    let status = tokio::time::timeout(bound, read_status(&mut stream))
        .await
        .map_err(|_| format!("no answer within {bound:?}"))??;
    let expected = t.ignores_body.unwrap_or(408);
    if status != expected {
        return Err(format!("answered {status}, expected {expected}"));
    }
    if !closed_within(&mut stream, Duration::from_secs(2)).await {
        return Err(format!("answered {status} but kept the connection open"));
    }
    Ok(())
}

/// `LORIS` connections, half of them silent (no TLS handshake either), half sending a request
/// head one byte at a time; a normal request is answered within [`ANSWER_BOUND`] while all of
/// them are open, and each is closed within the header timeout (plus slack) of its start.
async fn slow_loris(t: &Target) -> Result<(), String> {
    let started = Instant::now();
    let mut lorises = Vec::new();
    for i in 0..LORIS {
        let stream: Stream = if i % 2 == 0 {
            Box::new(
                TcpStream::connect(t.addr)
                    .await
                    .map_err(|e| format!("connect: {e}"))?,
            )
        } else {
            let mut stream = t.connect().await.map_err(|e| format!("connect: {e}"))?;
            stream
                .write_all(format!("POST / HTTP/1.1\r\nhost: {}\r\nx-slow: ", t.addr).as_bytes())
                .await
                .map_err(|e| format!("write: {e}"))?;
            stream
        };
        let trickle = i % 2 == 1;
        let opened = Instant::now();
        lorises.push(tokio::spawn(hold(stream, trickle, opened)));
    }
    eprintln!(
        "{LORIS} slow-loris connections open after {:?}",
        started.elapsed()
    );
    let asked = Instant::now();
    let answer = tokio::time::timeout(ANSWER_BOUND, t.normal_request()).await;
    let took = asked.elapsed();
    let closed_meanwhile = lorises.iter().filter(|l| l.is_finished()).count();
    let mut failures = Vec::new();
    match answer {
        Ok(Ok(200)) => eprintln!("normal request answered in {took:?} beside {LORIS} slow-loris"),
        Ok(Ok(status)) => failures.push(format!("the normal request got {status}")),
        Ok(Err(e)) => failures.push(format!("the normal request failed: {e}")),
        Err(_) => failures.push(format!("the normal request took over {ANSWER_BOUND:?}")),
    }
    if closed_meanwhile > 0 {
        failures.push(format!(
            "{closed_meanwhile} slow-loris connections were closed before the normal request \
             was answered (header timeout {HEADER_TIMEOUT:?}, asked after {:?})",
            asked - started
        ));
    }
    let mut open = 0;
    let mut longest = Duration::ZERO;
    for loris in lorises {
        match loris.await.map_err(|e| e.to_string())? {
            Some(lived) => longest = longest.max(lived),
            None => open += 1,
        }
    }
    eprintln!("slow-loris connections lived at most {longest:?}");
    if open > 0 {
        failures.push(format!(
            "{open} of {LORIS} slow-loris connections still open {:?} after they started \
             (header timeout {HEADER_TIMEOUT:?})",
            HEADER_TIMEOUT + SLACK
        ));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// Holds `stream` open, sending a header byte every 200 ms when `trickle`; how long it lived
/// once the server closed it, `None` if still open after the header timeout plus slack.
async fn hold(mut stream: Stream, trickle: bool, opened: Instant) -> Option<Duration> {
    let deadline = opened + HEADER_TIMEOUT + SLACK;
    let mut buf = [0u8; 1024];
    while Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return Some(opened.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) if trickle => {
                if stream.write_all(b"a").await.is_err() {
                    return Some(opened.elapsed());
                }
            }
            Err(_) => {}
        }
    }
    None
}

/// `MAX_CONNECTIONS` silent connections held: one more is refused (closed, or answered 503)
/// within a second; once they go, a normal request is served again.
async fn over_the_cap(t: &Target) -> Result<(), String> {
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        held.push(
            TcpStream::connect(t.addr)
                .await
                .map_err(|e| format!("connect: {e}"))?,
        );
    }
    let mut extra = TcpStream::connect(t.addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut first = [0u8; 12];
    let refused = match tokio::time::timeout(Duration::from_secs(1), extra.read(&mut first)).await {
        Ok(Ok(0) | Err(_)) => true,
        Ok(Ok(n)) => first[..n].starts_with(b"HTTP/1.1 503"),
        Err(_) => false,
    };
    drop(held);
    if !refused {
        return Err(format!(
            "connection {} was neither refused nor closed within 1 s",
            MAX_CONNECTIONS + 1
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match t.normal_request().await {
            Ok(200) => return Ok(()),
            outcome if Instant::now() > deadline => {
                return Err(format!(
                    "the held connections closed, yet a normal request still gets {outcome:?}"
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn ping() -> Vec<u8> {
    static DELIVERY: AtomicUsize = AtomicUsize::new(0);
    let body = br#"{"zen": "Keep it logically awesome.", "hook_id": 1}"#;
    let signature = hangar_github::webhook::sign(SECRET.as_bytes(), body);
    let id = DELIVERY.fetch_add(1, Ordering::Relaxed);
    let mut request = format!(
        "POST / HTTP/1.1\r\nhost: hooks\r\nconnection: close\r\ncontent-type: application/json\r\n\
         x-github-event: ping\r\nx-github-delivery: servers-{id}\r\n\
         x-hub-signature-256: {signature}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_server_survives_hostile_clients() {
    support::init_tracing();
    let mut config = hangar::webhook_server::WebhookConfig::new(Some(Secret::new(SECRET)), false)
        .expect("a secret is configured");
    config.limits = limits();
    let (_h, url) =
        Harness::start_with_webhook("servers-hook", support::uncached(), |_| {}, config).await;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let target = Target {
        addr,
        tls: None,
        normal: ping,
        post: "POST /",
        ignores_body: None,
    };
    // The server answers once the manager's caches are synced.
    support::eventually(
        "the webhook server to answer",
        Duration::from_secs(60),
        || {
            let target = &target;
            async move { (target.normal_request().await == Ok(200)).then_some(()) }
        },
    )
    .await;
    survives_hostile_clients("webhook server", &target).await;
}

fn validation_review() -> Vec<u8> {
    let body = serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "servers-test",
            "operation": "CREATE",
            "object": {
                "apiVersion": "actions.summerwind.dev/v1alpha1",
                "kind": "Runner",
                "metadata": {"name": "r"},
                "spec": {"repository": "octo/app"}
            }
        }
    }))
    .unwrap();
    let mut request = format!(
        "POST /validate-actions-summerwind-dev-v1alpha1-runner HTTP/1.1\r\nhost: hooks\r\n\
         connection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admission_server_survives_hostile_clients() {
    use hangar::admission::configurations::{Endpoint, Registration};
    use hangar::admission::{Admission, AdmissionConfig};

    support::init_tracing();
    let h = Harness::start("servers-admission").await;
    let ns = h.ns.name().to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Configurations of these names do not exist and are not created: the apiserver never
    // calls this server.
    let mut registration = Registration::new(Endpoint::Url(format!("https://{addr}")));
    registration.mutating_name = format!("{ns}-mutating");
    registration.validating_name = format!("{ns}-validating");
    let mut config = AdmissionConfig::new(registration, &ns);
    config.limits = limits();
    let clients = Arc::new(hangar::credentials::GitHubClients::new(
        h.github.clone(),
        None,
    ));
    let admission = Admission::new(
        h.client.clone(),
        clients,
        Arc::new(hangar::context::SystemClock),
        config,
    );
    let bundle = admission.certs.sync().await.unwrap().bundle;
    let server = tokio::spawn(admission.serve(listener, std::future::pending()));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let target = Target {
        addr,
        tls: Some(TlsConnector::from(Arc::new(tls))),
        normal: validation_review,
        post: "POST /validate-actions-summerwind-dev-v1alpha1-runner",
        ignores_body: None,
    };
    survives_hostile_clients("admission server", &target).await;
    server.abort();
}

fn healthz() -> Vec<u8> {
    b"GET /healthz HTTP/1.1\r\nhost: probe\r\nconnection: close\r\n\r\n".to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_server_survives_hostile_clients() {
    support::init_tracing();
    let exporter = Arc::new(hangar::metrics::Exporter::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(hangar::metrics::serve(
        listener,
        exporter.router(),
        limits(),
    ));
    let target = Target {
        addr,
        tls: None,
        normal: healthz,
        // No endpoint takes a body: the route answers at once, without reading one.
        post: "POST /metrics",
        ignores_body: Some(405),
    };
    survives_hostile_clients("metrics server", &target).await;
    server.abort();
}
