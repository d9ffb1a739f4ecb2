//! Plain HTTP/1.0 exchanges on loopback, for tests and tools that poke Hangar's own servers
//! (probes, metrics, the webhook server) without an HTTP client stack: one connection per
//! request, read until the server closes it.
//!
//! Every exchange is bounded by [`TIMEOUT`] and answers `None` when there is no (parsable)
//! answer in time, so a poll loop can simply try again. [`deliver`] posts a GitHub webhook
//! signed as GitHub signs it, with `hangar_github`'s own signing function.
//!
//! Tests that need byte-level control (slow headers, partial bodies, too many connections)
//! keep their own raw sockets: that is what they test.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long one exchange may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// `127.0.0.1:port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// Sends `method path` with `headers` (besides `Host` and `Content-Length`) and `body`; the
/// answer's status and body.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<(u16, String)> {
    let mut head = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream.write_all(head.as_bytes()).await.ok()?;
        stream.write_all(body).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_owned()))
    };
    tokio::time::timeout(TIMEOUT, exchange).await.ok().flatten()
}

/// `GET path`; the answer's status and body.
pub async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    request(addr, "GET", path, &[], &[]).await
}

/// Posts a GitHub webhook delivery to `/`: JSON `payload` as event `event` with delivery id
/// `guid`, signed (`X-Hub-Signature-256`) with `secret`. The answer's status and body.
pub async fn deliver(
    addr: SocketAddr,
    secret: &[u8],
    event: &str,
    guid: &str,
    payload: &[u8],
) -> Option<(u16, String)> {
    let signature = hangar_github::webhook::sign(secret, payload);
    let headers = [
        ("Content-Type", "application/json"),
        ("X-GitHub-Event", event),
        ("X-GitHub-Delivery", guid),
        ("X-Hub-Signature-256", signature.as_str()),
    ];
    request(addr, "POST", "/", &headers, payload).await
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::net::TcpListener;

    use super::*;

    /// A one-shot server: records the request it gets and answers `answer`.
    async fn server(answer: &'static str) -> (SocketAddr, Arc<Mutex<String>>) {
        let listener = TcpListener::bind(loopback(0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(String::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut raw = vec![0; 64 * 1024];
            let mut got = 0;
            // Read the head, then as much body as Content-Length says.
            loop {
                let n = stream.read(&mut raw[got..]).await.unwrap();
                got += n;
                let text = String::from_utf8_lossy(&raw[..got]).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let want = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .map_or(0, |n| n.parse().unwrap());
                    if body.len() >= want || n == 0 {
                        *record.lock().unwrap() = text;
                        break;
                    }
                }
            }
            stream.write_all(answer.as_bytes()).await.unwrap();
        });
        (addr, seen)
    }

    #[tokio::test]
    async fn get_reads_status_and_body() {
        let (addr, seen) = server("HTTP/1.0 503 Service Unavailable\r\n\r\nnot yet").await;
        assert_eq!(
            get(addr, "/readyz").await,
            Some((503, "not yet".to_owned()))
        );
        let seen = seen.lock().unwrap();
        assert!(seen.starts_with("GET /readyz HTTP/1.0\r\n"), "{seen}");
    }

    #[tokio::test]
    async fn no_server_is_no_answer() {
        let free = TcpListener::bind(loopback(0)).await.unwrap();
        let addr = free.local_addr().unwrap();
        drop(free);
        assert_eq!(get(addr, "/").await, None);
    }

    #[tokio::test]
    async fn a_delivery_is_signed_over_its_body() {
        let (addr, seen) = server("HTTP/1.0 202 Accepted\r\n\r\n").await;
        let payload = br#"{"action":"queued"}"#;
        let answer = deliver(addr, b"s3cret", "workflow_job", "guid-1", payload).await;
        assert_eq!(answer, Some((202, String::new())));
        let seen = seen.lock().unwrap().clone();
        let (head, body) = seen.split_once("\r\n\r\n").unwrap();
        assert_eq!(body.as_bytes(), payload);
        let header = |name: &str| {
            head.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(header("X-GitHub-Event"), "workflow_job");
        assert_eq!(header("X-GitHub-Delivery"), "guid-1");
        let secrets = [hangar_github::Secret::new("s3cret")];
        let signature = header("X-Hub-Signature-256");
        hangar_github::webhook::verify_signature(&secrets, body.as_bytes(), Some(&signature))
            .unwrap();
    }
}
