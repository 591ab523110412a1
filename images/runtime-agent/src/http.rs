//! The HTTP transport (collector-design.md §6; runtime-agent-backend-contract.md §3
//! "Transport").
//!
//! `POST {base}/v1/ingest/{kind}` over HTTP/1.1 (`https://` through rustls with the
//! compiled-in web PKI roots, or plain `http://`), one payload per request:
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
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper::{Request, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::payload::Kind;
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

/// The binary's transport.
pub struct HttpTransport {
    runtime: tokio::runtime::Runtime,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    base: String,
    user_agent: HeaderValue,
}

impl HttpTransport {
    /// A transport posting under `base` with this User-Agent.
    pub fn new(base: &str, user_agent: &str) -> Result<Self, TransportError> {
        if !valid_base_url(base) {
            return Err(TransportError::BadUrl);
        }
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
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(provider)
            .map_err(|_| TransportError::Tls)?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
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
        let Ok(request) = Request::post(uri)
            .header(CONTENT_TYPE, "application/json")
            .header(CONTENT_ENCODING, "gzip")
            .header(USER_AGENT, self.user_agent.clone())
            .body(Full::new(Bytes::from(body)))
        else {
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
