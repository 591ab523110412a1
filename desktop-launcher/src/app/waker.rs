//! The waker (issue 33 item 2): while `buzz-launcher ui` or `serve` runs,
//! it watches each agent's relay for mentions of its sleeping agents and
//! wakes one with a Start through the same path as the CLI's, handing the
//! harness the mentions that woke it. The decisions are [`crate::wake`]'s;
//! this is the shell: records and relays in, Starts and lines out.
//!
//! - One waker per state dir ([`claim`]: the `waker` lock, its pid in
//!   `waker.pid`), so two launchers never wake one agent twice; the agent's
//!   start lock and the running check then hold spec I4 as for any Start.
//! - Each scan (every [`SCAN`]) reads the records and opens one
//!   subscription per relay: mentions of its agents since the window, and
//!   their presence. A final presence's `stop` tag is recorded
//!   (`DeployState::ended`): the only record of how a provider agent's run
//!   ended.
//! - A subscription holds only while its connection does. A relay that
//!   dropped the connection, or that the client library reconnected since
//!   (a restarted NIP-42 relay may have closed the subscription before the
//!   new authentication), gets a new connection and subscription; the
//!   mentions of the window come again and are taken once by id. A relay
//!   that cannot be reached is tried again after a backoff doubling from
//!   one scan to [`RECONNECT_MAX`].
//! - A wake refused by the budget, or one that failed, is said once per
//!   refusal; a failed wake is tried again after the budget's backoff,
//!   never in a tight loop.
//!
//! A local agent is woken by spawning its harness (its watch reaps it); a
//! provider agent by a deploy whose request carries the hand-over
//! (`agent.wake`), which the provider writes into the pod's per-attempt
//! Secret. The deploy runs beside the scan, so the relays are drained and
//! other agents decided while it runs; its result is taken at a later scan.
//!
//! - Every [`SYNC_EVERY`] it also reads the records the owner's other
//!   desktops shared ([`super::sync`], beside the scans): an agent created,
//!   edited or deleted on another desktop is here within seconds, and each
//!   change is a line.
//!
//! **Decided twice** (review afa2bf1 finding 2): the scan decides on what it
//! read, then takes the agent's lock with `try_lock` (skipping the agent
//! while a Start, a stop or an undeploy holds it) and decides again under
//! it on a fresh read of the record and the deploy state: still asleep
//! since the same instant, no owner's stop and no undeploy meanwhile. Only
//! then does it spawn or deploy, still holding the lock. A stop and an
//! undeploy record themselves under that lock, so neither is undone by a
//! wake decided before them.

use super::agent::StartOptions;
use super::agent::{agent_lock, waker_lock, waker_pid_path};
use super::error::AppError;
use super::local_state::seen_end;
use super::start::{LocalStart, deploy_held, spawn_held};
use crate::child_watch::{self, ChildWatch};
use crate::lock;
use crate::record::{AgentRecord, Backend, DeployState, EndedSeen};
use crate::relay::{self, WakeFeed};
use crate::store::Store;
use crate::wake::{self, Budget, Gate, HandOver, Known, Mention, Rest};
use buzz_contract::gate::RespondTo;
use buzz_contract::presence::{AWAY, KIND_PRESENCE, OFFLINE, ONLINE, REPUBLISH_INTERVAL, TAG_RUN};
use buzz_contract::wake::{StopReason, TAG_STOP, WINDOW};
use nostr_sdk::prelude::{Client, Event, Kind};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

/// How often the waker reads the records the owner's other desktops shared.
pub const SYNC_EVERY: Duration = Duration::from_secs(10);

/// How often the records are read and the sleeping agents decided.
pub const SCAN: Duration = Duration::from_secs(1);
/// How long after a deploy a provider agent counts as coming up.
const START_GRACE: Duration = Duration::from_secs(60);
/// Mentions kept per agent between scans.
const KEPT_MENTIONS: usize = 256;
/// How long a watch listens before a deployed agent it heard nothing of
/// counts as asleep: a running harness republishes its presence within it.
const UNSEEN_HOLD: Duration = Duration::from_secs(REPUBLISH_INTERVAL.as_secs() + 5);
/// The longest wait between two connection attempts to an unreachable relay.
pub const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// The held waker role of this process.
pub struct Claimed {
    _held: lock::Held,
}

/// Takes the waker role for this state dir: `None` while another process
/// holds it.
pub fn claim(store: &Store) -> Result<Option<Claimed>, AppError> {
    // With patience: `waker_running` probes the lock by taking it for a moment.
    let Some(held) = lock::try_lock_for(&waker_lock(store), Duration::from_millis(500))? else {
        return Ok(None);
    };
    crate::store::write_private(
        &waker_pid_path(store),
        std::process::id().to_string().as_bytes(),
        0o600,
    )?;
    Ok(Some(Claimed { _held: held }))
}

/// One line the waker says about an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeLine {
    pub agent: String,
    pub text: String,
}

/// What the waker knows of one agent between scans.
#[derive(Default)]
struct Agent {
    mentions: Vec<Mention>,
    budget: Budget,
    /// The last thing said about it, so a refusal is said once.
    said: Option<String>,
    /// The agent's last presence: content, `created_at`, its `run` tag.
    presence: Option<(String, u64, Option<String>)>,
    /// The watch reaping a harness this waker spawned.
    watch: Option<ChildWatch>,
    /// A wake's deploy under way beside the scan.
    pending: Option<(Wake, tokio::task::JoinHandle<Result<(), AppError>>)>,
}

/// One relay's subscription and the agents it covers.
struct Watch {
    client: Client,
    feed: WakeFeed,
    agents: BTreeSet<String>,
    /// The client's count of successful connections when it subscribed.
    connections: usize,
    /// When it subscribed.
    opened: tokio::time::Instant,
}

impl Watch {
    /// Whether its connection is still the one it subscribed on.
    async fn holds(&self, url: &str) -> bool {
        match self.client.relay(url).await {
            Ok(r) => r.is_connected() && r.stats().success() == self.connections,
            Err(_) => false,
        }
    }
}

/// When an unreachable relay is tried again, and the wait after that.
struct Retry {
    at: tokio::time::Instant,
    wait: Duration,
}

/// Runs the waker until the process ends (it never returns `Ok`).
/// `harness` is the local harness binary, `opts` how a provider Start
/// runs; `on_line` hears each wake,
/// refusal and failure.
pub async fn run(
    store: Store,
    harness: PathBuf,
    opts: StartOptions,
    on_line: &mut (dyn FnMut(WakeLine) + Send),
) -> Result<(), AppError> {
    let mut agents: HashMap<String, Agent> = HashMap::new();
    let mut watches: BTreeMap<String, Watch> = BTreeMap::new();
    let mut retries: BTreeMap<String, Retry> = BTreeMap::new();
    // Said once per `key`: a refusal's key is its end, so the countdown in
    // its text does not repeat it every scan.
    let mut say = |agents: &mut HashMap<String, Agent>, name: &str, key: String, text: String| {
        let a = agents.entry(name.to_string()).or_default();
        if a.said.as_deref() != Some(key.as_str()) {
            a.said = Some(key);
            on_line(WakeLine {
                agent: name.to_string(),
                text,
            });
        }
    };
    // The owner's other desktops (issue 52): their records read every
    // [`SYNC_EVERY`], beside the scans.
    let mut syncing: Option<tokio::task::JoinHandle<Result<super::sync::Synced, AppError>>> = None;
    let mut synced_at: Option<tokio::time::Instant> = None;
    let sync_every = std::env::var(crate::limits::SYNC_EVERY_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map_or(SYNC_EVERY, Duration::from_secs);
    loop {
        if syncing.as_ref().is_some_and(|t| t.is_finished())
            && let Some(task) = syncing.take()
        {
            let done = task
                .await
                .map_err(|e| AppError::Conflict(e.to_string()))
                .and_then(|r| r);
            for line in sync_lines(done) {
                // Keyed by its text: a failure repeated every sync is said once.
                say(&mut agents, &line.agent, line.text.clone(), line.text);
            }
        }
        if syncing.is_none() && synced_at.is_none_or(|t| t.elapsed() >= sync_every) && !super::share::is_off()
        {
            synced_at = Some(tokio::time::Instant::now());
            let store = store.clone();
            syncing = Some(tokio::spawn(async move { super::sync::sync(&store, &[]).await }));
        }
        let records = store.agents()?;
        let started: Vec<&AgentRecord> = records
            .iter()
            .filter(|r| store.deploy_state(&r.name).is_ok_and(|s| s.started_at.is_some()))
            .collect();
        // Every agent is watched, started or not: a run that ends before
        // its Start is recorded is still seen ending.
        let all: Vec<&AgentRecord> = records.iter().collect();
        resubscribe(&store, &all, &mut watches, &mut retries).await;
        drain(&store, &records, &mut watches, &mut agents).await;
        let owner = store.owner()?.public_key().to_hex();
        let now = relay::unix_now();
        for rec in &started {
            let st = store.deploy_state(&rec.name)?;
            let a = agents.entry(rec.name.clone()).or_default();
            if a.pending.is_some() {
                continue;
            }
            let rest = wake::rest(&known(&store, rec, &st, a, now));
            let Some(since) = rest.asleep_since() else {
                a.mentions.clear();
                continue;
            };
            // Unseen is not asleep until a running harness would have said
            // so: on a relay that replays no presence, the watch hears a
            // running pod only at its next republish (review afa2bf1 finding 9).
            if matches!(rest, Rest::SleepingUnseen { .. })
                && a.presence.is_none()
                && watches
                    .get(&rec.relay_url)
                    .is_none_or(|w| w.opened.elapsed() < UNSEEN_HOLD)
            {
                continue;
            }
            let gate = gate_of(rec, &owner);
            let waking: Vec<Mention> = a
                .mentions
                .iter()
                .filter(|m| wake::wakes_for(&gate, since, now, m).is_ok())
                .cloned()
                .collect();
            if waking.is_empty() {
                continue;
            }
            if wake::owner_stopped(&gate, since, &a.mentions) {
                let text = format!(
                    "{} was stopped by its owner's !shutdown; a mention does not wake it",
                    rec.name
                );
                say(&mut agents, &rec.name, text.clone(), text);
                continue;
            }
            if let Err(refused) = a.budget.check(now) {
                let (until, text) = refusal_text(&rec.name, refused, a.budget.failures(), now);
                say(&mut agents, &rec.name, format!("refused until {until}"), text);
                continue;
            }
            // The decision again under the agent's lock, which a Start, a
            // stop and an undeploy hold while they change what it read
            // (review afa2bf1 finding 2): held elsewhere, the wake waits
            // for a later scan; changed meanwhile, it is not made.
            let Some(held) = lock::try_lock(&agent_lock(&store, &rec.name))? else {
                continue;
            };
            let a = agents.entry(rec.name.clone()).or_default();
            let Some(fresh) = still_asleep(&store, &rec.name, since, a, now, &held) else {
                continue;
            };
            let hand = HandOver {
                events: wake::to_hand_over(waking),
                look: now,
            };
            let wake = Wake {
                at: now,
                ids: hand.events.clone(),
            };
            match fresh.backend {
                Backend::Local => {
                    let result = wake_local(&store, &rec.name, &harness, &hand, held);
                    let (key, text) = settle(&rec.name, a, wake, result);
                    say(&mut agents, &rec.name, key, text);
                }
                // The deploy runs beside the scan (it may take minutes),
                // holding the lock until it ends.
                Backend::Provider { .. } => {
                    a.pending = Some((wake, wake_provider(&store, &rec.name, &opts, hand, held)));
                }
            }
        }
        // The deploys that ended since the last scan.
        let ended: Vec<String> = agents
            .iter()
            .filter(|(_, a)| a.pending.as_ref().is_some_and(|(_, t)| t.is_finished()))
            .map(|(n, _)| n.clone())
            .collect();
        for name in ended {
            let Some(a) = agents.get_mut(&name) else { continue };
            let Some((wake, task)) = a.pending.take() else {
                continue;
            };
            let result = task
                .await
                .map_err(|e| AppError::WakeTask(name.clone(), e.to_string()))
                .and_then(|r| r);
            let (key, text) = settle(&name, a, wake, result.map(|()| None));
            say(&mut agents, &name, key, text);
        }
    }
}

/// What a sync by the waker changed, one line per agent (a failure of the
/// whole sync as one line): what `serve` prints and the page's log shows.
fn sync_lines(done: Result<super::sync::Synced, AppError>) -> Vec<WakeLine> {
    let line = |agent: &str, text: String| WakeLine {
        agent: agent.to_string(),
        text,
    };
    let s = match done {
        Ok(s) => s,
        Err(e) => {
            return vec![line(
                "",
                format!("could not read the records of your other desktops: {e}"),
            )];
        }
    };
    let mut out = Vec::new();
    for (verb, names) in [
        ("filed from another desktop", &s.created),
        ("updated from another desktop", &s.updated),
        ("deleted on another desktop: deleted here", &s.deleted),
    ] {
        out.extend(names.iter().map(|n| line(n, format!("{n} {verb}"))));
    }
    out.extend(s.conflicts.iter().map(|n| {
        line(
            n,
            format!(
                "{n} was edited on two desktops at once: buzz-launcher agent resolve {n} --keep mine|theirs"
            ),
        )
    }));
    out
}

/// The wake's decision again while `_held` holds the agent's lock: a fresh
/// read of the record and its deploy state must still show it asleep since
/// `since` (no stop, undeploy, Start or delete meanwhile). The record, when so.
fn still_asleep(
    store: &Store,
    name: &str,
    since: u64,
    a: &Agent,
    now: u64,
    _held: &lock::Held,
) -> Option<AgentRecord> {
    let rec = store.agent(name).ok()?;
    let st = store.deploy_state(name).ok()?;
    (wake::rest(&known(store, &rec, &st, a, now)).asleep_since() == Some(since)).then_some(rec)
}

/// A wake under way: when it was decided, and the mentions it handed over.
struct Wake {
    at: u64,
    ids: Vec<String>,
}

/// Counts an ended wake of `a` in its budget and says how it went (the
/// line's key and text, for `say`). A wake that worked takes the mentions
/// it handed over; a failed one keeps them for the next try.
fn settle(
    name: &str,
    a: &mut Agent,
    wake: Wake,
    result: Result<Option<ChildWatch>, AppError>,
) -> (String, String) {
    a.budget.record(wake.at, result.is_ok());
    match result {
        Ok(watch) => {
            if watch.is_some() {
                a.watch = watch;
            }
            a.mentions.retain(|m| !wake.ids.contains(&m.id));
            let n = wake.ids.len();
            (
                format!("woke at {}", wake.at),
                format!("woke {name} for {n} mention{}", if n == 1 { "" } else { "s" }),
            )
        }
        Err(e) => (
            format!("failed at {}", wake.at),
            format!("waking {name} failed: {e}; trying again after a backoff"),
        ),
    }
}

/// A refusal's end (unix seconds) and what is said of it.
fn refusal_text(name: &str, refused: wake::Refused, failures: u32, now: u64) -> (u64, String) {
    match refused {
        wake::Refused::TooSoon { until } if failures > 0 => (
            until,
            format!(
                "a wake of {name} waits: {failures} failed wake{} in a row; the next try in {} s",
                if failures == 1 { "" } else { "s" },
                until - now
            ),
        ),
        wake::Refused::TooSoon { until } => (
            until,
            format!(
                "a wake of {name} is refused: the last one was moments ago; the next may come in {} s",
                until - now
            ),
        ),
        wake::Refused::HourFull { until } => (
            until,
            format!(
                "a wake of {name} is refused: {} wakes in the last hour; the next may come in {} s",
                wake::PER_HOUR,
                until - now
            ),
        ),
    }
}

/// Spawns the woken local harness under the agent's lock; its watch reaps it.
fn wake_local(
    store: &Store,
    name: &str,
    harness: &std::path::Path,
    hand: &HandOver,
    held: lock::Held,
) -> Result<Option<ChildWatch>, AppError> {
    match spawn_held(store, name, harness, Some(hand), &held)? {
        LocalStart::Spawned { child, nonce } => Ok(Some(ChildWatch::spawn(child, store, name, &nonce))),
        LocalStart::AlreadyRunning(_) => Ok(None),
    }
}

/// The deploy of the woken provider agent, on a blocking thread beside the
/// scan, holding the agent's lock until it ends.
fn wake_provider(
    store: &Store,
    name: &str,
    opts: &StartOptions,
    hand: HandOver,
    held: lock::Held,
) -> tokio::task::JoinHandle<Result<(), AppError>> {
    let (store, who, opts) = (store.clone(), name.to_string(), opts.clone());
    tokio::task::spawn_blocking(move || {
        deploy_held(&store, &who, &opts, Some(&hand), &mut |_| {}, &held).map(|_| ())
    })
}

/// What the waker knows of `rec` at `now` ([`Known`]).
fn known(store: &Store, rec: &AgentRecord, st: &DeployState, a: &Agent, now: u64) -> Known {
    let ttl = super::agent::presence_ttl().as_secs();
    let presence_live = a.presence.as_ref().is_some_and(|(c, at, run)| {
        (c == ONLINE || c == AWAY) && at + ttl > now && (run.is_none() || *run == st.generation)
    });
    let (live, ended) = match rec.backend {
        Backend::Local => {
            let live = crate::local::running_from(&rec.name, st).is_some();
            (
                live,
                (!live)
                    .then(|| child_watch::local_end(store, &rec.name, st))
                    .flatten(),
            )
        }
        // A deploy that just answered has a pod coming up: its `online`
        // is seconds away, so it is not asleep meanwhile, unless its run
        // was already seen ending.
        Backend::Provider { .. } => {
            let ended = seen_end(st);
            let coming_up = ended.is_none() && st.started_at.is_some_and(|t| t + START_GRACE.as_secs() > now);
            (presence_live || coming_up, ended)
        }
    };
    Known {
        live,
        started_at: st.started_at,
        stopped_at: st.stopped_at,
        ended,
        deployed: st.agent_id.is_some(),
    }
}

/// What `status` and the page add to an agent at rest: sleeping or
/// stopped, and whether anything will wake it.
pub fn rest_text(rest: Rest, waker: bool) -> Option<String> {
    match rest {
        Rest::Sleeping { .. } | Rest::SleepingUnseen { .. } => Some(if waker {
            "sleeping: a mention wakes it".to_string()
        } else {
            "sleeping: no waker runs, so nothing wakes it (run `buzz-launcher serve` or `ui`)".to_string()
        }),
        Rest::StoppedByOwner | Rest::Stopped(_) => Some("stopped: nothing wakes it; press Start".to_string()),
        Rest::Running | Rest::NotStarted | Rest::Failed | Rest::Unknown => None,
    }
}

/// The record's respond-to gate as its harness applies it; a record the
/// resolver would refuse wakes for its owner only.
fn gate_of(rec: &AgentRecord, owner: &str) -> Gate {
    let respond_to = RespondTo::parse(rec.respond_to.trim()).unwrap_or(RespondTo::OwnerOnly);
    Gate {
        agent: rec.pubkey.clone(),
        owner: owner.to_string(),
        respond_to,
        allowlist: buzz_contract::gate::validate_allowlist(respond_to, &rec.respond_to_allowlist)
            .unwrap_or_default(),
        channels: rec
            .env
            .get(buzz_contract::env::CHANNELS)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// One subscription per relay over its agents, opened anew when that set
/// changed or its connection did not hold ([`Watch::holds`]); a relay that
/// cannot be reached is tried again after its [`Retry`].
async fn resubscribe(
    store: &Store,
    started: &[&AgentRecord],
    watches: &mut BTreeMap<String, Watch>,
    retries: &mut BTreeMap<String, Retry>,
) {
    let mut by_relay: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in started {
        by_relay
            .entry(r.relay_url.clone())
            .or_default()
            .insert(r.pubkey.clone());
    }
    retries.retain(|u, _| by_relay.contains_key(u));
    let mut stale = Vec::new();
    for (url, w) in watches.iter() {
        if by_relay.get(url) != Some(&w.agents) || !w.holds(url).await {
            stale.push(url.clone());
        }
    }
    for url in stale {
        if let Some(w) = watches.remove(&url) {
            w.client.shutdown().await;
        }
    }
    let Ok(owner) = store.owner() else { return };
    let now = tokio::time::Instant::now();
    for (url, agents) in by_relay {
        if watches.contains_key(&url) || retries.get(&url).is_some_and(|r| r.at > now) {
            continue;
        }
        match watch(&url, owner.clone(), agents).await {
            Some(w) => {
                retries.remove(&url);
                watches.insert(url, w);
            }
            None => {
                let wait = retries
                    .get(&url)
                    .map_or(SCAN, |r| r.wait.saturating_mul(2).min(RECONNECT_MAX));
                retries.insert(url, Retry { at: now + wait, wait });
            }
        }
    }
}

/// Connects to `url` and subscribes to its `agents`' mentions and presence.
async fn watch(url: &str, owner: nostr_sdk::prelude::Keys, agents: BTreeSet<String>) -> Option<Watch> {
    let client = relay::connect(url, owner, Duration::from_secs(10)).await.ok()?;
    let list: Vec<String> = agents.iter().cloned().collect();
    let since = relay::unix_now().saturating_sub(WINDOW.as_secs());
    match relay::subscribe_wake(&client, url, &list, since).await {
        Ok(feed) => {
            let connections = match client.relay(url).await {
                Ok(r) => r.stats().success(),
                Err(_) => 0,
            };
            Some(Watch {
                client,
                feed,
                agents,
                connections,
                opened: tokio::time::Instant::now(),
            })
        }
        Err(_) => {
            client.shutdown().await;
            None
        }
    }
}

/// Takes what the relays sent during one [`SCAN`]: mentions to each agent
/// they name, presence to its author (a final one's `stop` tag recorded).
async fn drain(
    store: &Store,
    records: &[AgentRecord],
    watches: &mut BTreeMap<String, Watch>,
    agents: &mut HashMap<String, Agent>,
) {
    let by_key: HashMap<&str, &AgentRecord> = records.iter().map(|r| (r.pubkey.as_str(), r)).collect();
    let deadline = tokio::time::Instant::now() + SCAN;
    if watches.is_empty() {
        tokio::time::sleep(SCAN).await;
        return;
    }
    while tokio::time::Instant::now() < deadline {
        let step = (deadline - tokio::time::Instant::now()) / watches.len().max(1) as u32;
        for w in watches.values_mut() {
            while let Some(e) = w.feed.next(step.min(Duration::from_millis(100))).await {
                take(store, &by_key, agents, &e);
            }
        }
    }
}

fn tag<'a>(e: &'a Event, name: &str) -> Option<&'a str> {
    e.tags
        .iter()
        .find(|t| t.as_slice().first().map(String::as_str) == Some(name))
        .and_then(|t| t.as_slice().get(1))
        .map(String::as_str)
}

fn take(store: &Store, by_key: &HashMap<&str, &AgentRecord>, agents: &mut HashMap<String, Agent>, e: &Event) {
    if e.kind == Kind::from(KIND_PRESENCE) {
        let Some(rec) = by_key.get(e.pubkey.to_hex().as_str()) else {
            return;
        };
        let run = tag(e, TAG_RUN).map(str::to_string);
        let at = e.created_at.as_secs();
        if e.content == OFFLINE
            && let (Some(run), Some(reason)) = (run.clone(), tag(e, TAG_STOP).and_then(StopReason::parse))
        {
            // Kept whatever the recorded generation: a deploy may answer
            // after its run already ended; it counts once the run is the
            // recorded one (`seen_end`).
            let _ = store.update_deploy_state(&rec.name, |s| {
                if s.ended.as_ref().is_none_or(|e| e.at <= at) {
                    s.ended = Some(EndedSeen {
                        run: run.clone(),
                        reason: reason.as_str().to_string(),
                        at,
                    });
                }
            });
        }
        let a = agents.entry(rec.name.clone()).or_default();
        if a.presence.as_ref().is_none_or(|(_, t, _)| *t <= at) {
            a.presence = Some((e.content.clone(), at, run));
        }
        return;
    }
    let addressed: Vec<String> = e
        .tags
        .iter()
        .filter(|t| t.as_slice().first().map(String::as_str) == Some("p"))
        .filter_map(|t| t.as_slice().get(1).cloned())
        .collect();
    let m = Mention {
        id: e.id.to_hex(),
        author: e.pubkey.to_hex(),
        kind: e.kind.as_u16(),
        content: e.content.clone(),
        addressed: addressed.clone(),
        channel: tag(e, "h").map(str::to_string),
        created_at: e.created_at.as_secs(),
    };
    for key in &addressed {
        if let Some(rec) = by_key.get(key.as_str()) {
            let a = agents.entry(rec.name.clone()).or_default();
            if !a.mentions.iter().any(|x| x.id == m.id) {
                a.mentions.push(m.clone());
                let skip = a.mentions.len().saturating_sub(KEPT_MENTIONS);
                a.mentions.drain(..skip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider agent asleep since `now - 500`, its run ended `idle`.
    fn asleep(now: u64) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.init_owner(None).unwrap();
        store.create_agent("a", "ws://127.0.0.1:1").unwrap();
        let mut rec = store.agent("a").unwrap();
        rec.backend = Backend::Provider {
            id: "fake".into(),
            config: Default::default(),
            path_cache: None,
        };
        store.save_agent(&rec).unwrap();
        store
            .update_deploy_state("a", |s| {
                s.agent_id = Some("id".into());
                s.generation = Some("g".into());
                s.started_at = Some(now - 1000);
                s.ended = Some(EndedSeen {
                    run: "g".into(),
                    reason: "idle".into(),
                    at: now - 500,
                });
            })
            .unwrap();
        (dir, store)
    }

    #[test]
    fn a_wake_decided_before_a_stop_or_an_undeploy_is_not_made_under_the_lock() {
        let now = relay::unix_now();
        let held = |store: &Store| lock::try_lock(&agent_lock(store, "a")).unwrap().unwrap();
        let a = Agent::default();
        let (_d, store) = asleep(now);
        let h = held(&store);
        assert!(
            still_asleep(&store, "a", now - 500, &a, now, &h).is_some(),
            "asleep as decided"
        );
        assert!(
            still_asleep(&store, "a", now - 400, &a, now, &h).is_none(),
            "asleep since another instant"
        );
        store
            .update_deploy_state("a", |s| s.stopped_at = Some(now))
            .unwrap();
        assert!(
            still_asleep(&store, "a", now - 500, &a, now, &h).is_none(),
            "the owner stopped it"
        );
        drop(h);

        let (_d, store) = asleep(now);
        store
            .update_deploy_state("a", |s| {
                s.agent_id = None;
                s.started_at = None;
                s.stopped_at = Some(now);
            })
            .unwrap();
        let h = held(&store);
        assert!(
            still_asleep(&store, "a", now - 500, &a, now, &h).is_none(),
            "undeployed"
        );
        drop(h);

        let (_d, store) = asleep(now);
        store
            .update_deploy_state("a", |s| s.started_at = Some(now))
            .unwrap();
        let h = held(&store);
        assert!(
            still_asleep(&store, "a", now - 500, &a, now, &h).is_none(),
            "started again"
        );
    }
}
