//! One turn on a live agent connection (wire-facts §6; spec I5): the
//! session for its channel (bounded `session/new`, then the model and mode
//! applied as [`super::setup`] plans), `session/prompt`, the
//! idle deadline reset by each `session/update`, the hard cap, `!cancel` and
//! shutdown as `session/cancel` with a grace before the agent is killed, and
//! the outcome with the slot's fate.

use super::setup::{self, Offered, Unapplied};
use super::{
    AgentInfo, AgentSpec, Sessions, Shared, Sink, SlotCmd, TurnJob, TurnOutcome, connection_lost,
    failure_text, new_session_request, prompt_blocks,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{CancelNotification, PromptRequest, SessionId, StopReason};
use agent_client_protocol::{Agent, UntypedMessage};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Why a turn was cancelled when it ran out of time (the asker is told).
pub const IDLE_TIMEOUT: &str = "idle timeout";
pub const MAX_TURN: &str = "max turn duration";
/// Why a turn was cancelled at a graceful stop: no progress for the quiet bound.
pub const STALLED: &str = "stalled at stop";

/// The last update, whether an owner question is open, and whether a tool
/// call is running.
fn idle_clock(shared: &Shared, started: Instant) -> (Instant, bool, bool) {
    let sink = shared.lock();
    (
        sink.last_update.unwrap_or(started),
        sink.asking > 0,
        !sink.open_tools.is_empty(),
    )
}

/// When a draining turn counts as stalled: after `quiet` of silence, and
/// never while one of its tool calls runs (a build, a test suite: progress
/// that sends nothing; review-9b395e0 #7). The drain point still bounds it.
fn stalled_at(last: Instant, quiet: Option<Duration>, tool_running: bool) -> Option<Instant> {
    match (quiet, tool_running) {
        (Some(q), false) => Some(last + q),
        _ => None,
    }
}

/// A turn that ended before its prompt: its outcome and the slot's fate.
type Ended = (TurnOutcome, Fate);

/// One request before the prompt (`session/new`, the setup steps), bounded
/// by the start bound; `!cancel`, shutdown and the agent's exit end the wait.
async fn request_bounded(
    spec: &AgentSpec,
    info: &AgentInfo,
    cx: &ConnectionTo<Agent>,
    cmds: &mut mpsc::UnboundedReceiver<SlotCmd>,
    exited: &mut watch::Receiver<bool>,
    method: &str,
    params: Value,
) -> Result<Value, Ended> {
    let bound = spec.start_bound();
    let message = UntypedMessage::new(method, params).map_err(|e| {
        (
            TurnOutcome::Failed {
                error: Some(e.message),
            },
            Fate::Continue,
        )
    })?;
    let answered = tokio::select! {
        r = tokio::time::timeout(bound, cx.send_request(message).block_task()) => match r {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!(bound_secs = bound.as_secs(), "agent did not answer {method} in time; killing it");
                let error = if method == "session/new" {
                    "the agent did not start a session in time".to_string()
                } else {
                    format!("the agent did not answer {method} in time")
                };
                return Err((TurnOutcome::Failed { error: Some(error) }, Fate::Dead));
            }
        },
        _ = exited.wait_for(|e| *e) => return Err((TurnOutcome::Failed { error: None }, Fate::Dead)),
        c = cmds.recv() => {
            let why = match c {
                Some(SlotCmd::Cancel) => "cancel",
                _ => "shutdown",
            };
            tracing::info!(reason = why, "{method} abandoned; stopping the agent");
            let fate = if why == "cancel" { Fate::Dead } else { Fate::Shutdown };
            return Err((TurnOutcome::Cancelled { why }, fate));
        }
    };
    answered.map_err(|e| {
        if connection_lost(&e) {
            tracing::warn!(method, code = ?e.code, "failed: the agent is gone");
            (TurnOutcome::Failed { error: None }, Fate::Dead)
        } else {
            tracing::warn!(method, code = ?e.code, "failed (the message, which the agent wrote, goes to the asker scrubbed, never to the log)");
            (
                TurnOutcome::Failed {
                    error: Some(failure_text(&e, info)),
                },
                Fate::Continue,
            )
        }
    })
}

static MODEL_UNAPPLIED_LOGGED: AtomicBool = AtomicBool::new(false);
static MODE_UNAPPLIED_LOGGED: AtomicBool = AtomicBool::new(false);

/// `session/new`, then the model and mode in the forms the agent
/// advertised ([`super::setup`]). A setup the agent refuses, or a model or
/// mode it does not offer, fails the turn with the reason; the session is
/// not kept, so the next mention tries again.
async fn open_session(
    spec: &AgentSpec,
    info: &AgentInfo,
    cx: &ConnectionTo<Agent>,
    cmds: &mut mpsc::UnboundedReceiver<SlotCmd>,
    exited: &mut watch::Receiver<bool>,
    mode: Option<&str>,
) -> Result<SessionId, Ended> {
    let fail = |error: String| (TurnOutcome::Failed { error: Some(error) }, Fate::Continue);
    let asked = Instant::now();
    let params = serde_json::to_value(new_session_request(spec, info)).map_err(|e| fail(e.to_string()))?;
    let result = request_bounded(spec, info, cx, cmds, exited, "session/new", params).await?;
    let offered = Offered::from_result(&result).map_err(|e| fail(e.to_string()))?;
    let plan = setup::plan(&offered, spec.model.as_deref(), mode).map_err(|e| {
        tracing::warn!(error = %e, "session setup refused");
        fail(e.to_string())
    })?;
    for u in &plan.unapplied {
        let (flag, what) = match u {
            Unapplied::Model => (
                &MODEL_UNAPPLIED_LOGGED,
                "the agent advertises no models: the model rides session/new _meta.model only",
            ),
            Unapplied::Mode => (
                &MODE_UNAPPLIED_LOGGED,
                "the agent advertises no modes: the permission mode could not be applied",
            ),
        };
        if !flag.swap(true, Ordering::Relaxed) {
            tracing::warn!("{what}");
        }
    }
    for step in &plan.steps {
        let (method, params) = step.request(&offered.session_id);
        request_bounded(spec, info, cx, cmds, exited, method, params)
            .await
            .map_err(|(outcome, fate)| match outcome {
                TurnOutcome::Failed { error: Some(e) } => (
                    TurnOutcome::Failed {
                        error: Some(format!("{method}: {e}")),
                    },
                    fate,
                ),
                other => (other, fate),
            })?;
        tracing::info!(method, "session setup applied");
    }
    tracing::info!(
        took_ms = asked.elapsed().as_millis() as u64,
        steps = plan.steps.len(),
        "session opened"
    );
    Ok(SessionId::new(offered.session_id))
}

pub(super) enum Fate {
    Continue,
    Shutdown,
    Dead,
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn run_turn(
    spec: &AgentSpec,
    info: &AgentInfo,
    cx: &ConnectionTo<Agent>,
    shared: &Shared,
    cmds: &mut mpsc::UnboundedReceiver<SlotCmd>,
    exited: &mut watch::Receiver<bool>,
    sessions: &mut Sessions,
    job: &TurnJob,
    stalled: &(dyn Fn() + Sync),
) -> (TurnOutcome, Fate) {
    let mut lead = None;
    let key = (job.channel.clone(), job.asker.is_owner());
    let session = match sessions.get(&key) {
        Some(s) => s.clone(),
        None => match open_session(spec, info, cx, cmds, exited, spec.mode_for(&job.asker)).await {
            Ok(id) => {
                sessions.insert(key, id.clone());
                if !spec.adapter.system_prompt_on_new_session(info) {
                    lead = spec.system_prompt.as_deref();
                }
                id
            }
            Err(ended) => return ended,
        },
    };
    let started = Instant::now();
    {
        let mut sink = shared.lock();
        *sink = Sink {
            session: Some(session.clone()),
            turn: Some(job.clone()),
            last_update: Some(started),
            ..Sink::default()
        };
    }
    let prompt = PromptRequest::new(session.clone(), prompt_blocks(lead, &job.text));
    let response = cx.send_request(prompt).block_task();
    tokio::pin!(response);
    let hard_deadline = started + spec.max_turn;
    let mut cancelled: Option<(&'static str, Instant)> = None;
    let mut shutdown_requested = false;
    // Set once the stop's drain began: the quiet bound of a stalled turn.
    let mut drain_quiet: Option<Duration> = None;
    let result = loop {
        let (last, asking, tool_running) = idle_clock(shared, started);
        let stall = stalled_at(last, drain_quiet, tool_running);
        let next_deadline = match cancelled {
            Some((_, grace_end)) => grace_end,
            // Draining, silence for the quiet bound ends the turn (an open
            // owner question included: nobody answers a stopping agent).
            None if stall.is_some() => stall.unwrap_or(hard_deadline).min(hard_deadline),
            // An open owner question stops the idle clock, not the hard cap.
            None if asking => hard_deadline,
            None => (last + spec.idle_timeout).min(hard_deadline),
        };
        let mut cancel_now: Option<&'static str> = None;
        tokio::select! {
            r = &mut response => break Some(r),
            _ = exited.wait_for(|e| *e) => break None,
            () = shared.updated.notified() => continue,
            _ = tokio::time::sleep_until(next_deadline.into()) => {
                if cancelled.is_some() {
                    tracing::warn!("agent ignored session/cancel; killing it");
                    break None;
                }
                // Re-read the last update: a wake-up may have been missed.
                let now = Instant::now();
                let (last, asking, tool_running) = idle_clock(shared, started);
                if now >= hard_deadline {
                    cancel_now = Some(MAX_TURN);
                } else if stalled_at(last, drain_quiet, tool_running).is_some_and(|at| now >= at) {
                    cancel_now = Some(STALLED);
                    stalled();
                } else if !asking && now >= last + spec.idle_timeout {
                    cancel_now = Some(IDLE_TIMEOUT);
                }
            }
            c = cmds.recv() => match c {
                Some(SlotCmd::Cancel) => cancel_now = Some("cancel"),
                Some(SlotCmd::Drain { quiet }) => drain_quiet = Some(quiet),
                None | Some(SlotCmd::Shutdown) => {
                    shutdown_requested = true;
                    cancel_now = Some("shutdown");
                }
                Some(SlotCmd::Prompt(_)) => tracing::error!("prompt dispatched to a busy slot; dropped"),
            },
        }
        if let Some(why) = cancel_now
            && cancelled.is_none()
        {
            tracing::info!(reason = why, "cancelling turn");
            let _ = cx.send_notification(CancelNotification::new(session.clone()));
            cancelled = Some((why, Instant::now() + spec.cancel_grace));
        }
    };
    let text = {
        let mut sink = shared.lock();
        let text = std::mem::take(&mut sink.text);
        *sink = Sink::default();
        if text.is_cut() {
            tracing::warn!("the agent's answer exceeded the reply bound and was cut");
        }
        text.into_string()
    };
    let fate_after = |alive: bool| match (alive, shutdown_requested) {
        (false, _) => Fate::Dead,
        (true, true) => Fate::Shutdown,
        (true, false) => Fate::Continue,
    };
    match result {
        None => (
            cancelled.map_or(TurnOutcome::Failed { error: None }, |(why, _)| {
                TurnOutcome::Cancelled { why }
            }),
            if shutdown_requested {
                Fate::Shutdown
            } else {
                Fate::Dead
            },
        ),
        Some(Err(e)) => {
            tracing::warn!(code = ?e.code, "session/prompt failed (the agent's message goes to the asker scrubbed, never to the log)");
            // A closed transport is the agent's death even before its exit is
            // reaped: a crash is not an answer the asker should be shown.
            let alive = !*exited.borrow() && !connection_lost(&e);
            let error = (cancelled.is_none() && alive).then(|| failure_text(&e, info));
            (TurnOutcome::Failed { error }, fate_after(alive))
        }
        Some(Ok(r)) => {
            let outcome = if cancelled.is_some() || r.stop_reason == StopReason::Cancelled {
                TurnOutcome::Cancelled {
                    why: cancelled.map_or("agent", |(w, _)| w),
                }
            } else {
                TurnOutcome::Completed {
                    text,
                    stop_reason: format!("{:?}", r.stop_reason),
                }
            };
            (outcome, fate_after(true))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draining_turn_stalls_after_the_quiet_bound_unless_a_tool_runs() {
        let t = Instant::now();
        let q = Some(Duration::from_secs(4));
        assert_eq!(stalled_at(t, q, false), Some(t + Duration::from_secs(4)));
        assert_eq!(stalled_at(t, q, true), None, "a running tool is progress");
        assert_eq!(stalled_at(t, None, false), None, "not draining");
    }
}
