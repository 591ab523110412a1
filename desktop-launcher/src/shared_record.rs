//! An agent record as the owner's private head, kind 30179 (issue 52 item
//! 2; [`buzz_contract::managed_record`], upstream's format): what this
//! desktop shares of an agent with the owner's other desktops, and reads
//! back from them. Pure: the record, its secrets and its deployment in, a
//! payload out, and the reverse.
//!
//! What goes where:
//! - upstream's members, where one means the same: `name`, `relay_url`,
//!   `agent_command_override` (the command *name*), `agent_args`,
//!   `system_prompt`, `model`, `provider`, `parallelism`, `respond_to`
//!   and its allowlist, `idle_timeout_seconds`,
//!   `max_turn_duration_seconds`, `persona_id` (the persona's name),
//!   `runtime` (the preset whose command the record runs), `backend`
//!   (`{"type":"local"}` or `{"type":"provider","id":…,"config":{…}}`, the
//!   launcher's provider config as it is: never secret, spec I2) and
//!   `backend_agent_id` (the provider's `agent_id` of the live deployment);
//! - `env_vars`: the record's env **and** its secret env, one map, as
//!   upstream keeps it; which names were not secret rides in our extension,
//!   so a second desktop files each value where the first did;
//! - the launcher's own fields upstream has no member for, in the
//!   extension [`EXTENSION`] ([`Ours`]);
//! - never: the working directory (a path of this machine), the provider's
//!   cached binary path, the secret env revision (bookkeeping).
//!
//! [`materialize`] is the way back: the record a head describes, for a
//! desktop that does not have it yet (issue 52 item 3).
//!
//! A head another writer made keeps what this desktop does not own: its
//! unknown members, other extensions, and the backend's members beside
//! `type`, `id` and `config` (upstream's `name`, `summary`) while it names
//! the same backend ([`body`] starts from it).

use crate::record::{AgentRecord, Backend, Identity};
use buzz_contract::managed_record::{self, Config, Payload};
use nostr_sdk::prelude::{EventId, Keys, PublicKey};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Our extension's key in the payload's `extensions`.
pub const EXTENSION: &str = "buzz-launcher:record";

/// The launcher's fields that upstream's payload has no member for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ours {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_policy_others: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_timeout_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactivity_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doze_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub relay_observer: bool,
    /// The names in `env_vars` that are the record's plain env; every
    /// other name there is secret env.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub public_env: Vec<String>,
}

/// What this desktop knows of one agent.
pub struct Local<'a> {
    pub record: &'a AgentRecord,
    pub identity: &'a Identity,
    /// The provider's `agent_id` while deployed.
    pub agent_id: Option<&'a str>,
}

/// The head's body for `local`, built on `base` (the head it follows, or
/// none for a first one): generation and predecessor are `base`'s own,
/// for [`successor`] to move on; `updated_at` is `now`.
pub fn body(local: &Local, owner: &PublicKey, agent: &Keys, base: Option<&Payload>, now: u64) -> Payload {
    let rec = local.record;
    let mut p = match base {
        Some(b) => b.clone(),
        None => Payload::first(owner, agent, identity_of(local.identity), empty_config(), now),
    };
    p.identity = identity_of(local.identity);
    p.updated_at = managed_record::rfc3339(now);
    let c = &mut p.config;
    c.relay_url = rec.relay_url.clone();
    c.name = rec.name.clone();
    c.persona_id = rec.persona.clone();
    c.runtime = rec
        .agent_command
        .as_deref()
        .and_then(preset_of)
        .map(str::to_string);
    c.model = rec.model.clone();
    c.provider = rec.provider.clone();
    c.system_prompt = rec.system_prompt.clone();
    c.parallelism = rec.parallelism.map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    c.respond_to = Some(rec.respond_to.clone());
    c.respond_to_allowlist = rec.respond_to_allowlist.clone();
    c.agent_command_override = rec.agent_command.clone();
    c.agent_args = rec.agent_args.clone();
    c.idle_timeout_seconds = rec.idle_timeout_seconds;
    c.max_turn_duration_seconds = rec.max_turn_duration_seconds;
    c.env_vars = rec.env.clone();
    c.env_vars.extend(local.identity.secret_env.clone());
    c.backend = backend_value(&rec.backend, base.map(|b| &b.config.backend));
    c.backend_agent_id = local.agent_id.map(str::to_string);
    let ours = Ours {
        display_name: rec.display_name.clone(),
        channel: rec.channel.clone(),
        permission_mode: rec.permission_mode.clone(),
        permission_policy: rec.permission_policy.clone(),
        permission_policy_others: rec.permission_policy_others.clone(),
        turn_timeout_seconds: rec.turn_timeout_seconds,
        inactivity_seconds: rec.inactivity_seconds,
        doze_seconds: rec.doze_seconds,
        relay_observer: rec.relay_observer,
        public_env: rec.env.keys().cloned().collect(),
    };
    p.extensions
        .insert(EXTENSION.into(), serde_json::to_value(ours).unwrap_or_default());
    p
}

/// `body` as the head after `head` (whose event id is `head_id`).
pub fn successor(mut body: Payload, head_id: &EventId, head: &Payload) -> Payload {
    body.generation = head.generation + 1;
    body.previous_event_id = Some(head_id.to_hex());
    body
}

fn identity_of(id: &Identity) -> managed_record::Identity {
    managed_record::Identity {
        private_key_nsec: id.nsec.clone(),
        auth_tag: id.auth_tag.clone(),
    }
}

fn empty_config() -> Config {
    Config {
        relay_url: String::new(),
        name: String::new(),
        persona_id: None,
        runtime: None,
        model: None,
        provider: None,
        system_prompt: None,
        parallelism: None,
        respond_to: None,
        respond_to_allowlist: Vec::new(),
        agent_command_override: None,
        agent_args: Vec::new(),
        idle_timeout_seconds: None,
        max_turn_duration_seconds: None,
        env_vars: Default::default(),
        backend: json!({"type": "local"}),
        backend_agent_id: None,
        team_id: None,
        persona_name_in_team: None,
        relay_mesh: None,
        effort_level: None,
        extra: Map::new(),
    }
}

/// The preset whose command is `command` (upstream's `runtime`).
fn preset_of(command: &str) -> Option<&'static str> {
    buzz_contract::agents::PRESETS
        .iter()
        .find(|p| p.command == command)
        .map(|p| p.name)
}

/// Upstream's `BackendKind` for `b`, keeping `base`'s other members while it
/// names the same backend.
fn backend_value(b: &Backend, base: Option<&Value>) -> Value {
    let (kind, id, config) = match b {
        Backend::Local => ("local", None, None),
        Backend::Provider { id, config, .. } => ("provider", Some(id), Some(config)),
    };
    let same =
        base.filter(|v| v["type"] == kind && id.is_none_or(|id| v["id"].as_str() == Some(id.as_str())));
    let mut out = same.and_then(Value::as_object).cloned().unwrap_or_default();
    out.insert("type".into(), kind.into());
    if let (Some(id), Some(config)) = (id, config) {
        out.insert("id".into(), id.clone().into());
        out.insert("config".into(), Value::Object(config.clone()));
    }
    Value::Object(out)
}

/// An agent as a head says it, ready to be filed in a state dir: the
/// reverse of [`body`].
#[derive(Clone)]
pub struct Materialized {
    /// The record, without a working directory (this machine's default).
    pub record: AgentRecord,
    /// The agent's key (`nsec1…`) and NIP-OA tag, when the head has one.
    pub nsec: String,
    pub auth_tag: Option<String>,
    /// The env names our extension does not list as plain.
    pub secret_env: std::collections::BTreeMap<String, String>,
    /// The provider's `agent_id` of the live deployment.
    pub agent_id: Option<String>,
}

impl std::fmt::Debug for Materialized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Materialized")
            .field("name", &self.record.name)
            .field("pubkey", &self.record.pubkey)
            .field("agent_id", &self.agent_id)
            .finish_non_exhaustive()
    }
}

/// Why a head cannot become a record here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotMaterialized {
    #[error("its name `{0}` is not a valid agent name here")]
    Name(String),
    #[error("its backend is neither local nor a provider with an id")]
    Backend,
}

/// The record `p` (a checked payload) describes. A head written by another
/// client (no extension of ours) files every env value as secret.
pub fn materialize(p: &Payload) -> Result<Materialized, NotMaterialized> {
    let c = &p.config;
    if !crate::record::valid_agent_name(&c.name) {
        return Err(NotMaterialized::Name(c.name.clone()));
    }
    let ours: Ours = p
        .extensions
        .get(EXTENSION)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let mut rec = AgentRecord::new(&c.name, &p.agent_pubkey, &c.relay_url);
    rec.display_name = ours.display_name;
    rec.channel = ours.channel;
    rec.agent_command = c.agent_command_override.clone().or_else(|| {
        c.runtime
            .as_deref()
            .and_then(|r| buzz_contract::agents::PRESETS.iter().find(|p| p.name == r))
            .map(|p| p.command.to_string())
    });
    rec.agent_args = c.agent_args.clone();
    rec.persona = c.persona_id.clone();
    rec.system_prompt = c.system_prompt.clone();
    rec.model = c.model.clone();
    rec.permission_mode = ours.permission_mode;
    rec.permission_policy = ours.permission_policy;
    rec.permission_policy_others = ours.permission_policy_others;
    rec.provider = c.provider.clone();
    rec.turn_timeout_seconds = ours.turn_timeout_seconds;
    rec.idle_timeout_seconds = c.idle_timeout_seconds;
    rec.max_turn_duration_seconds = c.max_turn_duration_seconds;
    rec.parallelism = c.parallelism.map(u64::from);
    rec.inactivity_seconds = ours.inactivity_seconds;
    rec.doze_seconds = ours.doze_seconds;
    if let Some(r) = &c.respond_to {
        rec.respond_to = r.clone();
    }
    rec.respond_to_allowlist = c.respond_to_allowlist.clone();
    rec.relay_observer = ours.relay_observer;
    rec.backend = backend_of(&c.backend)?;
    let (mut plain, mut secret) = (
        std::collections::BTreeMap::new(),
        std::collections::BTreeMap::new(),
    );
    for (k, v) in &c.env_vars {
        let side = if ours.public_env.contains(k) {
            &mut plain
        } else {
            &mut secret
        };
        side.insert(k.clone(), v.clone());
    }
    rec.env = plain;
    Ok(Materialized {
        record: rec,
        nsec: p.identity.private_key_nsec.clone(),
        auth_tag: p.identity.auth_tag.clone(),
        secret_env: secret,
        agent_id: c.backend_agent_id.clone(),
    })
}

fn backend_of(v: &Value) -> Result<Backend, NotMaterialized> {
    match v["type"].as_str() {
        Some("local") => Ok(Backend::Local),
        Some("provider") => {
            let id = v["id"]
                .as_str()
                .filter(|id| !id.is_empty())
                .ok_or(NotMaterialized::Backend)?;
            Ok(Backend::Provider {
                id: id.to_string(),
                config: v["config"].as_object().cloned().unwrap_or_default(),
                path_cache: None,
            })
        }
        _ => Err(NotMaterialized::Backend),
    }
}

#[cfg(test)]
mod tests;
