//! The commands that reach a running agent over its relay and wait for it:
//! `stop`, `chat` and a local `start`'s wait for presence `online` (spec
//! §Stop, I3, M1; `status` is [`crate::app::status_watch`]). Every wait says
//! what it waits for and ends as soon as the answer is known (issue 24
//! item 2), from the rules in [`crate::waits`]:
//!
//! - before a wait, what the records already tell ([`liveness`]): a local
//!   harness that does not run, a provider agent that is not deployed, a
//!   deployed one whose relay replays a fresh `offline` — each answered at
//!   once, without a wait (a forced stop waits anyway);
//! - during a wait, the harness's own end: a local `start` watches its
//!   child ([`crate::child_watch`]), `stop` and `chat` re-check the
//!   harness's verified identity every [`relay::CHAT_TICK`], and `chat`
//!   ends at the agent's fresh `offline`;
//! - a chat's progress: queued (the harness's `👀`), working (its typing
//!   indicator), the reply ([`crate::waits::Progress`]).

use super::agent::{agent_lock, presence_ttl, waker_running};
use super::error::AppError;
use super::start::{LocalStart, local_launch_env, start_local};
use crate::child_watch::{self, ChildWatch};
use crate::local::Running;
use crate::lock;
use crate::presence::{Derived, Report, Tracker};
use crate::record::{AgentRecord, Backend};
use crate::relay::{self, Heard};
use crate::resolve;
use crate::store::Store;
use crate::waits::{self, Facts, Liveness, Progress};
use std::time::Duration;

/// How long a short look at a deployed agent's presence may take once the
/// relay sent its stored events (a relay that replays presence answers at once).
pub const PRESENCE_LOOK: Duration = Duration::from_millis(300);
/// How long a stop whose harness ended still listens for its `offline`.
const EXIT_SETTLE: Duration = Duration::from_millis(500);
/// How often a long chat says it still waits.
pub const CHAT_REMINDER: Duration = Duration::from_secs(30);

/// What the records say of `name` now (no relay is asked).
pub fn liveness(store: &Store, name: &str) -> Result<Liveness, AppError> {
    let rec = store.agent(name)?;
    let st = store.deploy_state(name)?;
    let local = matches!(rec.backend, Backend::Local);
    let running_pid = crate::local::running_from(name, &st).map(|r| r.pid);
    let ended = (local && running_pid.is_none())
        .then(|| child_watch::last_run(store, name, &st))
        .flatten();
    Ok(waits::liveness(&Facts {
        name: name.to_string(),
        local,
        running_pid,
        deployed: st.agent_id.is_some(),
        ended,
    }))
}

/// The sentence when `name`'s local harness no longer runs (`None` while it does).
fn local_gone(store: &Store, name: &str) -> Option<String> {
    match liveness(store, name) {
        Ok(Liveness::NotRunning(why)) => Some(why),
        _ => None,
    }
}

/// The floor of a presence wait that began at `began` (unix seconds).
fn presence_floor(began: u64) -> u64 {
    began.saturating_sub(crate::limits::PRESENCE_SKEW.as_secs())
}

/// True when `tracker` holds `want` for `pk` from the run `run` (any run when `None`).
fn reached(tracker: &Tracker, pk: &str, want: Derived, run: Option<&str>) -> bool {
    tracker.state(pk) == want
        && run.is_none_or(|r| tracker.last(pk).and_then(|l| l.run.as_deref()) == Some(r))
}

/// A short look at an agent's presence on `client`: its state and how long
/// ago it was reported (a relay that replays presence answers; one that
/// does not leaves it `unknown`).
async fn presence_look(
    client: &nostr_sdk::Client,
    rec: &AgentRecord,
) -> Result<(Derived, Option<u64>), AppError> {
    let ttl = presence_ttl();
    let since = relay::unix_now().saturating_sub(ttl.as_secs());
    let authors = vec![rec.pubkey.clone()];
    let mut feed = relay::subscribe_presence(client, &rec.relay_url, &authors, since).await?;
    let mut tracker = Tracker::new(authors, ttl).since(since);
    let pk = rec.pubkey.clone();
    feed.pump(&mut tracker, PRESENCE_LOOK, &mut |_, _| {}, &|t| {
        t.last(&pk).is_some()
    })
    .await;
    let ago = tracker.last(&pk).map(|r| relay::unix_now().saturating_sub(r.at));
    Ok((tracker.state(&pk), ago))
}

/// How a stop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The agent published presence `offline`: the report the stop saw
    /// (timed by its `created_at`, with its run tags).
    Offline(Report),
    /// Its local harness ended without an `offline` the stop saw (the sentence says how).
    Exited(String),
}

/// Options of a stop.
#[derive(Debug, Clone, Copy)]
pub struct StopOptions {
    /// The longest wait for presence `offline`.
    pub wait: Duration,
    /// Send the `!shutdown` and wait even when the agent is known not to run.
    pub force: bool,
}

/// `stop` that always sends and waits ([`stop_with`] forced).
pub async fn stop(store: &Store, name: &str, wait: Duration) -> Result<(), AppError> {
    stop_with(store, name, StopOptions { wait, force: true }, &mut |_| {})
        .await
        .map(|_| ())
}

/// `stop`: owner-signed `!shutdown` on the agent's relay, then wait for presence
/// `offline` up to `wait` (spec §Stop). Subscribes before publishing so the
/// `offline` cannot be missed. Only an `offline` created after the command
/// began counts, and, when the last start recorded a launch generation, only
/// one from that `run`: a relay replaying stored presence cannot make a
/// never-started agent look stopped. Unless forced, an agent known not to
/// run is answered at once ([`AppError::NotRunning`]); a local harness that
/// ends during the wait ends it. `on_line` hears what the stop waits for.
pub async fn stop_with(
    store: &Store,
    name: &str,
    opts: StopOptions,
    on_line: &mut dyn FnMut(&str),
) -> Result<Stopped, AppError> {
    let began = relay::unix_now();
    let rec = store.agent(name)?;
    let owner = store.owner()?;
    // Refuse before publishing a `!shutdown` the agent would not accept.
    resolve::check_identity(&rec, &store.identity(name)?)?;
    // The agent's lock, as a start and the waker take it: a wake decided
    // before this stop re-checks under it and finds the stop recorded.
    let held = hold_for_stop(store, name, on_line).await?;
    let live = liveness(store, name)?;
    if !opts.force
        && let Some(why) = waits::stop_refusal(name, &live)
    {
        let asleep = owner_stop_held(store, &rec, &held)?;
        let why = if asleep {
            waits::stop_of_sleeping(name, &live).unwrap_or(why)
        } else {
            why
        };
        return Err(AppError::NotRunning(why));
    }
    let run = store.deploy_state(name)?.generation;
    let client = relay::connect(&rec.relay_url, owner, Duration::from_secs(10)).await?;
    if live == Liveness::Deployed && !opts.force {
        let (state, ago) = presence_look(&client, &rec).await?;
        if let Some(why) = waits::presence_says(name, state, ago) {
            client.shutdown().await;
            // A pod agent asleep is deployed and reports `offline`: the
            // stop holds all the same (review afa2bf1 finding 3, I5).
            let asleep = owner_stop_held(store, &rec, &held)?;
            let why = if asleep {
                waits::presence_stop_of_sleeping(name, ago)
            } else {
                waits::nothing_to_stop(&why)
            };
            return Err(AppError::NotRunning(why));
        }
    }
    let authors = vec![rec.pubkey.clone()];
    let since = presence_floor(began);
    let mut feed = relay::subscribe_presence(&client, &rec.relay_url, &authors, since).await?;
    relay::send_shutdown(&client, &rec.relay_url, &rec.pubkey, rec.channel.as_deref()).await?;
    // The second the `!shutdown` is dated in (it was signed before this read).
    let shutdown_second = relay::unix_now();
    // The owner's stop: final, whatever the agent says next (issue 33, I5).
    store.update_deploy_state(name, |state| state.stopped_at = Some(shutdown_second))?;
    drop(held);
    on_line(&format!(
        "sent !shutdown to {name}; waiting up to {}s for its presence offline",
        opts.wait.as_secs()
    ));
    let mut tracker = Tracker::new(authors, presence_ttl()).since(since);
    let pk = rec.pubkey.clone();
    let local_running = matches!(live, Liveness::Running { .. });
    let offline = |t: &Tracker| reached(t, &pk, Derived::Offline, run.as_deref());
    let harness_gone = || local_running && crate::local::running(store, name).is_ok_and(|r| r.is_none());
    let ok = feed
        .pump(&mut tracker, opts.wait, &mut |_, _| {}, &|t| {
            offline(t) || harness_gone()
        })
        .await;
    let mut gone = None;
    if ok && !offline(&tracker) {
        // The harness ended: its `offline` may still be on its way.
        feed.pump(&mut tracker, EXIT_SETTLE, &mut |_, _| {}, &offline)
            .await;
        if !offline(&tracker) {
            let st = store.deploy_state(name)?;
            gone = Some(child_watch::last_run(store, name, &st).map_or_else(
                || "its harness ended".to_string(),
                |how| format!("its harness {how}"),
            ));
        }
    }
    client.shutdown().await;
    let run_offline = run.is_some() && offline(&tracker);
    store.update_deploy_state(name, |state| {
        // The harness said offline, or its recorded process is gone.
        if ok || crate::local::running_from(name, state).is_none() {
            state.local_pid = None;
            state.local_process = None;
        }
        // That run is over, whatever the cluster reports for a moment yet.
        if run_offline {
            state.stopped_generation = run.clone();
        }
    })?;
    // A harness subscribes from the second it starts, and the relay keeps the
    // `!shutdown`: a run started in the same second would read it and stop.
    // Returning only once that second is over keeps a `stop` from reaching
    // the next `start`.
    tokio::time::sleep(until_after_second(shutdown_second, std::time::SystemTime::now())).await;
    match (ok, gone) {
        (true, Some(why)) => Ok(Stopped::Exited(why)),
        (true, None) => Ok(tracker.last(&pk).cloned().map_or_else(
            || Stopped::Exited("its harness ended".to_string()),
            Stopped::Offline,
        )),
        (false, _) => Err(AppError::NotOffline {
            name: name.to_string(),
            wait: opts.wait,
        }),
    }
}

/// The agent's lock for a stop: at once, or after the start, wake or
/// undeploy that holds it ends (said once; polled, so an async caller's
/// runtime is never blocked).
async fn hold_for_stop(
    store: &Store,
    name: &str,
    on_line: &mut dyn FnMut(&str),
) -> Result<lock::Held, AppError> {
    let path = agent_lock(store, name);
    let mut said = false;
    loop {
        if let Some(held) = lock::try_lock(&path)? {
            return Ok(held);
        }
        if !said {
            said = true;
            on_line(&format!(
                "a start or undeploy of `{name}` is in progress; the stop waits for it to end"
            ));
        }
        tokio::time::sleep(HOLD_POLL).await;
    }
}

/// Records the owner's stop of `rec` while `_held` holds its lock, whatever
/// its presence says (spec I5: nothing wakes it until a Start). Returns
/// whether it was asleep, so the answer can say a mention no longer wakes it.
fn owner_stop_held(store: &Store, rec: &AgentRecord, _held: &lock::Held) -> Result<bool, AppError> {
    let asleep = super::local_state::rest_now(store, rec, false)?
        .asleep_since()
        .is_some();
    store.update_deploy_state(&rec.name, |state| state.stopped_at = Some(relay::unix_now()))?;
    Ok(asleep)
}

/// How often a stop looks whether the agent's lock is free.
const HOLD_POLL: Duration = Duration::from_millis(100);

/// How long until the unix second `second` is over (zero once it is).
pub fn until_after_second(second: u64, now: std::time::SystemTime) -> Duration {
    let end = std::time::UNIX_EPOCH + Duration::from_secs(second.saturating_add(1));
    end.duration_since(now).unwrap_or(Duration::ZERO)
}

/// Waits up to `wait` for presence `online` from the run `nonce` of agent
/// `name`, counting only events created after `began` (unix seconds, minus
/// a small skew). Returns whether it came.
pub async fn wait_online(
    store: &Store,
    name: &str,
    nonce: &str,
    began: u64,
    wait: Duration,
) -> Result<bool, AppError> {
    let rec = store.agent(name)?;
    let client = relay::connect(&rec.relay_url, store.owner()?, Duration::from_secs(10)).await?;
    let authors = vec![rec.pubkey.clone()];
    let since = presence_floor(began);
    let mut feed = relay::subscribe_presence(&client, &rec.relay_url, &authors, since).await?;
    let mut tracker = Tracker::new(authors, presence_ttl()).since(since);
    let pk = rec.pubkey.clone();
    let ok = feed
        .pump(&mut tracker, wait, &mut |_, _| {}, &|t| {
            reached(t, &pk, Derived::Online, Some(nonce))
        })
        .await;
    client.shutdown().await;
    Ok(ok)
}

/// What a watched local start did.
#[derive(Debug)]
pub enum Watched {
    /// A harness was spawned and watched.
    Started(WatchedStart),
    /// The agent's harness already runs: nothing was spawned (spec I4).
    AlreadyRunning(Running),
}

/// How the wait of a watched start ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartOutcome {
    /// Presence `online` from the run arrived.
    Online,
    /// The harness exited first: how, and its run's last log lines.
    Exited(String),
    /// Neither within the wait: the harness still runs (its last log lines).
    Silent(String),
}

/// A local start that was watched from before the spawn.
#[derive(Debug)]
pub struct WatchedStart {
    /// The harness, reaped by its watcher (which records a failure).
    pub watch: ChildWatch,
    /// The launch generation it was given.
    pub nonce: String,
    /// How the wait for presence `online` ended.
    pub outcome: StartOutcome,
    /// The `online` report the wait saw (timed by its `created_at`).
    pub online: Option<Report>,
}

impl WatchedStart {
    /// `Ok` once online; else the error that says what happened.
    pub fn online_or_error(&self, store: &Store, name: &str, wait: Duration) -> Result<(), AppError> {
        let log = store.log_path(name);
        match &self.outcome {
            StartOutcome::Online => Ok(()),
            StartOutcome::Exited(how) => Err(AppError::HarnessExited {
                name: name.to_string(),
                how: how.clone(),
                log,
            }),
            StartOutcome::Silent(lines) => Err(AppError::NotOnline {
                name: name.to_string(),
                wait,
                pid: self.watch.pid(),
                lines: lines.clone(),
                log,
            }),
        }
    }
}

/// `start` on the local backend with the presence subscription opened
/// *before* the harness is spawned: presence is ephemeral, and a harness
/// that reaches the relay faster than a subscription opened after the
/// spawn would announce `online` to nobody (the next republish is a
/// minute away). `on_spawned` sees the pid and run once the child exits
/// `spawn`. Refuses before spawning when the relay cannot be reached. An
/// agent whose harness already runs is left alone ([`Watched::AlreadyRunning`]).
/// The wait ends as soon as the harness exits ([`StartOutcome::Exited`]);
/// `on_exit` runs once the harness exited, whenever that is.
pub async fn start_local_watched(
    store: &Store,
    name: &str,
    harness: &std::path::Path,
    wait: Duration,
    on_spawned: &mut (dyn FnMut(u32, &str) + Send),
    on_exit: Box<dyn FnOnce() + Send + 'static>,
) -> Result<Watched, AppError> {
    let began = relay::unix_now();
    let rec = store.agent(name)?;
    if let Some(r) = crate::local::running(store, name)? {
        return Ok(Watched::AlreadyRunning(r));
    }
    // The refusals of the spawn, before a relay is reached (the spawn checks again).
    if matches!(rec.backend, Backend::Local) {
        local_launch_env(store, &rec, "")?;
    }
    let client = relay::connect(&rec.relay_url, store.owner()?, Duration::from_secs(10)).await?;
    let authors = vec![rec.pubkey.clone()];
    let since = presence_floor(began);
    let mut feed = match relay::subscribe_presence(&client, &rec.relay_url, &authors, since).await {
        Ok(f) => f,
        Err(e) => {
            client.shutdown().await;
            return Err(e.into());
        }
    };
    let (child, nonce) = match start_local(store, name, harness) {
        Ok(LocalStart::Spawned { child, nonce }) => (child, nonce),
        Ok(LocalStart::AlreadyRunning(r)) => {
            client.shutdown().await;
            return Ok(Watched::AlreadyRunning(r));
        }
        Err(e) => {
            client.shutdown().await;
            return Err(e);
        }
    };
    on_spawned(child.id(), &nonce);
    let watch = ChildWatch::spawn_then(child, store, name, &nonce, on_exit);
    let mut tracker = Tracker::new(authors, presence_ttl()).since(since);
    let pk = rec.pubkey.clone();
    let online = feed
        .pump(&mut tracker, wait, &mut |_, _| {}, &|t| {
            reached(t, &pk, Derived::Online, Some(nonce.as_str())) || watch.exited().is_some()
        })
        .await;
    client.shutdown().await;
    let lines = || {
        let lines = child_watch::run_lines(store, name, &nonce).unwrap_or_default();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        crate::harness_exit::quote(&crate::harness_exit::last_errors(&refs))
    };
    let outcome = match (
        online && reached(&tracker, &pk, Derived::Online, Some(&nonce)),
        watch.exited(),
    ) {
        (true, _) => StartOutcome::Online,
        (false, Some(status)) => StartOutcome::Exited(format!(
            "{}{}",
            crate::harness_exit::describe_status(&status),
            lines()
        )),
        (false, None) => StartOutcome::Silent(lines()),
    };
    let online = (outcome == StartOutcome::Online)
        .then(|| tracker.last(&pk).cloned())
        .flatten();
    if outcome == StartOutcome::Online {
        // Online, its relay is up: a record created while it was down (the
        // embedded relay at rest) is shared now; nothing is sent when the
        // head is current.
        super::share::share_now(store, name).await;
    }
    Ok(Watched::Started(WatchedStart {
        watch,
        nonce,
        outcome,
        online,
    }))
}

/// Whether `url` answers as a relay within `wait`: its TCP connection and
/// its WebSocket handshake, each failure named ([`relay::connect`]). A
/// throwaway key: nothing is published.
pub async fn reach_relay(url: &str, wait: Duration) -> Result<(), AppError> {
    let client = relay::connect(url, nostr_sdk::prelude::Keys::generate(), wait).await?;
    client.shutdown().await;
    Ok(())
}

/// `chat` with nothing said while it waits ([`chat_with`]).
pub async fn chat(store: &Store, name: &str, text: &str, wait: Duration) -> Result<String, AppError> {
    chat_with(store, name, text, wait, &mut |_| {}).await
}

/// `chat`: send a mention as the owner and return the agent's reply.
/// Refuses empty text and an agent known not to run at once; `on_line`
/// hears what it waits for and each step (queued, working); the wait ends
/// when the reply comes, the agent's local harness ends, or the agent
/// publishes `offline`.
///
/// An agent asleep (its run ended by its idle bound, issue 33) is no
/// refusal: the mention is what wakes it. With a waker running, the chat
/// says the agent is asleep and that the waker wakes it, and waits for the
/// reply over the whole wait (a pod's wake takes a deploy, so the short
/// wait for a first sign does not apply). With none, the mention is sent
/// and the chat ends at once saying nothing wakes it and how to run a
/// waker ([`AppError::AsleepNoWaker`]). A stopped agent is refused as before.
pub async fn chat_with(
    store: &Store,
    name: &str,
    text: &str,
    wait: Duration,
    on_line: &mut dyn FnMut(&str),
) -> Result<String, AppError> {
    if text.trim().is_empty() {
        return Err(AppError::EmptyChat(name.to_string()));
    }
    let rec = store.agent(name)?;
    let live = liveness(store, name)?;
    let asleep = || -> Result<bool, AppError> {
        Ok(super::local_state::rest_now(store, &rec, false)?
            .asleep_since()
            .is_some())
    };
    let mut sleeping = false;
    if let Liveness::NotRunning(why) = &live {
        if !asleep()? {
            return Err(AppError::NotRunning(why.clone()));
        }
        sleeping = true;
    }
    let owner = store.owner()?;
    let client = relay::connect(&rec.relay_url, owner, Duration::from_secs(10)).await?;
    // Not known to run: the relay must show a sign of its harness.
    let mut acked = matches!(live, Liveness::Running { .. });
    if !acked && !sleeping {
        let (state, ago) = presence_look(&client, &rec).await?;
        if let Some(why) = waits::presence_says(name, state, ago) {
            if !asleep()? {
                client.shutdown().await;
                return Err(AppError::NotRunning(why));
            }
            sleeping = true;
        }
        acked = matches!(state, Derived::Online | Derived::Away);
    }
    if sleeping {
        let Some(pid) = waker_running(store) else {
            let sent =
                relay::mention(&client, &rec.relay_url, &rec.pubkey, rec.channel.as_deref(), text).await;
            client.shutdown().await;
            sent?;
            return Err(AppError::AsleepNoWaker(name.to_string()));
        };
        on_line(&format!(
            "{name} is asleep; the waker (pid {pid}) wakes it for this message; waiting up to {}s for its reply",
            wait.as_secs()
        ));
    } else {
        on_line(&format!(
            "{name}: sending; waiting up to {}s for it to queue the message (👀) and reply",
            wait.as_secs()
        ));
    }
    let local_running = matches!(live, Liveness::Running { .. });
    let mut progress = Progress::default();
    let started = tokio::time::Instant::now();
    let mut reminded = started;
    let reply = relay::chat(
        &client,
        &rec.relay_url,
        &rec.pubkey,
        rec.channel.as_deref(),
        text,
        wait,
        &mut |heard| match heard {
            Heard::Progress(step) => {
                acked = true;
                if let Some(line) = progress.line(name, step) {
                    on_line(&line);
                }
                None
            }
            Heard::Presence(state) if state == buzz_contract::presence::OFFLINE => {
                Some(format!("agent `{name}` went offline before it replied"))
            }
            Heard::Presence(_) => {
                acked = true;
                None
            }
            Heard::Tick if !acked && !sleeping && started.elapsed() >= waits::ACK_WAIT => {
                Some(waits::no_ack(name, &live, &rec.relay_url))
            }
            Heard::Tick => {
                if reminded.elapsed() >= CHAT_REMINDER {
                    reminded = tokio::time::Instant::now();
                    on_line(&format!(
                        "{name}: still waiting for {} ({}s of {}s)",
                        progress.waiting_for(),
                        started.elapsed().as_secs(),
                        wait.as_secs()
                    ));
                }
                if local_running {
                    local_gone(store, name)
                } else {
                    None
                }
            }
        },
    )
    .await;
    client.shutdown().await;
    Ok(reply?)
}
