//! The Start page's HTTP server: embedded assets, the guard on every
//! request, the security headers on every response, and the router. The
//! routes live by concept: [`super::routes`] (records and providers),
//! [`super::ops`] (Start, Stop, chat: the operations on a running agent),
//! [`super::teardown`] (Delete, Undeploy) and [`super::live`] (presence and
//! the event stream); what they share, the replies included, is
//! [`super::shared`].
//!
//! Every handler calls the same `app` function as the matching CLI command.

use super::dots::Presence;
use super::guard::{self, Guard, Seen};
use super::shared::{S, Secrets, Shared, agents_changed, plain, progress};
use crate::app::Store;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, watch};

pub use super::shared::{LOCAL_ONLINE_WAIT, SECRETS_UNREADABLE};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// The Content-Security-Policy of every response: only the page's own
/// script, style and connections; no inline code, no frames, no forms.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

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
    super::doing::spawn(shared.clone());
    spawn_waker(shared.clone());
    on_ready(&shared.guard.start_url());
    axum::serve(listener, router(shared))
        .await
        .map_err(UiError::Serve)
}

/// The page's waker (issue 33): on its own thread and runtime, so a wake's
/// blocking start never holds up a request. It takes the waker role when
/// no other process of this state dir holds it, trying again every
/// [`WAKER_RETRY`]; its lines reach the page as the agent's progress.
fn spawn_waker(shared: S) {
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
            return;
        };
        loop {
            if let Ok(Some(_claimed)) = crate::app::waker::claim(&shared.store) {
                agents_changed(&shared);
                let s = shared.clone();
                let mut on_line = move |l: crate::app::waker::WakeLine| {
                    progress(&s, &l.agent, &l.text);
                    agents_changed(&s);
                };
                let harness = crate::app::harness_program();
                let run = crate::app::StartOptions::from_env(&shared.store).map(|opts| {
                    rt.block_on(crate::app::waker::run(
                        shared.store.clone(),
                        harness,
                        opts,
                        &mut on_line,
                    ))
                });
                if let Err(e) = run.and_then(|r| r) {
                    tracing::warn!(error = %e, "the waker stopped; trying again");
                }
            }
            std::thread::sleep(WAKER_RETRY);
        }
    });
}

/// How often the page tries to take the waker role another process holds.
const WAKER_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

fn router(shared: S) -> Router {
    use super::{history, live, ops, routes, teardown};
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
        .route("/api/agents/{name}/conversation", get(history::conversation))
        .route("/api/agents/{name}/usage", get(history::usage))
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
