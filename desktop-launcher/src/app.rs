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
use crate::record::{AgentRecord, Backend, DeployState};
use crate::relay::{self, RelayError};
use crate::resolve::{self, ResolveError, Target};
use crate::restart::{self, After};
use crate::store::{Store, StoreError};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

// The commands that wait on a running agent live in `relay_ops` and
// `status_watch`; their paths stay `app::stop`, `app::chat`, ….
pub use crate::relay_ops::{
    StartOutcome, StopOptions, Stopped, Watched, WatchedStart, chat, chat_with, start_local_watched, stop,
    stop_with, until_after_second, wait_online,
};
pub use crate::status_watch::{PresenceWatch, expected_live, local_status, running_local};

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
    /// A Start found the run the last stop saw go offline still reported
    /// running after [`restart::SETTLE`].
    #[error("{}", restart::still_reported(.name, .generation))]
    StoppedRunStillReported { name: String, generation: String },
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
    /// Known not to run, before any wait (the sentence says why and what to do).
    #[error("{0}")]
    NotRunning(String),
    #[error(
        "nothing to send: the message for `{0}` is empty; give its text, e.g. `buzz-launcher chat {0} \"hello\"`"
    )]
    EmptyChat(String),
    #[error("the harness of `{name}` {how}; its log: {}", .log.display())]
    HarnessExited { name: String, how: String, log: PathBuf },
    #[error(
        "{name} did not report presence online within {}s; its harness (pid {pid}) still runs{lines}; its log: {}",
        .wait.as_secs(), .log.display()
    )]
    NotOnline {
        name: String,
        wait: Duration,
        pid: u32,
        lines: String,
        log: PathBuf,
    },
    #[error(
        "agent command `{command}` {what}; install it, or give its full path with `buzz-launcher agent edit {name} --command /path/to/{command}`"
    )]
    CommandMissing {
        name: String,
        command: String,
        what: &'static str,
    },
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
    let stopped = store.deploy_state(name)?.stopped_generation;
    // Marked before the provider runs: a Start that ends without an
    // `agent_id`, however it ends, may have left a pod (`teardown::remote_side`).
    store.update_deploy_state(name, |state| state.deploy_sent_at = Some(relay::unix_now()))?;
    // One staged copy and one `info` per Start, however often it deploys
    // (a restart waiting for the node, `restart`): the nsec reaches only the
    // bytes that answered `info` (review 9b395e0 finding 9). `None`: the
    // stopped run was still reported after `restart::SETTLE`.
    let result = gate::negotiate(&resolution, &store.staging_root(), &wd, &opts.gate, on_status).and_then(
        |negotiated| {
            let first = std::time::Instant::now();
            loop {
                let schema = negotiated.info().get("config_schema");
                // Every field the schema requires, named at once with its `--config` fix (issue 24 item 5).
                let cfg = payload::deploy_config(name, &config, schema).map_err(PayloadError::from)?;
                let request_id = hex::encode(rand::random::<[u8; 16]>());
                let req = payload::build_deploy_request(&rec, &resolved, &ident, cfg, &request_id)?;
                let d = negotiated.deploy(&req, &opts.gate, on_status)?;
                match restart::after_deploy(
                    name,
                    stopped.as_deref(),
                    d.generation.as_deref(),
                    first.elapsed(),
                ) {
                    After::Done => break Ok(Some(d)),
                    After::Retry(line) => {
                        on_status(&line);
                        std::thread::sleep(restart::RETRY_EVERY);
                    }
                    After::GiveUp => break Ok(None),
                }
            }
        },
    );
    let result = match result {
        Ok(Some(d)) => Ok(d),
        Ok(None) => {
            let e = AppError::StoppedRunStillReported {
                name: name.to_string(),
                generation: stopped.clone().unwrap_or_default(),
            };
            store.update_deploy_state(name, |state| state.last_error = Some(e.to_string()))?;
            return Err(e);
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(d) => {
            store.update_deploy_state(name, |state| {
                state.agent_id = Some(d.agent_id.clone());
                state.generation = d.generation.clone();
                state.stopped_generation = None;
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

/// Refuses a local start whose agent command is missing from the `PATH`
/// the harness will get: the spawn env's own, else the launcher's, which
/// the harness inherits (`PATH` is host-resolved: no user layer sets it).
/// A preset's refusal carries its install hint; a custom command's says
/// how to name it (issue 24 item 1: a local start refuses a missing command).
fn refuse_missing_agent(name: &str, command: &str, env: &BTreeMap<String, String>) -> Result<(), AppError> {
    let path = env
        .get("PATH")
        .map(std::ffi::OsString::from)
        .or_else(|| std::env::var_os("PATH"));
    if let Some(m) = crate::presets::missing_binary(command, path.as_deref()) {
        return Err(m.into());
    }
    let builtin = command == buzz_contract::env::BUILTIN_ECHO_AGENT
        || buzz_contract::agents::preset_for_command(command).is_some();
    if builtin || crate::presets::find_on_path(command, path.as_deref()).is_some() {
        return Ok(());
    }
    Err(AppError::CommandMissing {
        name: name.to_string(),
        command: command.to_string(),
        what: if command.contains('/') {
            "is not an executable file"
        } else {
            "is not on PATH"
        },
    })
}

/// The local spawn env of `rec` from the one resolver, after every refusal
/// of a local start (nothing is spawned here).
pub(crate) fn local_launch_env(
    store: &Store,
    rec: &AgentRecord,
    nonce: &str,
) -> Result<BTreeMap<String, String>, AppError> {
    let settings = store.settings()?;
    let ident = store.identity(&rec.name)?;
    let resolved = resolve::resolve_launch(rec, &settings, &ident, Target::Local)?;
    let env = resolve::local_env(rec, &resolved, &ident, nonce);
    refuse_missing_agent(&rec.name, &resolved.launch.command, &env)?;
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
    let child = crate::local::spawn(
        harness,
        &env,
        &workdir(store, &rec)?,
        &store.log_path(name),
        &nonce,
    )?;
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
