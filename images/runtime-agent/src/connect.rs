//! The TCP side of the transport: direct, through a `CONNECT` tunnel, or to a forward
//! proxy (runtime-agent-backend-contract.md §3; the route is [`crate::proxy`]'s).
//!
//! [`Connector`] is what the HTTP client dials through (TLS, for `https://`, is layered
//! on top by `hyper-rustls`, so it runs end to end through a tunnel with the ingest's
//! own name):
//!
//! - **Direct**: TCP to the target.
//! - **Tunnel**: TCP to the proxy, then `CONNECT host:port HTTP/1.1` with `Host` and,
//!   when configured, `Proxy-Authorization`; any 2xx opens the tunnel; anything else
//!   (407, 403, 502, a response head over [`MAX_CONNECT_HEAD`] bytes, bytes after the
//!   head) fails the connect, which the shipper treats as a deferral like any network
//!   error. Nothing of the proxy's answer is logged.
//! - **Forward**: TCP to the proxy, and the connection says it is proxied, so the
//!   client writes absolute-form request lines; the transport adds
//!   `Proxy-Authorization` to each request.
//!
//! Connect timeouts are the [`HttpConnector`]'s; the whole exchange, the tunnel
//! included, runs under the request timeout of [`crate::http`].

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest `CONNECT` response head read.
pub const MAX_CONNECT_HEAD: usize = 8 * 1024;

/// How the connector reaches every target of this transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Direct,
    /// Through `proxy` (an `http://host:port` URI) with `CONNECT`.
    Tunnel {
        proxy: Uri,
        authorization: Option<String>,
    },
    /// To `proxy`, which forwards absolute-form requests.
    Forward {
        proxy: Uri,
    },
}

/// Why a tunnel could not be opened (never carries what the proxy sent).
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("the proxy refused the tunnel with status {0}")]
    Refused(u16),
    #[error("the proxy's answer to CONNECT is not an HTTP response head")]
    BadAnswer,
    #[error("connecting through the proxy failed: {0}")]
    Io(#[from] io::Error),
}

/// The connector.
#[derive(Clone)]
pub struct Connector {
    http: HttpConnector,
    mode: Arc<Mode>,
}

impl Connector {
    /// Dial with `http` (its connect timeout applies) in `mode`.
    pub fn new(http: HttpConnector, mode: Mode) -> Self {
        Self {
            http,
            mode: Arc::new(mode),
        }
    }
}

/// A connection, marked proxied when it goes to a forward proxy.
pub struct Stream {
    inner: TokioIo<TcpStream>,
    forwarded: bool,
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        let c = self.inner.connected();
        if self.forwarded { c.proxy(true) } else { c }
    }
}

impl Read for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl Write for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The status of a response head, if it is one.
fn head_status(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = line.split(' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let status = parts.next()?;
    (status.len() == 3).then(|| status.parse().ok()).flatten()
}

/// Ask the proxy on `tcp` for a tunnel to `target` (`host:port`).
async fn tunnel(tcp: &mut TcpStream, target: &str, authorization: Option<&str>) -> Result<(), TunnelError> {
    let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = authorization {
        request.push_str("Proxy-Authorization: ");
        request.push_str(auth);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    tcp.write_all(request.as_bytes()).await?;
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 512];
    loop {
        let n = tcp.read(&mut buf).await?;
        if n == 0 {
            return Err(TunnelError::BadAnswer);
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            // The server speaks only after our TLS hello: bytes past the head are a
            // proxy we do not understand.
            if end + 4 != head.len() {
                return Err(TunnelError::BadAnswer);
            }
            break;
        }
        if head.len() > MAX_CONNECT_HEAD {
            return Err(TunnelError::BadAnswer);
        }
    }
    match head_status(&head) {
        Some(s) if (200..300).contains(&s) => Ok(()),
        Some(s) => Err(TunnelError::Refused(s)),
        None => Err(TunnelError::BadAnswer),
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Uri> for Connector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower_service::Service::<Uri>::poll_ready(&mut self.http, cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let mut http = self.http.clone();
        let mode = Arc::clone(&self.mode);
        Box::pin(async move {
            match &*mode {
                Mode::Direct => Ok(Stream {
                    inner: tower_service::Service::call(&mut http, dst).await?,
                    forwarded: false,
                }),
                Mode::Forward { proxy } => Ok(Stream {
                    inner: tower_service::Service::call(&mut http, proxy.clone()).await?,
                    forwarded: true,
                }),
                Mode::Tunnel { proxy, authorization } => {
                    let host = dst.host().ok_or(TunnelError::BadAnswer)?;
                    let port = dst.port_u16().unwrap_or(match dst.scheme_str() {
                        Some("https") => 443,
                        _ => 80,
                    });
                    let host = host.trim_matches(['[', ']']);
                    let target = crate::proxy::authority(host, port);
                    let io = tower_service::Service::call(&mut http, proxy.clone()).await?;
                    let mut tcp = io.into_inner();
                    tunnel(&mut tcp, &target, authorization.as_deref()).await?;
                    Ok(Stream {
                        inner: TokioIo::new(tcp),
                        forwarded: false,
                    })
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_heads() {
        assert_eq!(
            head_status(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            Some(200)
        );
        assert_eq!(
            head_status(b"HTTP/1.0 407 Proxy Authentication Required\r\n"),
            Some(407)
        );
        assert_eq!(head_status(b"HTTP/1.1 204\r\n"), Some(204));
        for bad in [
            &b"SSH-2.0-x\r\n"[..],
            b"HTTP/2 200\r\n",
            b"HTTP/1.1 2000 x\r\n",
            b"",
        ] {
            assert_eq!(head_status(bad), None);
        }
    }
}
