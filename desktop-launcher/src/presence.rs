//! Presence derivation (spec I3 "Presence is the status", wire-facts §3;
//! heartbeat-presence-reference: state from the last report plus a timeout,
//! events only on change, desired versus actual for display only).
//!
//! Pure: the clock comes in as an argument (`now`, unix seconds).
//!
//! Reports are timed by the event's `created_at` (clamped to `now`), never
//! by arrival: a relay that stores presence and replays it must not make a
//! long-gone agent look live. A tracker also has a floor, [`Tracker::since`]:
//! events created before it (the command's start minus a small skew, or
//! `now − TTL` for `status`) are ignored, and so is any event older than the TTL.
//!
//! Which of two reports is the newer is [`supersedes`], the one rule the
//! CLI's waits, `status` and the Start page share (issue 30 item 8). A
//! later `created_at` wins. Within one second, `created_at` cannot order
//! them, so the run tags do (wire-facts §3): within one run, the higher
//! `seq` wins; between two runs, a run's `offline` loses to another run's
//! `online`/`away` of that second, whichever arrived last, since a run ends
//! with its `offline` and one harness runs per agent (spec I4), so the
//! restarted run is the newer one. Without run tags to compare, the later
//! arrival wins, as before.

use buzz_contract::presence::PresenceState;
use std::collections::BTreeMap;
use std::time::Duration;

/// The derived state of one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derived {
    /// Never seen since the tracker started.
    Unknown,
    Online,
    Away,
    /// Said `offline`, or its last `online`/`away` is older than the TTL.
    Offline,
}

impl Derived {
    /// Display form.
    pub fn as_str(self) -> &'static str {
        match self {
            Derived::Unknown => "unknown",
            Derived::Online => "online",
            Derived::Away => "away",
            Derived::Offline => "offline",
        }
    }
}

/// The last valid presence report of one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub state: PresenceState,
    /// When it was published: the event's `created_at`, clamped to the
    /// observer's clock (unix seconds).
    pub at: u64,
    /// The `run` tag (launch generation), if any.
    pub run: Option<String>,
    /// The `seq` tag (publish count within the run), if any.
    pub seq: Option<u64>,
    /// On `away` (a dozing harness, issue 50): when its inactivity bound
    /// ends it, unix seconds; `None` without one.
    pub sleeps_at: Option<u64>,
}

/// What a presence's tags say besides its state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tags {
    /// [`buzz_contract::presence::TAG_RUN`].
    pub run: Option<String>,
    /// [`buzz_contract::presence::TAG_SEQ`].
    pub seq: Option<u64>,
    /// [`buzz_contract::presence::TAG_SLEEPS_AT`].
    pub sleeps_at: Option<u64>,
}

impl Tags {
    /// Reads them with `tag`, the first value of a tag by name.
    pub fn read(tag: impl Fn(&str) -> Option<String>) -> Tags {
        use buzz_contract::presence::{TAG_RUN, TAG_SEQ, TAG_SLEEPS_AT};
        Tags {
            run: tag(TAG_RUN),
            seq: tag(TAG_SEQ).and_then(|s| s.parse().ok()),
            sleeps_at: tag(TAG_SLEEPS_AT).and_then(|s| s.parse().ok()),
        }
    }
}

/// True when `new` is a newer report than `last` (see the module doc):
/// one arm per case.
pub fn supersedes(new: &Report, last: &Report) -> bool {
    use PresenceState::{Away, Offline, Online};
    use std::cmp::Ordering::{Equal, Greater, Less};
    match (new.at.cmp(&last.at), &new.run, &last.run) {
        (Greater, _, _) => true,
        (Less, _, _) => false,
        // One run, one second: its publish count orders it.
        (Equal, Some(a), Some(b)) if a == b => match (new.seq, last.seq) {
            (Some(n), Some(l)) => n > l,
            _ => true,
        },
        // Two runs, one second: the run that said offline is the older one.
        (Equal, Some(_), Some(_)) => !matches!((new.state, last.state), (Offline, Online | Away)),
        // No runs to compare: the later arrival.
        (Equal, _, _) => true,
    }
}

/// Derives the state from the last report (I3: a stale `online`/`away` is offline).
pub fn derive(last: Option<&Report>, now: u64, ttl: Duration) -> Derived {
    match last {
        None => Derived::Unknown,
        Some(r) => {
            let stale = now.saturating_sub(r.at) > ttl.as_secs();
            match r.state {
                PresenceState::Offline => Derived::Offline,
                _ if stale => Derived::Offline,
                PresenceState::Online => Derived::Online,
                PresenceState::Away => Derived::Away,
            }
        }
    }
}

/// Why an agent whose last word was `online` or `away` now counts as
/// offline (issue 34 item 2: "host unreachable or presence stale shows last
/// seen and why"): its presence was not renewed within the TTL, and nothing
/// said it stopped. `None` while it is fresh, after a final `offline` (its
/// stop says why), or when it was never seen.
pub fn silence(last: Option<&Report>, now: u64, ttl: Duration) -> Option<String> {
    let r = last?;
    let age = now.saturating_sub(r.at);
    match r.state {
        PresenceState::Offline => None,
        _ if age <= ttl.as_secs() => None,
        PresenceState::Online | PresenceState::Away => Some(format!(
            "silent: it said {} {age} s ago and has not renewed it within {} s; its host, or its way to the relay, is down, or it was killed without a word",
            if r.state == PresenceState::Online {
                "online"
            } else {
                "away"
            },
            ttl.as_secs()
        )),
    }
}

/// What `status` and the page say of an agent whose last word is `away`:
/// it dozes (issue 50), answering mentions by itself, until its inactivity
/// bound ends it (its `sleeps_at`). `None` for any other report.
pub fn dozing(last: Option<&Report>, now: u64) -> Option<String> {
    let r = last.filter(|r| r.state == PresenceState::Away)?;
    Some(match r.sleeps_at {
        Some(at) if at > now => format!(
            "dozing: answers a mention by itself; sleeps in {}",
            span(at - now)
        ),
        Some(_) => "dozing: answers a mention by itself; its inactivity bound is due".to_string(),
        None => "dozing: answers a mention by itself; no inactivity bound".to_string(),
    })
}

/// A span of seconds as the owner reads it: `2h 5m`, `4m 10s`, `9s`.
pub(crate) fn span(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m {s}s"),
        _ => format!("{h}h {m}m"),
    }
}

/// One state change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub pubkey: String,
    pub from: Derived,
    pub to: Derived,
}

#[derive(Debug, Clone)]
struct Entry {
    last: Option<Report>,
    derived: Derived,
}

/// Tracks the managed pubkeys and emits [`Change`]s only when a derived state changes.
#[derive(Debug, Clone)]
pub struct Tracker {
    ttl: Duration,
    since: u64,
    entries: BTreeMap<String, Entry>,
}

impl Tracker {
    /// A tracker for `pubkeys` (64 lowercase hex), all `unknown`.
    pub fn new<I: IntoIterator<Item = String>>(pubkeys: I, ttl: Duration) -> Tracker {
        let entries = pubkeys
            .into_iter()
            .map(|p| {
                (
                    p,
                    Entry {
                        last: None,
                        derived: Derived::Unknown,
                    },
                )
            })
            .collect();
        Tracker {
            ttl,
            since: 0,
            entries,
        }
    }

    /// Starts tracking `pubkey` (`unknown`) if it is not tracked yet.
    pub fn manage(&mut self, pubkey: &str) {
        self.entries.entry(pubkey.to_string()).or_insert(Entry {
            last: None,
            derived: Derived::Unknown,
        });
    }

    /// Whether every managed pubkey has reported.
    pub fn all_heard(&self) -> bool {
        self.entries.values().all(|e| e.last.is_some())
    }

    /// The same tracker ignoring every event created before `since` (unix seconds).
    pub fn since(mut self, since: u64) -> Tracker {
        self.since = since;
        self
    }

    /// Feeds one kind-20001 event: `author` is `event.pubkey` (never a `p` tag),
    /// `content` is compared exactly, `created_at` times the report.
    /// Unmanaged authors, unknown contents, events created before the floor
    /// or older than the TTL, and events older than the last report are ignored.
    pub fn observe(
        &mut self,
        author: &str,
        content: &str,
        run: Option<String>,
        created_at: u64,
        now: u64,
    ) -> Option<Change> {
        let tags = Tags {
            run,
            ..Tags::default()
        };
        self.observe_tagged(author, content, tags, created_at, now)
    }

    /// [`Tracker::observe`] with the event's `seq` tag too. A report that
    /// does not [`supersede`](supersedes) the last one is ignored.
    pub fn observe_tagged(
        &mut self,
        author: &str,
        content: &str,
        tags: Tags,
        created_at: u64,
        now: u64,
    ) -> Option<Change> {
        let state = PresenceState::from_content(content)?;
        let ttl = self.ttl;
        if created_at < self.since || now.saturating_sub(created_at) > ttl.as_secs() {
            return None;
        }
        let at = created_at.min(now);
        let entry = self.entries.get_mut(author)?;
        let report = Report {
            state,
            at,
            run: tags.run,
            seq: tags.seq,
            sleeps_at: tags.sleeps_at,
        };
        if entry.last.as_ref().is_some_and(|l| !supersedes(&report, l)) {
            return None;
        }
        entry.last = Some(report);
        let to = derive(entry.last.as_ref(), now, ttl);
        Self::transition(author, entry, to)
    }

    /// Re-derives every entry at `now` (the TTL expiry path).
    pub fn tick(&mut self, now: u64) -> Vec<Change> {
        let ttl = self.ttl;
        let mut out = Vec::new();
        for (pk, entry) in self.entries.iter_mut() {
            let to = derive(entry.last.as_ref(), now, ttl);
            if let Some(c) = Self::transition(pk, entry, to) {
                out.push(c);
            }
        }
        out
    }

    fn transition(pk: &str, entry: &mut Entry, to: Derived) -> Option<Change> {
        if entry.derived == to {
            return None;
        }
        let from = entry.derived;
        entry.derived = to;
        Some(Change {
            pubkey: pk.to_string(),
            from,
            to,
        })
    }

    /// Current derived state of `pubkey`.
    pub fn state(&self, pubkey: &str) -> Derived {
        self.entries.get(pubkey).map_or(Derived::Unknown, |e| e.derived)
    }

    /// The last report of `pubkey`.
    pub fn last(&self, pubkey: &str) -> Option<&Report> {
        self.entries.get(pubkey).and_then(|e| e.last.as_ref())
    }
}

/// Why the running agent may not reflect the record (display only, never a permission).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// The running generation differs from the last start's.
    Generation,
    /// The record changed since the last start.
    RecordChanged,
}

/// Desired versus actual (spec §Documented consequence): an edit applies only
/// after the agent's next restart.
pub fn drift(
    running_run: Option<&str>,
    deployed_generation: Option<&str>,
    record_digest_now: &str,
    record_digest_at_start: Option<&str>,
) -> Option<Drift> {
    if let (Some(run), Some(generation)) = (running_run, deployed_generation)
        && run != generation
    {
        return Some(Drift::Generation);
    }
    match record_digest_at_start {
        Some(d) if d != record_digest_now => Some(Drift::RecordChanged),
        _ => None,
    }
}

/// The fleet line: "N deployed, M online — missing: a, b".
pub fn fleet_line(rows: &[(String, bool, Derived)]) -> String {
    fleet_line_with(rows, &[])
}

/// The fleet line where the agents named in `running` are local agents
/// whose harness process verifies: one not heard is counted as running,
/// not missing ("N deployed, M online, K running — missing: a").
pub fn fleet_line_with(rows: &[(String, bool, Derived)], running: &[String]) -> String {
    let deployed: Vec<&(String, bool, Derived)> = rows.iter().filter(|r| r.1).collect();
    let online = deployed.iter().filter(|r| r.2 == Derived::Online).count();
    let unheard = |r: &&&(String, bool, Derived)| r.2 == Derived::Unknown && running.contains(&r.0);
    let quiet = deployed.iter().filter(unheard).count();
    let missing: Vec<&str> = deployed
        .iter()
        .filter(|r| r.2 != Derived::Online && r.2 != Derived::Away && !unheard(r))
        .map(|r| r.0.as_str())
        .collect();
    let mut line = format!("{} deployed, {} online", deployed.len(), online);
    if quiet > 0 {
        line.push_str(&format!(", {quiet} running"));
    }
    if !missing.is_empty() {
        line.push_str(" — missing: ");
        line.push_str(&missing.join(", "));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(180);

    fn pk(c: char) -> String {
        c.to_string().repeat(64)
    }

    #[test]
    fn never_seen_is_unknown() {
        let t = Tracker::new([pk('a')], TTL);
        assert_eq!(t.state(&pk('a')), Derived::Unknown);
        assert_eq!(derive(None, 0, TTL), Derived::Unknown);
    }

    #[test]
    fn an_away_agent_dozes_until_its_sleeps_at() {
        let r = |state, sleeps_at| Report {
            state,
            at: 1000,
            run: None,
            seq: None,
            sleeps_at,
        };
        let text = |state, sleeps_at| dozing(Some(&r(state, sleeps_at)), 1000);
        assert_eq!(
            text(PresenceState::Away, Some(1000 + 86_400 - 300)).as_deref(),
            Some("dozing: answers a mention by itself; sleeps in 23h 55m")
        );
        assert!(
            text(PresenceState::Away, Some(1250))
                .unwrap()
                .ends_with("sleeps in 4m 10s")
        );
        assert!(
            text(PresenceState::Away, None)
                .unwrap()
                .ends_with("no inactivity bound")
        );
        assert!(text(PresenceState::Away, Some(900)).unwrap().ends_with("is due"));
        assert_eq!(text(PresenceState::Online, Some(2000)), None, "only away dozes");
        assert_eq!(dozing(None, 1000), None);
    }

    #[test]
    fn a_stale_online_says_it_went_silent_and_a_stop_does_not() {
        let ttl = Duration::from_secs(180);
        let at = |state, at| Report {
            state,
            at,
            run: None,
            seq: None,
            sleeps_at: None,
        };
        let line = silence(Some(&at(PresenceState::Online, 1000)), 1300, ttl).unwrap();
        assert!(
            line.starts_with("silent: it said online 300 s ago and has not renewed it within 180 s"),
            "{line}"
        );
        assert!(
            silence(Some(&at(PresenceState::Away, 1000)), 1300, ttl)
                .unwrap()
                .contains("said away")
        );
        assert_eq!(
            silence(Some(&at(PresenceState::Online, 1000)), 1180, ttl),
            None,
            "fresh"
        );
        assert_eq!(
            silence(Some(&at(PresenceState::Offline, 1000)), 9000, ttl),
            None,
            "a stop says why"
        );
        assert_eq!(silence(None, 9000, ttl), None);
    }

    #[test]
    fn online_then_stale_after_ttl_is_offline() {
        let mut t = Tracker::new([pk('a')], TTL);
        let c = t.observe(&pk('a'), "online", None, 1000, 1000).unwrap();
        assert_eq!((c.from, c.to), (Derived::Unknown, Derived::Online));
        assert!(t.tick(1180).is_empty(), "exactly at the TTL it is still online");
        let c = t.tick(1181);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].to, Derived::Offline);
    }

    #[test]
    fn a_pubkey_managed_later_starts_unknown_and_keeps_an_existing_report() {
        let mut t = Tracker::new(Vec::<String>::new(), TTL);
        assert!(t.observe(&pk('a'), "online", None, 1, 1).is_none(), "unmanaged");
        t.manage(&pk('a'));
        assert_eq!(t.state(&pk('a')), Derived::Unknown);
        assert!(t.observe(&pk('a'), "online", None, 1, 1).is_some());
        t.manage(&pk('a'));
        assert_eq!(t.state(&pk('a')), Derived::Online);
    }

    #[test]
    fn events_only_on_change() {
        let mut t = Tracker::new([pk('a')], TTL);
        assert!(t.observe(&pk('a'), "online", None, 1, 1).is_some());
        assert!(t.observe(&pk('a'), "online", None, 61, 61).is_none());
        assert_eq!(
            t.observe(&pk('a'), "away", None, 62, 62).unwrap().to,
            Derived::Away
        );
        assert_eq!(
            t.observe(&pk('a'), "offline", None, 63, 63).unwrap().to,
            Derived::Offline
        );
        assert!(t.tick(10_000).is_empty());
    }

    #[test]
    fn content_is_exact_and_unmanaged_authors_ignored() {
        let mut t = Tracker::new([pk('a')], TTL);
        assert!(t.observe(&pk('a'), "Online", None, 1, 1).is_none());
        assert!(t.observe(&pk('a'), " online", None, 1, 1).is_none());
        assert!(
            t.observe(&pk('a'), "{\"status\":\"online\"}", None, 1, 1)
                .is_none()
        );
        assert!(t.observe(&pk('b'), "online", None, 1, 1).is_none());
        assert_eq!(t.state(&pk('a')), Derived::Unknown);
    }

    #[test]
    fn reports_are_timed_by_created_at_and_replays_before_the_floor_are_ignored() {
        let mut t = Tracker::new([pk('a')], TTL).since(1000);
        // A stored event replayed by the relay: created before the floor.
        assert!(t.observe(&pk('a'), "online", None, 990, 1001).is_none());
        assert_eq!(t.state(&pk('a')), Derived::Unknown);
        // Older than the TTL, even with no floor.
        let mut u = Tracker::new([pk('a')], TTL);
        assert!(u.observe(&pk('a'), "offline", None, 100, 1000).is_none());
        // A fresh one counts and is timed by created_at, not arrival.
        let c = t
            .observe(&pk('a'), "online", Some("r1".into()), 1001, 1010)
            .unwrap();
        assert_eq!(c.to, Derived::Online);
        assert_eq!(t.last(&pk('a')).unwrap().at, 1001);
        // Its TTL runs from created_at.
        assert_eq!(t.tick(1182).len(), 1);
        // An out-of-order older event does not replace a newer report.
        let mut v = Tracker::new([pk('a')], TTL);
        v.observe(&pk('a'), "offline", None, 2000, 2000);
        assert!(v.observe(&pk('a'), "online", None, 1990, 2001).is_none());
        assert_eq!(v.state(&pk('a')), Derived::Offline);
        // A created_at in the future is clamped to now.
        let mut f = Tracker::new([pk('a')], TTL);
        f.observe(&pk('a'), "online", None, 5000, 3000);
        assert_eq!(f.last(&pk('a')).unwrap().at, 3000);
    }

    fn report(state: PresenceState, at: u64, run: &str, seq: u64) -> Report {
        Report {
            state,
            at,
            run: Some(run.into()),
            seq: Some(seq),
            sleeps_at: None,
        }
    }

    #[test]
    fn within_one_second_the_restarted_run_wins_whatever_arrives_last() {
        use PresenceState::{Away, Offline, Online};
        let stopped = report(Offline, 1000, "a", 7);
        let restarted = report(Online, 1000, "b", 0);
        assert!(supersedes(&restarted, &stopped));
        // A late-arriving older run's offline does not win.
        assert!(!supersedes(&stopped, &restarted));
        assert!(!supersedes(&stopped, &report(Away, 1000, "b", 1)));
        // A later second wins whatever the runs say; an earlier never does.
        assert!(supersedes(&report(Offline, 1001, "a", 8), &restarted));
        assert!(!supersedes(&report(Online, 999, "c", 0), &stopped));
        // One run within one second: its seq orders it, not arrival.
        assert!(!supersedes(
            &report(Online, 1000, "b", 0),
            &report(Offline, 1000, "b", 1)
        ));
        assert!(supersedes(
            &report(Offline, 1000, "b", 1),
            &report(Online, 1000, "b", 0)
        ));
        // Nothing to compare: the later arrival, as before.
        let bare = |state| Report {
            state,
            at: 1000,
            run: None,
            seq: None,
            sleeps_at: None,
        };
        assert!(supersedes(&bare(Offline), &restarted) && supersedes(&bare(Online), &stopped));

        // Through the tracker, in both arrival orders: online.
        for order in [[&stopped, &restarted], [&restarted, &stopped]] {
            let mut t = Tracker::new([pk('a')], TTL);
            for r in order {
                let tags = Tags {
                    run: r.run.clone(),
                    seq: r.seq,
                    sleeps_at: None,
                };
                t.observe_tagged(&pk('a'), r.state.as_str(), tags, r.at, 1000);
            }
            assert_eq!(t.state(&pk('a')), Derived::Online, "{order:?}");
            assert_eq!(t.last(&pk('a')).unwrap().run.as_deref(), Some("b"));
        }
    }

    #[test]
    fn desired_versus_actual() {
        assert_eq!(
            drift(Some("r1"), Some("r2"), "d", Some("d")),
            Some(Drift::Generation)
        );
        assert_eq!(
            drift(Some("r1"), Some("r1"), "d2", Some("d1")),
            Some(Drift::RecordChanged)
        );
        assert_eq!(drift(Some("r1"), Some("r1"), "d", Some("d")), None);
        assert_eq!(drift(None, Some("r1"), "d", None), None);
    }

    #[test]
    fn fleet_line_names_missing() {
        let rows = vec![
            ("a".to_string(), true, Derived::Online),
            ("b".to_string(), true, Derived::Offline),
            ("c".to_string(), false, Derived::Unknown),
            ("d".to_string(), true, Derived::Unknown),
        ];
        assert_eq!(fleet_line(&rows), "3 deployed, 1 online — missing: b, d");
        assert_eq!(fleet_line(&rows[..1]), "1 deployed, 1 online");
        // A verified local harness not heard yet runs; it is not missing.
        assert_eq!(
            fleet_line_with(&rows, &["d".to_string(), "b".to_string()]),
            "3 deployed, 1 online, 1 running — missing: b"
        );
    }
}
