//! What the harness does with the agent's messages to it (wire-facts §6):
//! `session/update` feeds the turn's text and its idle clock, and
//! `session/request_permission` is answered by the permission policy
//! ([`super::permission`]; `ask-owner` goes to the main loop, which asks
//! the owner on the relay).
//!
//! Text blocks: an `agent_message_chunk` with a new message id, or text
//! after a tool call, a plan or a thought, starts a new paragraph
//! ([`crate::events::TurnText::end_block`]).
//!
//! While an `ask-owner` question is open the idle clock stands still (the
//! agent is waiting for a person, not hung); the hard turn cap still holds,
//! and the question itself is bounded by `BUZZ_ACP_PERMISSION_TIMEOUT_SECS`.
//!
//! The policy is the one of the turn's asker (issue 30 item 2): the owner's
//! turns get the agent's, anyone else's the others' (`reject` by default).
//!
//! A `usage_update` is kept as the turn's context fill and cost
//! ([`crate::metrics`], issue 34).
//!
//! Tool calls are tracked open (`pending`/`in_progress`) until a final
//! status (`completed`/`failed`): a turn with an open tool call is running
//! that tool, not stalled, however long the tool is silent (a build, a test
//! suite; review-9b395e0 finding 7).

use super::permission::{self, Grant};
use super::{AgentSpec, Asker, Shared, SlotEvent};
use agent_client_protocol::Agent;
use agent_client_protocol::v1::Responder;
use agent_client_protocol::v1::schema::{
    ContentBlock, RequestPermissionRequest, RequestPermissionResponse, SessionNotification, SessionUpdate,
    ToolCallStatus,
};
use buzz_contract::agents::PermissionPolicy;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// One `session/update` of the session the slot is streaming.
pub(super) fn on_update(shared: &Shared, n: &SessionNotification) {
    let mut sink = shared.lock();
    if sink.session.as_ref() != Some(&n.session_id) {
        return;
    }
    sink.last_update = Some(Instant::now());
    match &n.update {
        SessionUpdate::AgentMessageChunk(chunk) => {
            if let ContentBlock::Text(t) = &chunk.content {
                if let Some(id) = chunk.message_id.as_ref().map(|m| m.0.to_string()) {
                    if sink.message_id.as_ref().is_some_and(|last| *last != id) {
                        sink.text.end_block();
                    }
                    sink.message_id = Some(id);
                }
                sink.text.push(&t.text);
            }
        }
        SessionUpdate::ToolCall(call) => {
            track_tool(
                &mut sink.open_tools,
                call.tool_call_id.0.to_string(),
                Some(call.status),
            );
            sink.text.end_block();
        }
        SessionUpdate::ToolCallUpdate(update) => {
            track_tool(
                &mut sink.open_tools,
                update.tool_call_id.0.to_string(),
                update.fields.status,
            );
            sink.text.end_block();
        }
        SessionUpdate::AgentThoughtChunk(_) | SessionUpdate::Plan(_) => sink.text.end_block(),
        SessionUpdate::UsageUpdate(u) => {
            sink.context = Some(crate::metrics::Context {
                used: u.used,
                size: u.size,
                cost: u.cost.as_ref().map(|c| (c.amount, c.currency.clone())),
            });
        }
        _ => {}
    }
    drop(sink);
    shared.updated.notify_waiters();
}

/// A tool call is open from its `pending` or `in_progress` status until a
/// `completed` or `failed` one; an update without a status changes nothing.
fn track_tool(open: &mut HashSet<String>, id: String, status: Option<ToolCallStatus>) {
    match status {
        Some(ToolCallStatus::Pending | ToolCallStatus::InProgress) => {
            open.insert(id);
        }
        Some(ToolCallStatus::Completed | ToolCallStatus::Failed) => {
            open.remove(&id);
        }
        Some(_) | None => {}
    }
}

/// A question for the owner, sent to the main loop (`ask-owner`).
#[derive(Debug)]
pub struct PermissionAsk {
    pub turn_id: u64,
    pub channel: String,
    /// Who asked for the turn that wants the tool.
    pub asker: Asker,
    /// The tool's name ([`permission::tool_label`]).
    pub tool: String,
    /// The tool call's title, not yet scrubbed.
    pub title: String,
    /// The owner's grant; dropped denies.
    pub answer: oneshot::Sender<Grant>,
}

/// Answers one `session/request_permission` by the policy of the turn's
/// asker ([`AgentSpec::policy_for`]).
pub(super) fn on_permission(
    slot: usize,
    spec: &AgentSpec,
    shared: &Arc<Shared>,
    events: &mpsc::UnboundedSender<SlotEvent>,
    req: RequestPermissionRequest,
    responder: Responder<RequestPermissionResponse>,
    cx: &agent_client_protocol::v1::ConnectionTo<Agent>,
) -> Result<(), agent_client_protocol::Error> {
    let tool = permission::tool_label(&req);
    let turn = shared.lock().turn.clone();
    // A request outside any turn has no asker: nobody's policy grants it.
    let Some(turn) = turn else {
        return answer(slot, &tool, "no turn to ask for", &req, Grant::Deny, responder);
    };
    let whose = if turn.asker.is_owner() {
        "owner's turn"
    } else {
        "another author's turn"
    };
    match spec.policy_for(&turn.asker) {
        PermissionPolicy::Allow => return answer(slot, &tool, whose, &req, Grant::Once, responder),
        PermissionPolicy::Reject => return answer(slot, &tool, whose, &req, Grant::Deny, responder),
        PermissionPolicy::AskOwner => {}
    }
    let (tx, rx) = oneshot::channel();
    let ask = PermissionAsk {
        turn_id: turn.turn_id,
        channel: turn.channel.clone(),
        asker: turn.asker.clone(),
        tool: tool.clone(),
        title: permission::title(&req),
        answer: tx,
    };
    if events.send(SlotEvent::Ask { slot, ask }).is_err() {
        return answer(slot, &tool, "harness stopping", &req, Grant::Deny, responder);
    }
    shared.lock().asking += 1;
    tracing::info!(slot, tool, whose, "permission asked of the owner");
    let bound = spec.permission_timeout;
    let shared = shared.clone();
    // Answered from a task of its own: the connection keeps reading (the
    // agent may cancel, or stream) while the owner thinks.
    cx.spawn(async move {
        let (grant, why) = match tokio::time::timeout(bound, rx).await {
            Ok(Ok(Grant::Deny)) => (Grant::Deny, "owner denied"),
            Ok(Ok(g)) => (g, "owner allowed"),
            Ok(Err(_)) => (Grant::Deny, "question withdrawn"),
            Err(_) => (Grant::Deny, "owner did not answer in time"),
        };
        {
            let mut sink = shared.lock();
            sink.asking = sink.asking.saturating_sub(1);
            sink.last_update = Some(Instant::now());
        }
        shared.updated.notify_waiters();
        answer(slot, &tool, why, &req, grant, responder)
    })
}

fn answer(
    slot: usize,
    tool: &str,
    why: &str,
    req: &RequestPermissionRequest,
    grant: Grant,
    responder: Responder<RequestPermissionResponse>,
) -> Result<(), agent_client_protocol::Error> {
    let outcome = permission::outcome(req, grant);
    tracing::info!(
        slot,
        tool,
        decision = grant.as_str(),
        selected = permission::selected_kind(req, &outcome),
        why,
        "permission answered"
    );
    responder.respond(RequestPermissionResponse::new(outcome))
}
