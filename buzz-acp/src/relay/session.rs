//! One connected relay session (wire-facts §2, §3; spec I3): the REQ, the
//! NIP-42 answer, `auth-required:` resends, EOSE as the moment presence
//! `online` goes out and the outbox drains, the presence interval, the live
//! deadline, de-duplicated inbound events, the one-off history requests of
//! a new session (issue 32) and of a woken harness (issue 33), and the
//! bounded stop.

use super::rules::{AuthOutcome, classify_auth_ok, supersedes};
use super::{OUTBOX_CAP, RelayCmd, RelayEvent, SUB_ID, SessionEnd, StopReq, Task, requeue_unacknowledged};
use crate::events;
use crate::exit::Exit;
use buzz_contract::presence::OFFLINE;
use nostr_sdk::prelude::*;
use std::collections::HashMap;
use std::time::Instant;
use tokio::sync::oneshot;

/// History requests one session answers at once; more get nothing.
const MAX_HISTORIES: usize = 8;
/// Events kept per history request.
const HISTORY_CAP: usize = 200;

impl Task {
    /// One connected session. Events sent but not acknowledged when it ends
    /// go back to the front of the outbox and are resent on the next live
    /// session (relays de-duplicate by id); presence is not resent stale.
    pub(super) async fn session(
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
        // History requests in flight (RelayCmd::History): what each got so far.
        let mut histories: HashMap<SubscriptionId, (oneshot::Sender<Vec<Event>>, Vec<Event>)> =
            HashMap::new();
        let mut history_n = 0u64;
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
                                    let e = self.presence_event(self.state);
                                    track(pending, &e);
                                    let _ = relay.send_msg(ClientMessage::event(e));
                                    tick.reset();
                                }
                                while let Some(e) = self.outbox.pop_front() {
                                    pending.insert(e.id, (e.clone(), false));
                                    let _ = relay.send_msg(ClientMessage::event(e));
                                }
                                let _ = self.out.send(RelayEvent::Live);
                            }
                            RelayMessage::Event { subscription_id, event } if histories.contains_key(subscription_id.as_ref()) => {
                                let event = event.into_owned();
                                if let Some((_, got)) = histories.get_mut(subscription_id.as_ref())
                                    && got.len() < HISTORY_CAP
                                    && event.verify().is_ok()
                                {
                                    got.push(event);
                                }
                            }
                            RelayMessage::EndOfStoredEvents(id) if histories.contains_key(id.as_ref()) => {
                                if let Some((reply, got)) = histories.remove(id.as_ref()) {
                                    let _ = reply.send(got);
                                }
                                let _ = relay.send_msg(ClientMessage::close(id.into_owned()));
                            }
                            RelayMessage::Closed { subscription_id, .. } if histories.contains_key(subscription_id.as_ref()) => {
                                if let Some((reply, got)) = histories.remove(subscription_id.as_ref()) {
                                    let _ = reply.send(got);
                                }
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
                    let e = self.presence_event(self.state);
                    track(pending, &e);
                    let _ = relay.send_msg(ClientMessage::event(e));
                }
                cmd = self.cmds.recv() => match cmd {
                    Some(RelayCmd::Accepted(t)) => self.accepted(t),
                    Some(RelayCmd::Presence { state, sleeps_at }) => {
                        let changed = std::mem::replace(&mut self.state, state.as_str()) != state.as_str();
                        self.sleeps_at = sleeps_at;
                        if changed && live && self.s.presence {
                            let e = self.presence_event(self.state);
                            track(pending, &e);
                            let _ = relay.send_msg(ClientMessage::event(e));
                            tick.reset();
                        }
                    }
                    Some(RelayCmd::History { channel, since, until, limit, authors, reply }) => {
                        let filters = self.history_filters(&channel, (since, until), limit, authors.as_deref());
                        ask(relay, live, &mut histories, &mut history_n, filters, reply);
                    }
                    Some(RelayCmd::Wake { ids, since, reply }) => {
                        let filters = self.wake_filters(&ids, since);
                        ask(relay, live, &mut histories, &mut history_n, filters, reply);
                    }
                    Some(RelayCmd::Stop { offline_bound, close_bound, done, .. }) if !live => {
                        return SessionEnd::StopNotLive(StopReq { offline_bound, close_bound, done });
                    }
                    Some(RelayCmd::Mirror(e)) => {
                        if live {
                            let _ = relay.send_msg(ClientMessage::event(*e));
                        }
                    }
                    Some(RelayCmd::Publish(e)) => {
                        if live {
                            pending.insert(e.id, ((*e).clone(), false));
                            let _ = relay.send_msg(ClientMessage::event(*e));
                        } else {
                            self.queue(*e);
                        }
                    }
                    Some(RelayCmd::Stop { reason, offline_bound, close_bound, done }) => {
                        if self.s.presence && live {
                            let e = self.presence_event_stopping(OFFLINE, reason);
                            let id = e.id;
                            // A REQ behind it: its EOSE says the relay read the
                            // offline, from a relay that acknowledges no
                            // ephemeral event too (docs/relays.md).
                            let probe = SubscriptionId::new(format!("{SUB_ID}-sent"));
                            let sent = relay.send_msg(ClientMessage::event(e)).is_ok()
                                && relay
                                    .send_msg(ClientMessage::req(probe.clone(), vec![Filter::new().id(id).limit(1)]))
                                    .is_ok();
                            let heard = if sent {
                                tokio::time::timeout(offline_bound, wait_read(&mut notes, id, &probe))
                                    .await
                                    .ok()
                            } else {
                                None
                            };
                            tracing::info!(
                                acknowledged = heard == Some(Read::Acknowledged),
                                read = matches!(heard, Some(Read::Acknowledged | Read::Probed)),
                                "presence offline published"
                            );
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

/// Waits for the OK of a sent event now waited for, after dropping the
/// waits it [`supersedes`].
fn track(pending: &mut HashMap<EventId, (Event, bool)>, e: &Event) {
    pending.retain(|_, (old, _)| !supersedes(e, old));
    pending.insert(e.id, (e.clone(), false));
}

/// How the relay showed it read the offline presence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Its OK.
    Acknowledged,
    /// The EOSE (or CLOSED) of the REQ sent after it.
    Probed,
    /// The connection ended first.
    Gone,
}

async fn wait_read(
    notes: &mut tokio::sync::broadcast::Receiver<RelayNotification>,
    id: EventId,
    probe: &SubscriptionId,
) -> Read {
    loop {
        match notes.recv().await {
            Ok(RelayNotification::Message {
                message: RelayMessage::Ok { event_id, .. },
            }) if event_id == id => return Read::Acknowledged,
            Ok(RelayNotification::Message {
                message:
                    RelayMessage::EndOfStoredEvents(sub)
                    | RelayMessage::Closed {
                        subscription_id: sub, ..
                    },
            }) if *sub == *probe => return Read::Probed,
            Ok(RelayNotification::Shutdown) | Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                return Read::Gone;
            }
            _ => {}
        }
    }
}

/// Sends a one-off REQ whose stored events answer `reply` at its EOSE; with
/// nothing when no session is live or [`MAX_HISTORIES`] are in flight.
fn ask(
    relay: &Relay,
    live: bool,
    histories: &mut HashMap<SubscriptionId, (oneshot::Sender<Vec<Event>>, Vec<Event>)>,
    n: &mut u64,
    filters: Vec<Filter>,
    reply: oneshot::Sender<Vec<Event>>,
) {
    if !live || histories.len() >= MAX_HISTORIES {
        let _ = reply.send(Vec::new());
        return;
    }
    *n += 1;
    let id = SubscriptionId::new(format!("{SUB_ID}-history-{n}"));
    if relay.send_msg(ClientMessage::req(id.clone(), filters)).is_ok() {
        histories.insert(id, (reply, Vec::new()));
    } else {
        let _ = reply.send(Vec::new());
    }
}
