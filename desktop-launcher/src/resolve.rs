//! THE launch resolver (spec §Launch data, Known Defect 3; I1).
//!
//! One pure function, [`resolve_launch`], turns a record plus settings plus
//! identity into the `launch` block. The local spawn ([`local_env`]) and the
//! deploy payload ([`crate::payload`]) both consume its output, so the two
//! paths cannot drift. Nothing here reads the launcher's own environment:
//! launch data is computed from record + config alone (spec §Launch data,
//! "Runtime `default_env` … computed from the runtime metadata table only").
//!
//! Agent presets ([`crate::presets`]): a command's default args come from
//! the preset table in `buzz_contract::agents`, not from a launcher copy;
//! the per-agent `permission_mode`, `permission_policy` and
//! `permission_policy_others` are tier 1, like the model
//! (`BUZZ_ACP_PERMISSION_MODE`, `BUZZ_ACP_PERMISSION_POLICY`,
//! `BUZZ_ACP_PERMISSION_POLICY_OTHERS`, each omitted when unset: the
//! harness's own defaults are `allow` for the owner's turns and `reject` for
//! everyone else's). The agent's
//! secret env ([`Identity::secret_env`], `keys/<name>.env`) is the last
//! user layer of tier 2, after the record's own env, with the same
//! reserved-key strip.

use crate::limits::{RELAY_MESH, SESSION_TITLE_MAX_CHARS};
use crate::record::{AgentRecord, Identity, Settings, non_empty};
use crate::runtime;
use buzz_contract::env as names;
use buzz_contract::gate::{self, GateError, RespondTo};
use buzz_contract::keys;
use buzz_contract::nip_oa::AuthTag;
use buzz_contract::wire::Launch;
use std::collections::BTreeMap;

/// Which path will consume the launch block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The harness runs as a child of the launcher.
    Local,
    /// A provider deploys it (relay-mesh is refused here).
    Remote,
}

/// Which env tier a key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Global,
    Persona,
    Agent,
    /// The agent's secret env (`keys/<name>.env`).
    AgentSecret,
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layer::Global => "global",
            Layer::Persona => "persona",
            Layer::Agent => "agent",
            Layer::AgentSecret => "agent secret",
        })
    }
}

/// A key removed from a user env layer, with why (shown to the user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stripped {
    pub layer: Layer,
    pub key: String,
    /// `reserved` or `host-resolved`.
    pub reason: &'static str,
}

/// The resolver's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The `launch` block.
    pub launch: Launch,
    /// Effective values, persona first (spec §deploy "live-persona-first resolution").
    pub system_prompt: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    /// Merged user env (global < persona < agent), reserved keys stripped: the legacy `env_vars`.
    pub user_env: BTreeMap<String, String>,
    /// Normalised respond-to mode and allowlist.
    pub respond_to: RespondTo,
    pub respond_to_allowlist: Vec<String>,
    /// Keys dropped from user layers.
    pub stripped: Vec<Stripped>,
}

/// Why a record cannot be launched. Every message is one actionable sentence
/// and carries no secret (keys are named, values never).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "refusing to launch agent `{0}`: its private key is empty (I1); restore its key file or re-create the agent"
    )]
    EmptyKey(String),
    #[error("refusing to launch agent `{0}`: its private key file does not hold a valid nsec or 64-hex key")]
    MalformedKey(String),
    #[error(
        "refusing to launch agent `{0}`: its key does not match the record's pubkey; restore the right key file"
    )]
    KeyMismatch(String),
    #[error(
        "refusing to launch agent `{0}`: it has neither an auth tag nor an owner pubkey, so `!shutdown` could never stop it; run `buzz-launcher init` and re-create the agent"
    )]
    NoOwner(String),
    #[error(
        "refusing to launch agent `{0}`: its auth tag does not verify for its key ({1}); re-create the agent"
    )]
    BadAuthTag(String, String),
    #[error("refusing to launch agent `{0}`: the owner pubkey is not 64 hex characters")]
    BadOwner(String),
    #[error(
        "refusing to launch agent `{name}`: its auth tag names owner {tag_owner} but the launcher's owner key is {owner}; the agent would obey `!shutdown` only from the tag's owner — run `buzz-launcher agent retag {name}` to re-mint the tag with the current owner"
    )]
    OwnerMismatch {
        name: String,
        tag_owner: String,
        owner: String,
    },
    #[error(
        "refusing to launch agent `{0}`: its owner is the agent's own key; an agent cannot own itself — run `buzz-launcher init --import` with a separate owner key"
    )]
    OwnerIsAgent(String),
    #[error(
        "refusing to deploy agent `{0}`: its provider resolves to relay-mesh, a loopback proxy on this desktop that a remote agent cannot reach; pick another provider or run it locally"
    )]
    RelayMesh(String),
    #[error(
        "agent `{agent}`: the {layer} env key {key:?} is not a POSIX name ([A-Za-z_][A-Za-z0-9_]*); rename or remove it"
    )]
    BadEnvKey {
        agent: String,
        layer: Layer,
        key: String,
    },
    #[error(
        "agent `{0}`: the agent command must be a command name resolved on PATH, not a path or an empty string"
    )]
    BadCommand(String),
    #[error("agent `{0}`: an agent arg contains a comma, which the harness would split; remove it")]
    ArgHasComma(String),
    #[error("agent `{0}`: the relay URL must start with ws:// or wss://")]
    BadRelayUrl(String),
    #[error("agent `{0}`: persona `{1}` does not exist; create it in settings or clear the agent's persona")]
    UnknownPersona(String, String),
    #[error("agent `{0}`: {1}")]
    Gate(String, GateError),
    #[error("agent `{0}`: {1}; fix it with `buzz-launcher agent edit {0}`")]
    Preset(String, crate::presets::PresetError),
}

/// Drops control characters, trims, and keeps at most 80 characters
/// (wire-facts §5; spec §Launch data "a rename must degrade, not turn into a deploy failure").
pub fn sanitize_session_title(raw: &str) -> String {
    let cleaned: String = raw.chars().filter(|c| !c.is_control()).collect();
    cleaned.trim().chars().take(SESSION_TITLE_MAX_CHARS).collect()
}

/// Filters one user env layer: POSIX names are required (refusal), reserved
/// and host-resolved keys are stripped (spec §Reserved-key rule; wire-facts §8 item 3).
fn filter_layer(
    agent: &str,
    layer: Layer,
    env: &BTreeMap<String, String>,
    out: &mut BTreeMap<String, String>,
    stripped: &mut Vec<Stripped>,
) -> Result<(), ResolveError> {
    for (k, v) in env {
        if !names::is_posix_env_key(k) {
            return Err(ResolveError::BadEnvKey {
                agent: agent.to_string(),
                layer,
                key: k.clone(),
            });
        }
        let reason = if names::is_reserved(k) {
            Some("reserved")
        } else if names::is_host_resolved(k) {
            Some("host-resolved")
        } else {
            None
        };
        match reason {
            Some(reason) => stripped.push(Stripped {
                layer,
                key: k.clone(),
                reason,
            }),
            None => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

/// Checks the identity before anything is invoked (I1 and the owner rule of
/// spec §Launch data). Returns the resolved owner pubkey.
pub fn check_identity(record: &AgentRecord, id: &Identity) -> Result<Option<String>, ResolveError> {
    let name = &record.name;
    if id.nsec.trim().is_empty() {
        return Err(ResolveError::EmptyKey(name.clone()));
    }
    let keys = keys::parse_private_key(&id.nsec).map_err(|_| ResolveError::MalformedKey(name.clone()))?;
    let agent_hex = keys::pubkey_hex(&keys);
    if agent_hex != record.pubkey {
        return Err(ResolveError::KeyMismatch(name.clone()));
    }
    let tag_owner = match non_empty(&id.auth_tag) {
        Some(tag) => Some(
            AuthTag::verified_owner(&tag, &agent_hex)
                .map_err(|e| ResolveError::BadAuthTag(name.clone(), e.to_string()))?,
        ),
        None => None,
    };
    let owner = match non_empty(&id.owner_pubkey) {
        Some(o) => Some(keys::normalize_pubkey_hex(&o).ok_or_else(|| ResolveError::BadOwner(name.clone()))?),
        None => tag_owner.clone(),
    };
    if owner.is_none() && tag_owner.is_none() {
        return Err(ResolveError::NoOwner(name.clone()));
    }
    // The owner that signs `!shutdown` must be the one the tag attests.
    if let (Some(t), Some(o)) = (&tag_owner, &owner)
        && t != o
    {
        return Err(ResolveError::OwnerMismatch {
            name: name.clone(),
            tag_owner: t.clone(),
            owner: o.clone(),
        });
    }
    if owner.as_deref() == Some(agent_hex.as_str()) || tag_owner.as_deref() == Some(agent_hex.as_str()) {
        return Err(ResolveError::OwnerIsAgent(name.clone()));
    }
    Ok(owner)
}

/// THE resolver: record + settings + identity → `launch` (spec §Launch data).
pub fn resolve_launch(
    record: &AgentRecord,
    settings: &Settings,
    id: &Identity,
    target: Target,
) -> Result<Resolved, ResolveError> {
    let name = &record.name;
    let owner_pubkey = check_identity(record, id)?;
    let url = record.relay_url.trim();
    if !(url.starts_with("ws://") || url.starts_with("wss://")) {
        return Err(ResolveError::BadRelayUrl(name.clone()));
    }
    let persona = match &record.persona {
        Some(p) => Some(
            settings
                .personas
                .get(p)
                .ok_or_else(|| ResolveError::UnknownPersona(name.clone(), p.clone()))?,
        ),
        None => None,
    };
    let from_persona =
        |f: fn(&crate::record::Persona) -> &Option<String>| persona.and_then(|p| non_empty(f(p)));
    let system_prompt = from_persona(|p| &p.system_prompt).or_else(|| non_empty(&record.system_prompt));
    let model = from_persona(|p| &p.model).or_else(|| non_empty(&record.model));
    let provider = from_persona(|p| &p.provider).or_else(|| non_empty(&record.provider));
    if target == Target::Remote && provider.as_deref().map(str::trim) == Some(RELAY_MESH) {
        return Err(ResolveError::RelayMesh(name.clone()));
    }

    // Command: agent's own, else the persona definition's, else the default.
    let command = crate::record::effective_command(record, settings);
    // A host path is a local choice only: remotely the command is a name
    // resolved on the image's PATH (spec §Launch data "Host-resolved values").
    let is_path = command.contains('/') || command.contains('\\');
    if command.chars().any(char::is_whitespace) || (is_path && target == Target::Remote) {
        return Err(ResolveError::BadCommand(name.clone()));
    }
    let base = command.rsplit(['/', '\\']).next().unwrap_or(&command);
    let meta = runtime::lookup(base);
    let norm = |args: &[String]| -> Vec<String> {
        args.iter()
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect()
    };
    let mut args = norm(&record.agent_args);
    if args.is_empty() {
        args = persona.map(|p| norm(&p.agent_args)).unwrap_or_default();
    }
    if args.is_empty() {
        args = crate::presets::default_args(&command)
            .iter()
            .map(|s| s.to_string())
            .collect();
    }
    if args.iter().any(|a| a.contains(',')) {
        return Err(ResolveError::ArgHasComma(name.clone()));
    }

    // Respond-to gate, validated here so neither path can launch a broken gate.
    let respond_to =
        RespondTo::parse(record.respond_to.trim()).map_err(|e| ResolveError::Gate(name.clone(), e))?;
    let respond_to_allowlist = gate::validate_allowlist(respond_to, &record.respond_to_allowlist)
        .map_err(|e| ResolveError::Gate(name.clone(), e))?;

    // Tier 2: runtime metadata → global → persona → agent.
    let mut stripped = Vec::new();
    let mut user_env = BTreeMap::new();
    filter_layer(
        name,
        Layer::Global,
        &settings.global_env,
        &mut user_env,
        &mut stripped,
    )?;
    if let Some(p) = persona {
        filter_layer(name, Layer::Persona, &p.env, &mut user_env, &mut stripped)?;
    }
    filter_layer(name, Layer::Agent, &record.env, &mut user_env, &mut stripped)?;
    filter_layer(
        name,
        Layer::AgentSecret,
        &id.secret_env,
        &mut user_env,
        &mut stripped,
    )?;
    let mut env = BTreeMap::new();
    if let (Some(var), Some(m)) = (meta.model_env_var, &model) {
        env.insert(var.to_string(), m.clone());
    }
    if !meta.provider_locked
        && let (Some(var), Some(p)) = (meta.provider_env_var, &provider)
    {
        env.insert(var.to_string(), p.clone());
    }
    env.extend(user_env.iter().map(|(k, v)| (k.clone(), v.clone())));

    // Tier 1: policy_env, exactly the spec's list.
    let mut policy_env = BTreeMap::new();
    for (k, v) in meta.default_env {
        policy_env.insert(k.to_string(), v.to_string());
    }
    policy_env.insert(
        names::RELAY_OBSERVER.to_string(),
        record.relay_observer.to_string(),
    );
    policy_env.insert(names::LAZY_POOL.to_string(), "true".to_string());
    let title = sanitize_session_title(record.display_name.as_deref().unwrap_or(&record.name));
    if !title.is_empty() {
        policy_env.insert(names::SESSION_TITLE.to_string(), title);
    }
    if let Some(t) = non_empty(&settings.team_instructions) {
        policy_env.insert(names::TEAM_INSTRUCTIONS.to_string(), t);
    }
    if let Some(m) = &model {
        policy_env.insert(names::MODEL.to_string(), m.clone());
    }
    let preset_err = |e| ResolveError::Preset(name.clone(), e);
    if let Some(mode) = non_empty(&record.permission_mode) {
        crate::presets::check_permission_mode(&mode).map_err(preset_err)?;
        policy_env.insert(names::PERMISSION_MODE.to_string(), mode);
    }
    if let Some(p) = non_empty(&record.permission_policy) {
        let p = crate::presets::permission_policy(&p).map_err(preset_err)?;
        policy_env.insert(names::PERMISSION_POLICY.to_string(), p.as_str().to_string());
    }
    if let Some(p) = non_empty(&record.permission_policy_others) {
        let p = crate::presets::permission_policy(&p).map_err(preset_err)?;
        policy_env.insert(
            names::PERMISSION_POLICY_OTHERS.to_string(),
            p.as_str().to_string(),
        );
    }
    if meta.mcp_hooks {
        policy_env.insert("MCP_HOOK_SERVERS".to_string(), "*".to_string());
    }
    if let Some(s) = &system_prompt {
        policy_env.insert(names::SYSTEM_PROMPT.to_string(), s.clone());
    }
    if let Some(n) = record.idle_timeout_seconds {
        policy_env.insert(names::IDLE_TIMEOUT.to_string(), n.to_string());
    }
    if let Some(n) = record.max_turn_duration_seconds {
        policy_env.insert(names::MAX_TURN_DURATION.to_string(), n.to_string());
    }
    if let Some(n) = record.parallelism {
        policy_env.insert(names::AGENTS.to_string(), n.to_string());
    }

    Ok(Resolved {
        launch: Launch {
            command,
            args,
            env,
            policy_env,
            owner_pubkey,
        },
        system_prompt,
        model,
        provider,
        user_env,
        respond_to,
        respond_to_allowlist,
        stripped,
    })
}

/// The harness environment for the local spawn: tier 1 `policy_env`, then
/// tier 2 `env`, then tier 3 authoritative values written last (spec
/// §Launch data "Environment precedence"). `nonce` is the launch generation.
pub fn local_env(
    record: &AgentRecord,
    resolved: &Resolved,
    id: &Identity,
    nonce: &str,
) -> BTreeMap<String, String> {
    let l = &resolved.launch;
    let mut env = l.policy_env.clone();
    env.extend(l.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let nsec = id.nsec.trim().to_string();
    env.insert(names::PRIVATE_KEY.into(), nsec.clone());
    env.insert(names::NOSTR_PRIVATE_KEY.into(), nsec);
    if let Some(tag) = non_empty(&id.auth_tag) {
        env.insert(names::AUTH_TAG.into(), tag);
    }
    if let Some(owner) = &l.owner_pubkey {
        env.insert(names::AGENT_OWNER.into(), owner.clone());
    }
    env.insert(names::RELAY_URL.into(), record.relay_url.trim().to_string());
    env.insert(names::AGENT_COMMAND.into(), l.command.clone());
    env.insert(names::AGENT_ARGS.into(), l.args.join(","));
    env.insert(names::RESPOND_TO.into(), resolved.respond_to.as_str().into());
    if !resolved.respond_to_allowlist.is_empty() {
        env.insert(
            names::RESPOND_TO_ALLOWLIST.into(),
            resolved.respond_to_allowlist.join(","),
        );
    }
    env.insert(names::START_NONCE.into(), nonce.to_string());
    env.insert(names::MANAGED_AGENT.into(), "1".into());
    env
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
