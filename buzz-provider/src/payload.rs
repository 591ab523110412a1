//! The payload checks every binding makes before any mutation (spec
//! §Deploy State Machine step 0, I1, §Launch data owner rule and
//! relay-mesh rule, §Reserved-key rule): the request's `agent` becomes the
//! agent's identity and its environment ([`Checked`]), or a typed refusal
//! that names its rule. Pure: no contact with the place agents run, no
//! clock.
//!
//! In order: the payload's shape; the identity from the key (I1); the
//! owner, from a verifying auth tag or `launch.owner_pubkey`, never the
//! agent itself (else `!shutdown` could never come); no relay-mesh (it
//! runs only on the owner's computer); the relay URL (the rule every front
//! end applies); `respond_to` and its allowlist; the agent command, a name
//! resolved where the agent runs, never a host path; then the environment's
//! tiers ([`crate::envtiers`]).

use crate::diag;
use crate::envtiers::{self, Authoritative};
use crate::refusal::{Refusal, RefusalRule};
use crate::request::{RequestError, RequestErrorKind};
use buzz_contract::gate::{RespondTo, validate_allowlist};
use buzz_contract::keys::{KeyError, normalize_pubkey_hex, parse_private_key, pubkey_hex};
use buzz_contract::nip_oa::{AuthTag, AuthTagError};
use buzz_contract::wire::{AgentPayload, parse_agent};
use serde_json::Value;
use std::collections::BTreeMap;

/// What the binding itself decides of the authoritative tier.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    pub inactivity_seconds: u64,
    pub doze_seconds: u64,
    /// The run's start nonce (the harness's presence `run` tag).
    pub generation: &'a str,
    /// The MCP server command the place provides, if any.
    pub mcp_command: Option<&'a str>,
    /// Where the agent command is resolved, for the refusal of a path
    /// (`in the image`, `on the host`).
    pub command_resolved: &'a str,
}

/// A payload that passed every check.
pub struct Checked {
    pub agent: AgentPayload,
    /// The agent's public key, 64 lowercase hex, derived from its key.
    pub pubkey: String,
    pub authoritative: Authoritative,
    /// The harness's whole environment: the user's tiers, then the
    /// authoritative one over them.
    pub env: BTreeMap<String, String>,
}

/// Why a payload was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The `agent` object does not parse.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A rule refused it.
    #[error(transparent)]
    Refused(#[from] Refusal),
}

fn refused(rule: RefusalRule, m: impl Into<String>) -> Rejected {
    Refusal::new(rule, m).into()
}

/// Every check before any mutation; see the module doc for the order.
pub fn check(agent_v: &Value, s: Settings<'_>) -> Result<Checked, Rejected> {
    let agent = parse_agent(agent_v).map_err(|e| {
        RequestError::new(
            RequestErrorKind::Payload,
            Some("agent"),
            format!("the deploy payload's {e}"),
        )
    })?;
    let keys = parse_private_key(&agent.private_key_nsec).map_err(|e| match e {
        KeyError::Empty => refused(
            RefusalRule::Identity,
            "agent.private_key_nsec is empty: refusing to deploy an agent without an identity (I1); check the agent's key in the keyring",
        ),
        KeyError::Malformed => refused(
            RefusalRule::Identity,
            "agent.private_key_nsec is malformed: expected nsec1… or 64 hex characters; nothing was deployed",
        ),
    })?;
    let pubkey = pubkey_hex(&keys);
    let launch = agent.launch.as_ref();
    let owner_pubkey = match launch
        .and_then(|l| l.owner_pubkey.as_deref())
        .filter(|s| !s.trim().is_empty())
    {
        Some(raw) => Some(normalize_pubkey_hex(raw).ok_or_else(|| {
            refused(
                RefusalRule::Owner,
                "agent.launch.owner_pubkey must be a 64-hex public key",
            )
        })?),
        None => None,
    };
    if owner_pubkey.as_deref() == Some(pubkey.as_str()) {
        return Err(refused(
            RefusalRule::Owner,
            "agent.launch.owner_pubkey is the agent's own public key; the owner must be the person who controls the agent, so nothing was deployed",
        ));
    }
    let mut auth_tag = agent
        .auth_tag
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    if let Some(tag) = &auth_tag
        && let Err(e) = AuthTag::verified_owner(tag, &pubkey)
    {
        if e == AuthTagError::OwnerIsAgent {
            return Err(refused(
                RefusalRule::Owner,
                "agent.auth_tag names the agent itself as its owner; the owner must be the person who controls the agent, so nothing was deployed",
            ));
        }
        if owner_pubkey.is_none() {
            return Err(refused(
                RefusalRule::Owner,
                format!(
                    "agent.auth_tag does not verify for this agent's key ({e}) and launch.owner_pubkey is absent; without an owner the agent could never honour !shutdown, so nothing was deployed"
                ),
            ));
        }
        diag::line(&format!(
            "agent.auth_tag does not verify ({e}); it is not passed to the agent, and the harness uses launch.owner_pubkey"
        ));
        // A tag known to be bad never reaches the harness (BUZZ_AUTH_TAG).
        auth_tag = None;
    }
    if auth_tag.is_none() && owner_pubkey.is_none() {
        return Err(refused(
            RefusalRule::Owner,
            "the payload has neither auth_tag nor launch.owner_pubkey; without an owner the agent could never honour !shutdown, so nothing was deployed",
        ));
    }
    if agent.provider.as_deref().map(str::trim) == Some("relay-mesh") {
        return Err(refused(
            RefusalRule::RelayMesh,
            "this agent uses Buzz shared compute (relay-mesh), which only works on this computer; choose a model provider the agent can reach where it runs, or run the agent locally",
        ));
    }
    let relay_url = buzz_contract::relay_url::check(&agent.relay_url).map_err(|e| match e {
        buzz_contract::relay_url::RelayUrlError::Empty => refused(
            RefusalRule::Relay,
            "agent.relay_url is empty; the agent needs a relay to connect to",
        ),
        e => refused(RefusalRule::Relay, format!("agent.relay_url: {e}")),
    })?;
    let respond_to = RespondTo::parse(agent.respond_to.trim())
        .map_err(|e| refused(RefusalRule::RespondTo, format!("agent.{e}")))?;
    let allowlist = validate_allowlist(respond_to, &agent.respond_to_allowlist)
        .map_err(|e| refused(RefusalRule::RespondTo, format!("agent.{e}")))?;
    let (agent_command, agent_args) = match launch {
        Some(l) => (l.command.trim().to_string(), l.args.clone()),
        None => (agent.agent_command.trim().to_string(), agent.agent_args.clone()),
    };
    if agent_command.contains('/') {
        return Err(refused(
            RefusalRule::AgentCommand,
            format!(
                "the agent command must be a command name resolved {}, not a host path",
                s.command_resolved
            ),
        ));
    }
    let authoritative = Authoritative {
        relay_url,
        private_key: agent.private_key_nsec.trim().to_string(),
        auth_tag,
        owner_pubkey,
        agent_command,
        agent_args,
        respond_to: respond_to.as_str().to_string(),
        respond_to_allowlist: allowlist,
        inactivity_seconds: s.inactivity_seconds,
        doze_seconds: s.doze_seconds,
        generation: s.generation.to_string(),
        mcp_command: s.mcp_command.map(str::to_string),
        wake: agent.wake.clone(),
    };
    let env = envtiers::assemble(&agent, &authoritative)
        .map_err(|e| Rejected::from(Refusal::new(RefusalRule::Env, e.0)))?;
    Ok(Checked {
        agent,
        pubkey,
        authoritative,
        env,
    })
}
