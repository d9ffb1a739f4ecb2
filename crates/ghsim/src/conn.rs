//! Connections that a request can reset: the listener [`crate::serve`] uses, so the
//! `reset_rate` fault ([`crate::faults::Faults::reset_rate`]) closes a request's TCP connection
//! without an answer, as a middlebox or a crashed frontend does.
//!
//! Each accepted stream shares a flag with the [`Connection`] handed to requests as
//! `ConnectInfo`; once a request raises it, the stream's next read or write fails, hyper drops
//! the connection, and the socket (with `SO_LINGER` 0) closes with a RST.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A TCP listener whose streams a request can reset.
#[derive(Debug)]
pub struct ResettableListener(pub TcpListener);

/// A stream that fails every read and write once reset.
#[derive(Debug)]
pub struct ResettableStream {
    inner: TcpStream,
    reset: Arc<AtomicBool>,
}

/// The request's connection (the `ConnectInfo` of [`crate::serve`]): resets it.
#[derive(Clone, Debug)]
pub struct Connection(Arc<AtomicBool>);

impl Connection {
    /// Closes the connection without an answer: whatever the request returns is not sent.
    pub fn reset(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Listener for ResettableListener {
    type Io = ResettableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((inner, addr)) => {
                    let stream = ResettableStream {
                        inner,
                        reset: Arc::new(AtomicBool::new(false)),
                    };
                    return (stream, addr);
                }
                // As axum's own TCP listener: a failed accept (e.g. out of file descriptors)
                // is retried after a pause rather than ending the server.
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

impl Connected<IncomingStream<'_, ResettableListener>> for Connection {
    fn connect_info(stream: IncomingStream<'_, ResettableListener>) -> Self {
        Connection(stream.io().reset.clone())
    }
}

impl ResettableStream {
    fn check(&self) -> io::Result<()> {
        if self.reset.load(Ordering::SeqCst) {
            // Linger 0: the close that follows sends RST, not FIN.
            #[allow(deprecated)]
            let _ = self.inner.set_linger(Some(Duration::ZERO));
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "ghsim: connection reset (fault)",
            ));
        }
        Ok(())
    }
}

impl AsyncRead for ResettableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResettableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
