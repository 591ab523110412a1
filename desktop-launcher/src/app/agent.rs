//! What every operation on one agent shares: the options a provider start
//! runs under, the agent's workdir and start lock, the presence TTL, and the
//! two axes of "deployed" as `status` and the page show them (spec I3).

use super::error::AppError;
use crate::discovery;
use crate::gate::GateConfig;
use crate::limits::STRICT_ENV;
use crate::record::{AgentRecord, DeployState};
use crate::store::Store;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

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

/// Whether a record's `provider_config` asks for a workspace volume that
/// outlives the pod (Kubernetes' `workspace_size`): what a deploy records
/// and a teardown asks about ([`super::teardown::may_remove_workspace`]).
pub fn has_workspace_volume(config: &serde_json::Map<String, serde_json::Value>) -> bool {
    config
        .get("workspace_size")
        .and_then(|v| v.as_str())
        .is_some_and(|s| !s.trim().is_empty())
}

/// The lock a start of `name` holds (see [`crate::lock`]).
pub(crate) fn agent_lock(store: &Store, name: &str) -> PathBuf {
    store.lock_path(&format!("agent-{name}"))
}

/// The presence TTL in force (`BUZZ_LAUNCHER_PRESENCE_TTL_SECS`, default 180 s).
pub fn presence_ttl() -> Duration {
    std::env::var(crate::limits::PRESENCE_TTL_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(buzz_contract::presence::PRESENCE_TTL, Duration::from_secs)
}

/// Why an agent whose last word was `online` counts as offline at `now`,
/// under the TTL in force ([`crate::presence::silence`]).
pub fn silence(last: Option<&crate::presence::Report>, now: u64) -> Option<String> {
    crate::presence::silence(last, now, presence_ttl())
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

/// The lock a waker (`ui` or `serve`, issue 33) holds while it runs: one
/// waker per state dir, so two launchers never wake one agent twice.
pub(crate) fn waker_lock(store: &Store) -> PathBuf {
    store.lock_path("waker")
}

/// Where the running waker writes its pid.
pub(crate) fn waker_pid_path(store: &Store) -> PathBuf {
    store.root().join("waker.pid")
}

/// The pid of the waker this state dir runs, if one runs: whatever holds
/// [`waker_lock`] (its pid file says which process).
pub fn waker_running(store: &Store) -> Option<u32> {
    match crate::lock::try_lock(&waker_lock(store)) {
        Ok(Some(_free)) => None,
        Ok(None) => Some(
            std::fs::read_to_string(waker_pid_path(store))
                .ok()
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or(0),
        ),
        Err(_) => None,
    }
}

/// What `agent create`, `status` and the page say about waking (issue 33).
pub fn waker_text(store: &Store) -> String {
    match waker_running(store) {
        Some(pid) => format!(
            "a waker runs (pid {pid}): a sleeping agent wakes on a mention its gate accepts"
        ),
        None => "no waker runs: nothing wakes a sleeping agent; run `buzz-launcher serve` or `buzz-launcher ui` to wake agents on a mention".to_string(),
    }
}

/// What `agent create` says of the agent's idle stop and its waking.
pub fn inactivity_text(store: &Store, rec: &AgentRecord) -> String {
    let waker = waker_running(store).is_some();
    let bound = match crate::wake::inactivity(rec.inactivity_seconds, waker) {
        Some(0) => "never stops when idle".to_string(),
        Some(n) => format!("sleeps after {n} s idle"),
        None => "stops when idle only as its backend's default says".to_string(),
    };
    let doze = match crate::wake::doze(rec.doze_seconds) {
        0 => "never dozes".to_string(),
        n => {
            format!("dozes after {n} s idle (its agent processes end; it answers the next mention by itself)")
        }
    };
    format!("{}: {doze}; {bound}; {}", rec.name, waker_text(store))
}
