//! The checks of a head, one rule per line of the facts
//! (`shared/spec/private-managed-agent.md`, "The signed envelope" and "The
//! decrypted payload"): [`check_envelope`] before anything is decrypted,
//! [`check_payload`] on what was.

use super::*;
use crate::keys::{is_hex64_lower, parse_private_key};
use crate::nip_oa::AuthTag;

/// The envelope's rules: kind, author, id and signature, the content's
/// length, and the tag grammar (`d`, `g`, `prev`, each once, one value).
pub fn check_envelope(event: &Event, owner: &PublicKey) -> Result<Envelope, RecordError> {
    let bad = RecordError::Envelope;
    if event.kind != Kind::from(KIND) {
        return Err(bad("not kind 30179"));
    }
    if event.pubkey != *owner {
        return Err(bad("not authored by the owner"));
    }
    if !event.verify_id() || !event.verify_signature() {
        return Err(bad("its id or signature does not verify"));
    }
    if event.content.is_empty() || event.content.len() > MAX_CIPHERTEXT_BYTES {
        return Err(bad("its content is empty or longer than NIP-44 allows"));
    }
    let (mut d, mut g, mut prev) = (None, None, None);
    for tag in event.tags.iter() {
        let [name, value] = tag.as_slice() else {
            return Err(bad("a tag without exactly one value"));
        };
        let slot = match name.as_str() {
            "d" => &mut d,
            "g" => &mut g,
            "prev" => &mut prev,
            _ => return Err(bad("a tag other than d, g and prev")),
        };
        if slot.replace(value.as_str()).is_some() {
            return Err(bad("a repeated d, g or prev tag"));
        }
    }
    let agent = d
        .ok_or(bad("no d tag"))
        .and_then(|d| pubkey(d).ok_or(bad("d is not an agent key (64 lowercase hex)")))?;
    let generation = g
        .ok_or(bad("no g tag"))
        .and_then(|g| generation(g).ok_or(bad("g is not a canonical decimal in 1..=2^53-1")))?;
    let prev = match prev {
        None => None,
        Some(p) => Some(event_id(p).ok_or(bad("prev is not an event id (64 lowercase hex)"))?),
    };
    if (generation == 1) != prev.is_none() {
        return Err(bad("prev must be absent exactly at generation 1"));
    }
    Ok(Envelope {
        agent,
        owner: *owner,
        generation,
        prev,
    })
}

/// The payload's rules, without the envelope: format and version, the keys
/// and their binding, generation and predecessor, the timestamp, the
/// bounds, and the auth tag.
pub fn check_payload(p: &Payload) -> Result<(), RecordError> {
    let bad = |why: &str| Err(RecordError::Payload(why.into()));
    if p.format != FORMAT || p.version != VERSION {
        return bad("not format buzz-private-managed-agent version 1");
    }
    let Some(agent) = pubkey(&p.agent_pubkey) else {
        return bad("agent_pubkey is not a key (64 lowercase hex)");
    };
    if pubkey(&p.owner_pubkey).is_none() {
        return bad("owner_pubkey is not a key (64 lowercase hex)");
    }
    if p.generation == 0 || p.generation > MAX_GENERATION {
        return bad("generation is not in 1..=2^53-1");
    }
    if (p.generation == 1) != p.previous_event_id.is_none() {
        return bad("previous_event_id must be absent exactly at generation 1");
    }
    if p.previous_event_id
        .as_deref()
        .is_some_and(|id| event_id(id).is_none())
    {
        return bad("previous_event_id is not an event id (64 lowercase hex)");
    }
    if chrono::DateTime::parse_from_rfc3339(&p.updated_at).is_err() {
        return bad("updated_at is not RFC 3339");
    }
    for (key, value) in &p.extensions {
        if key.is_empty() || key.len() > MAX_EXTENSION_KEY_BYTES || !key.contains(':') {
            return bad("an extension key is not namespaced (ns:key, at most 128 bytes)");
        }
        value_size("an extension", value)?;
    }
    match parse_private_key(&p.identity.private_key_nsec) {
        Ok(keys) if keys.public_key() == agent => {}
        Ok(_) => return bad("identity.private_key_nsec does not derive agent_pubkey"),
        Err(_) => return bad("identity.private_key_nsec is not a private key"),
    }
    if let Some(tag) = &p.identity.auth_tag {
        auth_tag(tag, &p.owner_pubkey, &p.agent_pubkey)?;
    }
    config(&p.config)
}

fn config(c: &Config) -> Result<(), RecordError> {
    let bad = |why: &str| Err(RecordError::Payload(why.into()));
    if c.relay_url.len() > MAX_TEXT_BYTES {
        return bad("config.relay_url is over 4096 bytes");
    }
    if c.name.is_empty() || c.name.len() > MAX_TEXT_BYTES {
        return bad("config.name is empty or over 4096 bytes");
    }
    if c.effort_level
        .as_ref()
        .is_some_and(|e| e.len() > MAX_EFFORT_LEVEL_BYTES)
    {
        return bad("config.effort_level is over 256 bytes");
    }
    if c.agent_args.len() > MAX_AGENT_ARGS || c.agent_args.iter().any(|a| a.len() > MAX_AGENT_ARG_BYTES) {
        return bad("config.agent_args: over 256 arguments or one over 8192 bytes");
    }
    let env_over = c
        .env_vars
        .iter()
        .any(|(k, v)| k.is_empty() || k.len() > MAX_ENV_KEY_BYTES || v.len() > MAX_ENV_VALUE_BYTES);
    if c.env_vars.len() > MAX_ENV_VARS || env_over {
        return bad("config.env_vars: over 256, an empty name, a name over 256 bytes or a value over 16384");
    }
    value_size("config.backend", &c.backend)?;
    if let Some(mesh) = &c.relay_mesh {
        value_size("config.relay_mesh", mesh)?;
    }
    Ok(())
}

/// An unconditional NIP-OA attestation by `owner` of `agent`.
fn auth_tag(json: &str, owner: &str, agent: &str) -> Result<(), RecordError> {
    let bad = |why: &str| Err(RecordError::Payload(why.into()));
    if json.is_empty() || json.len() > MAX_TEXT_BYTES {
        return bad("identity.auth_tag is empty or over 4096 bytes");
    }
    let Ok(tag) = AuthTag::parse(json) else {
        return bad("identity.auth_tag is not a NIP-OA tag");
    };
    if tag.owner != owner || !tag.conditions.is_empty() {
        return bad("identity.auth_tag is not an unconditional attestation by this owner");
    }
    if tag.verify(agent).is_err() {
        return bad("identity.auth_tag's signature does not verify for this agent");
    }
    Ok(())
}

fn value_size(what: &str, v: &Value) -> Result<(), RecordError> {
    let len = serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX);
    if len > MAX_VALUE_BYTES {
        return Err(RecordError::Payload(format!(
            "{what} is over {MAX_VALUE_BYTES} bytes"
        )));
    }
    Ok(())
}

/// 64 lowercase hex that is an x-only curve point.
fn pubkey(s: &str) -> Option<PublicKey> {
    if !is_hex64_lower(s) {
        return None;
    }
    let key = PublicKey::from_hex(s).ok()?;
    key.xonly().ok().map(|_| key)
}

fn event_id(s: &str) -> Option<EventId> {
    is_hex64_lower(s).then(|| EventId::from_hex(s).ok()).flatten()
}

/// A canonical positive decimal (no sign, no leading zero) up to 2^53 − 1.
fn generation(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && !(s.len() > 1 && s.starts_with('0'));
    let n: u64 = s.parse().ok().filter(|_| canonical)?;
    (1..=MAX_GENERATION).contains(&n).then_some(n)
}
