//! The commands behind the desktop's buttons (issue 5 "Commands"), as library
//! functions the binary formats and the conformance suite drives.
//!
//! Every refusal the spec requires before anything is invoked (I1, owner,
//! relay-mesh, I2, POSIX keys) happens in [`start_provider`] before discovery
//! runs a single process. A local start refuses a preset agent whose binary
//! the harness would not find ([`crate::presets::missing_binary`]) before
//! the harness is spawned; a deploy never does (the image resolves the name).

use crate::discovery::{self, Discovery, DiscoveryError};
use crate::gate::{self, Deployed, GateConfig, GateError};
use crate::limits::STRICT_ENV;
use crate::local::Running;
use crate::lock::{self, LockError};
use crate::payload::{self, ConfigError, PayloadError};
use crate::presence::{Derived, Tracker};
use crate::record::{AgentRecord, Backend, DeployState};
use crate::relay::{self, RelayError};
use crate::resolve::{self, ResolveError, Target};
use crate::store::{Store, StoreError};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

/// A command failure. Single actionable sentences; no secret inside.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error("{0}")]
    Gate(String),
    #[error(transparent)]
    GateRefused(#[from] GateError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(
        "agent `{}` has a live local harness (pid {}); deleting it would orphan the running agent — stop it first, or pass --force-remote-delete",
        .0.name, .0.pid
    )]
    LiveLocal(Running),
    #[error("a start of agent `{0}` is in progress; wait for it to end")]
    Busy(String),
    #[error(transparent)]
    Relay(#[from] RelayError),
    #[error(transparent)]
    Local(#[from] crate::local::LocalError),
    #[error(transparent)]
    MissingAgent(#[from] crate::presets::MissingBinary),
    #[error("agent `{0}` uses the local backend; `start` spawns the harness instead of deploying")]
    NotProvider(String),
    #[error("agent `{0}` uses a provider backend; it cannot be started as a local process")]
    NotLocal(String),
    #[error(
        "agent `{0}` is deployed (agent_id {1}); deleting it would orphan the remote agent — stop it first, or pass --force-remote-delete"
    )]
    Deployed(String, String),
    #[error(
        "agent `{name}` is deployed (agent_id {agent_id}) and {reason}; deleting its record would orphan the remote agent — pass --force-remote-delete to delete it anyway"
    )]
    NoUndeploy {
        name: String,
        agent_id: String,
        reason: String,
    },
    #[error("agent `{0}` uses the local backend; there is nothing to undeploy (`stop` ends its harness)")]
    UndeployLocal(String),
    #[error(
        "agent `{name}` did not report presence offline within {wait:?}; it may not be running or its relay may be unreachable"
    )]
    NotOffline { name: String, wait: Duration },
    #[error("cannot start the async runtime: {0}")]
    Runtime(String),
}

/// Options of a provider start.
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// Discovery search path (see [`discovery::dirs_from_env`]).
    pub dirs: Vec<PathBuf>,
    /// Gate limits and strict mode.
    pub gate: GateConfig,
}

impl StartOptions {
    /// From the environment and settings.
    pub fn from_env(store: &Store) -> Result<StartOptions, AppError> {
        let settings = store.settings()?;
        let strict = settings.strict_providers
            || std::env::var(STRICT_ENV).is_ok_and(|v| buzz_contract::env::is_truthy(&v));
        Ok(StartOptions {
            dirs: discovery::dirs_from_env(),
            gate: GateConfig {
                strict,
                approvals: store.approvals()?,
                deploy_deadline: crate::limits::deploy_kill_deadline_from(
                    std::env::var(crate::limits::DEPLOY_DEADLINE_ENV).ok().as_deref(),
                ),
                ..GateConfig::default()
            },
        })
    }
}

/// The agent's workdir: the record's, else a private per-agent directory in
/// the state dir — never the launcher's own cwd (the providers' and the
/// harness's cwd must not depend on where the launcher was started).
pub(crate) fn workdir(store: &Store, rec: &AgentRecord) -> Result<PathBuf, AppError> {
    match &rec.workdir {
        Some(w) => Ok(w.clone()),
        None => Ok(store.default_workdir(&rec.name)?),
    }
}

/// `start` on a provider backend: refusals first, then discovery, then the gate.
/// On success the `agent_id` is stored (the deployed axis); on failure the
/// redacted error is stored as `last_error`.
pub fn start_provider(
    store: &Store,
    name: &str,
    opts: &StartOptions,
    on_status: &mut dyn FnMut(&str),
) -> Result<Deployed, AppError> {
    let rec = store.agent(name)?;
    let Backend::Provider {
        id,
        config,
        path_cache,
    } = rec.backend.clone()
    else {
        return Err(AppError::NotProvider(name.to_string()));
    };
    // One start of an agent at a time; `delete` refuses while it is held.
    let _starting = match lock::try_lock(&agent_lock(store, name))? {
        Some(held) => held,
        None => {
            on_status(&format!(
                "another start of `{name}` is in progress; waiting for it to end"
            ));
            lock::lock(&agent_lock(store, name))?
        }
    };
    let settings = store.settings()?;
    let ident = store.identity(name)?;
    // Refusals before anything is invoked: I1, owner, relay-mesh, POSIX keys, gate, I2.
    let resolved = resolve::resolve_launch(&rec, &settings, &ident, Target::Remote)?;
    payload::normalize_provider_config(&config, None)?;

    let disc: Discovery = discovery::discover(&opts.dirs);
    let resolution = disc.resolve(&id, path_cache.as_deref())?;
    if let Some(stale) = &resolution.cache_overridden {
        on_status(&format!(
            "cached provider path {} is no longer what discovery selects; using {}",
            stale.display(),
            resolution.path.display()
        ));
    }
    let wd = workdir(store, &rec)?;
    let record_for_build = rec.clone();
    let result = gate::deploy(
        &resolution,
        &store.staging_root(),
        &wd,
        &opts.gate,
        |info| {
            let schema = info.get("config_schema");
            let cfg = payload::normalize_provider_config(&config, schema).map_err(PayloadError::from)?;
            let request_id = hex::encode(rand::random::<[u8; 16]>());
            payload::build_deploy_request(&record_for_build, &resolved, &ident, cfg, &request_id)
        },
        on_status,
    );
    match result {
        Ok(d) => {
            store.update_deploy_state(name, |state| {
                state.agent_id = Some(d.agent_id.clone());
                state.generation = d.generation.clone();
                state.record_digest = Some(rec.launch_digest());
                state.started_at = Some(relay::unix_now());
                state.last_error = None;
                state.provider_binary = Some(format!("{} (sha256 {})", d.path.display(), d.sha256));
            })?;
            // A deploy can take minutes: re-read the record so an edit made
            // meanwhile survives, and update only the path cache. The digest
            // stored above is the deployed record's, so `status` notes the edit.
            let mut fresh = store.agent(name)?;
            if let Backend::Provider {
                id: fresh_id,
                path_cache,
                ..
            } = &mut fresh.backend
                && *fresh_id == id
            {
                *path_cache = Some(d.path.clone());
                store.save_agent(&fresh)?;
            }
            Ok(d)
        }
        Err(e) => {
            let mut diag = disc.diagnostics_for(&id);
            let overrides = discovery::override_dirs_from_env();
            if resolution
                .path
                .parent()
                .is_some_and(|p| overrides.iter().any(|o| o == p))
                && let Some(note) = discovery::override_note(&overrides)
            {
                diag.push_str("; ");
                diag.push_str(&note);
            }
            let msg = match &e {
                GateError::Deploy { .. } | GateError::Info { .. } | GateError::Version { .. } => {
                    format!("{e} [discovery: {diag}]")
                }
                _ => e.to_string(),
            };
            store.update_deploy_state(name, |state| state.last_error = Some(msg.clone()))?;
            Err(AppError::Gate(msg))
        }
    }
}

/// The lock a start of `name` holds (see [`crate::lock`]).
pub(crate) fn agent_lock(store: &Store, name: &str) -> PathBuf {
    store.lock_path(&format!("agent-{name}"))
}

/// Refuses a local start whose preset agent binary is missing from the
/// `PATH` the harness will get: the spawn env's own, else the launcher's,
/// which the harness inherits (`PATH` is host-resolved: no user layer sets it).
fn refuse_missing_agent(command: &str, env: &BTreeMap<String, String>) -> Result<(), AppError> {
    let path = env
        .get("PATH")
        .map(std::ffi::OsString::from)
        .or_else(|| std::env::var_os("PATH"));
    match crate::presets::missing_binary(command, path.as_deref()) {
        Some(m) => Err(m.into()),
        None => Ok(()),
    }
}

/// The local spawn env of `rec` from the one resolver, after every refusal
/// of a local start (nothing is spawned here).
fn local_launch_env(
    store: &Store,
    rec: &AgentRecord,
    nonce: &str,
) -> Result<BTreeMap<String, String>, AppError> {
    let settings = store.settings()?;
    let ident = store.identity(&rec.name)?;
    let resolved = resolve::resolve_launch(rec, &settings, &ident, Target::Local)?;
    let env = resolve::local_env(rec, &resolved, &ident, nonce);
    refuse_missing_agent(&resolved.launch.command, &env)?;
    Ok(env)
}

/// What a local `start` did.
#[derive(Debug)]
pub enum LocalStart {
    /// A harness was spawned (not supervised: the caller reaps or leaves it).
    Spawned { child: Child, nonce: String },
    /// The agent's harness already runs: nothing was spawned (spec I4).
    AlreadyRunning(Running),
}

/// `start` on the local backend: the same resolver, then the harness as a
/// child — unless the agent's harness already runs (spec I4, local scope).
/// The check and the spawn hold the agent's lock, so two starts at once
/// (two CLI processes, the page and the CLI) spawn one harness.
pub fn start_local(store: &Store, name: &str, harness: &std::path::Path) -> Result<LocalStart, AppError> {
    let rec = store.agent(name)?;
    if !matches!(rec.backend, Backend::Local) {
        return Err(AppError::NotLocal(name.to_string()));
    }
    let _starting = lock::lock(&agent_lock(store, name))?;
    if let Some(r) = crate::local::running(store, name)? {
        return Ok(LocalStart::AlreadyRunning(r));
    }
    let nonce = crate::local::new_nonce();
    let env = local_launch_env(store, &rec, &nonce)?;
    let child = crate::local::spawn(harness, &env, &workdir(store, &rec)?, &store.log_path(name))?;
    // Read while the child is ours and unreaped: its pid cannot be reused yet.
    let identity = crate::procid::ProcessId::of(child.id()).ok();
    store.update_deploy_state(name, |state| {
        state.generation = Some(nonce.clone());
        state.record_digest = Some(rec.launch_digest());
        state.started_at = Some(relay::unix_now());
        state.local_pid = Some(child.id());
        state.local_process = identity;
        state.last_error = None;
    })?;
    Ok(LocalStart::Spawned { child, nonce })
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

/// `stop`: owner-signed `!shutdown` on the agent's relay, then wait for presence
/// `offline` up to `wait` (spec §Stop). Subscribes before publishing so the
/// `offline` cannot be missed. Only an `offline` created after the command
/// began counts, and, when the last start recorded a launch generation, only
/// one from that `run`: a relay replaying stored presence cannot make a
/// never-started agent look stopped.
pub async fn stop(store: &Store, name: &str, wait: Duration) -> Result<(), AppError> {
    let began = relay::unix_now();
    let rec = store.agent(name)?;
    let owner = store.owner()?;
    // Refuse before publishing a `!shutdown` the agent would not accept.
    resolve::check_identity(&rec, &store.identity(name)?)?;
    let run = store.deploy_state(name)?.generation;
    let client = relay::connect(&rec.relay_url, owner, Duration::from_secs(10)).await?;
    let authors = vec![rec.pubkey.clone()];
    let since = presence_floor(began);
    let mut feed = relay::subscribe_presence(&client, &rec.relay_url, &authors, since).await?;
    relay::send_shutdown(&client, &rec.relay_url, &rec.pubkey, rec.channel.as_deref()).await?;
    // The second the `!shutdown` is dated in (it was signed before this read).
    let shutdown_second = relay::unix_now();
    let mut tracker = Tracker::new(authors, presence_ttl()).since(since);
    let pk = rec.pubkey.clone();
    let ok = feed
        .pump(&mut tracker, wait, &mut |_, _| {}, &|t| {
            reached(t, &pk, Derived::Offline, run.as_deref())
        })
        .await;
    client.shutdown().await;
    store.update_deploy_state(name, |state| {
        // The harness said offline, or its recorded process is gone.
        if ok || crate::local::running_from(name, state).is_none() {
            state.local_pid = None;
            state.local_process = None;
        }
    })?;
    // A harness subscribes from the second it starts, and the relay keeps the
    // `!shutdown`: a run started in the same second would read it and stop.
    // Returning only once that second is over keeps a `stop` from reaching
    // the next `start`.
    tokio::time::sleep(until_after_second(shutdown_second, std::time::SystemTime::now())).await;
    if ok {
        Ok(())
    } else {
        Err(AppError::NotOffline {
            name: name.to_string(),
            wait,
        })
    }
}

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

/// A local start that was watched from before the spawn.
#[derive(Debug)]
pub struct WatchedStart {
    /// The harness (not supervised: the caller reaps or leaves it).
    pub child: Child,
    /// The launch generation it was given.
    pub nonce: String,
    /// Whether presence `online` from that run arrived within the wait.
    pub online: bool,
}

/// `start` on the local backend with the presence subscription opened
/// *before* the harness is spawned: presence is ephemeral, and a harness
/// that reaches the relay faster than a subscription opened after the
/// spawn would announce `online` to nobody (the next republish is a
/// minute away). `on_spawned` sees the pid and run once the child exits
/// `spawn`. Refuses before spawning when the relay cannot be reached. An
/// agent whose harness already runs is left alone ([`Watched::AlreadyRunning`]).
pub async fn start_local_watched(
    store: &Store,
    name: &str,
    harness: &std::path::Path,
    wait: Duration,
    on_spawned: &mut (dyn FnMut(u32, &str) + Send),
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
    let mut tracker = Tracker::new(authors, presence_ttl()).since(since);
    let pk = rec.pubkey.clone();
    let online = feed
        .pump(&mut tracker, wait, &mut |_, _| {}, &|t| {
            reached(t, &pk, Derived::Online, Some(nonce.as_str()))
        })
        .await;
    client.shutdown().await;
    Ok(Watched::Started(WatchedStart { child, nonce, online }))
}

/// Live presence of a set of agents across their relays (spec I3), for
/// `status`: subscriptions asking for the last TTL of presence, reports timed
/// by `created_at`.
pub struct PresenceWatch {
    /// The derived state of every agent.
    pub tracker: Tracker,
    feeds: Vec<relay::PresenceFeed>,
    clients: Vec<nostr_sdk::Client>,
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
        let mut by_relay: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        for a in agents {
            by_relay
                .entry(a.relay_url.as_str())
                .or_default()
                .push(a.pubkey.clone());
        }
        let (mut feeds, mut clients, mut warnings) = (Vec::new(), Vec::new(), Vec::new());
        for (url, authors) in by_relay {
            match relay::connect(url, owner.clone(), Duration::from_secs(10)).await {
                Ok(c) => match relay::subscribe_presence(&c, url, &authors, since).await {
                    Ok(f) => {
                        feeds.push(f);
                        clients.push(c);
                    }
                    Err(e) => warnings.push(e.to_string()),
                },
                Err(e) => warnings.push(e.to_string()),
            }
        }
        Ok(PresenceWatch {
            tracker,
            feeds,
            clients,
            warnings,
        })
    }

    /// Feeds every subscription for about `step`.
    pub async fn pump(
        &mut self,
        step: Duration,
        on_change: &mut dyn FnMut(&crate::presence::Change, &Tracker),
    ) {
        for f in self.feeds.iter_mut() {
            f.pump(&mut self.tracker, step, on_change, &|_| false).await;
        }
        if self.feeds.is_empty() {
            tokio::time::sleep(step).await;
        }
    }

    /// Listens until every pubkey in `expected` has reported or `listen`
    /// passed (at once when no relay could be reached).
    pub async fn listen(&mut self, expected: &[String], listen: Duration) {
        let deadline = tokio::time::Instant::now() + listen;
        let step = Duration::from_millis(200);
        while !self.feeds.is_empty()
            && !expected.iter().all(|pk| self.tracker.last(pk).is_some())
            && tokio::time::Instant::now() < deadline
        {
            self.pump(step, &mut |_, _| {}).await;
        }
    }

    /// Disconnects.
    pub async fn close(self) {
        for c in self.clients {
            c.shutdown().await;
        }
    }
}

/// The agents `status` waits for: deployed ones and live local ones.
pub fn expected_live(store: &Store, agents: &[AgentRecord]) -> Vec<String> {
    agents
        .iter()
        .filter(|a| store.deploy_state(&a.name).is_ok_and(|st| is_live(&a.name, &st)))
        .map(|a| a.pubkey.clone())
        .collect()
}

/// `chat`: send a mention as the owner and return the agent's reply.
pub async fn chat(store: &Store, name: &str, text: &str, wait: Duration) -> Result<String, AppError> {
    let rec = store.agent(name)?;
    let owner = store.owner()?;
    let client = relay::connect(&rec.relay_url, owner, Duration::from_secs(10)).await?;
    let reply = relay::chat(
        &client,
        &rec.relay_url,
        &rec.pubkey,
        rec.channel.as_deref(),
        text,
        wait,
    )
    .await;
    client.shutdown().await;
    Ok(reply?)
}

/// `delete` (spec §Stop and Delete; review b30b1a0 finding 9): refuses,
/// without `force_remote_delete`, a deployed agent and one whose local
/// harness runs (a verified identity, [`crate::local::running`]); refuses
/// always while a start of it is in progress (its lock is held: the start
/// would re-create what the delete removed, force or not).
pub fn delete(store: &Store, name: &str, force_remote_delete: bool) -> Result<(), AppError> {
    let Some(_held) = lock::try_lock_for(&agent_lock(store, name), Duration::from_millis(200))? else {
        return Err(AppError::Busy(name.to_string()));
    };
    delete_locked(store, name, force_remote_delete)
}

/// [`delete`] once the agent's lock is held (see [`crate::teardown::delete`]).
pub(crate) fn delete_locked(store: &Store, name: &str, force_remote_delete: bool) -> Result<(), AppError> {
    store.agent(name)?;
    let state = store.deploy_state(name)?;
    if !force_remote_delete {
        if let Some(r) = crate::local::running_from(name, &state) {
            return Err(AppError::LiveLocal(r));
        }
        if let Some(id) = state.agent_id {
            return Err(AppError::Deployed(name.to_string(), id));
        }
    }
    store.delete_agent(name)?;
    Ok(())
}

/// The presence TTL in force (`BUZZ_LAUNCHER_PRESENCE_TTL_SECS`, default 180 s).
pub fn presence_ttl() -> Duration {
    std::env::var(crate::limits::PRESENCE_TTL_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(buzz_contract::presence::PRESENCE_TTL, Duration::from_secs)
}

/// Sets one `provider_config` field from user input (`key=value`); an empty
/// value clears it (Known Defect 8: cleared means omitted).
pub fn set_config_field(config: &mut serde_json::Map<String, Value>, key: &str, value: &str) {
    if value.trim().is_empty() {
        config.remove(key);
    } else {
        config.insert(key.to_string(), Value::String(value.to_string()));
    }
}

/// True when the agent has a stored `agent_id`.
pub fn is_deployed(state: &DeployState) -> bool {
    state.agent_id.is_some()
}

/// True when the agent is deployed or its local harness runs (the
/// "deployed" axis of I3 as `status` and the page show it).
pub fn is_live(name: &str, state: &DeployState) -> bool {
    is_deployed(state) || crate::local::running_from(name, state).is_some()
}

#[cfg(test)]
#[path = "app_tests.rs"]
mod tests;
