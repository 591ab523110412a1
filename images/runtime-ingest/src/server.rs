//! The HTTP/1.1 server (collector-design.md §10 "Routes"; review b30b1a0 finding 14).
//!
//! - `POST /v1/ingest/{kind}` (alias `/v1/kubernetes/{kind}`): [`crate::server::ingest`]
//!   — decode, validate, upsert, then `204` with an empty body; a refusal is its
//!   [`crate::Reject`] status with `{"error":"<code>","detail":"…"}` and one log line;
//!   a storage failure is 503 `storage.unavailable`.
//! - `GET /healthz`: 204.
//! - Only with `--read-api` ([`Options::read_api`]), else 404 — and only for the
//!   bearer of the read token ([`Options::read_token`], [`crate::auth`]; review
//!   afa2bf1 finding 5): `GET /v1/read/usage?namespace=&pod=`, one agent's CPU,
//!   memory and OOM kills ([`crate::read`]). The token is checked first: without it
//!   the answer is 401 `read.unauthorized` with `WWW-Authenticate: Bearer` and
//!   nothing else, one log line that names the route and why (never a token), and
//!   the refusal is counted in `/debug/stats`. With the read API on and no token
//!   configured, every read is refused. The read holds the store's lock only while
//!   it copies that agent's rows out ([`crate::store::Store::agent_usage_rows`]),
//!   and parses them after releasing it, so ingestion never waits on a parse.
//! - Only with `--admin` ([`Options::admin`]), else 404 — they are unauthenticated:
//!   - `GET /debug/records?kind=&pod_uid=`: the stored rows as JSON;
//!   - `GET /debug/received`: the bounded log of requests seen ([`crate::received`]);
//!   - `GET /debug/stats`: what the log and the connections hold, refusals by code;
//!   - `POST /admin/faults`: replace the fault script ([`crate::faults`]).
//!
//! **Bounds** ([`crate::limits`], each overridable in [`Options`]): at most
//! `max_connections` connections (the accept loop waits for a slot, so the next ones
//! queue in the listen backlog); headers within [`crate::limits::HEADER_TIMEOUT`],
//! which hyper also applies to an idle keep-alive connection, so idle ones free their
//! slot; at most `bodies_in_flight` request bodies buffered at once, each read within
//! `body_timeout` (408 after) and capped at the compressed cap (413, with up to
//! [`crate::limits::DISCARD_LIMIT`] more read and dropped so the client sees the
//! answer); the `received` log within `received_budget` bytes.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONNECTION, CONTENT_TYPE, HeaderMap, HeaderValue, WWW_AUTHENTICATE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::auth::{ReadToken, Refusal};
use crate::faults::{Fault, Script};
use crate::limits;
use crate::received::ReceivedLog;
use crate::store::{ReadCounts, Store};

mod ingest;
#[cfg(test)]
mod tests;

/// The server's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The one configured source everything is attributed to (contract §3).
    pub source_id: String,
    /// Serve `/debug/*` and `/admin/faults`.
    pub admin: bool,
    /// Serve `GET /v1/read/usage` ([`crate::read`]).
    pub read_api: bool,
    /// The token a read must bear ([`crate::auth`]); with `read_api` and no token,
    /// every read answers 401.
    pub read_token: Option<ReadToken>,
    /// Decoded-size cap.
    pub decoded_cap: usize,
    /// How long a body may take once its headers arrived.
    pub body_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Request bodies buffered at once.
    pub bodies_in_flight: usize,
    /// Bytes the `received` log keeps.
    pub received_budget: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            source_id: "default".into(),
            admin: false,
            read_api: false,
            read_token: None,
            decoded_cap: limits::DECODED_CAP,
            body_timeout: limits::BODY_TIMEOUT,
            max_connections: limits::MAX_CONNECTIONS,
            bodies_in_flight: limits::BODIES_IN_FLIGHT,
            received_budget: limits::RECEIVED_BUDGET,
        }
    }
}

/// The server's shared state.
pub struct State {
    pub store: Mutex<Store>,
    pub script: Mutex<Script>,
    pub received: Mutex<ReceivedLog>,
    pub options: Options,
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    storage_failures: Mutex<u64>,
    bodies: Arc<Semaphore>,
    connections: Arc<Semaphore>,
}

impl State {
    /// A server state over `store` (zero limits are raised to 1).
    pub fn new(store: Store, options: Options) -> Self {
        Self {
            store: Mutex::new(store),
            script: Mutex::new(Script::default()),
            received: Mutex::new(ReceivedLog::new(options.received_budget)),
            rejected: Mutex::new(BTreeMap::new()),
            storage_failures: Mutex::new(0),
            bodies: Arc::new(Semaphore::new(options.bodies_in_flight.max(1))),
            connections: Arc::new(Semaphore::new(options.max_connections.max(1))),
            options,
        }
    }

    fn stats(&self) -> Stats {
        let (stored_bytes, reads) = {
            let store = lock(&self.store);
            (store.stored_bytes().ok(), store.read_counts())
        };
        let received = lock(&self.received);
        let limit = self.options.max_connections.max(1);
        Stats {
            received: LogStats {
                entries: received.len(),
                bytes: received.bytes(),
                budget: received.budget(),
            },
            rejected: lock(&self.rejected).clone(),
            storage_failures: *lock(&self.storage_failures),
            connections: ConnectionStats {
                open: limit.saturating_sub(self.connections.available_permits()),
                limit,
            },
            stored_bytes,
            reads,
        }
    }
}

#[derive(Serialize)]
struct LogStats {
    entries: usize,
    bytes: usize,
    budget: usize,
}

#[derive(Serialize)]
struct ConnectionStats {
    open: usize,
    limit: usize,
}

/// `GET /debug/stats`.
#[derive(Serialize)]
struct Stats {
    received: LogStats,
    rejected: BTreeMap<&'static str, u64>,
    storage_failures: u64,
    connections: ConnectionStats,
    stored_bytes: Option<u64>,
    /// What the store's reads touched: rows copied out, full-scan steps.
    reads: ReadCounts,
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

fn json<T: Serialize>(status: u16, value: &T) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn close_after(mut r: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    r.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Keep at most `max` characters, printable ASCII only (for logs and the log).
fn clip(text: &str, max: usize) -> String {
    text.chars()
        .take(max)
        .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
        .collect()
}

fn query(q: Option<&str>) -> BTreeMap<String, String> {
    q.unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

async fn admin(state: &State, method: &Method, path: &str, req: Request<Incoming>) -> Reply {
    match (method, path) {
        (&Method::GET, "/debug/records") => {
            let q = query(req.uri().query());
            let rows = lock(&state.store).raw_records(
                q.get("kind").map(String::as_str),
                q.get("pod_uid").map(String::as_str),
            );
            Ok(match rows {
                Ok(rows) => json(
                    200,
                    &rows
                        .into_iter()
                        .map(crate::store::RawRow::into_stored)
                        .collect::<Vec<_>>(),
                ),
                Err(_) => empty(503),
            })
        }
        (&Method::GET, "/debug/received") => {
            let entries: Vec<_> = lock(&state.received).iter().cloned().collect();
            Ok(json(200, &entries))
        }
        (&Method::GET, "/debug/stats") => Ok(json(200, &state.stats())),
        (&Method::POST, "/admin/faults") => {
            let body = Limited::new(req.into_body(), limits::FAULTS_BODY_CAP)
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

/// The code of a read refused for its token.
const READ_UNAUTHORIZED: &str = "read.unauthorized";

/// Whether `headers` bear the read token; a refusal is logged (why, never what was
/// sent) and counted.
fn authorized(state: &State, path: &str, headers: &HeaderMap) -> bool {
    let verdict = match &state.options.read_token {
        Some(token) => token.admits(headers.get_all(AUTHORIZATION).iter()),
        None => Err(Refusal::Missing),
    };
    let Err(refusal) = verdict else {
        return true;
    };
    *lock(&state.rejected).entry(READ_UNAUTHORIZED).or_default() += 1;
    let why = match state.options.read_token {
        Some(_) => refusal.describe(),
        None => "no read token is configured (serve --read-token-file)",
    };
    eprintln!(
        "runtime-ingest: 401 {READ_UNAUTHORIZED} {}: {why}",
        clip(path, limits::PATH_KEPT)
    );
    false
}

/// The answer to a read without the token: 401 and nothing else.
fn unauthorized() -> Response<Full<Bytes>> {
    let mut r = json(
        401,
        &serde_json::json!({"error": READ_UNAUTHORIZED, "detail": "this route needs the ingest's read token as a bearer token"}),
    );
    r.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static(r#"Bearer realm="runtime-ingest""#),
    );
    r
}

/// `GET /v1/read/usage?namespace=&pod=` ([`crate::read`]), for a caller that bore
/// the token. The store's lock is held for the copy of one agent's rows only.
fn read_usage(state: &State, q: Option<&str>) -> Response<Full<Bytes>> {
    let q = query(q);
    let (Some(namespace), Some(pod)) = (q.get("namespace"), q.get("pod")) else {
        return json(
            400,
            &serde_json::json!({"error": "read.parameters", "detail": "namespace and pod are required"}),
        );
    };
    if !crate::read::valid_name(namespace) || !crate::read::valid_name(pod) {
        return json(
            400,
            &serde_json::json!({"error": "read.parameters", "detail": "namespace and pod must be Kubernetes names"}),
        );
    }
    let copied = {
        let store = lock(&state.store);
        store.agent_usage_rows(namespace, pod)
    };
    match copied {
        Ok(rows) => json(200, &crate::read::agent_usage_of(rows, namespace, pod)),
        Err(_) => empty(503),
    }
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let ingest_kind = path
        .strip_prefix("/v1/ingest/")
        .or_else(|| path.strip_prefix("/v1/kubernetes/"))
        .map(str::to_owned);
    match (&method, ingest_kind) {
        (&Method::POST, Some(kind)) => ingest::ingest(&state, kind, req).await,
        (&Method::GET, _) if path == "/healthz" => Ok(empty(204)),
        (&Method::GET, _) if path == "/v1/read/usage" && state.options.read_api => {
            if !authorized(&state, &path, req.headers()) {
                return Ok(unauthorized());
            }
            Ok(read_usage(&state, req.uri().query()))
        }
        _ if state.options.admin && (path.starts_with("/debug/") || path.starts_with("/admin/")) => {
            admin(&state, &method, &path, req).await
        }
        _ => Ok(empty(404)),
    }
}

/// Serve on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, state: Arc<State>) -> Infallible {
    loop {
        // Wait for a connection slot before accepting, so connections past the limit
        // queue in the kernel's backlog instead of in our memory.
        let Ok(permit) = Arc::clone(&state.connections).acquire_owned().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let stream = loop {
            match listener.accept().await {
                Ok((stream, _)) => break stream,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let _slot = permit;
            let service = service_fn(move |req| handle(Arc::clone(&state), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits::HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
