//! Presence kept for readers that ask for its recent past (spec I3
//! "Presence is the status"; wire-facts §3 "Staleness bound": the Buzz
//! relay expires presence [`PRESENCE_TTL`] after the last publish, so it
//! holds each subject's last presence until then).
//!
//! Kind 20001 is ephemeral: the library broadcasts it and stores nothing
//! ([`super::log_store`] refuses it). A reader that subscribes after an
//! agent's last publish would hear nothing until the agent's next
//! republish, up to 60 s later (issue 35: `status` of 1 000 agents within
//! 2 s). So the relay keeps, in memory only, each author's latest accepted
//! presence for [`PRESENCE_TTL`], and a REQ whose filter names kind 20001
//! *and* bounds it with `since` gets the kept events that match the filter
//! before its EOSE. The rules:
//!
//! - **Which**: the author's latest by `created_at`; at the same second the
//!   later accepted one (a stop's `offline` and the next run's `online` can
//!   share a second; readers order them by run and seq anyway).
//! - **How long**: until [`PRESENCE_TTL`] after its `created_at`; older
//!   ones are never replayed, and are dropped when the map is full.
//! - **Not from the future** (review afa2bf1 finding 9): a presence dated
//!   more than [`PRESENCE_MAX_AHEAD`] ahead of the relay's clock is refused
//!   by the front (`OK false invalid:`, [`crate::policy::check_publish`])
//!   and never kept: kept, it would outrank every honest presence of its
//!   author until its date, and outlive them by as much.
//! - **To whom**: a filter that names kind 20001 and has `since`. A filter
//!   without `since` asks for "from now on" in this project's readers (the
//!   observers of the tests), and gets what it got before: live events.
//!   Every other filter field applies as for stored events
//!   (`Filter::match_event`), `limit` included (the newest ones).
//! - **Bounded**: at most [`MAX_KEPT`] authors; a publish beyond it, with
//!   nothing expired to drop, is broadcast but not kept. Only authenticated
//!   keys publish presence (the owner and the agents it attested), and
//!   only their own.
//!
//! Pure: the clock comes in; [`super::conn`] calls it.

use crate::limits::PRESENCE_MAX_AHEAD;
use buzz_contract::presence::{KIND_PRESENCE, PRESENCE_TTL};
use nostr_relay_builder::prelude::{Event, Filter, Kind, MatchEventOptions, PublicKey};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// The most authors whose presence is kept at once.
pub const MAX_KEPT: usize = 100_000;

/// Each author's latest accepted presence.
#[derive(Default)]
pub struct PresenceKeep {
    latest: Mutex<HashMap<PublicKey, Event>>,
}

fn expired(e: &Event, now: u64) -> bool {
    e.created_at.as_secs().saturating_add(PRESENCE_TTL.as_secs()) < now
}

/// Dated further ahead of `now` than [`PRESENCE_MAX_AHEAD`]: the front
/// refuses such an event ([`crate::policy::check_publish`]); this check
/// keeps the map sound on its own.
fn from_the_future(e: &Event, now: u64) -> bool {
    e.created_at.as_secs() > now.saturating_add(PRESENCE_MAX_AHEAD.as_secs())
}

/// Whether `f` asks for kind 20001's recent past: it names the kind and sets `since`.
pub fn asks_for_presence(f: &Filter) -> bool {
    f.since.is_some()
        && f.kinds
            .as_ref()
            .is_some_and(|k| k.contains(&Kind::from(KIND_PRESENCE)))
}

/// Whether a live presence can match `f`: it names kind 20001, or no kind
/// at all (issue 49 item 4: the front delivers live presence itself, to
/// these filters only).
pub fn may_match_presence(f: &Filter) -> bool {
    f.kinds
        .as_ref()
        .is_none_or(|k| k.contains(&Kind::from(KIND_PRESENCE)))
}

/// Whether the live presence `e` matches `f`, as the library matches a live
/// event (`limit` bounds only what is sent of the past).
pub fn matches_live(f: &Filter, e: &Event) -> bool {
    f.match_event(e, MatchEventOptions::new())
}

impl PresenceKeep {
    /// Keeps `event` (an accepted kind 20001) as its author's latest, unless
    /// a newer one is kept; `false` when it was not kept.
    pub fn keep(&self, event: &Event, now: u64) -> bool {
        if event.kind != Kind::from(KIND_PRESENCE) || expired(event, now) || from_the_future(event, now) {
            return false;
        }
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = latest.get(&event.pubkey) {
            if old.created_at > event.created_at {
                return false;
            }
        } else if latest.len() >= MAX_KEPT {
            latest.retain(|_, e| !expired(e, now));
            if latest.len() >= MAX_KEPT {
                return false;
            }
        }
        latest.insert(event.pubkey, event.clone());
        true
    }

    /// The kept events each of `filters` that [`asks_for_presence`] matches,
    /// newest `limit` per filter, each once, oldest first.
    pub fn replay(&self, filters: &[Filter], now: u64) -> Vec<Event> {
        let asking: Vec<&Filter> = filters.iter().filter(|f| asks_for_presence(f)).collect();
        if asking.is_empty() {
            return Vec::new();
        }
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = BTreeMap::new();
        for f in asking {
            let mut matched: Vec<&Event> = match &f.authors {
                Some(authors) => authors.iter().filter_map(|a| latest.get(a)).collect(),
                None => latest.values().collect(),
            };
            matched.retain(|e| !expired(e, now) && f.match_event(e, MatchEventOptions::new()));
            matched.sort_by_key(|e| std::cmp::Reverse(e.created_at));
            matched.truncate(f.limit.unwrap_or(usize::MAX));
            for e in matched {
                out.insert((e.created_at, e.id), e.clone());
            }
        }
        out.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr_relay_builder::prelude::{EventBuilder, Keys, Timestamp};

    const NOW: u64 = 1_800_000_000;

    fn presence(keys: &Keys, content: &str, at: u64) -> Event {
        EventBuilder::new(Kind::from(KIND_PRESENCE), content)
            .custom_created_at(Timestamp::from(at))
            .sign_with_keys(keys)
            .unwrap()
    }

    fn since(at: u64) -> Filter {
        Filter::new()
            .kind(Kind::from(KIND_PRESENCE))
            .since(Timestamp::from(at))
    }

    #[test]
    fn the_latest_presence_of_each_author_is_replayed_to_a_filter_with_since() {
        let keep = PresenceKeep::default();
        let (a, b) = (Keys::generate(), Keys::generate());
        assert!(keep.keep(&presence(&a, "online", NOW - 50), NOW));
        assert!(keep.keep(&presence(&a, "offline", NOW - 10), NOW));
        assert!(
            !keep.keep(&presence(&a, "online", NOW - 20), NOW),
            "older than the kept one"
        );
        assert!(keep.keep(&presence(&b, "online", NOW - 5), NOW));
        let got = keep.replay(&[since(NOW - 180)], NOW);
        let said: Vec<(&str, PublicKey)> = got.iter().map(|e| (e.content.as_str(), e.pubkey)).collect();
        assert_eq!(
            said,
            vec![("offline", a.public_key()), ("online", b.public_key())]
        );
        // `since` and `authors` narrow it as for stored events.
        assert_eq!(keep.replay(&[since(NOW - 6)], NOW).len(), 1);
        let only_a = since(NOW - 180).author(a.public_key());
        assert_eq!(
            keep.replay(&[only_a.clone(), only_a], NOW).len(),
            1,
            "each event once"
        );
        assert_eq!(
            keep.replay(&[since(NOW - 180).limit(1)], NOW)[0].pubkey,
            b.public_key()
        );
    }

    #[test]
    fn a_later_publish_in_the_same_second_replaces_the_kept_one() {
        let keep = PresenceKeep::default();
        let a = Keys::generate();
        keep.keep(&presence(&a, "offline", NOW), NOW);
        keep.keep(&presence(&a, "online", NOW), NOW);
        assert_eq!(keep.replay(&[since(NOW)], NOW)[0].content, "online");
    }

    /// Review afa2bf1 finding 9: a presence dated in the future would mask
    /// every honest one until its date.
    #[test]
    fn a_future_dated_presence_is_not_kept_and_the_later_honest_one_is_replayed() {
        let keep = PresenceKeep::default();
        let a = Keys::generate();
        assert!(
            !keep.keep(&presence(&a, "offline", NOW + 3600), NOW),
            "an hour ahead of the relay's clock"
        );
        assert!(keep.keep(&presence(&a, "online", NOW + 1), NOW + 1));
        let got = keep.replay(&[since(NOW - 180)], NOW + 2);
        let said: Vec<&str> = got.iter().map(|e| e.content.as_str()).collect();
        assert_eq!(said, vec!["online"]);
        // Within the skew a clock a little fast is still kept.
        let skew = crate::limits::PRESENCE_MAX_AHEAD.as_secs();
        assert!(keep.keep(&presence(&a, "away", NOW + 2 + skew), NOW + 2));
        assert!(!keep.keep(&presence(&a, "away", NOW + 3 + skew), NOW + 2));
    }

    #[test]
    fn nothing_is_replayed_without_since_or_kind_20001_or_past_the_ttl() {
        let keep = PresenceKeep::default();
        let a = Keys::generate();
        keep.keep(&presence(&a, "online", NOW - 100), NOW);
        let ttl = PRESENCE_TTL.as_secs();
        assert!(
            keep.replay(&[Filter::new().kind(Kind::from(KIND_PRESENCE))], NOW)
                .is_empty()
        );
        assert!(
            keep.replay(&[Filter::new().since(Timestamp::from(0))], NOW)
                .is_empty()
        );
        assert!(
            keep.replay(
                &[Filter::new().kind(Kind::from(9)).since(Timestamp::from(0))],
                NOW
            )
            .is_empty()
        );
        assert_eq!(keep.replay(&[since(0)], NOW - 100 + ttl).len(), 1);
        assert!(
            keep.replay(&[since(0)], NOW - 100 + ttl + 1).is_empty(),
            "expired"
        );
        assert!(
            !keep.keep(&presence(&a, "online", NOW - ttl - 1), NOW),
            "expired on arrival"
        );
        assert!(
            !keep.keep(
                &EventBuilder::new(Kind::from(20002), "")
                    .sign_with_keys(&a)
                    .unwrap(),
                NOW
            )
        );
    }
}
