//! The HTTP/1.1 server (collector-design.md §10 "Routes").
//!
//! - `POST /v1/ingest/{kind}` (alias `/v1/kubernetes/{kind}`): decode, validate,
//!   upsert, then `204` with an empty body; 400/413 for refused bytes, 503 when the
//!   store fails. Responses carry nothing actionable (contract §1, §5).
//! - `GET /debug/records?kind=&pod_uid=`: the stored rows as JSON (decoded payloads).
//! - `GET /debug/received`: every request seen (path, headers that matter, status,
//!   decoded body), bounded to the last [`RECEIVED_MAX`] — for canary checks over
//!   every byte the ingest received.
//! - `POST /admin/faults`: replace the fault script ([`crate::faults`]); only with
//!   `--admin`, else 404.
//! - `GET /healthz`: 204.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE, USER_AGENT};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;

use crate::faults::{Fault, Script};
use crate::store::Store;
use crate::{COMPRESSED_CAP, Reject, decode, validate};

/// Requests kept for `/debug/received`.
pub const RECEIVED_MAX: usize = 10_000;

/// One request as seen.
#[derive(Debug, Clone, Serialize)]
pub struct Received {
    pub path: String,
    pub user_agent: Option<String>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    /// The answer given (0 = dropped without a reply).
    pub status: u16,
    /// The decoded body (lossy UTF-8), or the raw body when it did not decode.
    pub body: String,
}

/// The server's shared state.
pub struct State {
    pub store: Mutex<Store>,
    pub script: Mutex<Script>,
    pub received: Mutex<Vec<Received>>,
    pub source_id: String,
    pub admin: bool,
    pub decoded_cap: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Dropping the connection without a reply.
#[derive(Debug)]
pub struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dropped without a reply")
    }
}

impl std::error::Error for Dropped {}

type Reply = Result<Response<Full<Bytes>>, Dropped>;

fn empty(status: u16) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

fn json<T: Serialize>(value: &T) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn query(q: Option<&str>) -> BTreeMap<String, String> {
    q.unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn header(req: &Request<Incoming>, name: hyper::header::HeaderName) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn ingest(state: &State, kind: String, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_owned();
    let user_agent = header(&req, USER_AGENT);
    let content_type = header(&req, CONTENT_TYPE);
    let content_encoding = header(&req, CONTENT_ENCODING);
    let fault = lock(&state.script).take_next();
    let body = Limited::new(req.into_body(), COMPRESSED_CAP.max(state.decoded_cap))
        .collect()
        .await
        .map(|b| b.to_bytes());
    let mut seen = Received {
        path,
        user_agent,
        content_type: content_type.clone(),
        content_encoding: content_encoding.clone(),
        status: 0,
        body: String::new(),
    };
    let outcome: Result<(Vec<u8>, Vec<crate::Row>), Reject> = match &body {
        Err(_) => Err(Reject::TooLarge),
        Ok(raw) => {
            let gzip = content_encoding
                .as_deref()
                .is_some_and(|e| e.trim().eq_ignore_ascii_case("gzip"));
            let is_json = content_type.as_deref().is_some_and(|t| {
                t.split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
            });
            if !gzip {
                seen.body = String::from_utf8_lossy(raw).into_owned();
                Err(Reject::Malformed("Content-Encoding is not gzip"))
            } else if !is_json {
                Err(Reject::Malformed("Content-Type is not application/json"))
            } else {
                decode(raw, state.decoded_cap).and_then(|decoded| {
                    seen.body = String::from_utf8_lossy(&decoded).into_owned();
                    validate(&kind, &decoded).map(|rows| (decoded, rows))
                })
            }
        }
    };
    if seen.body.is_empty()
        && let Ok(raw) = &body
    {
        seen.body = String::from_utf8_lossy(raw).into_owned();
    }
    let mut commit_then_drop = false;
    let status = match fault {
        // An ingest crash: the process ends at once, nothing stored, no reply (137 as
        // for SIGKILL; no core file, unlike abort).
        Some(Fault::Kill) => std::process::exit(137),
        Some(Fault::Status {
            status, retry_after, ..
        }) => {
            seen.status = status;
            record(state, seen);
            let mut r = empty(status);
            if let Some(secs) = retry_after {
                r.headers_mut().insert(
                    hyper::header::RETRY_AFTER,
                    secs.to_string().parse().map_err(|_| Dropped)?,
                );
            }
            return Ok(r);
        }
        Some(Fault::Hang { ms, .. }) => {
            record(state, seen);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            return Err(Dropped);
        }
        Some(Fault::Close { .. }) => {
            record(state, seen);
            return Err(Dropped);
        }
        Some(Fault::StorageError { .. }) => 503,
        Some(Fault::DropAfterCommit { .. }) => {
            commit_then_drop = true;
            0
        }
        Some(Fault::Pass { .. }) | None => 0,
    };
    let status = if status != 0 {
        status
    } else {
        match outcome {
            Err(reject) => reject.status(),
            Ok((decoded, rows)) => match lock(&state.store).upsert(&state.source_id, &rows, &decoded) {
                Ok(()) => 204,
                Err(e) => {
                    eprintln!("runtime-ingest: {e}");
                    503
                }
            },
        }
    };
    if commit_then_drop && status == 204 {
        record(state, seen);
        return Err(Dropped);
    }
    seen.status = status;
    record(state, seen);
    Ok(empty(status))
}

fn record(state: &State, seen: Received) {
    let mut received = lock(&state.received);
    if received.len() >= RECEIVED_MAX {
        received.remove(0);
    }
    received.push(seen);
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let ingest_kind = path
        .strip_prefix("/v1/ingest/")
        .or_else(|| path.strip_prefix("/v1/kubernetes/"))
        .map(str::to_owned);
    match (method, ingest_kind) {
        (Method::POST, Some(kind)) => ingest(&state, kind, req).await,
        (Method::GET, _) if path == "/healthz" => Ok(empty(204)),
        (Method::GET, _) if path == "/debug/records" => {
            let q = query(req.uri().query());
            let rows = lock(&state.store).records(
                q.get("kind").map(String::as_str),
                q.get("pod_uid").map(String::as_str),
            );
            Ok(match rows {
                Ok(rows) => json(&rows),
                Err(_) => empty(503),
            })
        }
        (Method::GET, _) if path == "/debug/received" => Ok(json(&*lock(&state.received))),
        (Method::POST, _) if path == "/admin/faults" && state.admin => {
            let body = Limited::new(req.into_body(), 64 * 1024)
                .collect()
                .await
                .map(|b| b.to_bytes());
            match body
                .ok()
                .and_then(|b| serde_json::from_slice::<Vec<Fault>>(&b).ok())
            {
                Some(faults) => {
                    lock(&state.script).set(faults);
                    Ok(empty(204))
                }
                None => Ok(empty(400)),
            }
        }
        _ => Ok(empty(404)),
    }
}

/// Serve on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, state: Arc<State>) -> Infallible {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(Arc::clone(&state), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
