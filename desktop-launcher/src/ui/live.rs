//! Live presence on the Start page (spec I3 "a bounded wrong dot, never an
//! indefinite one"; review b30b1a0 finding 8) and the event stream.
//!
//! One task owns one [`Tracker`] for every agent, and the page reads a
//! snapshot of it. Three things feed the tracker:
//!
//! - one presence subscription per relay. A relay that cannot be reached
//!   is retried with backoff ([`BACKOFF_FIRST`] doubling to
//!   [`BACKOFF_MAX`]), and at once when the page starts a relay
//!   ([`super::dots::Presence::relay_started`], after `ensure_running` reported
//!   `Started`): the first-run flow opens the page before its relay runs.
//! - the page's own confirmations: the `online` a Start waited for, the
//!   `offline` a Stop waited for ([`super::dots::Presence::note`]). They enter the
//!   tracker as the reports those waits saw, timed by their events'
//!   `created_at` with their run tags, never by when the page learns of
//!   them, so the tracker orders them with the relay's by the one rule
//!   ([`crate::app::supersedes`]) and the TTL ages them like any other.
//!
//! Every snapshot the task publishes carries a revision, counted up per
//! change, in its `presence` event and in the agents listing
//! (`presence_rev`): the page applies a dot only from a revision not older
//! than the one it shows, so a listing computed before a change but
//! answered after its event cannot move the dot back (issue 30 item 8).
//! - the clock: the tracker is ticked every step, so an agent that dies
//!   without a word goes `offline` one TTL after its last report, whether
//!   or not any relay is reachable.
//!
//! Subscriptions are reopened when the set of (relay, agent) pairs changes,
//! not on every edit or start: a reopen is a short window without presence.
//!
//! An agent that goes `offline` makes the page refetch the agents: the
//! reason it stopped (the record's `last_error`, or how its local harness's
//! run ended, [`crate::app::last_error`]) shows under its card (issue 24).

use super::dots::{Note, Snap};
use super::shared::{S, emit, scrub_value};
use crate::app::presence_feed::{self, Subscription};
use crate::app::{self, AgentRecord, Change, Derived, Tracker, unix_now};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc};

/// The first retry delay of a relay that could not be reached.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// The longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long one round feeds the subscriptions before ticking.
const STEP: Duration = Duration::from_millis(200);
/// How long a connection attempt may take.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// Starts the presence task on a blocking thread of the runtime (the relay
/// pumps take non-`Send` callbacks).
pub(super) fn spawn(s: S, notes: mpsc::UnboundedReceiver<Note>) {
    tokio::task::spawn_blocking(move || tokio::runtime::Handle::current().block_on(task(s, notes)));
}

/// One relay's subscription, or when to try again.
enum Link {
    Up(Box<Subscription>),
    Down { retry_at: Instant, backoff: Duration },
}

/// The next delay after a failed attempt (pure).
pub fn next_backoff(previous: Duration) -> Duration {
    (previous * 2).clamp(BACKOFF_FIRST, BACKOFF_MAX)
}

/// What a presence watch covers: every agent's relay and pubkey.
fn watch_set(agents: &[AgentRecord]) -> BTreeSet<(String, String)> {
    agents
        .iter()
        .map(|a| (a.relay_url.clone(), a.pubkey.clone()))
        .collect()
}

fn by_relay(set: &BTreeSet<(String, String)>) -> BTreeMap<String, Vec<String>> {
    presence_feed::by_relay(set.iter().map(|(url, pk)| (url.as_str(), pk.as_str())))
}

/// The task's state.
struct Watcher {
    s: S,
    tracker: Tracker,
    names: BTreeMap<String, String>,
    covered: BTreeSet<(String, String)>,
    links: BTreeMap<String, Link>,
    /// The last snapshot revision handed out.
    rev: u64,
}

impl Watcher {
    fn publish(&mut self, c: &Change) {
        let last = self.tracker.last(&c.pubkey);
        let mut snap = Snap {
            state: c.to,
            at: last.map(|r| r.at),
            run: last.and_then(|r| r.run.clone()),
            silent: crate::app::silence(last, crate::app::unix_now()),
            sleeps_at: last.and_then(|r| r.sleeps_at),
            rev: 0,
        };
        let changed = {
            let mut p = self.s.presence.snaps.lock().unwrap_or_else(|e| e.into_inner());
            let same = p.get(&c.pubkey).is_some_and(|o| {
                (o.state, o.at, &o.run, o.sleeps_at) == (snap.state, snap.at, &snap.run, snap.sleeps_at)
            });
            if !same {
                self.rev += 1;
                snap.rev = self.rev;
                p.insert(c.pubkey.clone(), snap.clone());
            }
            !same
        };
        if changed && let Some(name) = self.names.get(&c.pubkey) {
            emit(
                &self.s,
                json!({"type": "presence", "name": name, "state": snap.state.as_str(),
                       "last_seen": snap.at, "sleeps_at": snap.sleeps_at, "rev": snap.rev}),
            );
            // An agent that went offline may have a reason to show now (its
            // harness's exit, from the record or its log): the page refetches.
            if snap.state == Derived::Offline {
                emit(&self.s, json!({"type": "agents"}));
            }
        }
    }

    /// Re-reads the agents; reopens every subscription when the set changed.
    async fn reload(&mut self) {
        let agents = self.s.store.agents().unwrap_or_default();
        for a in &agents {
            self.tracker.manage(&a.pubkey);
        }
        self.names = agents
            .iter()
            .map(|a| (a.pubkey.clone(), a.name.clone()))
            .collect();
        let set = watch_set(&agents);
        if set == self.covered {
            return;
        }
        self.covered = set;
        for (_, link) in std::mem::take(&mut self.links) {
            if let Link::Up(live) = link {
                live.close().await;
            }
        }
        let now = Instant::now();
        self.links = by_relay(&self.covered)
            .into_keys()
            .map(|url| {
                (
                    url,
                    Link::Down {
                        retry_at: now,
                        backoff: Duration::ZERO,
                    },
                )
            })
            .collect();
    }

    /// Connects the relays that are due.
    async fn connect_due(&mut self) {
        let Ok(owner) = self.s.store.owner() else {
            return;
        };
        let ttl = self.tracker_ttl();
        let authors = by_relay(&self.covered);
        for (url, link) in self.links.iter_mut() {
            let Link::Down { retry_at, backoff } = link else {
                continue;
            };
            if Instant::now() < *retry_at {
                continue;
            }
            let pks = authors.get(url).cloned().unwrap_or_default();
            let since = unix_now().saturating_sub(ttl.as_secs());
            let attempt = Subscription::open(url, owner.clone(), &pks, since, CONNECT_WAIT);
            *link = match attempt.await {
                Ok(sub) => Link::Up(Box::new(sub)),
                Err(e) => {
                    tracing::debug!(%url, "presence: relay not reachable ({e}); retrying");
                    let b = next_backoff(*backoff);
                    Link::Down {
                        retry_at: Instant::now() + b,
                        backoff: b,
                    }
                }
            };
        }
    }

    fn tracker_ttl(&self) -> Duration {
        app::presence_ttl()
    }

    fn retry_now(&mut self) {
        for link in self.links.values_mut() {
            if let Link::Down { retry_at, backoff } = link {
                *retry_at = Instant::now();
                *backoff = Duration::ZERO;
            }
        }
    }

    fn apply_note(&mut self, n: Note) {
        self.tracker.manage(&n.pubkey);
        let r = n.report;
        let now = unix_now();
        if let Some(c) = self.tracker.observe_tagged(
            &n.pubkey,
            r.state.as_str(),
            app::PresenceTags {
                run: r.run,
                seq: r.seq,
                sleeps_at: r.sleeps_at,
            },
            r.at,
            now,
        ) {
            self.publish(&c);
        }
    }

    /// Feeds every live subscription for about one step, then ticks.
    async fn pump(&mut self) {
        let ups = self.links.values().filter(|l| matches!(l, Link::Up(_))).count();
        if ups == 0 {
            tokio::time::sleep(STEP).await;
        } else {
            let step = STEP / ups as u32;
            let mut changes = Vec::new();
            for link in self.links.values_mut() {
                if let Link::Up(live) = link {
                    live.feed()
                        .pump(
                            &mut self.tracker,
                            step,
                            &mut |c, _| changes.push(c.clone()),
                            &|_| false,
                        )
                        .await;
                }
            }
            for c in &changes {
                self.publish(c);
            }
        }
        for c in self.tracker.tick(unix_now()) {
            self.publish(&c);
        }
    }
}

async fn task(s: S, mut notes: mpsc::UnboundedReceiver<Note>) {
    let mut agents_rx = s.agents_gen.subscribe();
    let mut relay_rx = s.presence.relay_gen.subscribe();
    let mut w = Watcher {
        s: s.clone(),
        tracker: Tracker::new(Vec::<String>::new(), app::presence_ttl()),
        names: BTreeMap::new(),
        covered: BTreeSet::new(),
        links: BTreeMap::new(),
        rev: 0,
    };
    w.reload().await;
    let mut last_secrets = Instant::now();
    loop {
        if agents_rx.has_changed().unwrap_or(false) {
            agents_rx.borrow_and_update();
            w.reload().await;
        }
        if relay_rx.has_changed().unwrap_or(false) {
            relay_rx.borrow_and_update();
            w.retry_now();
        }
        w.connect_due().await;
        while let Ok(n) = notes.try_recv() {
            w.apply_note(n);
        }
        w.pump().await;
        // A change made outside the page (the CLI) reaches the redactor within a second.
        if last_secrets.elapsed() >= Duration::from_secs(1) {
            s.secrets.refresh(&s.store);
            last_secrets = Instant::now();
        }
    }
}

/// `GET /api/events`: Server-Sent Events, every one scrubbed; when the
/// secrets cannot be read an event is reduced to "refetch" (fail closed).
pub(super) async fn events(State(s): State<S>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = s.events.subscribe();
    let hello =
        futures::stream::once(async { Ok(Event::default().data(json!({"type": "hello"}).to_string())) });
    let rest = futures::stream::unfold((rx, s), |(mut rx, s)| async move {
        let mut v = match rx.recv().await {
            Ok(v) => v,
            // Missed events: the page refetches everything.
            Err(broadcast::error::RecvError::Lagged(_)) => json!({"type": "agents"}),
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        match s.secrets.redactor() {
            Some(r) => scrub_value(&r, &mut v),
            None => v = json!({"type": "agents"}),
        }
        Some((Ok(Event::default().data(v.to_string())), (rx, s)))
    });
    use futures::StreamExt;
    Sse::new(hello.chain(rest)).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_one_second_up_to_thirty() {
        let mut b = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..7 {
            b = next_backoff(b);
            seen.push(b.as_secs());
        }
        assert_eq!(seen, [1, 2, 4, 8, 16, 30, 30]);
    }
}
