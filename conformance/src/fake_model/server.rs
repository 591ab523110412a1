//! The loopback HTTP/1.1 server: accepts, records, routes and answers.

use super::script::{Failure, ScriptState, Step};
use super::{Answer, Api, RecordedRequest, anthropic, gemini, openai};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

/// What the server shares with its [`super::FakeModel`].
pub(super) struct State {
    pub(super) script: Mutex<ScriptState>,
    pub(super) fail_all: Mutex<Option<Failure>>,
    pub(super) log: Mutex<Vec<RecordedRequest>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) async fn serve(
    listener: std::net::TcpListener,
    state: Arc<State>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("fake model API: listener");
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let _ = tcp.set_nodelay(true);
                let st = state.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(st.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        }
    }
}

/// What a request is, from its method and path.
enum Route {
    Head,
    Anthropic,
    OpenAi,
    Gemini,
    GeminiCountTokens,
    Unknown,
}

fn route(method: &str, path: &str) -> Route {
    match (method, path) {
        ("HEAD", _) => Route::Head,
        ("POST", "/v1/messages") => Route::Anthropic,
        ("POST", "/v1/responses") => Route::OpenAi,
        ("POST", p) => match gemini::route(p) {
            Some((_, gemini::Action::CountTokens)) => Route::GeminiCountTokens,
            Some(_) => Route::Gemini,
            None => Route::Unknown,
        },
        _ => Route::Unknown,
    }
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string());
    let mut headers = BTreeMap::<String, String>::new();
    for (name, value) in req.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_string())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let bytes = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let path_only = path.split('?').next().unwrap_or_default().to_string();
    let route = route(&method, &path_only);
    let api = match route {
        Route::Anthropic => Some(Api::Anthropic),
        Route::OpenAi => Some(Api::OpenAi),
        Route::Gemini | Route::GeminiCountTokens => Some(Api::Gemini),
        Route::Head | Route::Unknown => None,
    };
    let mut rec = RecordedRequest {
        method,
        path,
        headers,
        body,
        api,
        turn: None,
        answered: false,
    };
    let fail_all = *lock(&state.fail_all);
    let decision = match (&route, fail_all) {
        (Route::Head, _) => Decision::Empty,
        (Route::Unknown, _) => Decision::NotFound,
        (_, Some(f)) => Decision::Step(Step::Fail(f), None),
        (Route::GeminiCountTokens, None) => Decision::CountTokens,
        (Route::Gemini, None) if gemini::side_call(&rec.body).is_some() => {
            let text = gemini::side_call(&rec.body).unwrap_or_default();
            Decision::Step(Step::Text(vec![text]), None)
        }
        _ => {
            let (step, turn) = lock(&state.script).step(!rec.tool_results().is_empty());
            Decision::Step(step, turn)
        }
    };
    if let Decision::Step(step, turn) = &decision {
        rec.turn = *turn;
        rec.answered = !matches!(step, Step::Fail(_));
    }
    let body = rec.body.clone();
    let path_only = rec.path_only().to_string();
    let seq = {
        let mut log = lock(&state.log);
        log.push(rec);
        log.len()
    };
    Ok(match (decision, api) {
        (Decision::Step(step, _), Some(api)) => answer(api, step, &path_only, &body, seq).await,
        (Decision::Empty, _) => respond(StatusCode::OK, "text/plain", Bytes::new()),
        (Decision::CountTokens, _) => json(StatusCode::OK, &serde_json::json!({"totalTokens": 12})),
        _ => {
            let body = serde_json::json!({"error": {"message": "fake model API: no such endpoint"}});
            json(StatusCode::NOT_FOUND, &body)
        }
    })
}

/// What the server does with a request.
enum Decision {
    /// 200, empty body (`HEAD`).
    Empty,
    /// 404 with a JSON error.
    NotFound,
    /// Gemini's `:countTokens`.
    CountTokens,
    /// A model answer, and the script turn it belongs to.
    Step(Step, Option<usize>),
}

/// Renders `step` in `api`'s wire format; a hang never returns.
async fn answer(api: Api, step: Step, path: &str, body: &Value, seq: usize) -> Response<Full<Bytes>> {
    let answer = match &step {
        Step::Fail(Failure::Hang) => return std::future::pending().await,
        Step::Fail(f) => {
            let status = match f {
                Failure::Http401 => StatusCode::UNAUTHORIZED,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let err = match api {
                Api::Anthropic => anthropic::error(status),
                Api::OpenAi => openai::error(status),
                Api::Gemini => gemini::error(status),
            };
            return json(status, &err);
        }
        Step::Text(blocks) => Answer::Text(blocks),
        Step::Shell { lead, command } => Answer::Shell {
            lead: lead.as_deref(),
            command,
        },
        Step::Read { path, shell } => Answer::Read { path, shell },
    };
    match api {
        Api::Anthropic => anthropic::reply(body, &answer, seq),
        Api::OpenAi => openai::reply(body, &answer, seq),
        Api::Gemini => gemini::reply(path, &answer, seq),
    }
}

/// A response with `content_type` and `body`.
fn respond(status: StatusCode, content_type: &str, body: Bytes) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    resp
}

/// A JSON response.
pub(super) fn json(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    respond(status, "application/json", Bytes::from(body.to_string()))
}

/// An SSE response: one `event: <name>` (when given) and one `data:` line per
/// event, each followed by a blank line.
pub(super) fn sse(events: &[(Option<&str>, Value)]) -> Response<Full<Bytes>> {
    let mut out = String::new();
    for (name, data) in events {
        if let Some(name) = name {
            out.push_str("event: ");
            out.push_str(name);
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&data.to_string());
        out.push_str("\n\n");
    }
    let mut resp = respond(StatusCode::OK, "text/event-stream", Bytes::from(out));
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    resp
}
