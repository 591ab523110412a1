//! The session a turn runs in (wire-facts §6; issue 32 item 1): the one
//! this slot holds for the conversation, else the one its receipt names,
//! brought back ([`crate::receipts`]: `session/resume`, else
//! `session/load`), else a new one, whose receipt is saved at once. Each
//! request is bounded by the start bound; the model and mode are applied
//! to a new or restored session alike, in the forms it advertises
//! ([`super::setup`]).
//!
//! A resume or load that fails removes the receipt if it still names that
//! session (a newer one survives), says why in the log, and the turn goes
//! on in a new session given the channel's recent history
//! ([`crate::history`], asked of the relay, bounded by
//! [`HISTORY_WAIT`]), as does a known conversation whose agent offers no
//! way back: the asker is answered either way. A restored
//! session's replay (`session/load` streams the history as updates) is
//! never published: updates count only for the session a prompt runs in.
//!
//! A slot keeps at most [`MAX_SESSIONS`] sessions; the least recently used
//! is evicted, with `session/close` when the agent offers it.

use super::setup::{self, Offered, Unapplied};
use super::{
    AgentInfo, AgentSpec, SlotCmd, Tools, TurnJob, TurnOutcome, connection_lost, failure_text, forms,
};
use crate::history;
use crate::inbound::{InboundEvent, Policy};
use crate::receipts::store::Receipts;
use crate::receipts::{Conversation, Receipt, Scope, Step, first_step};
use crate::relay::RelayCmd;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::SessionId;
use agent_client_protocol::{Agent, UntypedMessage};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// The most sessions one slot keeps open.
pub const MAX_SESSIONS: usize = 64;

/// What happens to the slot after a turn.
pub(super) enum Fate {
    Continue,
    Shutdown,
    Dead,
}

/// A turn that ended before its prompt: its outcome and the slot's fate.
pub(super) type Ended = (TurnOutcome, Fate);

/// Where an agent's conversations are remembered across restarts, and the
/// parts of their scope that are the harness's own.
#[derive(Debug, Clone)]
pub struct Memory {
    pub receipts: Arc<Receipts>,
    pub relay: String,
    pub owner: String,
    pub agent: String,
    /// The preset's `session/load` works ([`buzz_contract::agents::Continuity`]).
    pub load_works: bool,
    /// The others' gate and policy as receipts scope them ([`Scope::others_gate`]).
    pub others_gate: String,
    /// Where a new session of a known conversation gets the channel's
    /// history; `None` before the relay runs (and in tests).
    pub history: Option<HistorySource>,
}

/// How a new session asks the relay for the channel's history.
#[derive(Debug, Clone)]
pub struct HistorySource {
    pub relay: mpsc::UnboundedSender<RelayCmd>,
    /// The gate, as the run decides mentions (its start bounds the history).
    pub policy: Policy,
    /// The ids of the mentions that woke this run: they are its turns,
    /// never its history (empty for a run that was not woken).
    pub woke: Vec<String>,
    /// Where the history ends (unix seconds, exclusive): the run's start,
    /// moved to the mention that ended a doze (issue 50), so a session
    /// started after a doze gets what this run said before it.
    pub until: Arc<std::sync::atomic::AtomicU64>,
}

/// How long a new session waits for the relay's history.
pub const HISTORY_WAIT: Duration = Duration::from_secs(3);

impl HistorySource {
    /// The context block for `channel`'s conversation of `owner_class`
    /// turns ([`history::context`]), or `None` (nothing there, no live
    /// relay, or no answer within [`HISTORY_WAIT`]).
    pub async fn context(&self, channel: &str, owner_class: bool) -> Option<String> {
        let authors = history::authors(&self.policy, owner_class);
        if authors.as_ref().is_some_and(Vec::is_empty) {
            return None;
        }
        let (reply, got) = oneshot::channel();
        let start = self
            .until
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(self.policy.run_start);
        self.relay
            .send(RelayCmd::History {
                channel: channel.to_string(),
                since: start.saturating_sub(history::BOUNDS.age.as_secs()),
                until: start.saturating_sub(1),
                // Mentions the gate refuses come too: ask for more than are kept.
                limit: 4 * history::BOUNDS.count,
                authors,
                reply,
            })
            .ok()?;
        let events = tokio::time::timeout(HISTORY_WAIT, got).await.ok()?.ok()?;
        let inbound: Vec<InboundEvent> = events
            .iter()
            .map(InboundEvent::from_event)
            .filter(|e| !self.woke.contains(&e.id))
            .collect();
        let policy = Policy {
            run_start: start,
            ..self.policy.clone()
        };
        history::context(&inbound, &policy, channel, owner_class, history::BOUNDS)
    }
}

impl Memory {
    /// The scope of a session of `owner_class` turns run by `spec`.
    pub fn scope(&self, spec: &AgentSpec, mode: Option<&str>, owner_class: bool) -> Scope {
        Scope {
            gate: (!owner_class).then(|| self.others_gate.clone()),
            relay: self.relay.clone(),
            owner: self.owner.clone(),
            agent: self.agent.clone(),
            command: spec.command.clone(),
            args: spec.args.clone(),
            model: spec.model.clone(),
            permission_mode: mode.map(str::to_string),
            system_prompt_sha256: Scope::prompt_digest(spec.system_prompt.as_deref()),
        }
    }
}

/// A slot's sessions: one per channel and asker class (owner or not),
/// least recently used first out.
#[derive(Default)]
pub(crate) struct Sessions {
    open: HashMap<(String, bool), (SessionId, u64)>,
    tick: u64,
}

impl Sessions {
    fn get(&mut self, key: &(String, bool)) -> Option<SessionId> {
        self.tick += 1;
        let tick = self.tick;
        self.open.get_mut(key).map(|(id, used)| {
            *used = tick;
            id.clone()
        })
    }

    /// Keeps `id` for `key`; the session evicted to make room, if any.
    fn insert(&mut self, key: (String, bool), id: SessionId) -> Option<SessionId> {
        self.tick += 1;
        let evicted = if self.open.len() >= MAX_SESSIONS && !self.open.contains_key(&key) {
            let oldest = self
                .open
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            oldest.and_then(|k| self.open.remove(&k)).map(|(id, _)| id)
        } else {
            None
        };
        self.open.insert(key, (id, self.tick));
        evicted
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.len()
    }
}

/// The agent connection a session is asked on.
pub(super) struct Link<'a> {
    pub spec: &'a AgentSpec,
    pub info: &'a AgentInfo,
    pub cx: &'a ConnectionTo<Agent>,
    pub cmds: &'a mut mpsc::UnboundedReceiver<SlotCmd>,
    pub exited: &'a mut watch::Receiver<bool>,
}

/// The session a turn got.
pub(super) struct Got {
    pub id: SessionId,
    /// A new session: the first prompt leads with what the agent could not
    /// take on `session/new` (the system prompt).
    pub fresh: bool,
    /// The channel's history, for a new session of a known conversation.
    pub context: Option<String>,
}

/// The session for `job` (see the module doc).
pub(super) async fn session_for(
    link: &mut Link<'_>,
    sessions: &mut Sessions,
    job: &TurnJob,
) -> Result<Got, Ended> {
    let key = (job.channel.clone(), job.asker.is_owner());
    if let Some(id) = sessions.get(&key) {
        return Ok(Got {
            id,
            fresh: false,
            context: None,
        });
    }
    let spec = link.spec;
    let mode = spec.mode_for(&job.asker);
    let tools = spec.tools_for(&job.asker);
    let conv = Conversation {
        channel: job.channel.clone(),
        owner: job.asker.is_owner(),
    };
    let remembered = spec.memory.as_ref().map(|m| (m, m.scope(spec, mode, conv.owner)));
    // A conversation known from its receipt that is not brought back gets
    // the channel's history instead.
    let mut known = false;
    if let Some((memory, scope)) = &remembered
        && let Some(receipt) = memory.receipts.find(&conv, scope, &spec.cwd)
    {
        known = true;
        match first_step(link.info.offers, memory.load_works) {
            Step::History => tracing::info!(
                "the agent offers no way to bring a session back here; a new session gets the channel's history"
            ),
            step => match bring_back(link, step, &receipt, mode, tools).await {
                Ok(id) => {
                    tracing::info!(step = step.as_str(), "conversation brought back");
                    keep(link, sessions, key, id.clone()).await;
                    return Ok(Got {
                        id,
                        fresh: false,
                        context: None,
                    });
                }
                Err((outcome, fate)) => {
                    let why = match &outcome {
                        TurnOutcome::Failed { error: Some(_) } => "the agent refused it",
                        _ => "the agent ended meanwhile",
                    };
                    tracing::warn!(
                        step = step.as_str(),
                        "cannot bring the conversation back ({why}); a new session gets the channel's history"
                    );
                    if let Err(e) = memory.receipts.remove_if(&conv, &receipt.session_id) {
                        tracing::warn!(error = %e, "cannot remove the failed receipt");
                    }
                    if !matches!(fate, Fate::Continue) || !matches!(outcome, TurnOutcome::Failed { .. }) {
                        return Err((outcome, fate));
                    }
                }
            },
        }
    }
    let id = open_new(link, mode, tools).await?;
    if let Some((memory, scope)) = &remembered {
        let receipt = Receipt::new(
            scope.clone(),
            &conv,
            id.0.to_string(),
            spec.cwd.clone(),
            unix_now(),
        );
        if let Err(e) = memory.receipts.save(&receipt) {
            tracing::warn!(error = %e, "cannot save the conversation's receipt; a restart will start it anew");
        }
    }
    keep(link, sessions, key, id.clone()).await;
    let source = remembered
        .as_ref()
        .and_then(|(m, _)| m.history.as_ref())
        .filter(|_| known);
    let context = match source {
        Some(h) => h.context(&conv.channel, conv.owner).await,
        None => None,
    };
    if known {
        let messages = context
            .as_ref()
            .map_or(0, |c| c.lines().count().saturating_sub(1));
        tracing::info!(
            step = Step::History.as_str(),
            messages,
            "conversation brought back"
        );
    }
    Ok(Got {
        id,
        fresh: true,
        context,
    })
}

/// Keeps a session; closes the one evicted for it when the agent offers `session/close`.
async fn keep(link: &mut Link<'_>, sessions: &mut Sessions, key: (String, bool), id: SessionId) {
    let Some(evicted) = sessions.insert(key, id) else {
        return;
    };
    tracing::info!("a session was evicted (the slot keeps {MAX_SESSIONS})");
    if link.info.offers.close {
        let params = serde_json::json!({ "sessionId": evicted.0.to_string() });
        if request_bounded(link, "session/close", params).await.is_err() {
            tracing::warn!("session/close of an evicted session failed");
        }
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One request before the prompt (`session/new`, the setup steps), bounded
/// by the start bound; `!cancel`, shutdown and the agent's exit end the wait.
async fn request_bounded(link: &mut Link<'_>, method: &str, params: Value) -> Result<Value, Ended> {
    let (info, cx) = (link.info, link.cx);
    let bound = link.spec.start_bound();
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
        _ = link.exited.wait_for(|e| *e) => return Err((TurnOutcome::Failed { error: None }, Fate::Dead)),
        c = link.cmds.recv() => {
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

/// `session/new`, then the setup ([`set_up`]).
async fn open_new(link: &mut Link<'_>, mode: Option<&str>, tools: Tools) -> Result<SessionId, Ended> {
    let asked = Instant::now();
    let params = serde_json::to_value(forms::new_session_request(link.spec, link.info, tools))
        .map_err(|e| fail(e.to_string()))?;
    let result = request_bounded(link, "session/new", params).await?;
    let id = set_up(link, &result, mode).await?;
    tracing::info!(took_ms = asked.elapsed().as_millis() as u64, "session opened");
    Ok(id)
}

/// `session/resume` or `session/load` of the receipt's session, with the
/// `session/new` request's own fields (cwd, MCP servers, system prompt,
/// `_meta`), then the setup.
async fn bring_back(
    link: &mut Link<'_>,
    step: Step,
    receipt: &Receipt,
    mode: Option<&str>,
    tools: Tools,
) -> Result<SessionId, Ended> {
    let method = match step {
        Step::Resume => "session/resume",
        Step::Load => "session/load",
        Step::History => unreachable!("a new session is not brought back"),
    };
    let asked = Instant::now();
    let params = forms::restore_params(link.spec, link.info, &receipt.session_id, tools)
        .map_err(|e| fail(e.to_string()))?;
    let mut result = request_bounded(link, method, params).await?;
    // The result of a resume or load names no session: it is the receipt's.
    if let Value::Object(m) = &mut result {
        m.insert("sessionId".into(), Value::String(receipt.session_id.clone()));
    } else {
        result = serde_json::json!({ "sessionId": receipt.session_id });
    }
    let id = set_up(link, &result, mode).await?;
    tracing::info!(
        method,
        took_ms = asked.elapsed().as_millis() as u64,
        "session restored"
    );
    Ok(id)
}

fn fail(error: String) -> Ended {
    (TurnOutcome::Failed { error: Some(error) }, Fate::Continue)
}

/// The model and mode in the forms the session advertised ([`super::setup`]).
/// A setup the agent refuses, or a model or mode it does not offer, fails
/// the turn with the reason; the session is not kept, so the next mention
/// tries again.
async fn set_up(link: &mut Link<'_>, result: &Value, mode: Option<&str>) -> Result<SessionId, Ended> {
    let offered = Offered::from_result(result).map_err(|e| fail(e.to_string()))?;
    let plan = setup::plan(&offered, link.spec.model.as_deref(), mode).map_err(|e| {
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
        request_bounded(link, method, params)
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
    Ok(SessionId::new(offered.session_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(c: &str) -> (String, bool) {
        (c.to_string(), true)
    }

    #[test]
    fn a_slot_keeps_a_bounded_number_of_sessions_and_evicts_the_least_recently_used() {
        let mut s = Sessions::default();
        for i in 0..MAX_SESSIONS {
            assert_eq!(
                s.insert(key(&i.to_string()), SessionId::new(format!("s{i}"))),
                None
            );
        }
        // Channel 0 is used again: channel 1 is now the oldest.
        assert!(s.get(&key("0")).is_some());
        let evicted = s.insert(key("new"), SessionId::new("s-new"));
        assert_eq!(evicted, Some(SessionId::new("s1")));
        assert_eq!(s.len(), MAX_SESSIONS);
        assert!(s.get(&key("1")).is_none());
        assert!(s.get(&key("0")).is_some());
        // Replacing a kept session evicts nothing.
        assert_eq!(s.insert(key("0"), SessionId::new("s0b")), None);
    }
}
