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

use super::permission;
use super::{AgentSpec, Shared, SlotEvent};
use agent_client_protocol::Agent;
use agent_client_protocol::v1::Responder;
use agent_client_protocol::v1::schema::{
    ContentBlock, RequestPermissionRequest, RequestPermissionResponse, SessionNotification, SessionUpdate,
};
use buzz_contract::agents::PermissionPolicy;
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
        SessionUpdate::ToolCall(_)
        | SessionUpdate::ToolCallUpdate(_)
        | SessionUpdate::AgentThoughtChunk(_)
        | SessionUpdate::Plan(_) => sink.text.end_block(),
        _ => {}
    }
    drop(sink);
    shared.updated.notify_waiters();
}

/// A question for the owner, sent to the main loop (`ask-owner`).
#[derive(Debug)]
pub struct PermissionAsk {
    pub turn_id: u64,
    pub channel: String,
    /// The tool's name ([`permission::tool_label`]).
    pub tool: String,
    /// The tool call's title, not yet scrubbed.
    pub title: String,
    /// True grants; dropped or false denies.
    pub answer: oneshot::Sender<bool>,
}

/// Answers one `session/request_permission`.
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
    let (turn_id, channel) = match (spec.permission_policy, turn) {
        (PermissionPolicy::Allow, _) => return answer(slot, &tool, "allow", &req, true, responder),
        (PermissionPolicy::Reject, _) => return answer(slot, &tool, "reject", &req, false, responder),
        // A request outside any turn has no one to ask.
        (PermissionPolicy::AskOwner, None) => {
            return answer(slot, &tool, "no turn to ask for", &req, false, responder);
        }
        (PermissionPolicy::AskOwner, Some(t)) => t,
    };
    let (tx, rx) = oneshot::channel();
    let ask = PermissionAsk {
        turn_id,
        channel,
        tool: tool.clone(),
        title: permission::title(&req),
        answer: tx,
    };
    if events.send(SlotEvent::Ask { slot, ask }).is_err() {
        return answer(slot, &tool, "harness stopping", &req, false, responder);
    }
    shared.lock().asking += 1;
    tracing::info!(slot, tool, "permission asked of the owner");
    let bound = spec.permission_timeout;
    let shared = shared.clone();
    // Answered from a task of its own: the connection keeps reading (the
    // agent may cancel, or stream) while the owner thinks.
    cx.spawn(async move {
        let (allow, why) = match tokio::time::timeout(bound, rx).await {
            Ok(Ok(true)) => (true, "owner allowed"),
            Ok(Ok(false)) => (false, "owner denied"),
            Ok(Err(_)) => (false, "question withdrawn"),
            Err(_) => (false, "owner did not answer in time"),
        };
        {
            let mut sink = shared.lock();
            sink.asking = sink.asking.saturating_sub(1);
            sink.last_update = Some(Instant::now());
        }
        shared.updated.notify_waiters();
        answer(slot, &tool, why, &req, allow, responder)
    })
}

fn answer(
    slot: usize,
    tool: &str,
    why: &str,
    req: &RequestPermissionRequest,
    allow: bool,
    responder: Responder<RequestPermissionResponse>,
) -> Result<(), agent_client_protocol::Error> {
    tracing::info!(
        slot,
        tool,
        decision = if allow { "allow" } else { "reject" },
        why,
        "permission answered"
    );
    responder.respond(RequestPermissionResponse::new(permission::outcome(req, allow)))
}
