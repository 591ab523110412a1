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
