//! One turn on a live agent connection (wire-facts §6; spec I5): the
//! session for its conversation ([`super::session`]), `session/prompt`, the
//! idle deadline reset by each `session/update`, the hard cap, `!cancel` and
//! shutdown as `session/cancel` with a grace before the agent is killed, and
//! the outcome with the slot's fate, and what the turn reported of its usage
//! ([`crate::metrics::TurnReport`]: the agent's `PromptResponse.usage` and
//! its last `usage_update`).

use super::session::{Fate, Link, Sessions, session_for};
use super::{
    AgentInfo, AgentSpec, Shared, Sink, SlotCmd, TurnJob, TurnOutcome, connection_lost, failure_text,
    prompt_blocks,
};
use crate::metrics::{End, Tokens, TurnReport};
use agent_client_protocol::Agent;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{CancelNotification, PromptRequest, SessionId, StopReason};
use std::time::{Duration, Instant, SystemTime};
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
) -> (TurnOutcome, Fate, TurnReport) {
    let begun = SystemTime::now();
    let report = |session: Option<&SessionId>, fresh: bool, tokens, context, end| TurnReport {
        turn_id: job.turn_id,
        channel: job.channel.clone(),
        session: session.map(|s| s.0.to_string()),
        fresh_session: fresh,
        started: begun,
        ended: SystemTime::now(),
        tokens,
        context,
        end,
    };
    let mut link = Link {
        spec,
        info,
        cx,
        cmds,
        exited,
    };
    let got = match session_for(&mut link, sessions, job).await {
        Ok(got) => got,
        Err((outcome, fate)) => {
            let r = report(None, false, None, None, End::Failed);
            return (outcome, fate, r);
        }
    };
    let (cmds, exited) = (link.cmds, link.exited);
    let session = got.id;
    let fresh = got.fresh;
    let system = (got.fresh && !spec.adapter.system_prompt_on_new_session(info))
        .then_some(spec.system_prompt.as_deref())
        .flatten();
    let lead = match (system, got.context.as_deref()) {
        (Some(p), Some(h)) => Some(format!("{p}\n\n{h}")),
        (p, h) => p.or(h).map(str::to_string),
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
    let prompt = PromptRequest::new(session.clone(), prompt_blocks(lead.as_deref(), &job.text));
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
                Some(SlotCmd::Doze) => tracing::error!("doze asked of a busy slot; ignored"),
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
    let (text, context) = {
        let mut sink = shared.lock();
        let text = std::mem::take(&mut sink.text);
        let context = sink.context.take();
        *sink = Sink::default();
        if text.is_cut() {
            tracing::warn!("the agent's answer exceeded the reply bound and was cut");
        }
        (text.into_string(), context)
    };

    let fate_after = |alive: bool| match (alive, shutdown_requested) {
        (false, _) => Fate::Dead,
        (true, true) => Fate::Shutdown,
        (true, false) => Fate::Continue,
    };
    let mut tokens = None;
    let mut stop_word = None;
    let (outcome, fate) = match result {
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
            tokens = r.usage.as_ref().map(|u| Tokens {
                input: u.input_tokens,
                output: u.output_tokens,
                total: u.total_tokens,
                cache_read: u.cached_read_tokens,
                cache_write: u.cached_write_tokens,
            });
            stop_word = serde_json::to_value(r.stop_reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string));
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
    };
    let end = match &outcome {
        TurnOutcome::Completed { .. } => End::Answered(stop_word.unwrap_or_default()),
        TurnOutcome::Cancelled { .. } => End::Cancelled,
        TurnOutcome::Failed { .. } => End::Failed,
    };
    let r = report(Some(&session), fresh, tokens, context, end);
    (outcome, fate, r)
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
