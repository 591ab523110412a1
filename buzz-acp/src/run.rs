//! The main loop and the budgeted graceful stop (spec §Stop and Delete,
//! §Auto-Stop, I3, I5; Known Defects 6 and 7).
//!
//! Every intentional stop — owner `!shutdown`, SIGTERM/SIGINT, the inactivity
//! reaper — takes one path: stop taking work, drain (running turns may
//! finish and their replies are published), cancel what remains at the drain
//! point, reap every agent process group concurrently (SIGTERM, then
//! SIGKILL), then the reserved finalization slice: presence `offline`
//! (≤ 2 s) and relay close (≤ 5 s), all under one shared deadline. Failures
//! that end the harness (all agents dead, relay lost) take the same path
//! with their own exit code.
//!
//! Every text the harness posts (the answer, an error reply, an owner
//! question, a note to the owner) goes through the one scrub
//! ([`crate::scrub`]; issue 30 item 1): [`crate::events`] signs nothing else.
//!
//! A turn that fails with an agent error is answered with a short, redacted
//! error reply (at most one per channel per
//! [`crate::replies::ERROR_REPLY_INTERVAL`]), so the asker is never left with
//! silence; a turn cancelled for running out of time is answered too.
//!
//! **Presence and an agent that cannot start** (issue 24 item 1). `online`
//! means "can receive work" (wire-facts §3): it goes out once the relay
//! subscription is live, not once an agent process runs, because the pool
//! is lazy by the spec's choice (§Launch data `BUZZ_ACP_LAZY_POOL=true`: no
//! idle LLM process per launch) and the first agent starts on the first
//! mention. An agent command that is not installed never gets this far: the
//! entry point refuses it (exit 2, issue 30 item 3). What keeps `online`
//! honest otherwise is the answer to that mention: an agent whose first
//! start exits before it answers `initialize` gives up at once (`acp.rs`), every
//! waiting asker gets a reply that says why (the command, the install hint
//! or the exit status) within a second of asking, and the harness exits 5
//! (all agents dead) and publishes `offline` rather than staying online for
//! work it cannot do. A local launcher refuses a missing command before it
//! spawns the harness; for a deploy, only the image knows its commands, so
//! this reply is how the user learns it.

//!
//! **Doze** (issue 50, docs/harness.md "Dozing"): with no turn for the doze
//! bound ([`doze_due`]), the idle agents are ended ([`SlotCmd::Doze`]) and
//! presence says `away`; the next accepted mention ends the doze in
//! [`Harness::dispatch`], after the gate, never before it.

use crate::acp::{self, AgentSpec, Asker, PermissionAsk, SlotCmd, SlotEvent, TurnJob, TurnOutcome};
use crate::agent_spec::agent_spec;
use crate::asks::{Answered, Asks, Question};
use crate::budget::{STALLED_AFTER, ShutdownPlan};
use crate::config::Config;
use crate::events;
use crate::exit::Exit;
use crate::inbound::{self, Answer, Decision, InboundEvent, Policy};
use crate::pid1;
use crate::procs::{self, ProcessTable};
use crate::relay::{self, RelayCmd, RelayEvent, RelaySettings};
use crate::replies::{
    BUSY_TEXT, NOTHING_RUNS_TEXT, STOPPED_TEXT, error_reply_due, error_reply_text, timeout_text,
};
use crate::schedule::{Scheduler, admit, doze_due, inactivity_expired};
use crate::scrub::Scrub;
use buzz_contract::wake::StopReason;
use nostr_sdk::prelude::{Event, Keys, PublicKey};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, oneshot};

/// Typing indicator period (wire-facts §4).
pub const TYPING_PERIOD: Duration = Duration::from_secs(3);
/// How long a woken run waits for its relay to hand over the mentions.
const WAKE_FETCH_BOUND: Duration = Duration::from_secs(10);
/// How often a woken run asks for the mentions that woke it, at most: a
/// fetch that timed out, was refused or died with its session is asked
/// once more (review afa2bf1 finding 9), after [`WAKE_RETRY_AFTER`].
const WAKE_FETCH_TRIES: u32 = 2;
/// The pause before a woken run asks again for mentions that did not come.
const WAKE_RETRY_AFTER: Duration = Duration::from_secs(2);
/// Events held behind the waking mentions; past it they go through at once.
const HELD_CAP: usize = 1024;
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Unspawned,
    Starting,
    Idle,
    Busy,
    /// Told to end its agent for a doze; [`SlotEvent::Dozed`] makes it
    /// [`SlotState::Unspawned`].
    Dozing,
    Dead,
}

struct Slot {
    state: SlotState,
    tx: Option<mpsc::UnboundedSender<SlotCmd>>,
}

struct Pending {
    mention: InboundEvent,
    channel: String,
}

/// Why the main loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Owner,
    Signal,
    Reaper,
    Fail(Exit),
}

impl Stop {
    /// What the last presence and log line say (issue 33): an inactivity
    /// stop sleeps, the others stop; a failure says nothing.
    fn reason(self) -> Option<StopReason> {
        match self {
            Stop::Owner => Some(StopReason::Owner),
            Stop::Signal => Some(StopReason::Signal),
            Stop::Reaper => Some(StopReason::Idle),
            Stop::Fail(_) => None,
        }
    }
}

struct Harness {
    cfg: Config,
    keys: Keys,
    policy: Policy,
    spec: Arc<AgentSpec>,
    procs: ProcessTable,
    slots: Vec<Slot>,
    sched: Scheduler<TurnJob>,
    pending: HashMap<u64, Pending>,
    typing: HashMap<u64, tokio::task::JoinHandle<()>>,
    next_turn: u64,
    slot_tx: mpsc::UnboundedSender<SlotEvent>,
    relay_tx: mpsc::UnboundedSender<RelayCmd>,
    last_activity: Instant,
    /// The one scrub of every published text.
    scrub: Scrub,
    /// channel → when it last got an error reply.
    error_replies: HashMap<String, Instant>,
    /// The owner's open permission questions (`ask-owner`).
    asks: Asks,
    /// Slots whose turn stalled during the stop's drain.
    stalled: HashSet<usize>,
    /// The waker's mentions already answered, by either path (issue 33).
    woken: HashSet<String>,
    /// Each session's usage so far (issue 34).
    ledger: crate::metrics::Ledger,
    /// Who the usage events are sealed to.
    owner: PublicKey,
    /// Dozing (issue 50): no agent process, presence `away`, until the
    /// next accepted mention.
    dozing: bool,
    /// Where a new session's history ends ([`acp::HistorySource::until`]).
    history_until: Arc<std::sync::atomic::AtomicU64>,
    /// State changes published so far ([`Harness::state_change`]).
    changes: u64,
}

fn system_prompt(cfg: &Config) -> Option<String> {
    match (&cfg.system_prompt, &cfg.team_instructions) {
        (None, None) => None,
        (Some(p), None) => Some(p.clone()),
        (None, Some(t)) => Some(t.clone()),
        (Some(p), Some(t)) => Some(format!("{p}\n\n{t}")),
    }
}

/// The scrub of this run: the key, the auth tag and the secret env of the
/// process (which the agents inherit).
fn scrub_of(cfg: &Config) -> Scrub {
    Scrub::new(
        &cfg.identity.keys,
        cfg.identity.auth_tag.as_ref(),
        std::env::vars(),
    )
}

impl Harness {
    fn spawn_slot(&mut self, i: usize) {
        let tx = acp::spawn_slot(i, self.spec.clone(), self.procs.clone(), self.slot_tx.clone());
        self.slots[i] = Slot {
            state: SlotState::Starting,
            tx: Some(tx),
        };
    }

    fn publish(&self, e: Event) {
        let _ = self.relay_tx.send(RelayCmd::Publish(Box::new(e)));
    }

    /// Assigns runnable turns to idle slots; wakes lazy slots when needed.
    fn pump(&mut self) {
        let idle: Vec<usize> = (0..self.slots.len())
            .filter(|i| self.slots[*i].state == SlotState::Idle)
            .collect();
        for (slot, _channel, job) in self.sched.assign(&idle) {
            self.slots[slot].state = SlotState::Busy;
            self.last_activity = Instant::now();
            let turn_id = job.turn_id;
            if let Some(tx) = &self.slots[slot].tx {
                let _ = tx.send(SlotCmd::Prompt(job));
            }
            if self.cfg.typing
                && let Some(p) = self.pending.get(&turn_id)
            {
                let (keys, mention, channel, relay) = (
                    self.keys.clone(),
                    p.mention.clone(),
                    p.channel.clone(),
                    self.relay_tx.clone(),
                );
                let h = tokio::spawn(async move {
                    let mut t = tokio::time::interval(TYPING_PERIOD);
                    loop {
                        t.tick().await;
                        let e = events::typing(&keys, &mention, &channel);
                        if relay.send(RelayCmd::Publish(Box::new(e))).is_err() {
                            return;
                        }
                    }
                });
                self.typing.insert(turn_id, h);
            }
        }
        if self.sched.has_runnable() {
            let starting = self
                .slots
                .iter()
                .filter(|s| s.state == SlotState::Starting)
                .count();
            let want = self.sched.queued().saturating_sub(starting);
            let unspawned: Vec<usize> = (0..self.slots.len())
                .filter(|i| self.slots[*i].state == SlotState::Unspawned)
                .take(want)
                .collect();
            for i in unspawned {
                tracing::info!(slot = i, "waking lazy agent slot");
                self.spawn_slot(i);
            }
        }
    }

    fn dispatch(&mut self, mention: InboundEvent, channel: String, asker: Asker) {
        if !admit(self.sched.queued(), self.sched.queued_in(&channel)) {
            tracing::warn!(queued = self.sched.queued(), "queue full; mention shed");
            let p = Pending { mention, channel };
            self.error_reply(&p, BUSY_TEXT);
            return;
        }
        self.wake_from_doze(mention.created_at);
        let turn_id = self.next_turn;
        self.next_turn += 1;
        self.last_activity = Instant::now();
        let job = TurnJob {
            turn_id,
            channel: channel.clone(),
            text: mention.content.clone(),
            asker,
        };
        tracing::info!(turn_id, "mention queued");
        if self.cfg.react_queued {
            self.publish(events::queued_reaction(&self.keys, &mention, &channel));
        }
        // One session per channel and asker class: the scheduler keeps it in its slot.
        let conversation = format!(
            "{channel}\0{}",
            if job.asker.is_owner() { "owner" } else { "other" }
        );
        self.sched.push_in(&channel, &conversation, job);
        self.pending.insert(turn_id, Pending { mention, channel });
        self.pump();
    }

    fn on_slot(&mut self, ev: SlotEvent) -> Option<Stop> {
        match ev {
            SlotEvent::Ready { slot } => {
                self.slots[slot].state = SlotState::Idle;
            }
            SlotEvent::TurnDone {
                slot,
                turn_id,
                channel,
                outcome,
                report,
            } => {
                self.sched.finished(&channel);
                self.last_activity = Instant::now();
                if self.slots[slot].state == SlotState::Busy {
                    self.slots[slot].state = SlotState::Idle;
                }
                if let Some(h) = self.typing.remove(&turn_id) {
                    h.abort();
                }
                let pending = self.pending.remove(&turn_id);
                self.asks.forget_turn(turn_id);
                self.report_usage(&report, pending.as_ref().map(|p| p.mention.id.as_str()));
                match &outcome {
                    TurnOutcome::Completed { text, stop_reason } => {
                        tracing::info!(turn_id, stop_reason, "turn completed");
                        if let Some(p) = pending
                            && self.cfg.reply
                            && !text.trim().is_empty()
                        {
                            let text = self.scrub.publish(text);
                            if text.withheld() {
                                tracing::warn!(turn_id, "a secret was withheld from the answer");
                            }
                            self.publish(events::reply(
                                &self.keys,
                                &p.mention,
                                &p.channel,
                                &text,
                                self.cfg.reply_p_tag,
                            ));
                        }
                    }
                    TurnOutcome::Cancelled { why } => {
                        tracing::info!(turn_id, reason = why, "turn cancelled");
                        if let (Some(p), Some(text)) = (pending, timeout_text(why, &self.spec)) {
                            self.error_reply(&p, &text);
                        }
                    }
                    TurnOutcome::Failed { error } => {
                        tracing::warn!(turn_id, "turn failed");
                        if let (Some(p), Some(error)) = (pending, error) {
                            self.error_reply(&p, error);
                        }
                    }
                }
            }
            SlotEvent::Died { slot, failures } => {
                self.slots[slot].state = SlotState::Starting;
                self.sched.forget_slot(slot);
                tracing::warn!(slot, failures, "agent slot will respawn");
            }
            SlotEvent::GaveUp { slot, reason } => {
                self.slots[slot].state = SlotState::Dead;
                self.slots[slot].tx = None;
                if self.slots.iter().all(|s| s.state == SlotState::Dead) {
                    tracing::error!("all agents dead");
                    // Whoever waits is told why before the harness stops.
                    let error = reason.unwrap_or_else(|| "the agent keeps failing to start".into());
                    let waiting: Vec<Pending> = self.pending.drain().map(|(_, p)| p).collect();
                    for p in waiting {
                        self.error_reply(&p, &error);
                    }
                    return Some(Stop::Fail(Exit::AgentsDead));
                }
            }
            SlotEvent::Ask { slot, ask } => self.ask_owner(slot, ask),
            SlotEvent::Dozed { slot } => {
                self.slots[slot] = Slot {
                    state: SlotState::Unspawned,
                    tx: None,
                };
            }
            SlotEvent::Stalled { slot } => {
                tracing::info!(
                    slot,
                    "a turn made no progress at the stop; cancelled, not waited for"
                );
                self.stalled.insert(slot);
            }
        }
        self.pump();
        None
    }

    /// Whether anything runs, waits or starts: a harness that is busy
    /// does not doze.
    fn busy(&self) -> bool {
        self.sched.running().next().is_some()
            || self.sched.queued() > 0
            || self.slots.iter().any(|s| s.state == SlotState::Starting)
    }

    /// Dozes (issue 50): every idle agent is ended the way a stop ends it
    /// (its receipts kept), and presence says `away`. A slot that is not
    /// idle has no agent to end, or is dead.
    fn doze(&mut self) {
        self.dozing = true;
        let mut ended = 0;
        for s in &mut self.slots {
            if s.state == SlotState::Idle
                && let Some(tx) = &s.tx
            {
                let _ = tx.send(SlotCmd::Doze);
                s.state = SlotState::Dozing;
                ended += 1;
            }
        }
        tracing::info!(
            agents = ended,
            "dozing: no turn for the doze bound; the agents end, presence away"
        );
        self.state_change(buzz_contract::awake::AwakeState::Dozing);
        // Said on `away`, so the owner sees how long it answers by itself.
        let sleeps_at = self.cfg.exit_after_inactivity.map(|bound| {
            let left = bound.saturating_sub(self.last_activity.elapsed());
            nostr_sdk::prelude::Timestamp::now().as_secs() + left.as_secs()
        });
        let _ = self.relay_tx.send(RelayCmd::Presence {
            state: buzz_contract::presence::PresenceState::Away,
            sleeps_at,
        });
    }

    /// An accepted mention, sent at `at`, ends a doze: presence is
    /// `online` again, the pump starts an agent for it, and a session that
    /// agent opens gets what was said before `at` as history (when its
    /// conversation cannot be resumed or loaded).
    fn wake_from_doze(&mut self, at: u64) {
        if std::mem::replace(&mut self.dozing, false) {
            tracing::info!("a mention ends the doze");
            self.state_change(buzz_contract::awake::AwakeState::Awake);
            self.history_until
                .fetch_max(at, std::sync::atomic::Ordering::Relaxed);
            let _ = self.relay_tx.send(RelayCmd::Presence {
                state: buzz_contract::presence::PresenceState::Online,
                sleeps_at: None,
            });
        }
    }

    /// Publishes that the agent is `state` from now on, sealed to the owner
    /// (kind 44201; issue 50 item 3: the hours awake, dozing and asleep).
    fn state_change(&mut self, state: buzz_contract::awake::AwakeState) {
        use buzz_contract::{awake, turn_metric};
        let change = awake::StateChange {
            harness: "buzz-acp".into(),
            run: self.cfg.run_nonce.clone(),
            seq: self.changes,
            state,
        };
        self.changes += 1;
        let text = self.scrub.publish_value(&change);
        let tags = turn_metric::tags(&self.policy.owner, &self.policy.agent);
        match events::sealed(&self.keys, awake::KIND, &text, &self.owner, tags) {
            Some(e) => self.publish(e),
            None => tracing::warn!(state = state.as_str(), "the state change could not be sealed"),
        }
    }

    /// Publishes the turn's usage, sealed to the owner (kind 44200; issue 34).
    fn report_usage(&mut self, report: &crate::metrics::TurnReport, mention: Option<&str>) {
        use buzz_contract::turn_metric;
        let metric = self.ledger.metric(report, mention, self.spec.model.as_deref());
        let text = self.scrub.publish_value(&metric);
        let tags = turn_metric::tags(&self.policy.owner, &self.policy.agent);
        match events::sealed(&self.keys, turn_metric::KIND, &text, &self.owner, tags) {
            Some(e) => self.publish(e),
            None => tracing::warn!(
                turn_id = report.turn_id,
                "the turn's usage event could not be sealed"
            ),
        }
    }

    /// Tells the asker why there is no answer (rate-limited per channel).
    fn error_reply(&mut self, p: &Pending, error: &str) {
        if !self.cfg.reply {
            return;
        }
        let now = Instant::now();
        if !error_reply_due(self.error_replies.get(&p.channel).copied(), now) {
            tracing::info!("error reply suppressed by the per-channel rate limit");
            return;
        }
        self.error_replies.insert(p.channel.clone(), now);
        let text = error_reply_text(&self.scrub, error);
        self.publish(events::reply(
            &self.keys,
            &p.mention,
            &p.channel,
            &text,
            self.cfg.reply_p_tag,
        ));
    }

    /// Posts an `ask-owner` question, with its id, under the mention it
    /// arose from.
    fn ask_owner(&mut self, slot: usize, ask: PermissionAsk) {
        let Some(p) = self.pending.get(&ask.turn_id) else {
            tracing::info!(slot, "permission question for a turn that ended; denied");
            return;
        };
        let id = self.asks.fresh_id(rand::random);
        let asker = match &ask.asker {
            Asker::Owner => None,
            Asker::Other { pubkey } => Some(pubkey.as_str()),
        };
        let wait = self.spec.permission_timeout.as_secs();
        let text = self.scrub.publish_with(&ask.title, |title| {
            acp::permission::question(&id, &ask.tool, title, asker, wait)
        });
        let e = events::question(&self.keys, &p.mention, &p.channel, &text, &self.policy.owner);
        let event_id = e.id.to_hex();
        self.publish(e);
        tracing::info!(slot, question = %id, channel = %ask.channel, "permission question posted");
        self.asks.open(Question {
            id,
            event_id,
            turn_id: ask.turn_id,
            answer: ask.answer,
        });
    }

    /// Applies the owner's answer to the question it names; an answer to no
    /// open question grants nothing, and the owner is told so.
    fn on_answer(&mut self, ev: &InboundEvent, channel: &str, answer: &Answer) {
        let note = match self.asks.answer(answer) {
            Answered::Granted { id, grant } => {
                tracing::info!(question = %id, grant = grant.as_str(), "owner answered a permission question");
                return;
            }
            Answered::NotOpen { id } => {
                tracing::info!(question = %id, "owner answer for a question that is not open; ignored");
                format!(
                    "No open question `{id}`: it was answered, timed out or its turn ended. Nothing was granted."
                )
            }
            Answered::Unnamed { open } => {
                tracing::info!(open, "owner answer that names no question; ignored");
                format!(
                    "This answers no question ({open} open): name the one you answer, `{} <id>` or `{} <id>`, \
                     or reply to it. Nothing was granted.",
                    buzz_contract::presence::ALLOW_COMMAND,
                    buzz_contract::presence::DENY_COMMAND
                )
            }
        };
        if self.cfg.reply {
            let text = self.scrub.publish(&note);
            self.publish(events::reply(
                &self.keys,
                ev,
                channel,
                &text,
                self.cfg.reply_p_tag,
            ));
        }
    }

    /// Asks the relay, after `delay`, for the mentions the waker named and
    /// the owner's messages since the floor; the answer comes back to the
    /// main loop.
    fn ask_woken(&self, back: mpsc::UnboundedSender<Vec<Event>>, delay: Duration) {
        let Some(wake) = self.cfg.wake.as_ref().filter(|w| !w.events.is_empty()) else {
            return;
        };
        let (ids, relay) = (wake.events.clone(), self.relay_tx.clone());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let (reply, got) = oneshot::channel();
            let now = nostr_sdk::prelude::Timestamp::now().as_secs();
            let _ = relay.send(RelayCmd::Wake {
                ids,
                since: now.saturating_sub(buzz_contract::wake::WINDOW.as_secs()),
                reply,
            });
            let events = tokio::time::timeout(WAKE_FETCH_BOUND, got)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            let _ = back.send(events);
        });
    }

    /// The mentions that woke this run, answered in order through the
    /// gate with the wake floor (issue 33, [`inbound::decide_woken`]).
    fn on_woken(&mut self, events: &[Event]) {
        let Some(wake) = self.cfg.wake.clone() else { return };
        let all: Vec<InboundEvent> = events.iter().map(InboundEvent::from_event).collect();
        let floor = buzz_contract::wake::floor(
            nostr_sdk::prelude::Timestamp::now().as_secs(),
            inbound::last_shutdown(&self.policy, &all),
        );
        let order = inbound::woken_in_order(&wake.events, &all);
        tracing::info!(
            named = wake.events.len(),
            found = order.len(),
            floor,
            "answering the mentions that woke this run"
        );
        for ev in order {
            if !self.woken.insert(ev.id.clone()) {
                continue;
            }
            match inbound::decide_woken(&self.policy, floor, ev) {
                Decision::Dispatch { channel, asker } => self.dispatch(ev.clone(), channel, asker),
                Decision::Drop(reason) => tracing::info!(?reason, "a waking mention is not answered"),
                _ => {}
            }
        }
    }

    fn on_inbound(&mut self, e: &Event) -> Option<Stop> {
        let ev = InboundEvent::from_event(e);
        if self.cfg.wake.as_ref().is_some_and(|w| w.events.contains(&ev.id))
            && !self.woken.insert(ev.id.clone())
        {
            // Already answered from the waker's list.
            return None;
        }
        let decision = inbound::decide(&self.policy, &ev);
        if !matches!(decision, Decision::Drop(_)) {
            // Only accepted events move the re-subscription `since`.
            let _ = self.relay_tx.send(RelayCmd::Accepted(e.created_at));
        }
        match decision {
            Decision::Shutdown => {
                tracing::info!("owner !shutdown received");
                Some(Stop::Owner)
            }
            Decision::Cancel { channel } => {
                match self.sched.running_slot(&channel) {
                    Some(slot) => {
                        if let Some(tx) = &self.slots[slot].tx {
                            tracing::info!("owner !cancel: cancelling the channel's turn");
                            let _ = tx.send(SlotCmd::Cancel);
                        }
                    }
                    None if self.cfg.reply => {
                        tracing::info!(dozing = self.dozing, "owner !cancel: nothing runs in the channel");
                        let text = self.scrub.publish(NOTHING_RUNS_TEXT);
                        self.publish(events::reply(
                            &self.keys,
                            &ev,
                            &channel,
                            &text,
                            self.cfg.reply_p_tag,
                        ));
                    }
                    None => {}
                }
                None
            }
            Decision::Permission { channel, answer } => {
                self.on_answer(&ev, &channel, &answer);
                None
            }
            Decision::Dispatch { channel, asker } => {
                self.dispatch(ev, channel, asker);
                None
            }
            Decision::Drop(reason) => {
                tracing::debug!(?reason, "inbound event dropped");
                None
            }
        }
    }

    /// Drain → cancel the rest → reap concurrently, bounded by the plan.
    /// Draining, a turn silent for [`STALLED_AFTER`] is cancelled at once by
    /// its slot and no longer waited for; once every running turn finished or
    /// stalled the drain ends, and cancel and kill move up by as much
    /// ([`ShutdownPlan::drained_at`]).
    async fn stop_children(&mut self, plan: &ShutdownPlan, slot_rx: &mut mpsc::UnboundedReceiver<SlotEvent>) {
        self.procs.close();
        let dropped = self.sched.clear_queued();
        if !dropped.is_empty() {
            tracing::info!(
                dropped = dropped.len(),
                "queued mentions not answered at shutdown"
            );
        }
        for job in dropped {
            if let Some(p) = self.pending.remove(&job.turn_id) {
                self.error_reply(&p, STOPPED_TEXT);
            }
        }
        let quiet = STALLED_AFTER.min(plan.drain_until.saturating_duration_since(plan.start));
        let running: Vec<usize> = self.sched.running().map(|(_, slot)| slot).collect();
        for slot in running {
            if let Some(tx) = &self.slots[slot].tx {
                let _ = tx.send(SlotCmd::Drain { quiet });
            }
        }
        self.drain(plan.drain_until, slot_rx).await;
        let plan = &plan.drained_at(Instant::now());
        let left: Vec<usize> = self
            .sched
            .running()
            .map(|(_, slot)| slot)
            .filter(|s| !self.stalled.contains(s))
            .collect();
        if !left.is_empty() {
            tracing::warn!(
                turns = left.len(),
                "drain point reached; cancelling the turns still in flight"
            );
        }
        for slot in left {
            if let Some(tx) = &self.slots[slot].tx {
                let _ = tx.send(SlotCmd::Cancel);
            }
        }
        // Agents that honour session/cancel end their turns here (the stalled
        // ones too: theirs went out when they stalled); then SIGTERM.
        self.stalled.clear();
        self.drain(plan.cancel_until, slot_rx).await;
        for s in &self.slots {
            if let Some(tx) = &s.tx {
                let _ = tx.send(SlotCmd::Shutdown);
            }
        }
        for (_, h) in self.typing.drain() {
            h.abort();
        }
        let left = self.procs.reap_all(plan.kill_at, plan.children_until).await;
        if left > 0 {
            tracing::error!(
                left,
                "agent process groups still alive at the child-cleanup deadline"
            );
        }
    }
}

impl Harness {
    /// Lets running turns finish (their replies are published) until
    /// `until`, or until every running turn is one that stalled.
    async fn drain(&mut self, until: Instant, slot_rx: &mut mpsc::UnboundedReceiver<SlotEvent>) {
        while self.sched.running().any(|(_, s)| !self.stalled.contains(&s)) {
            match tokio::time::timeout_at(until.into(), slot_rx.recv()).await {
                Ok(Some(ev)) => {
                    let _ = self.on_slot(ev);
                }
                _ => break,
            }
        }
    }

    /// The graceful stop (spec §Stop): one plan, one shared deadline.
    /// Children first (drain, cancel, reap), then the finalization slice.
    async fn shutdown(
        mut self,
        stop: Stop,
        mut slot_rx: mpsc::UnboundedReceiver<SlotEvent>,
        relay_task: tokio::task::JoinHandle<()>,
    ) {
        let plan = ShutdownPlan::new(
            Instant::now(),
            self.cfg.shutdown_budget,
            self.cfg.shutdown_drain,
            self.cfg.kill_grace,
        );
        tracing::info!(
            ?stop,
            budget_secs = self.cfg.shutdown_budget.as_secs(),
            "graceful stop"
        );
        crate::notify::stopping();
        // As the container's PID 1, the stop also reaches the sidecars
        // (pid1.rs), concurrently with the agents' drain and inside the same
        // child span, so the finalization slice stays whole.
        let pid1 = pid1::is_pid1();
        let others = pid1.then(|| {
            tokio::spawn(pid1::stop_others(
                self.procs.clone(),
                plan.kill_at,
                plan.children_until,
            ))
        });
        self.stop_children(&plan, &mut slot_rx).await;
        if let Some(task) = others {
            let _ = task.await;
        }
        if pid1 {
            procs::reap_orphans(&self.procs);
        }
        self.state_change(buzz_contract::awake::AwakeState::after(stop.reason()));
        self.finalize(&plan, stop.reason()).await;
        relay_task.abort();
        tracing::info!(
            elapsed_ms = plan.start.elapsed().as_millis() as u64,
            "shutdown complete"
        );
    }

    /// The reserved finalization slice: presence `offline`, relay close.
    async fn finalize(&self, plan: &ShutdownPlan, reason: Option<StopReason>) {
        let (done_tx, done_rx) = oneshot::channel();
        let now = Instant::now();
        let _ = self.relay_tx.send(RelayCmd::Stop {
            reason,
            offline_bound: plan.offline_bound(now),
            close_bound: plan.close_bound(now),
            done: done_tx,
        });
        if tokio::time::timeout_at(plan.deadline.into(), done_rx)
            .await
            .is_err()
        {
            tracing::error!("finalization did not finish inside the budget");
        }
    }
}

/// Runs the harness until it stops; returns the exit reason.
/// Runs the harness until it stops. `probe`: the endpoint's listener, bound
/// by the entry point once the startup checks passed ([`crate::probe`]); its
/// readiness follows the relay session's `Live` and `Down`.
pub async fn run(cfg: Config, probe: Option<std::net::TcpListener>) -> Exit {
    let probe = crate::probe::Probe::serve(probe);
    let keys = cfg.identity.keys.clone();
    let (Ok(agent), Ok(owner)) = (
        PublicKey::from_hex(&cfg.identity.pubkey),
        PublicKey::from_hex(&cfg.identity.owner),
    ) else {
        return Exit::Internal;
    };
    let mut sigterm = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return Exit::Internal,
    };
    let mut sigint = match signal(SignalKind::interrupt()) {
        Ok(s) => s,
        Err(_) => return Exit::Internal,
    };
    let mut sigchld = signal(SignalKind::child()).ok();
    let pid1 = pid1::is_pid1();
    // One instant for the subscription's `since` floor and the gate's
    // run-start floor (review b30b1a0 #3): this run's start, or for a woken
    // run the waker's look (issue 33: what was sent while it was started).
    let start = nostr_sdk::prelude::Timestamp::from_secs(buzz_contract::wake::run_floor(
        nostr_sdk::prelude::Timestamp::now().as_secs(),
        cfg.wake.as_ref().map(|w| w.since),
    ));

    let (relay_tx, mut relay_rx, relay_task) = relay::spawn(RelaySettings {
        url: cfg.relay_url.clone(),
        keys: keys.clone(),
        start,
        auth_tag: cfg.identity.auth_tag.clone(),
        agent,
        owner,
        channels: cfg.channels.clone(),
        presence: cfg.presence,
        run: cfg.run_nonce.clone(),
        presence_interval: cfg.presence_interval,
        reconnect_base: cfg.reconnect_base,
        lost_after: cfg.relay_lost_after,
        live_timeout: cfg.subscribe_timeout,
    });
    let (slot_tx, mut slot_rx) = mpsc::unbounded_channel();
    let policy = Policy {
        agent: cfg.identity.pubkey.clone(),
        owner: cfg.identity.owner.clone(),
        respond_to: cfg.respond_to,
        allowlist: cfg.allowlist.clone(),
        channels: cfg.channels.clone(),
        run_start: start.as_secs(),
    };
    crate::agent_spec::prepare_cwd(&cfg);
    let history_until = Arc::new(std::sync::atomic::AtomicU64::new(start.as_secs()));
    let mut spec = agent_spec(&cfg, system_prompt(&cfg));
    // A known conversation that cannot be brought back asks the relay for
    // its history, under the gate this run decides mentions by (issue 32).
    if let Some(m) = &mut spec.memory {
        m.history = Some(acp::HistorySource {
            relay: relay_tx.clone(),
            policy: policy.clone(),
            woke: cfg.wake.as_ref().map(|w| w.events.clone()).unwrap_or_default(),
            until: history_until.clone(),
        });
    }
    if cfg.relay_observer {
        spec.observer = Some(crate::observer::spawn(
            scrub_of(&cfg),
            keys.clone(),
            (owner, agent),
            relay_tx.clone(),
        ));
    }
    let spec = Arc::new(spec);
    let n = cfg.agents;
    let mut h = Harness {
        keys,
        policy,
        spec,
        procs: ProcessTable::default(),
        slots: (0..n)
            .map(|_| Slot {
                state: SlotState::Unspawned,
                tx: None,
            })
            .collect(),
        sched: Scheduler::default(),
        pending: HashMap::new(),
        typing: HashMap::new(),
        next_turn: 0,
        slot_tx,
        relay_tx,
        last_activity: Instant::now(),
        scrub: scrub_of(&cfg),
        error_replies: HashMap::new(),
        asks: Asks::default(),
        stalled: HashSet::new(),
        woken: HashSet::new(),
        ledger: crate::metrics::Ledger::default(),
        owner,
        dozing: false,
        history_until,
        changes: 0,
        cfg,
    };
    h.state_change(buzz_contract::awake::AwakeState::Awake);
    // Woken by a launcher's waker: once live, fetch the mentions it named.
    let (wake_tx, mut wake_rx) = mpsc::unbounded_channel::<Vec<Event>>();
    let mut wake_asked = h.cfg.wake.is_none();
    let (mut wake_tries, mut wake_got) = (0u32, Vec::<Event>::new());
    // Until they are answered, what arrives meanwhile waits behind them, so
    // one channel's mentions are answered oldest first.
    let mut held: Option<Vec<Event>> = h
        .cfg
        .wake
        .as_ref()
        .filter(|w| !w.events.is_empty())
        .map(|_| Vec::new());
    if !h.cfg.lazy_pool {
        for i in 0..n {
            h.spawn_slot(i);
        }
    }
    // The reaper has its own timer, independent of pool readiness (spec §Auto-Stop).
    let mut reaper = tokio::time::interval(h.cfg.reaper_check);
    reaper.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut orphan_sweep = tokio::time::interval(Duration::from_secs(5));

    let stop = loop {
        tokio::select! {
            _ = sigterm.recv() => { tracing::info!("SIGTERM received"); break Stop::Signal; }
            _ = sigint.recv() => { tracing::info!("SIGINT received"); break Stop::Signal; }
            ev = relay_rx.recv() => match ev {
                Some(RelayEvent::Inbound(e)) => match held.as_mut() {
                    Some(q) if q.len() < HELD_CAP => q.push(*e),
                    _ => if let Some(s) = h.on_inbound(&e) { break s; },
                },
                Some(RelayEvent::Live) => {
                    tracing::info!("relay live");
                    probe.set_live(true);
                    if !std::mem::replace(&mut wake_asked, true) {
                        wake_tries += 1;
                        h.ask_woken(wake_tx.clone(), Duration::ZERO);
                    }
                }
                Some(RelayEvent::Down) => {
                    tracing::warn!("relay down; reconnecting");
                    probe.set_live(false);
                }
                Some(RelayEvent::Fatal(code)) => break Stop::Fail(code),
                None => break Stop::Fail(Exit::RelayLost),
            },
            Some(ev) = slot_rx.recv() => if let Some(s) = h.on_slot(ev) { break s; },
            Some(events) = wake_rx.recv() => {
                wake_got.extend(events);
                let named = h.cfg.wake.as_ref().map_or(0, |w| w.events.len());
                let found = h.cfg.wake.as_ref().map_or(0, |w| {
                    w.events.iter().filter(|id| wake_got.iter().any(|e| e.id.to_hex() == **id)).count()
                });
                if found < named {
                    if wake_tries < WAKE_FETCH_TRIES {
                        tracing::warn!(named, found, "not every mention that woke this run came; asking the relay again");
                        wake_tries += 1;
                        h.ask_woken(wake_tx.clone(), WAKE_RETRY_AFTER);
                        continue;
                    }
                    tracing::warn!(
                        named,
                        found,
                        "the relay did not hand over every mention that woke this run; those are not answered"
                    );
                }
                h.on_woken(&std::mem::take(&mut wake_got));
                // What came meanwhile, oldest first (a relay sends stored events newest first).
                let mut meanwhile = held.take().unwrap_or_default();
                meanwhile.sort_by_key(|e| e.created_at);
                if let Some(s) = meanwhile.into_iter().find_map(|e| h.on_inbound(&e)) { break s; }
            }
            _ = reaper.tick() => {
                if let Some(bound) = h.cfg.exit_after_inactivity
                    && inactivity_expired(bound, h.last_activity, h.sched.running().next().is_some(), Instant::now())
                {
                    tracing::info!(bound_secs = bound.as_secs(), "inactivity bound reached; stopping");
                    break Stop::Reaper;
                }
                if let Some(bound) = h.cfg.doze
                    && !h.dozing
                    && doze_due(bound, h.last_activity, h.busy(), Instant::now())
                {
                    h.doze();
                }
            }
            _ = async { match sigchld.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending::<()>().await } }, if pid1 => {
                procs::reap_orphans(&h.procs);
            }
            _ = orphan_sweep.tick(), if pid1 => { procs::reap_orphans(&h.procs); }
        }
    };
    probe.set_live(false);
    let exit = match stop {
        Stop::Owner | Stop::Signal | Stop::Reaper => Exit::Intentional,
        Stop::Fail(e) => e,
    };
    h.shutdown(stop, slot_rx, relay_task).await;
    match stop.reason() {
        Some(r) => tracing::info!(code = exit.code(), stop = r.as_str(), "harness exiting"),
        None => tracing::info!(code = exit.code(), "harness exiting"),
    }
    exit
}
