//! The Start page's HTTP server: embedded assets, the guard on every
//! request, the security headers on every response, and the replies (every
//! string of every response and event passes the state dir's redactor).
//! The routes live by concept: [`super::routes`] (records and providers),
//! [`super::ops`] (Start, Stop, chat: the operations on a running agent)
//! and [`super::live`] (presence and the event stream).
//!
//! Every handler calls the same library function as the matching CLI
//! command, and runs the store's file I/O and every blocking wait on the
//! runtime's blocking pool ([`off`]), never on its two async workers
//! (review b30b1a0 finding 1 scenario 3, code-quality "Blocking work on the
//! async runtime").
//!
//! Secrets (review b30b1a0 code-quality "Fail-open redaction"): the
//! redactor is built from [`crate::store::Store::secrets`], the same
//! rules the gate uses, and cached until a secret-bearing file changes
//! ([`Secrets::refresh`] compares sizes and modification times). It fails
//! closed: when the state dir's secrets cannot be read, a response carries
//! a fixed error and nothing else, and an event is reduced to "refetch".

use super::guard::{self, Guard, Seen};
use super::live::Presence;
use crate::app::AppError;
use crate::redact::Redactor;
use crate::response::sanitize_text;
use crate::store::{Store, StoreError};
use axum::Json;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{broadcast, watch};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// The Content-Security-Policy of every response: only the page's own
/// script, style and connections; no inline code, no frames, no forms.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// How long a local start waits for presence `online`.
pub const LOCAL_ONLINE_WAIT: Duration = Duration::from_secs(60);

/// What a response says when the state dir's secrets cannot be read.
pub const SECRETS_UNREADABLE: &str =
    "cannot read this state dir's secrets, so nothing is shown; check the files in the state dir";

/// Why the Start page could not run.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error(
        "refusing to listen on {0}: the Start page binds loopback addresses only (127.0.0.1:PORT or [::1]:PORT)"
    )]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot draw the page token from the OS random source: {0}")]
    Token(String),
    #[error("the Start page server stopped: {0}")]
    Serve(std::io::Error),
}

/// The operation an agent is busy with (one at a time, announced to the page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Start,
    Stop,
    /// An `undeploy`, alone or as the first half of a Delete.
    Undeploy,
}

impl Op {
    /// As the page's `op` field says it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Op::Start => "start",
            Op::Stop => "stop",
            Op::Undeploy => "undeploy",
        }
    }

    /// "a start", "an undeploy": for refusals.
    pub(super) fn what(self) -> &'static str {
        match self {
            Op::Start => "a start",
            Op::Stop => "a stop",
            Op::Undeploy => "an undeploy",
        }
    }
}

/// Sizes and modification times of every file secrets come from.
type Fingerprint = Vec<(String, u64, Option<SystemTime>)>;

/// The cached redactor (see the module doc).
#[derive(Default)]
pub(super) struct Secrets {
    cached: Mutex<Option<(Fingerprint, Arc<Redactor>)>>,
}

fn fingerprint(store: &Store) -> Fingerprint {
    let mut out = Vec::new();
    let mut add = |p: std::path::PathBuf| {
        let m = std::fs::metadata(&p).ok();
        out.push((
            p.display().to_string(),
            m.as_ref().map_or(0, |m| m.len()),
            m.and_then(|m| m.modified().ok()),
        ));
    };
    add(store.root().join("owner.key"));
    add(store.root().join("settings.json"));
    for dir in ["agents", "keys"] {
        let mut entries: Vec<_> = std::fs::read_dir(store.root().join(dir))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        entries.sort();
        entries.into_iter().for_each(&mut add);
    }
    out
}

impl Secrets {
    /// Rebuilds the redactor when a secret-bearing file changed (blocking
    /// file I/O: call it from [`off`] or the presence thread). On failure
    /// the cache is emptied, so replies fail closed.
    pub(super) fn refresh(&self, store: &Store) {
        let fp = fingerprint(store);
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if cached.as_ref().is_some_and(|(old, _)| *old == fp) {
            return;
        }
        *cached = match store.secrets() {
            Ok(set) => Some((fp, Arc::new(Redactor::from_set(&set)))),
            Err(e) => {
                tracing::warn!("cannot read the state dir's secrets: {e}");
                None
            }
        };
    }

    /// The current redactor (`None`: fail closed).
    pub(super) fn redactor(&self) -> Option<Arc<Redactor>> {
        self.cached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(_, r)| r.clone())
    }
}

pub(super) struct Shared {
    pub(super) store: Store,
    pub(super) guard: Guard,
    pub(super) events: broadcast::Sender<Value>,
    pub(super) presence: Presence,
    pub(super) agents_gen: watch::Sender<u64>,
    pub(super) busy: Mutex<BTreeMap<String, Op>>,
    pub(super) secrets: Secrets,
}

pub(super) type S = Arc<Shared>;

/// Binds `listen` (loopback only), draws the token, calls `on_ready` with the
/// URL to open (the only place the token is shown) and serves until the
/// process ends. Nothing else happens before the address is accepted.
pub async fn serve(store: Store, listen: SocketAddr, on_ready: impl FnOnce(&str)) -> Result<(), UiError> {
    if !guard::is_loopback(&listen) {
        return Err(UiError::NotLoopback(listen));
    }
    let token = guard::new_token().map_err(|e| UiError::Token(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| UiError::Bind { addr: listen, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| UiError::Bind { addr: listen, source })?;
    let (events, _) = broadcast::channel(1024);
    let (presence, notes) = Presence::new();
    let shared = Arc::new(Shared {
        store,
        guard: Guard::new(addr, token),
        events,
        presence,
        agents_gen: watch::channel(0).0,
        busy: Mutex::new(BTreeMap::new()),
        secrets: Secrets::default(),
    });
    let first = shared.clone();
    tokio::task::spawn_blocking(move || first.secrets.refresh(&first.store))
        .await
        .map_err(|e| UiError::Serve(std::io::Error::other(e.to_string())))?;
    super::live::spawn(shared.clone(), notes);
    on_ready(&shared.guard.start_url());
    axum::serve(listener, router(shared))
        .await
        .map_err(UiError::Serve)
}

fn router(shared: S) -> Router {
    use super::{live, ops, routes, teardown};
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route("/api/agents", get(routes::list_agents).post(routes::create_agent))
        .route(
            "/api/agents/{name}",
            get(routes::show_agent)
                .put(routes::edit_agent)
                .delete(teardown::delete_agent),
        )
        .route("/api/agents/{name}/delete-plan", get(teardown::delete_plan))
        .route("/api/agents/{name}/undeploy", post(teardown::undeploy_agent))
        .route("/api/agents/{name}/start", post(ops::start_agent))
        .route("/api/agents/{name}/stop", post(ops::stop_agent))
        .route("/api/agents/{name}/chat", post(ops::chat_agent))
        .route("/api/presets", get(routes::list_presets))
        .route("/api/providers", get(routes::providers))
        .route("/api/providers/{id}/schema", get(routes::provider_schema))
        .route("/api/providers/{id}/approve", post(routes::approve_provider))
        .route("/api/events", get(live::events))
        .fallback(|| async { plain(StatusCode::NOT_FOUND, "not found") })
        .layer(middleware::from_fn_with_state(shared.clone(), guard_layer))
        .with_state(shared)
}

fn asset(ty: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, ty)], body).into_response()
}

fn plain(status: StatusCode, msg: &'static str) -> Response {
    (status, Json(json!({ "error": msg }))).into_response()
}

/// The guard on every request, then the security headers on every response.
async fn guard_layer(State(s): State<S>, req: Request, next: Next) -> Response {
    let verdict = {
        let h = req.headers();
        let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok());
        s.guard.check(&Seen {
            path: req.uri().path(),
            host: get("host"),
            origin: get("origin"),
            sec_fetch_site: get("sec-fetch-site"),
            authorization: get("authorization"),
        })
    };
    let mut resp = match verdict {
        Ok(()) => next.run(req).await,
        Err(r) => plain(
            StatusCode::from_u16(r.status()).unwrap_or(StatusCode::FORBIDDEN),
            r.message(),
        ),
    };
    secure_headers(resp.headers_mut());
    resp
}

fn secure_headers(h: &mut HeaderMap) {
    for (k, v) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
        ("x-frame-options", "DENY"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
}

// ---- replies: the last line of defence ----------------------------------------------------

/// Scrubs every string of `v`.
pub(super) fn scrub_value(r: &Redactor, v: &mut Value) {
    match v {
        Value::String(s) => *s = r.scrub(s),
        Value::Array(a) => a.iter_mut().for_each(|x| scrub_value(r, x)),
        Value::Object(m) => m.values_mut().for_each(|x| scrub_value(r, x)),
        _ => {}
    }
}

/// A JSON reply, scrubbed; a fixed 500 when the secrets are unreadable.
pub(super) fn reply(s: &Shared, status: StatusCode, mut v: Value) -> Response {
    let Some(r) = s.secrets.redactor() else {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, SECRETS_UNREADABLE);
    };
    scrub_value(&r, &mut v);
    (status, Json(v)).into_response()
}

pub(super) fn fail(s: &Shared, status: StatusCode, msg: impl std::fmt::Display) -> Response {
    reply(s, status, json!({ "error": sanitize_text(&msg.to_string()) }))
}

pub(super) fn fields_failed(s: &Shared, errors: super::form::FieldErrors) -> Response {
    reply(
        s,
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({"error": "some fields need attention", "fields": errors}),
    )
}

pub(super) fn store_status(e: &StoreError) -> StatusCode {
    match e {
        StoreError::NoAgent(_) => StatusCode::NOT_FOUND,
        StoreError::Io { .. } | StoreError::Lock(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    }
}

pub(super) fn app_status(e: &AppError) -> StatusCode {
    match e {
        AppError::Store(se) => store_status(se),
        AppError::Deployed(..)
        | AppError::NoUndeploy { .. }
        | AppError::LiveLocal(_)
        | AppError::Busy(_)
        | AppError::NotRunning(_) => StatusCode::CONFLICT,
        AppError::Relay(_) | AppError::NotOffline { .. } => StatusCode::BAD_GATEWAY,
        AppError::Lock(_) | AppError::Runtime(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// Parses a JSON body. The error never echoes the input (it may hold a
/// secret typed in the wrong field): position only.
pub(super) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| {
        format!(
            "the request body is not the expected JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })
}

/// Runs blocking work (store file I/O, provider calls, relay starts) on the
/// runtime's blocking pool, refreshing the redactor first. The error is the
/// response to send (boxed: a `Response` is large).
pub(super) async fn off<T: Send + 'static>(
    s: &S,
    f: impl FnOnce(&Shared) -> T + Send + 'static,
) -> Result<T, Box<Response>> {
    let s2 = s.clone();
    tokio::task::spawn_blocking(move || {
        s2.secrets.refresh(&s2.store);
        f(&s2)
    })
    .await
    .map_err(|e| {
        Box::new(fail(
            s,
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the task failed: {e}"),
        ))
    })
}

/// Runs a launcher future whose callbacks are not `Send` (the relay pumps
/// take plain `dyn FnMut`) on a blocking thread of the same runtime.
pub(super) async fn on_blocking_thread<T, F>(make: impl FnOnce() -> F + Send + 'static) -> Result<T, AppError>
where
    T: Send + 'static,
    F: std::future::Future<Output = T>,
{
    tokio::task::spawn_blocking(move || tokio::runtime::Handle::current().block_on(make()))
        .await
        .map_err(|e| AppError::Runtime(format!("the task failed: {e}")))
}

// ---- events ------------------------------------------------------------------------------

pub(super) fn emit(s: &Shared, v: Value) {
    let _ = s.events.send(v);
}

pub(super) fn agents_changed(s: &Shared) {
    s.agents_gen.send_modify(|g| *g += 1);
    emit(s, json!({"type": "agents"}));
}

pub(super) fn progress(s: &Shared, name: &str, line: &str) {
    emit(
        s,
        json!({"type": "progress", "name": name, "line": sanitize_text(line)}),
    );
}
