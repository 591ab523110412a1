//! The Start page's HTTP server: embedded assets, the JSON API and the event
//! stream. Every handler calls the same library function as the matching CLI
//! command (`agent create/edit` → [`super::form::apply`] over
//! [`Store`]; `start` → [`app::start_provider`] / [`app::start_local`] +
//! [`app::wait_online`]; `stop` → [`app::stop`] (spec §Stop: owner-signed
//! `!shutdown`, then presence `offline`); `chat` → [`app::chat`]; `delete` →
//! [`app::delete`]; `providers` → [`discovery::discover`], [`gate::stage`],
//! [`Store::approve`]; the config form → [`gate::info`]).
//!
//! Presence (spec I3) comes from one [`app::PresenceWatch`] over every
//! agent's relay, reopened when the set of agents changes; a confirmed
//! `online` after a start or `offline` after a stop is recorded at once too.

use super::form::{self, AgentForm, FieldErrors};
use super::guard::{self, Guard, Seen};
use crate::app::{self, AppError, StartOptions};
use crate::discovery;
use crate::gate;
use crate::presence::{self, Derived};
use crate::record::{AgentRecord, Backend};
use crate::redact::Redactor;
use crate::relay;
use crate::response::sanitize_text;
use crate::store::{Store, StoreError};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::Stream;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
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

/// The last presence known for one pubkey.
#[derive(Debug, Clone)]
struct Snap {
    state: Derived,
    at: Option<u64>,
    run: Option<String>,
}

struct Shared {
    store: Store,
    guard: Guard,
    events: broadcast::Sender<Value>,
    presence: Mutex<BTreeMap<String, Snap>>,
    agents_gen: watch::Sender<u64>,
    busy: Mutex<BTreeSet<String>>,
}

type S = Arc<Shared>;

/// Binds `listen` (loopback only), draws the token, calls `on_ready` with the
/// URL to open (the only place the token is shown) and serves until the
/// process ends.
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
    let shared = Arc::new(Shared {
        store,
        guard: Guard::new(addr, token),
        events,
        presence: Mutex::new(BTreeMap::new()),
        agents_gen: watch::channel(0).0,
        busy: Mutex::new(BTreeSet::new()),
    });
    let watcher = shared.clone();
    tokio::task::spawn_blocking(move || tokio::runtime::Handle::current().block_on(presence_task(watcher)));
    on_ready(&shared.guard.start_url());
    axum::serve(listener, router(shared))
        .await
        .map_err(UiError::Serve)
}

fn router(shared: S) -> Router {
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
        .route("/api/agents", get(list_agents).post(create_agent))
        .route(
            "/api/agents/{name}",
            get(show_agent).put(edit_agent).delete(delete_agent),
        )
        .route("/api/agents/{name}/start", post(start_agent))
        .route("/api/agents/{name}/stop", post(stop_agent))
        .route("/api/agents/{name}/chat", post(chat_agent))
        .route("/api/providers", get(providers))
        .route("/api/providers/{id}/schema", get(provider_schema))
        .route("/api/providers/{id}/approve", post(approve_provider))
        .route("/api/events", get(events))
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

use axum::Json;

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

// ---- secrets: the last line of defence ---------------------------------------------------

/// Every secret the state dir holds: owner and agent keys (nsec and hex, both
/// cases), auth-tag signatures, env values of agents, personas and the global layer.
fn redactor(store: &Store) -> Redactor {
    use nostr_sdk::ToBech32;
    let mut v: Vec<String> = Vec::new();
    let keys = |k: &nostr_sdk::Keys, v: &mut Vec<String>| {
        let hex = k.secret_key().to_secret_hex();
        v.push(hex.to_ascii_uppercase());
        v.push(hex);
        let n = k.secret_key().to_bech32().unwrap_or_default();
        v.push(n.to_ascii_uppercase());
        v.push(n);
    };
    if let Ok(o) = store.owner() {
        keys(&o, &mut v);
    }
    if let Ok(st) = store.settings() {
        v.extend(st.global_env.values().cloned());
        v.extend(st.personas.values().flat_map(|p| p.env.values().cloned()));
    }
    for rec in store.agents().unwrap_or_default() {
        v.extend(rec.env.values().cloned());
        if let Ok(k) = store.agent_keys(&rec.name) {
            keys(&k, &mut v);
        }
        if let Some(t) = store
            .identity(&rec.name)
            .ok()
            .and_then(|i| i.auth_tag)
            .and_then(|t| buzz_contract::nip_oa::AuthTag::parse(&t).ok())
        {
            v.push(t.sig.to_ascii_uppercase());
            v.push(t.sig);
        }
    }
    Redactor::new(v)
}

fn scrub_value(r: &Redactor, v: &mut Value) {
    match v {
        Value::String(s) => *s = r.scrub(s),
        Value::Array(a) => a.iter_mut().for_each(|x| scrub_value(r, x)),
        Value::Object(m) => m.values_mut().for_each(|x| scrub_value(r, x)),
        _ => {}
    }
}

fn reply(s: &Shared, status: StatusCode, mut v: Value) -> Response {
    scrub_value(&redactor(&s.store), &mut v);
    (status, Json(v)).into_response()
}

fn fail(s: &Shared, status: StatusCode, msg: impl std::fmt::Display) -> Response {
    reply(s, status, json!({ "error": sanitize_text(&msg.to_string()) }))
}

fn fields_failed(s: &Shared, errors: FieldErrors) -> Response {
    reply(
        s,
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({"error": "some fields need attention", "fields": errors}),
    )
}

fn store_status(e: &StoreError) -> StatusCode {
    match e {
        StoreError::NoAgent(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    }
}

fn app_status(e: &AppError) -> StatusCode {
    match e {
        AppError::Store(se) => store_status(se),
        AppError::Deployed(..) => StatusCode::CONFLICT,
        AppError::Relay(_) | AppError::NotOffline { .. } => StatusCode::BAD_GATEWAY,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// Parses a JSON body. The error never echoes the input (it may hold a
/// secret typed in the wrong field): position only.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| {
        format!(
            "the request body is not the expected JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })
}

/// Runs a launcher future whose callbacks are not `Send` (the relay pumps
/// take plain `dyn FnMut`) on a blocking thread of the same runtime.
async fn on_blocking_thread<T, F>(make: impl FnOnce() -> F + Send + 'static) -> Result<T, String>
where
    T: Send + 'static,
    F: std::future::Future<Output = T>,
{
    tokio::task::spawn_blocking(move || tokio::runtime::Handle::current().block_on(make()))
        .await
        .map_err(|e| format!("the task failed: {e}"))
}

// ---- events ------------------------------------------------------------------------------

fn emit(s: &Shared, v: Value) {
    let _ = s.events.send(v);
}

fn agents_changed(s: &Shared) {
    s.agents_gen.send_modify(|g| *g += 1);
    emit(s, json!({"type": "agents"}));
}

fn progress(s: &Shared, name: &str, line: &str) {
    emit(
        s,
        json!({"type": "progress", "name": name, "line": sanitize_text(line)}),
    );
}

fn name_of(s: &Shared, pubkey: &str) -> Option<String> {
    s.store
        .agents()
        .ok()?
        .into_iter()
        .find(|a| a.pubkey == pubkey)
        .map(|a| a.name)
}

/// Records a presence state and tells the page when it changed.
fn note_presence(s: &Shared, pubkey: &str, snap: Snap) {
    let changed = {
        let mut p = s.presence.lock().unwrap_or_else(|e| e.into_inner());
        let prev = p.insert(pubkey.to_string(), snap.clone());
        prev.is_none_or(|o| o.state != snap.state || o.at != snap.at)
    };
    if changed && let Some(name) = name_of(s, pubkey) {
        emit(
            s,
            json!({"type": "presence", "name": name, "state": snap.state.as_str(), "last_seen": snap.at}),
        );
    }
}

/// What a presence watch covers: every agent's relay and pubkey.
fn watch_set(agents: &[AgentRecord]) -> BTreeSet<(String, String)> {
    agents
        .iter()
        .map(|a| (a.relay_url.clone(), a.pubkey.clone()))
        .collect()
}

async fn presence_task(s: S) {
    let mut gen_rx = s.agents_gen.subscribe();
    loop {
        gen_rx.borrow_and_update();
        let agents = s.store.agents().unwrap_or_default();
        let covered = watch_set(&agents);
        let mut w = match app::PresenceWatch::open(&s.store, &agents).await {
            Ok(w) => w,
            Err(_) => {
                let _ = tokio::time::timeout(Duration::from_secs(5), gen_rx.changed()).await;
                continue;
            }
        };
        loop {
            if gen_rx.has_changed().unwrap_or(true) {
                gen_rx.borrow_and_update();
                // Reopen only when the relays or agents changed, not on every
                // edit or start: a reopen is a short window without presence.
                if watch_set(&s.store.agents().unwrap_or_default()) != covered {
                    break;
                }
            }
            // Each change reaches the page as it happens, not at the end of the step.
            w.pump(Duration::from_millis(200), &mut |c, t| {
                let last = t.last(&c.pubkey);
                let snap = Snap {
                    state: c.to,
                    at: last.map(|r| r.at),
                    run: last.and_then(|r| r.run.clone()),
                };
                note_presence(&s, &c.pubkey, snap);
            })
            .await;
        }
        w.close().await;
    }
}

async fn events(State(s): State<S>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = s.events.subscribe();
    let hello =
        futures::stream::once(async { Ok(Event::default().data(json!({"type": "hello"}).to_string())) });
    let rest = futures::stream::unfold((rx, s), |(mut rx, s)| async move {
        let mut v = match rx.recv().await {
            Ok(v) => v,
            // Missed events: the page refetches everything.
            Err(broadcast::error::RecvError::Lagged(_)) => json!({"type": "agents"}),
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        scrub_value(&redactor(&s.store), &mut v);
        Some((Ok(Event::default().data(v.to_string())), (rx, s)))
    });
    use futures::StreamExt;
    Sse::new(hello.chain(rest)).keep_alive(KeepAlive::default())
}

// ---- agents ------------------------------------------------------------------------------

fn backend_label(b: &Backend) -> String {
    match b {
        Backend::Local => "local".into(),
        Backend::Provider { id, .. } => format!("provider:{id}"),
    }
}

/// One agent as the page sees it: env *names* only, no key material.
fn agent_json(s: &Shared, rec: &AgentRecord) -> Result<Value, StoreError> {
    let st = s.store.deploy_state(&rec.name)?;
    let snap = s
        .presence
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&rec.pubkey)
        .cloned();
    let restart_note = presence::drift(
        snap.as_ref().and_then(|p| p.run.as_deref()),
        st.generation.as_deref(),
        &rec.launch_digest(),
        st.record_digest.as_deref(),
    )
    .is_some();
    let config = match &rec.backend {
        Backend::Provider { config, .. } => Value::Object(config.clone()),
        Backend::Local => Value::Object(Map::new()),
    };
    let busy = s
        .busy
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&rec.name);
    Ok(json!({
        "name": rec.name,
        "pubkey": rec.pubkey,
        "display_name": rec.display_name,
        "relay_url": rec.relay_url,
        "backend": backend_label(&rec.backend),
        "deployed": app::is_deployed(&st) || st.local_pid.is_some(),
        "agent_id": st.agent_id,
        "presence": snap.as_ref().map_or(Derived::Unknown, |p| p.state).as_str(),
        "last_seen": snap.and_then(|p| p.at),
        "restart_note": restart_note,
        "last_error": st.last_error,
        "agent_command": rec.agent_command,
        "agent_args": rec.agent_args,
        "model": rec.model,
        "provider": rec.provider,
        "system_prompt": rec.system_prompt,
        "env_names": rec.env.keys().collect::<Vec<_>>(),
        "config": config,
        "busy": busy,
    }))
}

async fn list_agents(State(s): State<S>) -> Response {
    let all = match s.store.agents() {
        Ok(a) => a,
        Err(e) => return fail(&s, StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let mut out = Vec::new();
    for rec in &all {
        match agent_json(&s, rec) {
            Ok(v) => out.push(v),
            Err(e) => return fail(&s, StatusCode::INTERNAL_SERVER_ERROR, e),
        }
    }
    let now = relay::unix_now();
    reply(&s, StatusCode::OK, json!({"agents": out, "now": now}))
}

async fn show_agent(State(s): State<S>, Path(name): Path<String>) -> Response {
    match s.store.agent(&name).and_then(|r| agent_json(&s, &r)) {
        Ok(v) => reply(&s, StatusCode::OK, v),
        Err(e) => fail(&s, store_status(&e), e),
    }
}

/// The provider's `config_schema`, when the form targets a provider and it answers.
async fn schema_for(s: &S, backend: Option<&str>, agent: Option<&str>) -> Option<Value> {
    let id = backend?.strip_prefix("provider:")?.to_string();
    let s2 = s.clone();
    let agent = agent.map(str::to_string);
    tokio::task::spawn_blocking(move || run_info(&s2, &id, agent.as_deref()).ok())
        .await
        .ok()
        .flatten()
        .and_then(|o| o.info.get("config_schema").cloned())
}

async fn create_agent(State(s): State<S>, body: Bytes) -> Response {
    let form: AgentForm = match parse(&body) {
        Ok(f) => f,
        Err(e) => return fail(&s, StatusCode::BAD_REQUEST, e),
    };
    let mut missing = FieldErrors::new();
    let name = form.name.clone().unwrap_or_default().trim().to_string();
    let mut relay_url = form.relay_url.clone().unwrap_or_default().trim().to_string();
    if name.is_empty() {
        missing.insert("name".into(), "a name is required".into());
    }
    if !missing.is_empty() {
        return fields_failed(&s, missing);
    }
    // As `agent create` without `--relay`: the embedded relay of this state dir.
    let mut form = form;
    if relay_url.is_empty() {
        match crate::embedded::url(&s.store) {
            Ok(u) => relay_url = u,
            Err(e) => {
                return fields_failed(&s, FieldErrors::from([("relay_url".to_string(), e.to_string())]));
            }
        }
        form.relay_url = Some(relay_url.clone());
    }
    let schema = schema_for(&s, form.backend.as_deref(), None).await;
    // Validate on a scratch record first: nothing is created when a field is wrong.
    let mut scratch = AgentRecord::new(&name, &"0".repeat(64), &relay_url);
    if let Err(errs) = form::apply(&mut scratch, &form, schema.as_ref()) {
        return fields_failed(&s, errs);
    }
    let mut rec = match s.store.create_agent(&name, &relay_url) {
        Ok(r) => r,
        Err(e) => {
            return fields_failed(&s, FieldErrors::from([("name".to_string(), e.to_string())]));
        }
    };
    let applied = form::apply(&mut rec, &form, schema.as_ref());
    if let Err(errs) = applied {
        let _ = s.store.delete_agent(&name);
        return fields_failed(&s, errs);
    }
    if let Err(e) = s.store.save_agent(&rec) {
        let _ = s.store.delete_agent(&name);
        return fail(&s, StatusCode::INTERNAL_SERVER_ERROR, e);
    }
    agents_changed(&s);
    match agent_json(&s, &rec) {
        Ok(v) => reply(&s, StatusCode::CREATED, v),
        Err(e) => fail(&s, StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn edit_agent(State(s): State<S>, Path(name): Path<String>, body: Bytes) -> Response {
    let form: AgentForm = match parse(&body) {
        Ok(f) => f,
        Err(e) => return fail(&s, StatusCode::BAD_REQUEST, e),
    };
    if form.name.as_deref().is_some_and(|n| n != name) {
        return fields_failed(
            &s,
            FieldErrors::from([("name".to_string(), "an agent cannot be renamed".to_string())]),
        );
    }
    let mut rec = match s.store.agent(&name) {
        Ok(r) => r,
        Err(e) => return fail(&s, store_status(&e), e),
    };
    let backend = form.backend.clone().or_else(|| Some(backend_label(&rec.backend)));
    let schema = schema_for(&s, backend.as_deref(), Some(&name)).await;
    if let Err(errs) = form::apply(&mut rec, &form, schema.as_ref()) {
        return fields_failed(&s, errs);
    }
    if let Err(e) = s.store.save_agent(&rec) {
        return fail(&s, StatusCode::INTERNAL_SERVER_ERROR, e);
    }
    agents_changed(&s);
    let restart_note = s
        .store
        .deploy_state(&name)
        .ok()
        .and_then(|st| st.record_digest)
        .is_some_and(|d| d != rec.launch_digest());
    match agent_json(&s, &rec) {
        Ok(mut v) => {
            v["saved"] = json!(true);
            v["applies_after_restart"] = json!(restart_note);
            reply(&s, StatusCode::OK, v)
        }
        Err(e) => fail(&s, StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

#[derive(serde::Deserialize)]
struct DeleteQuery {
    #[serde(default)]
    force: bool,
}

async fn delete_agent(
    State(s): State<S>,
    Path(name): Path<String>,
    Query(q): Query<DeleteQuery>,
) -> Response {
    match app::delete(&s.store, &name, q.force) {
        Ok(()) => {
            agents_changed(&s);
            reply(&s, StatusCode::OK, json!({"deleted": name}))
        }
        Err(e @ AppError::Deployed(..)) => reply(
            &s,
            StatusCode::CONFLICT,
            json!({"error": sanitize_text(&e.to_string()), "needs_force": true}),
        ),
        Err(e) => fail(&s, app_status(&e), e),
    }
}

/// Marks `name` busy; false when an operation on it is already running.
fn claim(s: &Shared, name: &str) -> bool {
    s.busy
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string())
}

fn release(s: &Shared, name: &str) {
    s.busy.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
}

/// Starts this state dir's embedded relay in the background when `rec` uses
/// it and it is not running (as the CLI's `start`, `stop` and `chat` do).
fn embedded_ready(s: &S, rec: &AgentRecord) -> Result<(), String> {
    if !crate::embedded::is_embedded(&s.store, &rec.relay_url).map_err(|e| e.to_string())? {
        return Ok(());
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot locate the buzz-launcher executable: {e}"))?;
    crate::embedded::ensure_running(&s.store, &exe)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// What Start and Stop do first: load the record, start the embedded relay
/// it needs, and claim the agent (one operation at a time, announced to the
/// page as `busy`). The error is the response to send instead (boxed: a
/// `Response` is large).
fn begin(s: &S, name: &str) -> Result<AgentRecord, Box<Response>> {
    let rec = s
        .store
        .agent(name)
        .map_err(|e| Box::new(fail(s, store_status(&e), e)))?;
    embedded_ready(s, &rec).map_err(|e| Box::new(fail(s, StatusCode::SERVICE_UNAVAILABLE, e)))?;
    if !claim(s, name) {
        return Err(Box::new(fail(
            s,
            StatusCode::CONFLICT,
            format!("an operation on `{name}` is already running"),
        )));
    }
    emit(s, json!({"type": "busy", "name": name, "busy": true}));
    Ok(rec)
}

async fn start_agent(State(s): State<S>, Path(name): Path<String>) -> Response {
    let rec = match begin(&s, &name) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let task = s.clone();
    tokio::spawn(async move {
        let result = run_start(&task, &rec).await;
        release(&task, &rec.name);
        let (ok, message) = match result {
            Ok(m) => (true, m),
            Err(e) => (false, e),
        };
        emit(
            &task,
            json!({"type": "done", "op": "start", "name": rec.name, "ok": ok, "message": sanitize_text(&message)}),
        );
        agents_changed(&task);
    });
    reply(&s, StatusCode::ACCEPTED, json!({"started": name}))
}

/// The CLI's `start`, reporting progress as events instead of stderr lines.
async fn run_start(s: &S, rec: &AgentRecord) -> Result<String, String> {
    let name = rec.name.clone();
    match rec.backend {
        Backend::Provider { .. } => {
            progress(
                s,
                &name,
                "discovering the provider, staging and checking it before any secret is sent",
            );
            let s2 = s.clone();
            let n2 = name.clone();
            let d = tokio::task::spawn_blocking(move || {
                let opts = StartOptions::from_env(&s2.store)?;
                app::start_provider(&s2.store, &n2, &opts, &mut |line| progress(&s2, &n2, line))
            })
            .await
            .map_err(|e| format!("the start task failed: {e}"))?
            .map_err(|e| e.to_string())?;
            Ok(format!(
                "deployed: agent_id {} (provider {}, sha256 {})",
                d.agent_id,
                d.path.display(),
                d.sha256
            ))
        }
        Backend::Local => {
            let harness = crate::local::harness_program();
            progress(s, &name, &format!("spawning the harness {}", harness.display()));
            let (s2, n2) = (s.clone(), name.clone());
            let started = on_blocking_thread(move || async move {
                let s3 = s2.clone();
                let n3 = n2.clone();
                app::start_local_watched(&s2.store, &n2, &harness, LOCAL_ONLINE_WAIT, &mut |pid, run| {
                    progress(
                        &s3,
                        &n3,
                        &format!("harness started (pid {pid}, run {run}); waiting for presence online"),
                    );
                    // The record now says "deployed" (a local pid): let the page show it.
                    agents_changed(&s3);
                })
                .await
            })
            .await?
            .map_err(|e| e.to_string())?;
            let app::WatchedStart { child, nonce, online } = started;
            // Reap the harness when it exits; it is not supervised (as with the CLI).
            std::thread::spawn(move || {
                let mut child = child;
                let _ = child.wait();
            });
            if !online {
                return Err(format!(
                    "{name} did not report presence online within {}s; see {}",
                    LOCAL_ONLINE_WAIT.as_secs(),
                    s.store.log_path(&name).display()
                ));
            }
            note_presence(
                s,
                &rec.pubkey,
                Snap {
                    state: Derived::Online,
                    at: Some(relay::unix_now()),
                    run: Some(nonce),
                },
            );
            progress(s, &name, "online");
            Ok(format!("{name} online"))
        }
    }
}

async fn stop_agent(State(s): State<S>, Path(name): Path<String>) -> Response {
    let rec = match begin(&s, &name) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    progress(&s, &name, "sending !shutdown; waiting for presence offline");
    let (s2, n2) = (s.clone(), name.clone());
    let result =
        match on_blocking_thread(
            move || async move { app::stop(&s2.store, &n2, crate::limits::STOP_WAIT).await },
        )
        .await
        {
            Ok(r) => r,
            Err(e) => Err(AppError::Runtime(e)),
        };
    release(&s, &name);
    if result.is_ok() {
        let run = s.store.deploy_state(&name).ok().and_then(|st| st.generation);
        note_presence(
            &s,
            &rec.pubkey,
            Snap {
                state: Derived::Offline,
                at: Some(relay::unix_now()),
                run,
            },
        );
    }
    let (ok, message) = match &result {
        Ok(()) => (true, format!("{name} offline")),
        Err(e) => (false, e.to_string()),
    };
    emit(
        &s,
        json!({"type": "done", "op": "stop", "name": name, "ok": ok, "message": sanitize_text(&message)}),
    );
    agents_changed(&s);
    match result {
        Ok(()) => reply(&s, StatusCode::OK, json!({"stopped": name})),
        Err(e) => fail(&s, app_status(&e), e),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatBody {
    text: String,
}

async fn chat_agent(State(s): State<S>, Path(name): Path<String>, body: Bytes) -> Response {
    let msg: ChatBody = match parse(&body) {
        Ok(m) => m,
        Err(e) => return fail(&s, StatusCode::BAD_REQUEST, e),
    };
    if msg.text.trim().is_empty() {
        return fields_failed(
            &s,
            FieldErrors::from([("text".to_string(), "type a message".to_string())]),
        );
    }
    match s.store.agent(&name) {
        Ok(rec) => {
            if let Err(e) = embedded_ready(&s, &rec) {
                return fail(&s, StatusCode::SERVICE_UNAVAILABLE, e);
            }
        }
        Err(e) => return fail(&s, store_status(&e), e),
    }
    let (s2, n2) = (s.clone(), name.clone());
    let out = on_blocking_thread(move || async move {
        app::chat(&s2.store, &n2, &msg.text, crate::limits::CHAT_WAIT).await
    })
    .await;
    match out.unwrap_or_else(|e| Err(AppError::Runtime(e))) {
        Ok(reply_text) => reply(&s, StatusCode::OK, json!({"reply": reply_text})),
        Err(e) => fail(&s, app_status(&e), e),
    }
}

// ---- providers ---------------------------------------------------------------------------

fn providers_json(store: &Store) -> Result<Value, AppError> {
    let d = discovery::discover(&discovery::dirs_from_env());
    let opts = StartOptions::from_env(store)?;
    let list: Vec<Value> = d
        .selected
        .iter()
        .map(|(id, path)| {
            let (digest, stage_error) = match gate::stage(path) {
                Ok(st) => (Some(st.sha256.clone()), None),
                Err(e) => (None, Some(e.to_string())),
            };
            let approved = digest.is_some() && opts.gate.approvals.get(id) == digest.as_ref();
            json!({"id": id, "path": path.display().to_string(), "sha256": digest,
                   "stage_error": stage_error, "approved": approved,
                   "diagnostics": d.diagnostics_for(id)})
        })
        .collect();
    Ok(json!({
        "strict": opts.gate.strict,
        "override_note": discovery::override_note(&discovery::override_dirs_from_env()),
        "providers": list,
        "shadowed": d.shadowed.iter().map(|x| json!({"id": x.id, "path": x.path.display().to_string(), "by": x.by.display().to_string()})).collect::<Vec<_>>(),
        "rejected": d.rejected.iter().map(|x| json!({"path": x.path.display().to_string(), "reason": x.reason})).collect::<Vec<_>>(),
    }))
}

async fn providers(State(s): State<S>) -> Response {
    let s2 = s.clone();
    match tokio::task::spawn_blocking(move || providers_json(&s2.store)).await {
        Ok(Ok(v)) => reply(&s, StatusCode::OK, v),
        Ok(Err(e)) => fail(&s, app_status(&e), e),
        Err(e) => fail(&s, StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `info` through the gate (sealed copy, strict mode honoured). Runs in the
/// agent's workdir, or a private scratch dir for a form without an agent yet.
fn run_info(s: &Shared, id: &str, agent: Option<&str>) -> Result<gate::InfoOutcome, AppError> {
    let d = discovery::discover(&discovery::dirs_from_env());
    let res = d.resolve(id, None)?;
    let wd = match agent.map(|n| s.store.agent(n)).transpose()? {
        Some(AgentRecord { workdir: Some(w), .. }) => w,
        Some(rec) => s.store.default_workdir(&rec.name)?,
        None => {
            let dir = s.store.root().join("work").join(".ui-info");
            std::fs::create_dir_all(&dir)
                .map_err(|e| AppError::Gate(format!("cannot create {}: {e}", dir.display())))?;
            dir
        }
    };
    let opts = StartOptions::from_env(&s.store)?;
    gate::info(&res, &s.store.staging_root(), &wd, &opts.gate, &mut |_| {})
        .map_err(|e| AppError::Gate(e.to_string()))
}

#[derive(serde::Deserialize)]
struct SchemaQuery {
    agent: Option<String>,
}

async fn provider_schema(
    State(s): State<S>,
    Path(id): Path<String>,
    Query(q): Query<SchemaQuery>,
) -> Response {
    let s2 = s.clone();
    let id2 = id.clone();
    let out = tokio::task::spawn_blocking(move || run_info(&s2, &id2, q.agent.as_deref())).await;
    match out {
        Ok(Ok(o)) => {
            let text = |k: &str| o.info.get(k).and_then(Value::as_str).map(sanitize_text);
            let fields = form::fields_from_schema(o.info.get("config_schema"));
            reply(
                &s,
                StatusCode::OK,
                json!({"id": id, "path": o.path.display().to_string(), "sha256": o.sha256,
                       "name": text("name"), "version": text("version"), "description": text("description"),
                       "fields": fields}),
            )
        }
        Ok(Err(e)) => {
            let needs_approval = e.to_string().contains("is not approved");
            reply(
                &s,
                app_status(&e),
                json!({"error": sanitize_text(&e.to_string()), "needs_approval": needs_approval}),
            )
        }
        Err(e) => fail(&s, StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn approve_provider(State(s): State<S>, Path(id): Path<String>) -> Response {
    let s2 = s.clone();
    let out = tokio::task::spawn_blocking(move || -> Result<Value, AppError> {
        let d = discovery::discover(&discovery::dirs_from_env());
        let res = d.resolve(&id, None)?;
        let staged = gate::stage(&res.path)
            .map_err(|e| AppError::Gate(format!("cannot stage {}: {e}", res.path.display())))?;
        s2.store.approve(&id, &staged.sha256)?;
        Ok(json!({"approved": id, "path": res.path.display().to_string(), "sha256": staged.sha256}))
    })
    .await;
    match out {
        Ok(Ok(v)) => reply(&s, StatusCode::OK, v),
        Ok(Err(e)) => fail(&s, app_status(&e), e),
        Err(e) => fail(&s, StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}
