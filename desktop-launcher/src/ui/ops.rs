//! Start, Stop and chat on the Start page: the CLI's `start` →
//! [`app::start_provider`] / [`app::start_local_watched`]; `stop` →
//! [`app::stop`] (spec §Stop: owner-signed `!shutdown`, then presence
//! `offline`); `chat` → [`app::chat`].
//!
//! The order of a Start or Stop (review b30b1a0 findings 1 and 9, spec I4):
//! 1. the record and the I4 check, off the runtime: a local agent whose
//!    harness runs is left alone, and the answer says so (200,
//!    `already_running`), as the CLI's `start` does;
//! 2. the claim: one operation per agent at a time. A second Start while
//!    one is in flight answers `already_starting` (200); anything else 409;
//! 3. only then the embedded relay, through the one start-on-demand path
//!    ([`app::embedded_relay::ensure_for`]) on the blocking pool. A relay that
//!    was started makes the presence task retry its relays at once.
//!
//! "Running" is [`app::live_local`], with the presence the page last heard.

use super::shared::{
    LOCAL_ONLINE_WAIT, Op, S, Shared, agents_changed, app_status, emit, fail, fields_failed, off,
    on_blocking_thread, parse, progress, reply, store_status,
};
use crate::app::embedded_relay::{self, Ensured};
use crate::app::{
    self, AgentRecord, Backend, CHAT_WAIT, DeployState, Report, Running, STOP_WAIT, StartOptions,
    sanitize_text, unix_now,
};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use buzz_contract::presence::PresenceState;
use serde_json::json;

/// The live local harness of `rec`, if any ([`app::live_local`], with the
/// presence the page last heard).
pub(super) fn live_local(s: &Shared, rec: &AgentRecord, st: &DeployState) -> Option<Running> {
    let snap = s.presence.snap(&rec.pubkey);
    app::live_local(rec, st, snap.as_ref().map(|p| (p.state, p.run.as_deref())))
}

/// Marks `name` busy with `op`; the operation already running otherwise.
pub(super) fn claim(s: &Shared, name: &str, op: Op) -> Result<(), Op> {
    let mut busy = s.busy.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(running) = busy.get(name) {
        return Err(*running);
    }
    busy.insert(name.to_string(), op);
    drop(busy);
    emit(s, json!({"type": "busy", "name": name, "busy": true}));
    Ok(())
}

pub(super) fn release(s: &Shared, name: &str) {
    s.busy.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
    emit(s, json!({"type": "busy", "name": name, "busy": false}));
}

/// Loads the record and the bookkeeping off the runtime.
async fn load(s: &S, name: &str) -> Result<(AgentRecord, DeployState), Box<Response>> {
    let n = name.to_string();
    match off(s, move |s| {
        s.store.agent(&n).and_then(|r| Ok((r, s.store.deploy_state(&n)?)))
    })
    .await?
    {
        Ok(x) => Ok(x),
        Err(e) => Err(Box::new(fail(s, store_status(&e), e))),
    }
}

/// Starts the embedded relay `rec` needs, if it needs it (off the runtime).
async fn relay_ready(s: &S, rec: &AgentRecord) -> Result<(), Box<Response>> {
    let rec = rec.clone();
    let out = off(s, move |s| {
        embedded_relay::ensure_for(&s.store, std::slice::from_ref(&rec))
    })
    .await?;
    match out {
        Ok(Some(Ensured::Started { .. })) => {
            s.presence.relay_started();
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(Box::new(fail(s, StatusCode::SERVICE_UNAVAILABLE, e))),
    }
}

/// [`relay_ready`] for an operation that holds `name`'s claim: a relay
/// that cannot be started releases the claim.
async fn claimed_relay_ready(s: &S, name: &str, rec: &AgentRecord) -> Result<(), Box<Response>> {
    let ready = relay_ready(s, rec).await;
    if ready.is_err() {
        release(s, name);
    }
    ready
}

/// 409: another operation holds `name`'s claim.
fn in_progress(s: &Shared, name: &str, op: Op) -> Response {
    fail(
        s,
        StatusCode::CONFLICT,
        format!("{} of `{name}` is in progress", op.what()),
    )
}

fn already_running(s: &Shared, r: &Running) -> Response {
    reply(
        s,
        StatusCode::OK,
        json!({"already_running": true, "pid": r.pid, "run": r.run, "message": r.to_string()}),
    )
}

pub(super) async fn start_agent(State(s): State<S>, Path(name): Path<String>) -> Response {
    let (rec, st) = match load(&s, &name).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if let Some(r) = live_local(&s, &rec, &st) {
        return already_running(&s, &r);
    }
    match claim(&s, &name, Op::Start) {
        Ok(()) => {}
        Err(Op::Start) => {
            return reply(
                &s,
                StatusCode::OK,
                json!({"already_starting": true, "message": format!("{name} is already starting")}),
            );
        }
        Err(op) => return in_progress(&s, &name, op),
    }
    if let Err(r) = claimed_relay_ready(&s, &name, &rec).await {
        return *r;
    }
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
            let (s2, n2) = (s.clone(), name.clone());
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
            let harness = app::harness_program();
            progress(s, &name, &format!("spawning the harness {}", harness.display()));
            let (s2, n2) = (s.clone(), name.clone());
            let started = on_blocking_thread(move || async move {
                let s3 = s2.clone();
                let n3 = n2.clone();
                // A harness that ends later: the page shows why at once.
                let s4 = s2.clone();
                let on_exit = Box::new(move || agents_changed(&s4));
                app::start_local_watched(
                    &s2.store,
                    &n2,
                    &harness,
                    LOCAL_ONLINE_WAIT,
                    &mut |pid, run| {
                        progress(
                            &s3,
                            &n3,
                            &format!("harness started (pid {pid}, run {run}); waiting for presence online"),
                        );
                        // The record now says "deployed" (a local pid): let the page show it.
                        agents_changed(&s3);
                    },
                    on_exit,
                )
                .await
            })
            .await
            .and_then(|r| r)
            .map_err(|e| e.to_string())?;
            let started = match started {
                app::Watched::Started(w) => w,
                app::Watched::AlreadyRunning(r) => return Ok(r.to_string()),
            };
            // The harness is not supervised (as with the CLI): its watcher
            // reaps it, and records a failure as the agent's last error.
            started
                .online_or_error(&s.store, &name, LOCAL_ONLINE_WAIT)
                .map_err(|e| e.to_string())?;
            // Timed by the event the start saw, never by when the page learns of it.
            let online = started.online.clone().unwrap_or_else(|| Report {
                state: PresenceState::Online,
                at: unix_now(),
                run: Some(started.nonce.clone()),
                seq: None,
                sleeps_at: None,
            });
            s.presence.note(&rec.pubkey, online);
            progress(s, &name, "online");
            Ok(format!("{name} online"))
        }
    }
}

pub(super) async fn stop_agent(State(s): State<S>, Path(name): Path<String>) -> Response {
    let (rec, _) = match load(&s, &name).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if let Err(op) = claim(&s, &name, Op::Stop) {
        return in_progress(&s, &name, op);
    }
    if let Err(r) = claimed_relay_ready(&s, &name, &rec).await {
        return *r;
    }
    let (s2, n2) = (s.clone(), name.clone());
    let result = on_blocking_thread(move || async move {
        let opts = app::StopOptions {
            wait: STOP_WAIT,
            force: false,
        };
        let out = app::stop_with(&s2.store, &n2, opts, &mut |line| progress(&s2, &n2, line)).await;
        let run = s2.store.deploy_state(&n2).ok().and_then(|st| st.generation);
        (out, run)
    })
    .await;
    let result = match result {
        Ok((out, run)) => out.map(|stopped| {
            // The `offline` the stop saw, timed by its event; a harness that
            // ended without one is over now.
            let report = match stopped {
                app::Stopped::Offline(r) => r,
                app::Stopped::Exited(_) => Report {
                    state: PresenceState::Offline,
                    at: unix_now(),
                    run,
                    seq: None,
                    sleeps_at: None,
                },
            };
            s.presence.note(&rec.pubkey, report);
        }),
        Err(e) => Err(e),
    };
    release(&s, &name);
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
pub(super) struct ChatBody {
    text: String,
}

pub(super) async fn chat_agent(State(s): State<S>, Path(name): Path<String>, body: Bytes) -> Response {
    let msg: ChatBody = match parse(&body) {
        Ok(m) => m,
        Err(e) => return fail(&s, StatusCode::BAD_REQUEST, e),
    };
    if msg.text.trim().is_empty() {
        return fields_failed(
            &s,
            super::form::FieldErrors::from([("text".to_string(), "type a message".to_string())]),
        );
    }
    let (rec, _) = match load(&s, &name).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if let Err(r) = relay_ready(&s, &rec).await {
        return *r;
    }
    let (s2, n2) = (s.clone(), name.clone());
    let out = on_blocking_thread(move || async move {
        app::chat_with(&s2.store, &n2, &msg.text, CHAT_WAIT, &mut |line| {
            progress(&s2, &n2, line)
        })
        .await
    })
    .await
    .and_then(|r| r);
    match out {
        Ok(reply_text) => reply(&s, StatusCode::OK, json!({"reply": reply_text})),
        Err(e) => fail(&s, app_status(&e), e),
    }
}
