//! HTTPS for the admission server: a serving certificate that can be swapped while the server
//! runs ([`ReloadableCert`]), and the TLS transport it is served over ([`Tls`]).
//!
//! Handshakes run in each connection's own task, so a client that stalls mid-handshake never
//! delays the next connection; a handshake that fails or outlasts the header timeout is logged
//! at debug level and dropped. Only HTTP/1.1 is offered (ALPN), which is what the apiserver's
//! webhook client falls back to.

use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpStream;
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

/// TLS for [`crate::serve::serve`]: each accepted connection is handshaken in its own task,
/// bounded by the server's header timeout, and counts against its connection cap meanwhile.
#[derive(Clone)]
pub struct Tls(TlsAcceptor);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Tls {
    /// Handshakes with `config`.
    pub fn new(config: Arc<rustls::ServerConfig>) -> Self {
        Self(TlsAcceptor::from(config))
    }
}

impl crate::serve::Transport for Tls {
    type Io = TlsStream<TcpStream>;

    async fn handshake(&self, tcp: TcpStream) -> std::io::Result<Self::Io> {
        self.0.accept(tcp).await
    }
}
