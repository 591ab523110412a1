//! One turn on a live agent connection (wire-facts §6; spec I5): the
//! session for its channel (bounded `session/new`), `session/prompt`, the
//! idle deadline reset by each `session/update`, the hard cap, `!cancel` and
//! shutdown as `session/cancel` with a grace before the agent is killed, and
//! the outcome with the slot's fate.

use super::{
    AgentInfo, AgentSpec, Shared, Sink, SlotCmd, TurnJob, TurnOutcome, connection_lost, failure_text,
    new_session_request, prompt_blocks,
};
use crate::events::TurnText;
use agent_client_protocol::Agent;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{CancelNotification, PromptRequest, SessionId, StopReason};
use std::collections::HashMap;
use std::time::Instant;
use tokio::sync::{mpsc, watch};

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
    sessions: &mut HashMap<String, SessionId>,
    job: &TurnJob,
) -> (TurnOutcome, Fate) {
    let mut lead = None;
    let session = match sessions.get(&job.channel) {
        Some(s) => s.clone(),
        None => {
            let bound = spec.start_bound();
            // A hung session/new must not hold the slot: bounded, and the
            // owner's !cancel (or a shutdown) ends the wait too.
            let created = tokio::select! {
                r = tokio::time::timeout(bound, cx.send_request(new_session_request(spec, info)).block_task()) => match r {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::warn!(bound_secs = bound.as_secs(), "agent did not answer session/new in time; killing it");
                        return (TurnOutcome::Failed { error: Some("the agent did not start a session in time".into()) }, Fate::Dead);
                    }
                },
                _ = exited.wait_for(|e| *e) => return (TurnOutcome::Failed { error: None }, Fate::Dead),
                c = cmds.recv() => {
                    let why = match c {
                        Some(SlotCmd::Cancel) => "cancel",
                        _ => "shutdown",
                    };
                    tracing::info!(reason = why, "session/new abandoned; stopping the agent");
                    let fate = if why == "cancel" { Fate::Dead } else { Fate::Shutdown };
                    return (TurnOutcome::Cancelled { why }, fate);
                }
            };
            match created {
                Ok(r) => {
                    sessions.insert(job.channel.clone(), r.session_id.clone());
                    if !spec.adapter.system_prompt_on_new_session(info) {
                        lead = spec.system_prompt.as_deref();
                    }
                    r.session_id
                }
                Err(e) if connection_lost(&e) => {
                    tracing::warn!(error = %e, "session/new failed: the agent is gone");
                    return (TurnOutcome::Failed { error: None }, Fate::Dead);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "session/new failed");
                    return (
                        TurnOutcome::Failed {
                            error: Some(failure_text(&e, info)),
                        },
                        Fate::Continue,
                    );
                }
            }
        }
    };
    let started = Instant::now();
    {
        let mut sink = shared.sink.lock().unwrap_or_else(|p| p.into_inner());
        *sink = Sink {
            session: Some(session.clone()),
            text: TurnText::default(),
            last_update: Some(started),
        };
    }
    let prompt = PromptRequest::new(session.clone(), prompt_blocks(lead, &job.text));
    let response = cx.send_request(prompt).block_task();
    tokio::pin!(response);
    let hard_deadline = started + spec.max_turn;
    let mut cancelled: Option<(&'static str, Instant)> = None;
    let mut shutdown_requested = false;
    let result = loop {
        let last = shared
            .sink
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_update
            .unwrap_or(started);
        let next_deadline = match cancelled {
            Some((_, grace_end)) => grace_end,
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
                let last = shared.sink.lock().unwrap_or_else(|p| p.into_inner()).last_update.unwrap_or(started);
                if now >= hard_deadline {
                    cancel_now = Some("max turn duration");
                } else if now >= last + spec.idle_timeout {
                    cancel_now = Some("idle timeout");
                }
            }
            c = cmds.recv() => match c {
                Some(SlotCmd::Cancel) => cancel_now = Some("cancel"),
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
        let mut sink = shared.sink.lock().unwrap_or_else(|p| p.into_inner());
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
            tracing::warn!(error = %e, "session/prompt failed");
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
