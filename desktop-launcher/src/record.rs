//! Agent records, launcher settings and deploy bookkeeping (spec §System Model
//! "agent record", §deploy "`agent_id` … its presence is the `deployed` axis of I3").
//!
//! Records never contain key material: the agent's private key, its NIP-OA
//! tag and its secret env (API keys given with `--env-file`, `--env-stdin` or
//! the Start page's API key field) live in separate `0600` files (see
//! [`crate::store`]).
//!
//! Fields added after records were first written are `serde(default)` and
//! skipped when unset, so an older record file reads as before and its
//! [`AgentRecord::launch_digest`] does not change by an upgrade alone (a
//! changed digest would note "the edit applies after the next restart" on
//! every deployed agent).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where an agent runs (spec §System Model "backend discriminator").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Backend {
    /// The harness runs as a child process on this machine.
    #[default]
    Local,
    /// A provider `buzz-backend-<id>` deploys it.
    Provider {
        /// Provider id (`[a-z0-9][a-z0-9_-]*`).
        id: String,
        /// `provider_config`, I2-validated before use; never secret.
        #[serde(default)]
        config: Map<String, Value>,
        /// Cached binary path; only a cache, revalidated against discovery (spec §Discovery "Resolution rule").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path_cache: Option<PathBuf>,
    },
}

impl Backend {
    /// The backend as the CLI's `--backend` takes it and every listing
    /// shows it: `local` or `provider:<id>`.
    pub fn label(&self) -> String {
        match self {
            Backend::Local => "local".into(),
            Backend::Provider { id, .. } => format!("provider:{id}"),
        }
    }
}

/// A persona: a reusable layer between the global env and the agent's own (spec §deploy `env_vars`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Persona {
    /// Definition-provided command name.
    #[serde(default)]
    pub agent_command: Option<String>,
    /// Definition-provided args (the fallback when the agent's own are empty).
    #[serde(default)]
    pub agent_args: Vec<String>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    /// Persona env layer.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Launcher-wide settings (`settings.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Settings {
    /// Global env layer (lowest user tier).
    #[serde(default)]
    pub global_env: BTreeMap<String, String>,
    /// Named personas.
    #[serde(default)]
    pub personas: BTreeMap<String, Persona>,
    /// Team instructions (`BUZZ_ACP_TEAM_INSTRUCTIONS`).
    #[serde(default)]
    pub team_instructions: Option<String>,
    /// Only approved provider digests may deploy.
    #[serde(default)]
    pub strict_providers: bool,
    /// Relays `sync` reads the owner's shared records from, beside each
    /// agent's own (issue 52; `init --relay`, `sync --relay`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sync_relays: Vec<String>,
}

/// One agent (spec §System Model "agent record"), minus its secrets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// Unique name, also the file name.
    pub name: String,
    /// The agent's public key, 64 lowercase hex (public).
    pub pubkey: String,
    /// Display name; the session title derives from it.
    #[serde(default)]
    pub display_name: Option<String>,
    /// Concrete relay WebSocket URL.
    pub relay_url: String,
    /// Optional channel (`h` tag) for stop and chat messages.
    #[serde(default)]
    pub channel: Option<String>,
    /// ACP agent command *name*; `None` falls back to the persona, then `goose`.
    #[serde(default)]
    pub agent_command: Option<String>,
    #[serde(default)]
    pub agent_args: Vec<String>,
    /// Persona name (a layer between global and agent env).
    #[serde(default)]
    pub persona: Option<String>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// The agent's session mode id, applied by the harness with
    /// `session/set_mode` (`BUZZ_ACP_PERMISSION_MODE`, tier 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// How the harness answers `session/request_permission`: `allow`,
    /// `reject` or `ask-owner` (`BUZZ_ACP_PERMISSION_POLICY`, tier 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_policy: Option<String>,
    /// The same for turns of any author but the owner (strangers the
    /// `respond_to` gate admits): the harness defaults to `reject`
    /// (`BUZZ_ACP_PERMISSION_POLICY_OTHERS`, tier 1; issue 30 item 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_policy_others: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub turn_timeout_seconds: Option<u64>,
    #[serde(default)]
    pub idle_timeout_seconds: Option<u64>,
    #[serde(default)]
    pub max_turn_duration_seconds: Option<u64>,
    #[serde(default)]
    pub parallelism: Option<u64>,
    /// The harness's inactivity bound in seconds (`agent create|edit
    /// --inactivity`; 0 = none). Unset: the launcher's wake rule decides
    /// at each start (issue 33).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactivity_seconds: Option<u64>,
    /// The harness's doze bound in seconds (`agent create|edit --doze`;
    /// 0 = none; issue 50). Unset: [`crate::wake::DEFAULT_DOZE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doze_seconds: Option<u64>,
    /// Respond-to gate mode (wire-facts §4).
    #[serde(default = "default_respond_to")]
    pub respond_to: String,
    #[serde(default)]
    pub respond_to_allowlist: Vec<String>,
    /// Agent env layer (highest user tier), non-secret values. Secret
    /// values live in `keys/<name>.env` ([`crate::store::Store::secret_env`]).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Bumped at every change of the agent's secret env, so
    /// [`AgentRecord::launch_digest`] notices a rotated key. A counter:
    /// nothing of the secret goes into it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub secret_env_revision: u64,
    /// Owner-encrypted telemetry frames.
    #[serde(default)]
    pub relay_observer: bool,
    /// Working directory for providers and the local harness.
    #[serde(default)]
    pub workdir: Option<PathBuf>,
    #[serde(default)]
    pub backend: Backend,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn default_respond_to() -> String {
    buzz_contract::gate::RespondTo::OwnerOnly.as_str().to_string()
}

impl AgentRecord {
    /// A new record with defaults.
    pub fn new(name: &str, pubkey: &str, relay_url: &str) -> AgentRecord {
        AgentRecord {
            name: name.to_string(),
            pubkey: pubkey.to_string(),
            display_name: None,
            relay_url: relay_url.to_string(),
            channel: None,
            agent_command: None,
            agent_args: Vec::new(),
            persona: None,
            system_prompt: None,
            model: None,
            permission_mode: None,
            permission_policy: None,
            permission_policy_others: None,
            provider: None,
            turn_timeout_seconds: None,
            idle_timeout_seconds: None,
            max_turn_duration_seconds: None,
            parallelism: None,
            inactivity_seconds: None,
            doze_seconds: None,
            respond_to: default_respond_to(),
            respond_to_allowlist: Vec::new(),
            env: BTreeMap::new(),
            secret_env_revision: 0,
            relay_observer: false,
            workdir: None,
            backend: Backend::Local,
        }
    }

    /// Digest of everything that shapes a launch (the path cache excluded), so
    /// `status` can say "the record changed since the last deploy".
    pub fn launch_digest(&self) -> String {
        let mut copy = self.clone();
        if let Backend::Provider { path_cache, .. } = &mut copy.backend {
            *path_cache = None;
        }
        let bytes = serde_json::to_vec(&copy).unwrap_or_default();
        hex::encode(Sha256::digest(bytes))
    }
}

/// Deploy bookkeeping (`deploy/<name>.json`): the deployed axis of I3 and the
/// inputs of the desired-versus-actual note.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DeployState {
    /// The provider's handle (`backend_agent_id`); `Some` = deployed.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The launch generation the last start used, when known (32 hex).
    #[serde(default)]
    pub generation: Option<String>,
    /// The generation whose own `offline` the last `stop` saw: a deploy
    /// that answers with it found the stopped run still reported running
    /// ([`crate::restart`]). Cleared by the next start's fresh generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_generation: Option<String>,
    /// Unix seconds at which a Start last sent `deploy`, kept until an
    /// `undeploy` succeeds: a Start that ended without an `agent_id`
    /// (failed, or the launcher was killed) may have left a pod, and `delete`
    /// undeploys first ([`crate::app::teardown::remote_side`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_sent_at: Option<u64>,
    /// [`AgentRecord::launch_digest`] at the last successful start.
    #[serde(default)]
    pub record_digest: Option<String>,
    /// Unix seconds of the last successful start.
    #[serde(default)]
    pub started_at: Option<u64>,
    /// Redacted last error.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Provider binary that ran last: path and SHA-256.
    #[serde(default)]
    pub provider_binary: Option<String>,
    /// Local harness process id, when started locally (for people reading
    /// the file; the identity is [`DeployState::local_process`]).
    #[serde(default)]
    pub local_pid: Option<u32>,
    /// The local harness's identity (pid, start time, boot, executable):
    /// what decides whether it still runs (see [`crate::procid`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_process: Option<crate::procid::ProcessId>,
    /// Unix seconds of the owner's last stop through a launcher (`stop`,
    /// the page's Stop, `undeploy`): an agent stopped so is never woken
    /// (issue 33, spec I5), until its next start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<u64>,
    /// How a run ended as its last presence said (its `stop` tag), seen by
    /// a launcher watching: the only record of a provider agent's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<EndedSeen>,
    /// A deploy of this record asked for a workspace volume, and no undeploy
    /// has removed it since (review afa2bf1 finding 8): an Undeploy or
    /// Delete asks about the volume whatever the config says now.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub workspace_deployed: bool,
}

/// A run's end as its last presence said (`["stop", reason]`, issue 33).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedSeen {
    /// The run's generation (its presence `run` tag).
    pub run: String,
    /// `buzz_contract::wake::StopReason`'s word.
    pub reason: String,
    /// The presence's `created_at`, unix seconds.
    pub at: u64,
}

/// True for a record name usable as a file name.
pub fn valid_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !name.starts_with('-')
}

/// The command a launch of `record` runs: the agent's own, else its
/// persona definition's, else [`crate::runtime::DEFAULT_COMMAND`] (an unknown persona gives
/// nothing here; [`crate::resolve::resolve_launch`] refuses it).
pub fn effective_command(record: &AgentRecord, settings: &Settings) -> String {
    let persona = record.persona.as_ref().and_then(|p| settings.personas.get(p));
    non_empty(&record.agent_command)
        .or_else(|| persona.and_then(|p| non_empty(&p.agent_command)))
        .unwrap_or_else(|| crate::runtime::DEFAULT_COMMAND.to_string())
}

/// A set field's trimmed value; unset and blank are both nothing.
pub(crate) fn non_empty(s: &Option<String>) -> Option<String> {
    s.as_ref()
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// The agent's secrets, hydrated from the key files just before use.
#[derive(Clone)]
pub struct Identity {
    /// The agent's private key (`nsec1…`).
    pub nsec: String,
    /// NIP-OA auth tag JSON, if minted.
    pub auth_tag: Option<String>,
    /// The owner's pubkey hex (legacy `BUZZ_ACP_AGENT_OWNER` fallback).
    pub owner_pubkey: Option<String>,
    /// The agent's secret env (API keys), the last user env layer.
    pub secret_env: BTreeMap<String, String>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("nsec", &"<redacted>")
            .field("auth_tag", &self.auth_tag.as_ref().map(|_| "<redacted>"))
            .field("owner_pubkey", &self.owner_pubkey)
            .field("secret_env", &self.secret_env.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_digest_ignores_path_cache() {
        let mut r = AgentRecord::new("a", &"a".repeat(64), "ws://r");
        r.backend = Backend::Provider {
            id: "k".into(),
            config: Map::new(),
            path_cache: None,
        };
        let d = r.launch_digest();
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<AgentRecord>(&json).unwrap(), r);
        if let Backend::Provider { path_cache, .. } = &mut r.backend {
            *path_cache = Some("/x".into());
        }
        assert_eq!(r.launch_digest(), d);
        r.model = Some("m".into());
        assert_ne!(r.launch_digest(), d);
    }

    #[test]
    fn an_older_record_reads_and_keeps_its_digest() {
        let r = AgentRecord::new("a", &"a".repeat(64), "ws://r");
        let json = serde_json::to_value(&r).unwrap();
        for added in [
            "permission_mode",
            "permission_policy",
            "permission_policy_others",
            "secret_env_revision",
        ] {
            assert!(json.get(added).is_none(), "{added} is written while unset");
        }
        let mut old = json.as_object().unwrap().clone();
        old.remove("backend");
        let back: AgentRecord = serde_json::from_value(Value::Object(old)).unwrap();
        assert_eq!(back.launch_digest(), r.launch_digest());
        let mut rotated = r.clone();
        rotated.secret_env_revision += 1;
        assert_ne!(rotated.launch_digest(), r.launch_digest());
    }

    #[test]
    fn agent_names() {
        assert!(valid_agent_name("my-agent_1"));
        for bad in ["", "../x", "a b", "-x", "a/b"] {
            assert!(!valid_agent_name(bad), "{bad}");
        }
    }
}
