//! What `status` listens for and shows (spec I3 "Presence is the status";
//! issue 24 item 2 "`status` for local agents uses the verified pid"):
//!
//! - deployed agents (a stored `agent_id`): only presence tells whether
//!   they run, so `status` listens up to `--listen` (a republish interval
//!   and a margin on a relay that keeps no presence to replay), stopping
//!   once each reported;
//! - local agents: the verified harness process tells ([`running_local`]);
//!   their presence is listened for only
//!   [`crate::limits::STATUS_LOCAL_LISTEN`], and a harness not heard is
//!   shown `running`, one that ended `offline` with how its run ended
//!   ([`local_status`], from [`crate::waits::local_status`]).

use super::agent::{is_deployed, presence_ttl};
use super::error::AppError;
use super::presence_feed::{Subscription, records_by_relay};
use crate::child_watch;
use crate::presence::Tracker;
use crate::record::{AgentRecord, Backend};
use crate::relay;
use crate::store::Store;
use crate::waits;
use std::time::Duration;

/// Live presence of a set of agents across their relays (spec I3), for
/// `status`: subscriptions asking for the last TTL of presence, reports timed
/// by `created_at`.
pub struct PresenceWatch {
    /// The derived state of every agent.
    pub tracker: Tracker,
    feeds: Vec<Subscription>,
    /// Relays that could not be reached (one message each).
    pub warnings: Vec<String>,
}

impl PresenceWatch {
    /// Connects to every relay of `agents` and subscribes. Presence created
    /// within the last TTL is asked for, so a relay that keeps presence
    /// answers at once; older events are ignored.
    pub async fn open(store: &Store, agents: &[AgentRecord]) -> Result<PresenceWatch, AppError> {
        let owner = store.owner()?;
        let ttl = presence_ttl();
        let since = relay::unix_now().saturating_sub(ttl.as_secs());
        let tracker = Tracker::new(agents.iter().map(|a| a.pubkey.clone()), ttl).since(since);
        let (mut feeds, mut warnings) = (Vec::new(), Vec::new());
        for (url, authors) in records_by_relay(agents) {
            match Subscription::open(&url, owner.clone(), &authors, since, Duration::from_secs(10)).await {
                Ok(f) => feeds.push(f),
                Err(e) => warnings.push(e.to_string()),
            }
        }
        Ok(PresenceWatch {
            tracker,
            feeds,
            warnings,
        })
    }

    /// Feeds every subscription for about `step`.
    pub async fn pump(
        &mut self,
        step: Duration,
        on_change: &mut dyn FnMut(&crate::presence::Change, &Tracker),
    ) {
        self.pump_until(step, on_change, &|_| false).await;
    }

    /// Feeds every subscription for about `step`, each until `done` holds.
    async fn pump_until(
        &mut self,
        step: Duration,
        on_change: &mut dyn FnMut(&crate::presence::Change, &Tracker),
        done: &dyn Fn(&Tracker) -> bool,
    ) {
        for f in self.feeds.iter_mut() {
            f.feed().pump(&mut self.tracker, step, on_change, done).await;
        }
        if self.feeds.is_empty() {
            tokio::time::sleep(step).await;
        }
    }

    /// Listens until every pubkey in `expected` has reported or `listen`
    /// passed (at once when no relay could be reached).
    pub async fn listen(&mut self, expected: &[String], listen: Duration) {
        self.listen_for(expected, listen, &[], Duration::ZERO).await;
    }

    /// Listens until every pubkey in `expected` has reported or `listen`
    /// passed, and every one in `briefly` has reported or `brief` passed;
    /// always for one short step first, so a relay that replays presence
    /// is heard, unless every agent has been heard before it ends (at once
    /// when no relay could be reached). Each wait ends as soon as what it
    /// waits for is heard, not at the end of a step.
    pub async fn listen_for(
        &mut self,
        expected: &[String],
        listen: Duration,
        briefly: &[String],
        brief: Duration,
    ) {
        if self.feeds.is_empty() {
            return;
        }
        let began = tokio::time::Instant::now();
        let step = Duration::from_millis(200);
        let heard = |t: &Tracker, pks: &[String]| pks.iter().all(|pk| t.last(pk).is_some());
        let want = |t: &Tracker| {
            let waited = began.elapsed();
            (!heard(t, expected) && waited < listen) || (!heard(t, briefly) && waited < brief.min(listen))
        };
        self.pump_until(step, &mut |_, _| {}, &Tracker::all_heard).await;
        while want(&self.tracker) {
            self.pump_until(step, &mut |_, _| {}, &|t| !want(t)).await;
        }
    }

    /// Disconnects.
    pub async fn close(self) {
        for f in self.feeds {
            f.close().await;
        }
    }
}

/// The agents `status` waits for: deployed agents (a stored `agent_id`:
/// only their presence can tell whether they run).
pub fn expected_live(store: &Store, agents: &[AgentRecord]) -> Vec<String> {
    agents
        .iter()
        .filter(|a| store.deploy_state(&a.name).is_ok_and(|st| is_deployed(&st)))
        .map(|a| a.pubkey.clone())
        .collect()
}

/// The local agents whose harness runs (verified): `status` listens for
/// their presence only briefly ([`crate::limits::STATUS_LOCAL_LISTEN`]).
pub fn running_local(store: &Store, agents: &[AgentRecord]) -> Vec<String> {
    running_local_records(store, agents)
        .map(|a| a.pubkey.clone())
        .collect()
}

/// The records of [`running_local`]: local agents whose harness process
/// verifies now.
pub fn running_local_records<'a>(
    store: &'a Store,
    agents: &'a [AgentRecord],
) -> impl Iterator<Item = &'a AgentRecord> + 'a {
    agents
        .iter()
        .filter(|a| matches!(a.backend, Backend::Local))
        .filter(|a| {
            store
                .deploy_state(&a.name)
                .is_ok_and(|st| crate::local::running_from(&a.name, &st).is_some())
        })
}

/// A local agent's `status` state and "seen" columns: presence when heard
/// from a harness that runs, else what its verified process and its run's
/// log say ([`waits::local_status`]).
pub fn local_status(
    store: &Store,
    rec: &AgentRecord,
    tracker: &Tracker,
    listened: Duration,
) -> Option<(String, String)> {
    if !matches!(rec.backend, Backend::Local) {
        return None;
    }
    let st = store.deploy_state(&rec.name).ok()?;
    if is_deployed(&st) {
        return None;
    }
    let running = crate::local::running_from(&rec.name, &st).map(|r| r.pid);
    let ended = running
        .is_none()
        .then(|| child_watch::last_run(store, &rec.name, &st))
        .flatten();
    let ago = tracker
        .last(&rec.pubkey)
        .map(|r| relay::unix_now().saturating_sub(r.at));
    Some(waits::local_status(
        tracker.state(&rec.pubkey),
        ago,
        running,
        ended.as_deref(),
        listened,
    ))
}
