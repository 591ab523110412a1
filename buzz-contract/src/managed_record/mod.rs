//! The owner's private record of one managed agent: kind 30179, upstream's
//! "private managed-agent" head (issue 52 item 1; the facts in
//! `shared/spec/private-managed-agent.md`, upstream's `NIP-PMA.md`). A record
//! this codec seals is one upstream's codec opens, and the reverse.
//!
//! One addressable event per agent, authored by the **owner**, coordinate
//! `(owner, 30179, agent pubkey)`:
//! - tags, exactly: `["d", <agent hex>]` once, `["g", <generation>]` once
//!   (canonical decimal, 1 ..= 2^53 − 1), `["prev", <event id>]` once from
//!   generation 2 on and never at 1. Any other tag, a repeat or another
//!   arity is refused before anything is decrypted ([`check_envelope`]);
//! - content: the JSON [`Payload`], NIP-44 v2 from the owner's key to the
//!   owner's own, at most [`MAX_PLAINTEXT_BYTES`] of plaintext and
//!   [`MAX_CIPHERTEXT_BYTES`] of ciphertext.
//!
//! The payload repeats the agent, the owner, the generation and the
//! predecessor; a mismatch with the envelope is corruption. It carries the
//! agent's key (`identity.private_key_nsec`, which must derive `d`), its
//! NIP-OA tag (unconditional, from this owner to this agent), and its
//! runnable settings ([`Config`]). Duplicate JSON member names anywhere are
//! refused ([`strict_json`]). Unknown members at the top level and in
//! `config` are kept verbatim and written back ([`Payload::extra`],
//! [`Config::extra`]), so an older writer never drops a newer one's fields.
//!
//! `g` and `prev` are advisory: a relay does no compare-and-swap, and two
//! heads with one `prev` are two writers' concurrent edits (the launcher
//! shows them; issue 52 item 4). Deletion is a NIP-09 kind 5 naming the
//! coordinate ([`coordinate`]).
//!
//! Pure: the owner's keys in, an event or a payload out; no I/O. Errors and
//! `Debug` never show key material, the auth tag, env values or the backend
//! config.

mod check;
mod strict;
#[cfg(test)]
mod tests;

pub use check::{check_envelope, check_payload};
pub use strict::strict_json;

use nostr::nips::nip44::{self, Version};
use nostr::{Event, EventBuilder, EventId, Keys, Kind, PublicKey, Tag, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// The record's kind: addressable (NIP-01's 30000 ..= 39999).
pub const KIND: u16 = 30179;
/// The payload's `format`.
pub const FORMAT: &str = "buzz-private-managed-agent";
/// The payload's `version`.
pub const VERSION: u32 = 1;
/// NIP-44 v2's plaintext bound.
pub const MAX_PLAINTEXT_BYTES: usize = 65_535;
/// The longest NIP-44 v2 ciphertext of a bounded plaintext (base64).
pub const MAX_CIPHERTEXT_BYTES: usize = 87_472;
/// The largest generation: JSON's exact integers.
pub const MAX_GENERATION: u64 = (1 << 53) - 1;
/// At most this many `env_vars`.
pub const MAX_ENV_VARS: usize = 256;
/// An env name's bytes.
pub const MAX_ENV_KEY_BYTES: usize = 256;
/// An env value's bytes.
pub const MAX_ENV_VALUE_BYTES: usize = 16_384;
/// At most this many `agent_args`.
pub const MAX_AGENT_ARGS: usize = 256;
/// One argument's bytes.
pub const MAX_AGENT_ARG_BYTES: usize = 8_192;
/// `effort_level`'s bytes.
pub const MAX_EFFORT_LEVEL_BYTES: usize = 256;
/// `backend`, `relay_mesh` and each extension, serialized.
pub const MAX_VALUE_BYTES: usize = 32_768;
/// An extension's key (it must hold a `:`).
pub const MAX_EXTENSION_KEY_BYTES: usize = 128;
/// `name`, `relay_url` and the auth tag.
pub const MAX_TEXT_BYTES: usize = 4_096;

/// The `a`-style coordinate `30179:<owner>:<agent>` a kind 5 names.
pub fn coordinate(owner: &PublicKey, agent: &PublicKey) -> String {
    format!("{KIND}:{}:{}", owner.to_hex(), agent.to_hex())
}

/// Why a record was refused or could not be made. Never carries secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The signed event is not a well-formed head of this owner's.
    #[error("not a valid private agent record: {0}")]
    Envelope(&'static str),
    /// The content did not decrypt with the owner's key (not the owner's, or
    /// tampered with).
    #[error("the private agent record does not decrypt with the owner's key")]
    Decrypt,
    /// The decrypted payload is malformed, ambiguous or inconsistent.
    #[error("the private agent record's payload is invalid: {0}")]
    Payload(String),
    /// Encryption or signing failed.
    #[error("the private agent record could not be sealed")]
    Seal,
}

/// What the signed envelope says, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// `d`: the agent.
    pub agent: PublicKey,
    /// The author: the owner.
    pub owner: PublicKey,
    /// `g`.
    pub generation: u64,
    /// `prev`: the head this one follows.
    pub prev: Option<EventId>,
}

/// The agent's secrets: its key and its owner's attestation.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// The agent's private key, `nsec1…`.
    pub private_key_nsec: String,
    /// The NIP-OA tag, as the JSON array string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_tag: Option<String>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("private_key_nsec", &"<redacted>")
            .field("auth_tag", &self.auth_tag.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The runnable settings. Members are in upstream's order (the serialized
/// bytes match its writer's); `None` and empty lists and maps are absent.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// The relay (empty: the workspace's relay). Required.
    pub relay_url: String,
    /// The agent's name. Required, not empty.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona_id: Option<String>,
    /// The agent runtime (`claude`, `codex`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    /// The respond-to gate's wire string (`owner-only`, `allowlist`,
    /// `anyone`; an unknown one is kept as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub respond_to: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub respond_to_allowlist: Vec<String>,
    /// The agent command (a name, never trusted without the device's check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_command_override: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_args: Vec<String>,
    /// The inactivity bound (spec I5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turn_duration_seconds: Option<u64>,
    /// The secret env.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_vars: BTreeMap<String, String>,
    /// Where it runs: `{"type":"local"}` or `{"type":"provider","id":…,
    /// "config":{…}}` (upstream's `BackendKind`). Required.
    pub backend: Value,
    /// The provider's `agent_id` of the live deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona_name_in_team: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_mesh: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort_level: Option<String>,
    /// Members this codec does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("name", &self.name)
            .field("rest", &"<redacted>")
            .finish()
    }
}

/// The decrypted record, version 1. Members in upstream's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    /// [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    pub agent_pubkey: String,
    pub owner_pubkey: String,
    pub generation: u64,
    /// Absent exactly at generation 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_event_id: Option<String>,
    /// RFC 3339; bookkeeping only (not part of [`Payload::same_body`]).
    pub updated_at: String,
    pub identity: Identity,
    pub config: Config,
    /// Namespaced (`ns:key`) data of other writers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extensions: BTreeMap<String, Value>,
    /// Members this codec does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Payload {
    /// A first head (generation 1) of `agent`'s record, owned by `owner`.
    pub fn first(owner: &PublicKey, agent: &Keys, identity: Identity, config: Config, now: u64) -> Payload {
        Payload {
            format: FORMAT.into(),
            version: VERSION,
            agent_pubkey: agent.public_key().to_hex(),
            owner_pubkey: owner.to_hex(),
            generation: 1,
            previous_event_id: None,
            updated_at: rfc3339(now),
            identity,
            config,
            extensions: BTreeMap::new(),
            extra: Map::new(),
        }
    }

    /// The head that follows `prev` (this payload's own event): generation
    /// + 1, `prev` its id, stamped `now`; everything else as it is.
    pub fn next(&self, prev: &EventId, now: u64) -> Payload {
        Payload {
            generation: self.generation + 1,
            previous_event_id: Some(prev.to_hex()),
            updated_at: rfc3339(now),
            ..self.clone()
        }
    }

    /// Whether `self` and `other` say the same about the agent: every member
    /// but the bookkeeping (`generation`, `previous_event_id`, `updated_at`).
    /// A writer publishes a new head only when this is false (NIP-44 is
    /// randomized: ciphertexts never compare).
    pub fn same_body(&self, other: &Payload) -> bool {
        let strip = |p: &Payload| Payload {
            generation: 1,
            previous_event_id: None,
            updated_at: String::new(),
            ..p.clone()
        };
        strip(self) == strip(other)
    }
}

/// `unix` seconds as RFC 3339 UTC, to the second.
pub fn rfc3339(unix: u64) -> String {
    Timestamp::from_secs(unix).to_human_datetime()
}

/// Checks `payload`, encrypts it to the owner and signs the head at
/// `created_at` with the owner's keys.
pub fn seal(owner: &Keys, payload: &Payload, created_at: u64) -> Result<Event, RecordError> {
    check_payload(payload)?;
    if payload.owner_pubkey != owner.public_key().to_hex() {
        return Err(RecordError::Payload(
            "owner_pubkey is not the signing key's".into(),
        ));
    }
    let plain = serde_json::to_string(payload).map_err(|_| RecordError::Seal)?;
    if plain.len() > MAX_PLAINTEXT_BYTES {
        return Err(RecordError::Payload(format!(
            "{} bytes of plaintext, over NIP-44's {MAX_PLAINTEXT_BYTES}",
            plain.len()
        )));
    }
    let sealed = nip44::encrypt(owner.secret_key(), &owner.public_key(), plain, Version::V2)
        .map_err(|_| RecordError::Seal)?;
    let mut tags = vec![
        Tag::parse(["d", payload.agent_pubkey.as_str()]).map_err(|_| RecordError::Seal)?,
        Tag::parse(["g", payload.generation.to_string().as_str()]).map_err(|_| RecordError::Seal)?,
    ];
    if let Some(prev) = &payload.previous_event_id {
        tags.push(Tag::parse(["prev", prev.as_str()]).map_err(|_| RecordError::Seal)?);
    }
    EventBuilder::new(Kind::from(KIND), sealed)
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(created_at))
        .sign_with_keys(owner)
        .map_err(|_| RecordError::Seal)
}

/// Checks the envelope, decrypts with the owner's keys, parses strictly,
/// checks the payload and that it repeats the envelope.
pub fn open(event: &Event, owner: &Keys) -> Result<(Envelope, Payload), RecordError> {
    let envelope = check_envelope(event, &owner.public_key())?;
    let plain = nip44::decrypt(owner.secret_key(), &owner.public_key(), &event.content)
        .map_err(|_| RecordError::Decrypt)?;
    if plain.len() > MAX_PLAINTEXT_BYTES {
        return Err(RecordError::Decrypt);
    }
    let value = strict_json(plain.as_bytes())?;
    let payload: Payload =
        serde_json::from_value(value).map_err(|e| RecordError::Payload(schema_error(&e)))?;
    check_payload(&payload)?;
    let repeats = payload.agent_pubkey == envelope.agent.to_hex()
        && payload.owner_pubkey == envelope.owner.to_hex()
        && payload.generation == envelope.generation
        && payload.previous_event_id == envelope.prev.map(|p| p.to_hex());
    if !repeats {
        return Err(RecordError::Payload(
            "the payload's agent, owner, generation or predecessor differs from the envelope's".into(),
        ));
    }
    Ok((envelope, payload))
}

/// serde's message for a schema error (it names the member and the type
/// it expected), cut before any quoted value: a value may be a secret.
fn schema_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.split_once('"') {
        Some((head, _)) => format!("schema: {}…", head.trim_end()),
        None => format!("schema: {text}"),
    }
}
