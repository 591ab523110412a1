//! What every handler of the Start page shares: the state (the store, the
//! guard, the event channel, the presence handle, who is busy, the cached
//! redactor), the replies (every string of every response and event passes
//! the state dir's redactor), and the two ways off the async workers.
//!
//! Every handler runs the store's file I/O and every blocking wait on the
//! runtime's blocking pool ([`off`]), never on its two async workers
//! (review b30b1a0 finding 1 scenario 3, code-quality "Blocking work on the
//! async runtime").
//!
//! Secrets (review b30b1a0 code-quality "Fail-open redaction"): the
//! redactor is built from [`crate::app::Store::secrets`], the same
//! rules the gate uses, and cached until a secret-bearing file changes
//! ([`Secrets::refresh`] compares sizes and modification times). It fails
//! closed: when the state dir's secrets cannot be read, a response carries
//! a fixed error and nothing else, and an event is reduced to "refetch".

use super::dots::Presence;
use super::guard::Guard;
use crate::app::{AppError, Redactor, Store, StoreError, sanitize_text};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{broadcast, watch};

/// How long a local start waits for presence `online`.
pub const LOCAL_ONLINE_WAIT: Duration = Duration::from_secs(60);

/// What a response says when the state dir's secrets cannot be read.
pub const SECRETS_UNREADABLE: &str =
    "cannot read this state dir's secrets, so nothing is shown; check the files in the state dir";

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

// ---- replies: the last line of defence ----------------------------------------------------

/// A fixed error, as JSON.
pub(super) fn plain(status: StatusCode, msg: &'static str) -> Response {
    (status, Json(json!({ "error": msg }))).into_response()
}

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
        | AppError::NotRunning(_)
        | AppError::AsleepNoWaker(_) => StatusCode::CONFLICT,
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
