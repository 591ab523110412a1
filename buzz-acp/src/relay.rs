//! The relay connection (wire-facts §2, §3; spec I3): one nostr-sdk client
//! per connection attempt with automatic authentication off, so that the
//! kind 22242 answer carries the NIP-OA `auth` tag. Handles relays that
//! challenge on open, relays that challenge only on the first REQ/EVENT
//! (`auth-required:` then resend) and relays that never challenge.
//!
//! Reconnects back off 1, 2, 4, 8, 16 s ±20 %; after a reconnect it
//! re-authenticates, re-subscribes with `since` = the newest *accepted*
//! event − 5 s (clamped to now, so a stranger's future-dated event can never
//! hide later ones), never below the run's own start (review b30b1a0 #3: a
//! lower `since` replays the previous run's stored `!shutdown`), drops
//! duplicate event ids and re-announces presence.
//! With a channel scope, a second filter takes the owner's mentions from any
//! channel, so owner control is never scoped. A socket whose subscription
//! does not go live within a deadline is dropped and reconnected.
//! Presence `online` goes out only once the subscription is live (EOSE), then
//! every interval; while the harness dozes it is `away` instead
//! ([`RelayCmd::Presence`], issue 50). A stop publishes `offline` bounded by 2 s and closes
//! bounded by 5 s; a stop that finds no live session makes one bounded
//! attempt to publish `offline` on a fresh connection.
//!
//! This file is the task (connect, back off, idle commands, the stops);
//! `relay/session.rs` is one connected session, `relay/rules.rs` the pure
//! rules (AUTH answers, `since`, resending).

use crate::backoff::reconnect_delay;
use crate::events;
use crate::exit::Exit;
use crate::inbound::SeenIds;

mod rules;
mod session;

use buzz_contract::nip_oa::AuthTag;
use buzz_contract::presence::{KIND_CHANNEL_MESSAGE, OFFLINE};
use nostr_sdk::prelude::*;
pub use rules::{AuthOutcome, classify_auth_ok, requeue_unacknowledged, resubscribe_since};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Connect timeout of one attempt.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Overlap when re-subscribing (wire-facts §2).
pub const RESUBSCRIBE_OVERLAP: u64 = 5;
/// Pending outbound events kept while disconnected.
pub const OUTBOX_CAP: usize = 1000;
/// Remembered event ids for de-duplication.
pub const SEEN_CAP: usize = 10_000;
const SUB_ID: &str = "buzz-acp";

/// Commands to the relay task.
#[derive(Debug)]
pub enum RelayCmd {
    /// Publish (queued while disconnected).
    Publish(Box<Event>),
    /// Publish an ephemeral observer frame while live; dropped otherwise,
    /// so it never queues ahead of, or pushes out, an answer (issue 34).
    Mirror(Box<Event>),
    /// The inbound gate accepted an event created at this time (it moves
    /// the re-subscription `since`).
    Accepted(Timestamp),
    /// The channel's kind 9 events that mention the agent or are the
    /// agent's own, created in `[since, until]`, at most `limit` of each
    /// (issue 32: a new session's history). Answered with what the relay
    /// sent before its EOSE, signatures verified; with nothing when no
    /// session is live.
    History {
        channel: String,
        since: u64,
        until: u64,
        limit: usize,
        /// The mentions' authors (hex), `None` for any
        /// ([`crate::history::authors`]); the agent's own messages come whoever it answered.
        authors: Option<Vec<String>>,
        reply: oneshot::Sender<Vec<Event>>,
    },
    /// The mentions a waker named (issue 33): the events with these ids,
    /// and the owner's messages to the agent since `since` (where a later
    /// `!shutdown` would be), answered like [`RelayCmd::History`].
    Wake {
        ids: Vec<String>,
        since: u64,
        reply: oneshot::Sender<Vec<Event>>,
    },
    /// What presence says while live (issue 50): `online`, or `away` while
    /// the harness dozes (with when its inactivity bound will end it, unix
    /// seconds); published at once when live, then every interval.
    Presence {
        state: buzz_contract::presence::PresenceState,
        sleeps_at: Option<u64>,
    },
    /// Publish `offline` (bounded), tagged with why the harness stops
    /// (issue 33), close (bounded), then acknowledge.
    Stop {
        reason: Option<buzz_contract::wake::StopReason>,
        offline_bound: Duration,
        close_bound: Duration,
        done: oneshot::Sender<()>,
    },
}

/// What the relay task reports.
#[derive(Debug)]
pub enum RelayEvent {
    /// A new (de-duplicated, signature-verified) event from our subscription.
    Inbound(Box<Event>),
    /// The subscription is live; presence was announced.
    Live,
    /// The connection dropped; reconnecting.
    Down,
    /// Terminal: exit with this reason.
    Fatal(Exit),
}

/// Relay task settings.
#[derive(Clone)]
pub struct RelaySettings {
    pub url: RelayUrl,
    pub keys: Keys,
    /// This run's start: the floor of every subscription's `since` (the
    /// inbound gate drops anything older with the same instant).
    pub start: Timestamp,
    pub auth_tag: Option<AuthTag>,
    pub agent: PublicKey,
    /// The resolved owner: its mentions are subscribed from every channel.
    pub owner: PublicKey,
    pub channels: Vec<String>,
    pub presence: bool,
    pub run: String,
    pub presence_interval: Duration,
    pub reconnect_base: Duration,
    pub lost_after: Option<Duration>,
    /// How long a connected socket may take to get its subscription live.
    pub live_timeout: Duration,
}

/// A stop request's bounds and acknowledgement.
struct StopReq {
    offline_bound: Duration,
    close_bound: Duration,
    done: oneshot::Sender<()>,
}

enum SessionEnd {
    Disconnected,
    Stopped,
    /// Stop requested before the subscription went live.
    StopNotLive(StopReq),
    Fatal(Exit),
}

/// What a command did while no session is live.
enum Idle {
    Continue,
    Stop(StopReq),
    Closed,
}

struct Task {
    s: RelaySettings,
    cmds: mpsc::UnboundedReceiver<RelayCmd>,
    out: mpsc::UnboundedSender<RelayEvent>,
    last_accepted: Option<Timestamp>,
    seq: u64,
    seen: SeenIds,
    outbox: VecDeque<Event>,
    /// The live presence: `online`, or `away` while dozing.
    state: &'static str,
    /// When a dozing harness's inactivity bound ends it (unix seconds).
    sleeps_at: Option<u64>,
}

/// Spawns the relay task.
pub fn spawn(
    s: RelaySettings,
) -> (
    mpsc::UnboundedSender<RelayCmd>,
    mpsc::UnboundedReceiver<RelayEvent>,
    tokio::task::JoinHandle<()>,
) {
    let (cmd_tx, cmds) = mpsc::unbounded_channel();
    let (out, out_rx) = mpsc::unbounded_channel();
    let task = Task {
        s,
        cmds,
        out,
        last_accepted: None,
        seq: 0,
        seen: SeenIds::new(SEEN_CAP),
        outbox: VecDeque::new(),
        state: buzz_contract::presence::ONLINE,
        sleeps_at: None,
    };
    let handle = tokio::spawn(task.run());
    (cmd_tx, out_rx, handle)
}

fn jitter() -> f64 {
    use ::rand::Rng;
    ::rand::rng().random_range(-1.0..=1.0)
}

impl Task {
    async fn run(mut self) {
        let mut attempt: u32 = 0;
        let mut down_since = Instant::now();
        loop {
            let client = Client::builder()
                .opts(ClientOptions::new().automatic_authentication(false))
                .build();
            let added = client
                .pool()
                .add_relay(self.s.url.clone(), RelayOptions::new().reconnect(false))
                .await;
            let end = match (added, client.relay(self.s.url.clone()).await) {
                (Ok(_), Ok(relay)) => {
                    let notes = relay.notifications();
                    // A stop must not wait for a slow connect: keep serving commands.
                    let connect = relay.try_connect(CONNECT_TIMEOUT);
                    tokio::pin!(connect);
                    let connected = loop {
                        tokio::select! {
                            r = &mut connect => break r,
                            cmd = self.cmds.recv() => match self.idle_cmd(cmd) {
                                Idle::Continue => {}
                                Idle::Stop(req) => {
                                    client.shutdown().await;
                                    return self.stop_without_session(req).await;
                                }
                                Idle::Closed => return,
                            },
                        }
                    };
                    match connected {
                        Ok(()) => {
                            tracing::info!(relay = %self.s.url, "relay connected");
                            self.session(&client, &relay, notes, &mut attempt, &mut down_since)
                                .await
                        }
                        Err(e) => {
                            tracing::warn!(relay = %self.s.url, error = %e, "relay connect failed");
                            SessionEnd::Disconnected
                        }
                    }
                }
                _ => SessionEnd::Disconnected,
            };
            client.shutdown().await;
            match end {
                SessionEnd::Stopped => return,
                SessionEnd::StopNotLive(req) => return self.stop_without_session(req).await,
                SessionEnd::Fatal(e) => {
                    let _ = self.out.send(RelayEvent::Fatal(e));
                    return self.drain_until_stop().await;
                }
                SessionEnd::Disconnected => {
                    let _ = self.out.send(RelayEvent::Down);
                }
            }
            if let Some(bound) = self.s.lost_after
                && down_since.elapsed() >= bound
            {
                tracing::error!("relay unreachable past the configured bound");
                let _ = self.out.send(RelayEvent::Fatal(Exit::RelayLost));
                return self.drain_until_stop().await;
            }
            let delay = reconnect_delay(self.s.reconnect_base, attempt, jitter());
            attempt = attempt.saturating_add(1);
            tracing::info!(delay_ms = delay.as_millis() as u64, "relay reconnect scheduled");
            let wake = tokio::time::sleep(delay);
            tokio::pin!(wake);
            loop {
                tokio::select! {
                    () = &mut wake => break,
                    cmd = self.cmds.recv() => match self.idle_cmd(cmd) {
                        Idle::Continue => {}
                        Idle::Stop(req) => return self.stop_without_session(req).await,
                        Idle::Closed => return,
                    },
                }
            }
        }
    }

    /// Handles a command while no session is live.
    fn idle_cmd(&mut self, cmd: Option<RelayCmd>) -> Idle {
        match cmd {
            Some(RelayCmd::Publish(e)) => {
                self.queue(*e);
                Idle::Continue
            }
            Some(RelayCmd::Mirror(_)) => Idle::Continue,
            Some(RelayCmd::Presence { state, sleeps_at }) => {
                (self.state, self.sleeps_at) = (state.as_str(), sleeps_at);
                Idle::Continue
            }
            Some(RelayCmd::Accepted(t)) => {
                self.accepted(t);
                Idle::Continue
            }
            // Not live: nothing to ask; the sender gets none.
            Some(RelayCmd::History { reply, .. } | RelayCmd::Wake { reply, .. }) => {
                let _ = reply.send(Vec::new());
                Idle::Continue
            }
            Some(RelayCmd::Stop {
                offline_bound,
                close_bound,
                done,
                ..
            }) => Idle::Stop(StopReq {
                offline_bound,
                close_bound,
                done,
            }),
            None => Idle::Closed,
        }
    }

    fn accepted(&mut self, t: Timestamp) {
        self.last_accepted = Some(self.last_accepted.map_or(t, |l| l.max(t)));
    }

    /// A stop with no live session: one bounded attempt, on a fresh
    /// connection, to publish `offline`, then acknowledge.
    async fn stop_without_session(mut self, req: StopReq) {
        if self.s.presence {
            let bound = req.offline_bound.saturating_add(req.close_bound);
            let e = self.presence_event(OFFLINE);
            let sent = tokio::time::timeout(bound, self.offline_attempt(e)).await;
            tracing::info!(
                acknowledged = matches!(sent, Ok(true)),
                "presence offline published on a final connection attempt"
            );
        }
        let _ = req.done.send(());
    }

    /// Connects, answers a challenge if one comes, publishes `offline` (again
    /// after authenticating, if it was refused) and waits for its `OK`.
    async fn offline_attempt(&self, offline: Event) -> bool {
        let client = Client::builder()
            .opts(ClientOptions::new().automatic_authentication(false))
            .build();
        let ok = async {
            client
                .pool()
                .add_relay(self.s.url.clone(), RelayOptions::new().reconnect(false))
                .await
                .ok()?;
            let relay = client.relay(self.s.url.clone()).await.ok()?;
            let mut notes = relay.notifications();
            relay.try_connect(CONNECT_TIMEOUT).await.ok()?;
            relay.send_msg(ClientMessage::event(offline.clone())).ok()?;
            let mut auth_id = None;
            loop {
                let RelayNotification::Message { message } = notes.recv().await.ok()? else {
                    continue;
                };
                match message {
                    RelayMessage::Auth { challenge } => {
                        let ev =
                            events::auth(&self.s.keys, &self.s.url, &challenge, self.s.auth_tag.as_ref());
                        auth_id = Some(ev.id);
                        relay.send_msg(ClientMessage::auth(ev)).ok()?;
                    }
                    RelayMessage::Ok { event_id, status, .. } if Some(event_id) == auth_id => {
                        if !status {
                            return None;
                        }
                        relay.send_msg(ClientMessage::event(offline.clone())).ok()?;
                    }
                    RelayMessage::Ok {
                        event_id,
                        status,
                        message,
                    } if event_id == offline.id => {
                        if status {
                            return Some(());
                        }
                        if !message.starts_with("auth-required:") {
                            return None;
                        }
                    }
                    _ => {}
                }
            }
        }
        .await
        .is_some();
        client.shutdown().await;
        ok
    }

    /// After a fatal end: acknowledge a stop without a connection.
    async fn drain_until_stop(mut self) {
        while let Some(cmd) = self.cmds.recv().await {
            if let RelayCmd::Stop { done, .. } = cmd {
                let _ = done.send(());
                return;
            }
        }
    }

    fn queue(&mut self, e: Event) {
        if self.outbox.len() >= OUTBOX_CAP {
            self.outbox.pop_front();
            tracing::warn!("relay outbox full; dropped the oldest pending event");
        }
        self.outbox.push_back(e);
    }

    /// The filters of a history request (see [`RelayCmd::History`]).
    fn history_filters(
        &self,
        channel: &str,
        (since, until): (u64, u64),
        limit: usize,
        authors: Option<&[String]>,
    ) -> Vec<Filter> {
        let base = Filter::new()
            .kind(Kind::from(KIND_CHANNEL_MESSAGE))
            .custom_tag(SingleLetterTag::lowercase(Alphabet::H), channel.to_string())
            .since(Timestamp::from_secs(since))
            .until(Timestamp::from_secs(until))
            .limit(limit);
        let mut mentions = base.clone().pubkey(self.s.agent);
        if let Some(a) = authors {
            mentions = mentions.authors(a.iter().filter_map(|h| PublicKey::from_hex(h).ok()));
        }
        vec![mentions, base.author(self.s.agent)]
    }

    fn wake_filters(&self, ids: &[String], since: u64) -> Vec<Filter> {
        let ids = ids.iter().filter_map(|i| EventId::from_hex(i).ok());
        vec![
            Filter::new().ids(ids),
            Filter::new()
                .kind(Kind::from(KIND_CHANNEL_MESSAGE))
                .author(self.s.owner)
                .pubkey(self.s.agent)
                .since(Timestamp::from_secs(since)),
        ]
    }

    fn filters(&self) -> Vec<Filter> {
        let since = resubscribe_since(self.s.start, self.last_accepted, Timestamp::now());
        let base = Filter::new()
            .kind(Kind::from(KIND_CHANNEL_MESSAGE))
            .pubkey(self.s.agent)
            .since(since);
        if self.s.channels.is_empty() {
            vec![base]
        } else {
            // The owner's control reaches the harness from any channel (or none).
            let mut f = vec![base.clone().author(self.s.owner)];
            f.extend(self.s.channels.iter().map(|c| {
                base.clone()
                    .custom_tag(SingleLetterTag::lowercase(Alphabet::H), c.clone())
            }));
            f
        }
    }

    fn presence_event(&mut self, state: &'static str) -> Event {
        self.presence_event_stopping(state, None)
    }

    /// A presence event; the last one, `offline`, says why (`stop`).
    fn presence_event_stopping(
        &mut self,
        state: &'static str,
        reason: Option<buzz_contract::wake::StopReason>,
    ) -> Event {
        // Only a dozing harness's `away` says when it will sleep.
        let sleeps_at = (state == buzz_contract::presence::AWAY)
            .then_some(self.sleeps_at)
            .flatten();
        let e = events::presence(&self.s.keys, state, &self.s.run, self.seq, reason, sleeps_at);
        tracing::debug!(state, seq = self.seq, "presence published");
        self.seq += 1;
        e
    }
}
