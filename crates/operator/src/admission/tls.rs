//! HTTPS for the admission server: a serving certificate that can be swapped while the server
//! runs ([`ReloadableCert`]), and a TLS listener axum can serve on ([`TlsListener`]).
//!
//! Handshakes run in their own tasks, so a client that stalls mid-handshake never delays the
//! next connection; a handshake that fails is logged at debug level and dropped. Only HTTP/1.1
//! is offered (ALPN), which is what the apiserver's webhook client falls back to.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Why PEM material could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// No certificate in the PEM.
    #[error("no certificate in the serving certificate PEM")]
    NoCertificate,
    /// The PEM did not parse.
    #[error("invalid PEM: {0}")]
    Pem(String),
    /// The key type is not supported.
    #[error("unsupported serving key: {0}")]
    Key(String),
}

/// The certificate the server presents; replaced by [`ReloadableCert::set`] at any time.
/// Handshakes before the first `set` fail (the server is not ready).
#[derive(Debug, Default)]
pub struct ReloadableCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
    loaded: RwLock<Option<String>>,
}

impl ReloadableCert {
    /// Loads `cert_pem` (the leaf first) and `key_pem`; a no-op when they are what is loaded.
    pub fn set(&self, cert_pem: &str, key_pem: &str) -> Result<bool, LoadError> {
        if self
            .loaded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_deref()
            == Some(cert_pem)
        {
            return Ok(false);
        }
        let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| LoadError::Pem(e.to_string()))?;
        if certs.is_empty() {
            return Err(LoadError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| LoadError::Pem(e.to_string()))?;
        let signing = rustls::crypto::ring::sign::any_supported_type(&key)
            .map_err(|e| LoadError::Key(e.to_string()))?;
        let certified = Arc::new(CertifiedKey::new(certs, signing));
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(certified);
        *self.loaded.write().unwrap_or_else(|e| e.into_inner()) = Some(cert_pem.to_owned());
        Ok(true)
    }

    /// Whether a certificate is loaded.
    pub fn is_ready(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The PEM currently served, if any.
    pub fn current_pem(&self) -> Option<String> {
        self.loaded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The rustls server configuration: ring, TLS 1.2 and 1.3, HTTP/1.1, `cert` as the resolver.
pub fn server_config(cert: Arc<ReloadableCert>) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A listener whose connections are TLS streams (for `axum::serve`).
#[derive(Debug)]
pub struct TlsListener {
    local: std::net::SocketAddr,
    rx: mpsc::Receiver<(TlsStream<TcpStream>, std::net::SocketAddr)>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

/// A TLS handshake taking longer than this is abandoned.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl TlsListener {
    /// Accepts on `listener`, handshaking with `config`.
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (tx, rx) = mpsc::channel(64);
        let accept_task = tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            local,
            rx,
            accept_task,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept task only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
