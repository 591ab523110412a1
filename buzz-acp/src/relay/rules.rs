//! The relay connection's pure rules (wire-facts §2, §3): how an AUTH answer
//! is classified, the re-subscription's `since` (review b30b1a0 #3: never
//! below the run's start), which unacknowledged events are resent and
//! which stop being waited for.

use super::RESUBSCRIBE_OVERLAP;
use buzz_contract::presence::KIND_PRESENCE;
use nostr_sdk::prelude::*;
use std::collections::VecDeque;

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
/// `created_at`, clamped to `now`, minus the 5 s overlap, and never below
/// `start`, the run's own start; the start time when nothing was accepted
/// yet. Only events the inbound gate accepted count: anyone can post a
/// future-dated event, and a `since` past it would hide every later event,
/// the owner's `!shutdown` included. The floor keeps the previous run's
/// events (its `!shutdown` above all) out of every subscription of this run.
pub fn resubscribe_since(start: Timestamp, last_accepted: Option<Timestamp>, now: Timestamp) -> Timestamp {
    match last_accepted {
        Some(t) => Timestamp::from(
            t.min(now)
                .as_secs()
                .saturating_sub(RESUBSCRIBE_OVERLAP)
                .max(start.as_secs()),
        ),
        None => start,
    }
}

/// Whether sending `new` ends the wait for the OK of `old`, sent before
/// it: a presence supersedes every earlier presence. A relay that never
/// acknowledges ephemeral events (nostr-rs-relay 0.8: docs/relays.md)
/// would otherwise leave one unanswered presence per interval waiting for
/// the whole session.
pub fn supersedes(new: &Event, old: &Event) -> bool {
    new.kind == Kind::from(KIND_PRESENCE) && old.kind == Kind::from(KIND_PRESENCE)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_presence_ends_the_wait_for_earlier_presence_only() {
        let k = Keys::generate();
        let ev = |kind: u16| {
            EventBuilder::new(Kind::from(kind), "x")
                .sign_with_keys(&k)
                .unwrap()
        };
        let (presence, reply) = (ev(KIND_PRESENCE), ev(9));
        assert!(supersedes(&ev(KIND_PRESENCE), &presence));
        assert!(
            !supersedes(&ev(KIND_PRESENCE), &reply),
            "a reply is still waited for"
        );
        assert!(!supersedes(&ev(9), &presence));
    }

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
        // Never below the run's start (review b30b1a0 #3): an event accepted
        // right after the start must not reopen the previous run's last
        // seconds, where its `!shutdown` is stored.
        assert_eq!(resubscribe_since(start, Some(Timestamp::from(1002)), now), start);
        assert_eq!(resubscribe_since(start, Some(Timestamp::from(3)), now), start);
        // A future-dated event never moves `since` past now − 5 s.
        assert_eq!(
            resubscribe_since(start, Some(Timestamp::from(90_000)), now),
            Timestamp::from(4995)
        );
    }

    #[test]
    fn resubscribe_since_is_never_below_the_start() {
        for start in [0u64, 5, 1000, 1_700_000_000] {
            for last in [
                0u64,
                1,
                start.saturating_sub(1),
                start,
                start + 1,
                start + 4,
                start + 5,
                start + 6,
            ] {
                for now in [start, start + 1, start + 10, start + 10_000] {
                    let since = resubscribe_since(
                        Timestamp::from(start),
                        Some(Timestamp::from(last)),
                        Timestamp::from(now),
                    );
                    assert!(since.as_secs() >= start, "start {start} last {last} now {now}");
                    assert!(
                        since.as_secs() <= now.max(start),
                        "start {start} last {last} now {now}"
                    );
                }
            }
        }
    }
}
