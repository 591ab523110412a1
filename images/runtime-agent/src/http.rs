//! The HTTP transport (collector-design.md §6; runtime-agent-backend-contract.md §3
//! "Transport").
//!
//! `POST {base}/v1/ingest/{kind}` over HTTP/1.1 (`https://` through rustls with the
//! compiled-in web PKI roots or, for an embedder, pinned roots ([`TlsRoots`]), or plain
//! `http://`), one payload per request, directly or through the egress proxy the
//! environment names ([`crate::proxy`]: `CONNECT` for `https://`, a forward proxy
//! for `http://`, [`crate::connect`] dials):
//!
//! - the body is always gzip (level 6) with `Content-Type: application/json`,
//!   `Content-Encoding: gzip` and the same [`crate::ship::user_agent`] on every request;
//! - the whole exchange (connect, TLS, request, status, body drain) runs under the
//!   caller's timeout; the response body is drained up to 4 KiB and ignored — nothing
//!   received changes what the agent collects (contract §1);
//! - redirects are never followed: a 3xx is just another deferred status;
//! - a `Retry-After` in whole seconds is passed up; any other form is ignored.
//!
//! One current-thread runtime lives in the shipper's thread; nothing here spawns tasks
//! beyond what the connector needs for the single request.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{
    CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, PROXY_AUTHORIZATION, RETRY_AFTER, USER_AGENT,
};
use hyper::{Request, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;

use crate::connect::{Connector, Mode};
use crate::payload::Kind;
use crate::proxy::{ProxySettings, Route};
use crate::ship::{Outcome, Response, Transport, classify};

/// Response bytes read (and ignored) before the connection is dropped.
const DRAIN_LIMIT: usize = 4096;
/// Connect timeout, inside the request timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the transport could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("the ingest URL is not an http:// or https:// URL")]
    BadUrl,
    #[error("the TLS configuration could not be built")]
    Tls,
    #[error("the proxy address cannot be dialled")]
    BadProxy,
    #[error("the async runtime could not be started: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Check an ingest base URL: `http://` or `https://`, a host, no query or fragment.
pub fn valid_base_url(base: &str) -> bool {
    let Ok(uri) = format!("{}/v1/ingest/x", base.trim_end_matches('/')).parse::<Uri>() else {
        return false;
    };
    matches!(uri.scheme_str(), Some("http" | "https"))
        && uri.host().is_some_and(|h| !h.is_empty())
        && uri.query().is_none()
        && !base.contains('#')
}

/// gzip level 6 (design §6).
pub fn gzip(payload: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(payload.len() / 4 + 64),
        flate2::Compression::new(6),
    );
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(payload);
    enc.finish().unwrap_or_default()
}

/// Which TLS trust anchors an `https://` ingest is checked against.
#[derive(Debug, Clone, Default)]
pub enum TlsRoots {
    /// The compiled-in web PKI roots.
    #[default]
    WebPki,
    /// Exactly these anchors (a backend's private CA, contract §3; tests).
    Pinned(Vec<CertificateDer<'static>>),
}

/// The binary's transport.
pub struct HttpTransport {
    runtime: tokio::runtime::Runtime,
    client: Client<HttpsConnector<Connector>, Full<Bytes>>,
    base: String,
    user_agent: HeaderValue,
    /// Sent on every request when it goes to a forward proxy with credentials.
    proxy_authorization: Option<HeaderValue>,
}

/// The connector mode for `base` under `proxy`, and the header a forward proxy wants.
fn mode_for(base: &Uri, proxy: &ProxySettings) -> Result<(Mode, Option<HeaderValue>), TransportError> {
    let scheme = base.scheme_str().unwrap_or("http");
    let host = base.host().ok_or(TransportError::BadUrl)?;
    let port = base
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    let dial = |p: &crate::proxy::Proxy| {
        format!("http://{}", p.authority())
            .parse::<Uri>()
            .map_err(|_| TransportError::BadProxy)
    };
    let header = |p: &crate::proxy::Proxy| {
        p.authorization()
            .map(|a| HeaderValue::from_str(a).map_err(|_| TransportError::BadProxy))
            .transpose()
    };
    Ok(match proxy.route(scheme, host, port) {
        Route::Direct => (Mode::Direct, None),
        Route::Tunnel(p) => (
            Mode::Tunnel {
                proxy: dial(p)?,
                authorization: p.authorization().map(str::to_owned),
            },
            None,
        ),
        Route::Forward(p) => (Mode::Forward { proxy: dial(p)? }, header(p)?),
    })
}

impl HttpTransport {
    /// A transport posting under `base` with this User-Agent, directly, checking TLS
    /// against the web PKI.
    pub fn new(base: &str, user_agent: &str) -> Result<Self, TransportError> {
        Self::with(base, user_agent, &ProxySettings::none(), TlsRoots::WebPki)
    }

    /// A transport posting under `base` through `proxy` (when it routes `base`), with
    /// these TLS roots.
    pub fn with(
        base: &str,
        user_agent: &str,
        proxy: &ProxySettings,
        roots: TlsRoots,
    ) -> Result<Self, TransportError> {
        if !valid_base_url(base) {
            return Err(TransportError::BadUrl);
        }
        let base_uri = base.parse::<Uri>().map_err(|_| TransportError::BadUrl)?;
        let (mode, proxy_authorization) = mode_for(&base_uri, proxy)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(1)
            .build()
            .map_err(TransportError::Runtime)?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = match roots {
            TlsRoots::WebPki => builder
                .with_provider_and_webpki_roots(provider)
                .map_err(|_| TransportError::Tls)?,
            TlsRoots::Pinned(certs) => {
                let mut store = rustls::RootCertStore::empty();
                for cert in certs {
                    store.add(cert).map_err(|_| TransportError::Tls)?;
                }
                let config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|_| TransportError::Tls)?
                    .with_root_certificates(store)
                    .with_no_client_auth();
                builder.with_tls_config(config)
            }
        };
        let connector = builder
            .https_or_http()
            .enable_http1()
            .wrap_connector(Connector::new(http, mode));
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Ok(Self {
            runtime,
            client,
            base: base.trim_end_matches('/').to_owned(),
            user_agent: HeaderValue::from_str(user_agent)
                .unwrap_or(HeaderValue::from_static("runtime-agent")),
            proxy_authorization,
        })
    }
}

fn retry_after_secs(value: Option<&HeaderValue>) -> Option<Duration> {
    let text = value?.to_str().ok()?.trim();
    if text.is_empty() || text.len() > 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u64>().ok().map(Duration::from_secs)
}

impl Transport for HttpTransport {
    fn post(&mut self, kind: Kind, payload: &[u8], timeout: Duration) -> Response {
        let Ok(uri) = format!("{}/v1/ingest/{}", self.base, kind.as_str()).parse::<Uri>() else {
            return Response::of(Outcome::Deferred);
        };
        let body = gzip(payload);
        let transmitted_bytes = body.len() as u64;
        let mut builder = Request::post(uri)
            .header(CONTENT_TYPE, "application/json")
            .header(CONTENT_ENCODING, "gzip")
            .header(USER_AGENT, self.user_agent.clone());
        if let Some(auth) = &self.proxy_authorization {
            builder = builder.header(PROXY_AUTHORIZATION, auth.clone());
        }
        let Ok(request) = builder.body(Full::new(Bytes::from(body))) else {
            return Response::of(Outcome::Deferred);
        };
        let client = &self.client;
        let exchange = async move {
            let response = client.request(request).await.ok()?;
            let status = response.status().as_u16();
            let retry_after = retry_after_secs(response.headers().get(RETRY_AFTER));
            let mut body = response.into_body();
            let mut drained = 0usize;
            while drained <= DRAIN_LIMIT {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        drained += frame.data_ref().map_or(0, Bytes::len);
                    }
                    _ => break,
                }
            }
            Some((status, retry_after))
        };
        let result = self
            .runtime
            .block_on(async { tokio::time::timeout(timeout, exchange).await });
        match result {
            Ok(Some((status, retry_after))) => Response {
                outcome: classify(status),
                retry_after,
                transmitted_bytes,
            },
            // Network error or timeout: the bytes may or may not have left.
            _ => Response {
                outcome: Outcome::Deferred,
                retry_after: None,
                transmitted_bytes,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        for ok in [
            "http://127.0.0.1:8080",
            "https://ingest.example.com",
            "https://ingest.example.com/",
            "https://ingest.example.com/prefix",
            "http://[::1]:9/",
        ] {
            assert!(valid_base_url(ok), "{ok}");
        }
        for bad in [
            "",
            "ingest.example.com",
            "ftp://x",
            "https://",
            "https://x/?a=b",
            "https://x/#f",
            "http://a b",
        ] {
            assert!(!valid_base_url(bad), "{bad}");
        }
    }

    #[test]
    fn retry_after_whole_seconds_only() {
        let h = |s: &'static str| HeaderValue::from_static(s);
        assert_eq!(retry_after_secs(Some(&h("7"))), Some(Duration::from_secs(7)));
        assert_eq!(retry_after_secs(Some(&h(" 30 "))), Some(Duration::from_secs(30)));
        assert_eq!(retry_after_secs(Some(&h("Wed, 21 Oct 2015 07:28:00 GMT"))), None);
        assert_eq!(retry_after_secs(Some(&h("-1"))), None);
        assert_eq!(retry_after_secs(Some(&h("99999999999"))), None);
        assert_eq!(retry_after_secs(None), None);
    }

    #[test]
    fn gzip_round_trips() {
        use std::io::Read;
        let payload = br#"{"kind":"collection_coverage"}"#.repeat(50);
        let gz = gzip(&payload);
        assert!(gz.len() < payload.len());
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, payload);
    }
}
