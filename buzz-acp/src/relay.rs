//! The relay connection (wire-facts §2, §3; spec I3): one nostr-sdk client
//! per connection attempt with automatic authentication off, so that the
//! kind 22242 answer carries the NIP-OA `auth` tag. Handles relays that
//! challenge on open, relays that challenge only on the first REQ/EVENT
//! (`auth-required:` then resend) and relays that never challenge.
//!
//! Reconnects back off 1, 2, 4, 8, 16 s ±20 %; after a reconnect it
//! re-authenticates, re-subscribes with `since` = the newest *accepted*
//! event − 5 s (clamped to now, so a stranger's future-dated event can never
//! hide later ones), drops duplicate event ids and re-announces presence.
//! With a channel scope, a second filter takes the owner's mentions from any
//! channel, so owner control is never scoped. A socket whose subscription
//! does not go live within a deadline is dropped and reconnected.
//! Presence `online` goes out only once the subscription is live (EOSE), then
//! every interval. A stop publishes `offline` bounded by 2 s and closes
//! bounded by 5 s; a stop that finds no live session makes one bounded
//! attempt to publish `offline` on a fresh connection.

use crate::backoff::reconnect_delay;
use crate::events;
use crate::exit::Exit;
use crate::inbound::SeenIds;
use buzz_contract::nip_oa::AuthTag;
use buzz_contract::presence::{KIND_CHANNEL_MESSAGE, KIND_PRESENCE, OFFLINE, ONLINE};
use nostr_sdk::prelude::*;
use std::collections::{HashMap, VecDeque};
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

/// How a relay answered our AUTH (wire-facts §2 "OK-false prefixes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthOutcome {
    Accepted,
    /// `auth-required:`, `restricted:`, `blocked:`: exit with [`Exit::AuthDenied`].
    Terminal,
    /// Anything else (`error:` …): reconnect.
    Transient,
}

/// Classifies the OK answer to our kind 22242 event.
pub fn classify_auth_ok(status: bool, message: &str) -> AuthOutcome {
    if status {
        return AuthOutcome::Accepted;
    }
    let m = message.trim_start();
    if ["auth-required:", "restricted:", "blocked:"]
        .iter()
        .any(|p| m.starts_with(p))
    {
        AuthOutcome::Terminal
    } else {
        AuthOutcome::Transient
    }
}

/// The `since` of a (re-)subscription: the newest accepted event's
/// `created_at`, clamped to `now`, minus the 5 s overlap; the start time when
/// nothing was accepted yet. Only events the inbound gate accepted count:
/// anyone can post a future-dated event, and a `since` past it would hide
/// every later event, the owner's `!shutdown` included.
pub fn resubscribe_since(start: Timestamp, last_accepted: Option<Timestamp>, now: Timestamp) -> Timestamp {
    match last_accepted {
        Some(t) => Timestamp::from(t.min(now).as_secs().saturating_sub(RESUBSCRIBE_OVERLAP)),
        None => start,
    }
}

/// Puts events that were sent but never acknowledged back in front of the
/// outbox, oldest first, skipping presence (a stale presence must not be
/// resent), keeping at most `cap` events (the oldest are dropped first).
/// Returns how many were requeued.
pub fn requeue_unacknowledged(outbox: &mut VecDeque<Event>, mut unacked: Vec<Event>, cap: usize) -> usize {
    unacked.retain(|e| e.kind != Kind::from(KIND_PRESENCE) && !outbox.iter().any(|o| o.id == e.id));
    unacked.sort_by_key(|e| e.created_at);
    let n = unacked.len();
    for e in unacked.into_iter().rev() {
        outbox.push_front(e);
    }
    while outbox.len() > cap {
        outbox.pop_front();
    }
    n
}

/// Commands to the relay task.
#[derive(Debug)]
pub enum RelayCmd {
    /// Publish (queued while disconnected).
    Publish(Box<Event>),
    /// The inbound gate accepted an event created at this time (it moves
    /// the re-subscription `since`).
    Accepted(Timestamp),
    /// Publish `offline` (bounded), close (bounded), then acknowledge.
    Stop {
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
    start: Timestamp,
    last_accepted: Option<Timestamp>,
    seq: u64,
    seen: SeenIds,
    outbox: VecDeque<Event>,
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
        start: Timestamp::now(),
        last_accepted: None,
        seq: 0,
        seen: SeenIds::new(SEEN_CAP),
        outbox: VecDeque::new(),
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
            Some(RelayCmd::Accepted(t)) => {
                self.accepted(t);
                Idle::Continue
            }
            Some(RelayCmd::Stop {
                offline_bound,
                close_bound,
                done,
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

    fn filters(&self) -> Vec<Filter> {
        let since = resubscribe_since(self.start, self.last_accepted, Timestamp::now());
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

    fn presence_event(&mut self, state: &str) -> Event {
        let e = events::presence(&self.s.keys, state, &self.s.run, self.seq);
        tracing::debug!(state, seq = self.seq, "presence published");
        self.seq += 1;
        e
    }

    /// One connected session. Events sent but not acknowledged when it ends
    /// go back to the front of the outbox and are resent on the next live
    /// session (relays de-duplicate by id); presence is not resent stale.
    async fn session(
        &mut self,
        client: &Client,
        relay: &Relay,
        notes: tokio::sync::broadcast::Receiver<RelayNotification>,
        attempt: &mut u32,
        down_since: &mut Instant,
    ) -> SessionEnd {
        let mut pending: HashMap<EventId, (Event, bool)> = HashMap::new();
        let end = self
            .session_inner(client, relay, notes, attempt, down_since, &mut pending)
            .await;
        if matches!(end, SessionEnd::Disconnected) {
            let unacked: Vec<Event> = pending.into_values().map(|(e, _)| e).collect();
            let n = requeue_unacknowledged(&mut self.outbox, unacked, OUTBOX_CAP);
            if n > 0 {
                tracing::info!(events = n, "unacknowledged events kept for resending");
            }
        }
        end
    }

    async fn session_inner(
        &mut self,
        client: &Client,
        relay: &Relay,
        mut notes: tokio::sync::broadcast::Receiver<RelayNotification>,
        attempt: &mut u32,
        down_since: &mut Instant,
        pending: &mut HashMap<EventId, (Event, bool)>,
    ) -> SessionEnd {
        let sub = SubscriptionId::new(SUB_ID);
        // `pending`: sent, not yet acknowledged events; `true` = refused with
        // auth-required, resend after AUTH.
        let mut auth_id: Option<EventId> = None;
        let mut resub_after_auth = false;
        let mut live = false;
        if relay
            .send_msg(ClientMessage::req(sub.clone(), self.filters()))
            .is_err()
        {
            return SessionEnd::Disconnected;
        }
        let mut tick = tokio::time::interval(self.s.presence_interval);
        tick.reset();
        let live_deadline = tokio::time::sleep(self.s.live_timeout);
        tokio::pin!(live_deadline);
        loop {
            tokio::select! {
                note = notes.recv() => {
                    let note = match note {
                        Ok(n) => n,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                            tracing::warn!(skipped = n, "relay notifications lagged");
                            continue;
                        }
                        Err(_) => return SessionEnd::Disconnected,
                    };
                    match note {
                        RelayNotification::Message { message } => match message {
                            RelayMessage::Auth { challenge } => {
                                let ev = events::auth(&self.s.keys, &self.s.url, &challenge, self.s.auth_tag.as_ref());
                                auth_id = Some(ev.id);
                                tracing::info!("answering NIP-42 challenge");
                                if relay.send_msg(ClientMessage::auth(ev)).is_err() {
                                    return SessionEnd::Disconnected;
                                }
                            }
                            RelayMessage::Ok { event_id, status, message } => {
                                if Some(event_id) == auth_id {
                                    match classify_auth_ok(status, &message) {
                                        AuthOutcome::Accepted => {
                                            tracing::info!("authenticated to relay");
                                            // Re-send the REQ if it was refused, or if the relay may
                                            // have ignored it before authentication (not live yet).
                                            if (std::mem::take(&mut resub_after_auth) || !live)
                                                && relay.send_msg(ClientMessage::req(sub.clone(), self.filters())).is_err()
                                            {
                                                return SessionEnd::Disconnected;
                                            }
                                            for (e, refused) in pending.values_mut() {
                                                if *refused {
                                                    *refused = false;
                                                    let _ = relay.send_msg(ClientMessage::event(e.clone()));
                                                }
                                            }
                                        }
                                        AuthOutcome::Terminal => {
                                            tracing::error!(reason = %message, "relay denied authentication");
                                            return SessionEnd::Fatal(Exit::AuthDenied);
                                        }
                                        AuthOutcome::Transient => {
                                            tracing::warn!(reason = %message, "relay authentication failed transiently");
                                            return SessionEnd::Disconnected;
                                        }
                                    }
                                } else if let Some((_, refused)) = pending.get_mut(&event_id) {
                                    if status {
                                        pending.remove(&event_id);
                                    } else if message.starts_with("auth-required:") {
                                        *refused = true;
                                    } else {
                                        tracing::warn!(reason = %message, "relay refused an event");
                                        pending.remove(&event_id);
                                    }
                                }
                            }
                            RelayMessage::Closed { subscription_id, message } if *subscription_id == sub => {
                                if message.starts_with("auth-required:") {
                                    resub_after_auth = true;
                                } else {
                                    tracing::warn!(reason = %message, "relay closed the subscription");
                                    return SessionEnd::Disconnected;
                                }
                            }
                            RelayMessage::EndOfStoredEvents(id) if *id == sub && !live => {
                                live = true;
                                *attempt = 0;
                                *down_since = Instant::now();
                                tracing::info!("subscription live");
                                if self.s.presence {
                                    let e = self.presence_event(ONLINE);
                                    pending.insert(e.id, (e.clone(), false));
                                    let _ = relay.send_msg(ClientMessage::event(e));
                                    tick.reset();
                                }
                                while let Some(e) = self.outbox.pop_front() {
                                    pending.insert(e.id, (e.clone(), false));
                                    let _ = relay.send_msg(ClientMessage::event(e));
                                }
                                let _ = self.out.send(RelayEvent::Live);
                            }
                            RelayMessage::Event { subscription_id, event } if *subscription_id == sub => {
                                let event = event.into_owned();
                                if self.seen.insert(&event.id.to_hex()) {
                                    let _ = self.out.send(RelayEvent::Inbound(Box::new(event)));
                                } else {
                                    tracing::debug!(id = %event.id, "duplicate event dropped");
                                }
                            }
                            _ => {}
                        },
                        RelayNotification::RelayStatus { status } => {
                            if matches!(status, RelayStatus::Disconnected | RelayStatus::Terminated | RelayStatus::Banned) {
                                tracing::warn!(?status, "relay connection lost");
                                return SessionEnd::Disconnected;
                            }
                        }
                        RelayNotification::Shutdown => return SessionEnd::Disconnected,
                        _ => {}
                    }
                }
                () = &mut live_deadline, if !live => {
                    tracing::warn!(
                        timeout_ms = self.s.live_timeout.as_millis() as u64,
                        "subscription did not go live in time; reconnecting"
                    );
                    return SessionEnd::Disconnected;
                }
                _ = tick.tick(), if live && self.s.presence => {
                    let e = self.presence_event(ONLINE);
                    pending.insert(e.id, (e.clone(), false));
                    let _ = relay.send_msg(ClientMessage::event(e));
                }
                cmd = self.cmds.recv() => match cmd {
                    Some(RelayCmd::Accepted(t)) => self.accepted(t),
                    Some(RelayCmd::Stop { offline_bound, close_bound, done }) if !live => {
                        return SessionEnd::StopNotLive(StopReq { offline_bound, close_bound, done });
                    }
                    Some(RelayCmd::Publish(e)) => {
                        if live {
                            pending.insert(e.id, ((*e).clone(), false));
                            let _ = relay.send_msg(ClientMessage::event(*e));
                        } else {
                            self.queue(*e);
                        }
                    }
                    Some(RelayCmd::Stop { offline_bound, close_bound, done }) => {
                        if self.s.presence && live {
                            let e = self.presence_event(OFFLINE);
                            let id = e.id;
                            let sent = relay.send_msg(ClientMessage::event(e)).is_ok();
                            let waited = sent && tokio::time::timeout(offline_bound, wait_ok(&mut notes, id)).await.is_ok();
                            tracing::info!(acknowledged = waited, "presence offline published");
                        }
                        let closed = tokio::time::timeout(close_bound, client.shutdown()).await.is_ok();
                        tracing::info!(closed, "relay closed");
                        let _ = done.send(());
                        return SessionEnd::Stopped;
                    }
                    None => return SessionEnd::Stopped,
                },
            }
        }
    }
}

async fn wait_ok(notes: &mut tokio::sync::broadcast::Receiver<RelayNotification>, id: EventId) {
    loop {
        match notes.recv().await {
            Ok(RelayNotification::Message {
                message: RelayMessage::Ok { event_id, .. },
            }) if event_id == id => return,
            Ok(RelayNotification::Shutdown) | Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unacknowledged_events_are_requeued_oldest_first_without_presence() {
        let k = Keys::generate();
        let at = |t: u64, kind: u16, c: &str| {
            EventBuilder::new(Kind::from(kind), c)
                .custom_created_at(Timestamp::from(t))
                .sign_with_keys(&k)
                .unwrap()
        };
        let queued = at(30, 9, "queued");
        let mut outbox = VecDeque::from([queued.clone()]);
        let n = requeue_unacknowledged(
            &mut outbox,
            vec![at(20, 9, "b"), at(10, 9, "a"), at(15, 20001, "online")],
            10,
        );
        assert_eq!(n, 2);
        let order: Vec<&str> = outbox.iter().map(|e| e.content.as_str()).collect();
        assert_eq!(order, vec!["a", "b", "queued"]);
        // Bounded: the oldest go first.
        let n = requeue_unacknowledged(&mut outbox, vec![at(5, 9, "z")], 2);
        assert_eq!(n, 1);
        let order: Vec<&str> = outbox.iter().map(|e| e.content.as_str()).collect();
        assert_eq!(order, vec!["b", "queued"]);
        // Already queued: not duplicated.
        assert_eq!(requeue_unacknowledged(&mut outbox, vec![queued], 10), 0);
    }

    #[test]
    fn auth_ok_prefixes() {
        assert_eq!(classify_auth_ok(true, ""), AuthOutcome::Accepted);
        for t in [
            "auth-required: no",
            "restricted: members only",
            "blocked: go away",
        ] {
            assert_eq!(classify_auth_ok(false, t), AuthOutcome::Terminal, "{t}");
        }
        assert_eq!(
            classify_auth_ok(false, "error: try later"),
            AuthOutcome::Transient
        );
        assert_eq!(classify_auth_ok(false, ""), AuthOutcome::Transient);
    }

    #[test]
    fn resubscribe_overlaps_five_seconds_and_clamps_to_now() {
        let start = Timestamp::from(1000);
        let now = Timestamp::from(5000);
        assert_eq!(resubscribe_since(start, None, now), start);
        assert_eq!(
            resubscribe_since(start, Some(Timestamp::from(2000)), now),
            Timestamp::from(1995)
        );
        assert_eq!(
            resubscribe_since(start, Some(Timestamp::from(3)), now),
            Timestamp::from(0)
        );
        // A future-dated event never moves `since` past now − 5 s.
        assert_eq!(
            resubscribe_since(start, Some(Timestamp::from(90_000)), now),
            Timestamp::from(4995)
        );
    }
}
