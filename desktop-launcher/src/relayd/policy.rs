//! The embedded relay's admission rules, pure (no I/O, the clock passed in):
//! who may authenticate (NIP-42, wire-facts §2) and what an authenticated
//! connection may publish (wire-facts §3 "its author must be the
//! authenticated key").
//!
//! Admitted keys: the launcher's owner, and any agent whose AUTH event
//! carries a NIP-OA `auth` tag (wire-facts §1) that verifies for the agent's
//! key and names that owner. Everything else is refused with `restricted:`.
//! A malformed AUTH event (wrong kind, challenge, time, signature) is
//! refused with `invalid:`.
//!
//! The tag's conditions are honoured, the way the harness reads them
//! (`buzz-acp` accepts a tag only when it covers its own AUTH event):
//!
//! - at AUTH they must cover the AUTH event itself (kind 22242 at its
//!   `created_at`), so a tag limited to other kinds, or outside its time
//!   window, admits nobody;
//! - after AUTH, every EVENT and REQ of an agent's session checks the tag's
//!   time window against the relay's clock ([`AuthTag::in_force`]), so an
//!   attestation that expires ends the agent's access on the live
//!   connection too, not only at its next AUTH.

use buzz_contract::nip_oa::{AuthTag, AuthTagError, ConditionError};
use buzz_contract::presence::{KIND_AUTH, KIND_PRESENCE};
use nostr_sdk::prelude::{Event, Kind};

/// How far an AUTH event's `created_at` may be from the relay's clock
/// (wire-facts §2: ±60 s).
pub const AUTH_MAX_SKEW_SECS: u64 = 60;

/// Who an accepted AUTH event proved to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    /// The launcher's owner key.
    Owner,
    /// An agent key attested by the owner (NIP-OA), with the attestation
    /// whose time window its session stays bound to.
    Agent(AuthTag),
}

/// An authenticated connection: its key and, for an agent, the attestation
/// that admitted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The authenticated pubkey, 64 lowercase hex.
    pub key: String,
    /// `Some` for an agent admitted by a NIP-OA tag.
    pub attestation: Option<AuthTag>,
}

impl Session {
    /// The session an accepted AUTH event by `key` opens.
    pub fn new(key: String, admitted: Admitted) -> Session {
        let attestation = match admitted {
            Admitted::Owner => None,
            Admitted::Agent(tag) => Some(tag),
        };
        Session { key, attestation }
    }

    /// Whether the session may still act at unix time `now`: always for
    /// the owner; for an agent while its attestation's time window holds.
    pub fn check(&self, now: u64) -> Result<(), SessionRefusal> {
        match &self.attestation {
            None => Ok(()),
            Some(tag) => tag.in_force(now).map_err(SessionRefusal),
        }
    }
}

/// Why an authenticated agent's session may no longer act.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("restricted: the NIP-OA attestation that admitted this agent no longer holds ({0})")]
pub struct SessionRefusal(pub ConditionError);

/// Why an AUTH event was refused. Carries no key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthRefusal {
    #[error("invalid: an AUTH event must be kind 22242")]
    Kind,
    #[error("invalid: the AUTH event does not answer this connection's challenge")]
    Challenge,
    #[error("invalid: the AUTH event has no relay tag")]
    RelayTag,
    #[error("invalid: the AUTH event's created_at is more than 60 s from the relay's clock")]
    Stale,
    #[error("invalid: the AUTH event's id or signature does not verify")]
    Signature,
    #[error("restricted: this relay serves only its owner and the owner's agents")]
    Stranger,
    #[error("restricted: the NIP-OA auth tag was refused ({0})")]
    AuthTag(AuthTagError),
    #[error("restricted: the NIP-OA auth tag names another owner")]
    OtherOwner,
    #[error("restricted: the NIP-OA auth tag's conditions do not cover this AUTH event ({0})")]
    Conditions(ConditionError),
}

fn tag_values<'a>(event: &'a Event, name: &str) -> impl Iterator<Item = &'a [String]> {
    let name = name.to_string();
    event
        .tags
        .iter()
        .map(|t| t.as_slice())
        .filter(move |s| s.first().map(String::as_str) == Some(name.as_str()))
}

/// Decides an AUTH event for a connection whose challenge is `challenge`,
/// served by a relay whose owner is `owner_hex`, at unix time `now`.
pub fn check_auth(
    event: &Event,
    challenge: &str,
    owner_hex: &str,
    now: u64,
) -> Result<Admitted, AuthRefusal> {
    if event.kind != Kind::from(KIND_AUTH) {
        return Err(AuthRefusal::Kind);
    }
    if !tag_values(event, "challenge").any(|t| t.get(1).map(String::as_str) == Some(challenge)) {
        return Err(AuthRefusal::Challenge);
    }
    if !tag_values(event, "relay").any(|t| t.get(1).is_some_and(|v| !v.is_empty())) {
        return Err(AuthRefusal::RelayTag);
    }
    if event.created_at.as_secs().abs_diff(now) > AUTH_MAX_SKEW_SECS {
        return Err(AuthRefusal::Stale);
    }
    if event.verify().is_err() {
        return Err(AuthRefusal::Signature);
    }
    let author = event.pubkey.to_hex();
    if author == owner_hex {
        return Ok(Admitted::Owner);
    }
    let Some(tag) = tag_values(event, "auth").next() else {
        return Err(AuthRefusal::Stranger);
    };
    let json = serde_json::Value::from(tag.to_vec()).to_string();
    let tag = AuthTag::parse(&json)
        .and_then(|t| t.verify(&author).map(|()| t))
        .map_err(AuthRefusal::AuthTag)?;
    if tag.owner != owner_hex {
        return Err(AuthRefusal::OtherOwner);
    }
    tag.covers(u64::from(KIND_AUTH), event.created_at.as_secs())
        .map_err(AuthRefusal::Conditions)?;
    Ok(Admitted::Agent(tag))
}

/// Why an authenticated connection may not publish an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishRefusal {
    #[error("restricted: presence (kind 20001) must be authored by the authenticated key")]
    PresenceAuthor,
    #[error(transparent)]
    Session(#[from] SessionRefusal),
}

/// Checks an EVENT from the authenticated `session` at unix time `now`.
pub fn check_publish(event: &Event, session: &Session, now: u64) -> Result<(), PublishRefusal> {
    session.check(now)?;
    if event.kind == Kind::from(KIND_PRESENCE) && event.pubkey.to_hex() != session.key {
        return Err(PublishRefusal::PresenceAuthor);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr_sdk::prelude::{EventBuilder, Keys, Tag, Timestamp};

    fn auth_event(keys: &Keys, challenge: &str, extra: Vec<Tag>, at: u64) -> Event {
        let mut tags = vec![
            Tag::parse(["relay", "ws://127.0.0.1:1"]).unwrap(),
            Tag::parse(["challenge", challenge]).unwrap(),
        ];
        tags.extend(extra);
        EventBuilder::new(Kind::from(KIND_AUTH), "")
            .tags(tags)
            .custom_created_at(Timestamp::from(at))
            .sign_with_keys(keys)
            .unwrap()
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn the_owner_is_admitted() {
        let owner = Keys::generate();
        let e = auth_event(&owner, "c1", vec![], NOW);
        assert_eq!(
            check_auth(&e, "c1", &owner.public_key().to_hex(), NOW),
            Ok(Admitted::Owner)
        );
    }

    #[test]
    fn an_agent_with_the_owners_tag_is_admitted_and_one_of_another_owner_is_not() {
        let owner = Keys::generate();
        let other = Keys::generate();
        let agent = Keys::generate();
        let agent_hex = agent.public_key().to_hex();
        let good = AuthTag::mint(&owner, &agent_hex, "").unwrap();
        let e = auth_event(&agent, "c", vec![good.to_tag()], NOW);
        assert_eq!(
            check_auth(&e, "c", &owner.public_key().to_hex(), NOW),
            Ok(Admitted::Agent(good))
        );
        let foreign = AuthTag::mint(&other, &agent_hex, "").unwrap().to_tag();
        let e = auth_event(&agent, "c", vec![foreign], NOW);
        assert_eq!(
            check_auth(&e, "c", &owner.public_key().to_hex(), NOW),
            Err(AuthRefusal::OtherOwner)
        );
    }

    #[test]
    fn a_tag_minted_for_another_agent_does_not_verify() {
        let owner = Keys::generate();
        let agent = Keys::generate();
        let thief = Keys::generate();
        let stolen = AuthTag::mint(&owner, &agent.public_key().to_hex(), "")
            .unwrap()
            .to_tag();
        let e = auth_event(&thief, "c", vec![stolen], NOW);
        assert_eq!(
            check_auth(&e, "c", &owner.public_key().to_hex(), NOW),
            Err(AuthRefusal::AuthTag(AuthTagError::BadSignature))
        );
    }

    #[test]
    fn strangers_and_malformed_auth_are_refused() {
        let owner = Keys::generate();
        let owner_hex = owner.public_key().to_hex();
        let stranger = Keys::generate();
        let e = auth_event(&stranger, "c", vec![], NOW);
        assert_eq!(check_auth(&e, "c", &owner_hex, NOW), Err(AuthRefusal::Stranger));
        assert!(AuthRefusal::Stranger.to_string().starts_with("restricted:"));
        let e = auth_event(&owner, "c", vec![], NOW);
        assert_eq!(
            check_auth(&e, "other", &owner_hex, NOW),
            Err(AuthRefusal::Challenge)
        );
        assert_eq!(check_auth(&e, "c", &owner_hex, NOW + 61), Err(AuthRefusal::Stale));
        assert_eq!(check_auth(&e, "c", &owner_hex, NOW - 61), Err(AuthRefusal::Stale));
        assert_eq!(check_auth(&e, "c", &owner_hex, NOW + 60), Ok(Admitted::Owner));
        let no_relay = EventBuilder::new(Kind::from(KIND_AUTH), "")
            .tags([Tag::parse(["challenge", "c"]).unwrap()])
            .custom_created_at(Timestamp::from(NOW))
            .sign_with_keys(&owner)
            .unwrap();
        assert_eq!(
            check_auth(&no_relay, "c", &owner_hex, NOW),
            Err(AuthRefusal::RelayTag)
        );
        let note = EventBuilder::new(Kind::from(1), "")
            .custom_created_at(Timestamp::from(NOW))
            .sign_with_keys(&owner)
            .unwrap();
        assert_eq!(check_auth(&note, "c", &owner_hex, NOW), Err(AuthRefusal::Kind));
    }

    #[test]
    fn a_forged_signature_is_refused() {
        let owner = Keys::generate();
        let e = auth_event(&owner, "c", vec![], NOW);
        let mut v: serde_json::Value =
            serde_json::from_str(&nostr_sdk::prelude::JsonUtil::as_json(&e)).unwrap();
        let sig = v["sig"].as_str().unwrap().to_string();
        let flipped = if sig.starts_with('0') { "1" } else { "0" };
        v["sig"] = serde_json::Value::String(format!("{flipped}{}", &sig[1..]));
        let forged: Event = nostr_sdk::prelude::JsonUtil::from_json(v.to_string()).unwrap();
        assert_eq!(
            check_auth(&forged, "c", &owner.public_key().to_hex(), NOW),
            Err(AuthRefusal::Signature)
        );
    }

    #[test]
    fn an_agent_is_admitted_only_when_its_tags_conditions_cover_the_auth_event() {
        let owner = Keys::generate();
        let owner_hex = owner.public_key().to_hex();
        let agent = Keys::generate();
        let agent_hex = agent.public_key().to_hex();
        let admit = |conditions: &str| {
            let tag = AuthTag::mint(&owner, &agent_hex, conditions).unwrap().to_tag();
            check_auth(&auth_event(&agent, "c", vec![tag], NOW), "c", &owner_hex, NOW)
        };
        assert!(matches!(admit("kind=22242"), Ok(Admitted::Agent(_))));
        let window = format!("created_at>{}&created_at<{}", NOW - 10, NOW + 10);
        assert!(matches!(admit(&window), Ok(Admitted::Agent(_))));
        assert_eq!(
            admit("kind=9"),
            Err(AuthRefusal::Conditions(ConditionError::Kind))
        );
        assert_eq!(
            admit(&format!("created_at<{NOW}")),
            Err(AuthRefusal::Conditions(ConditionError::Expired))
        );
        assert_eq!(
            admit(&format!("created_at>{NOW}")),
            Err(AuthRefusal::Conditions(ConditionError::NotYetValid))
        );
        assert!(
            admit("kind=9")
                .unwrap_err()
                .to_string()
                .starts_with("restricted:")
        );
    }

    fn session(keys: &Keys) -> Session {
        Session::new(keys.public_key().to_hex(), Admitted::Owner)
    }

    #[test]
    fn presence_must_be_authored_by_the_authenticated_key() {
        let a = Keys::generate();
        let b = Keys::generate();
        let p = EventBuilder::new(Kind::from(KIND_PRESENCE), "online")
            .sign_with_keys(&a)
            .unwrap();
        assert_eq!(check_publish(&p, &session(&a), NOW), Ok(()));
        assert_eq!(
            check_publish(&p, &session(&b), NOW),
            Err(PublishRefusal::PresenceAuthor)
        );
        let note = EventBuilder::new(Kind::from(9), "hi").sign_with_keys(&a).unwrap();
        assert_eq!(check_publish(&note, &session(&b), NOW), Ok(()));
    }

    #[test]
    fn an_agents_session_ends_with_its_attestations_time_window() {
        let owner = Keys::generate();
        let agent = Keys::generate();
        let tag = AuthTag::mint(
            &owner,
            &agent.public_key().to_hex(),
            &format!("created_at<{}", NOW + 60),
        )
        .unwrap();
        let s = Session::new(agent.public_key().to_hex(), Admitted::Agent(tag));
        let note = EventBuilder::new(Kind::from(9), "hi")
            .sign_with_keys(&agent)
            .unwrap();
        assert_eq!(check_publish(&note, &s, NOW + 59), Ok(()));
        assert_eq!(s.check(NOW + 59), Ok(()));
        let refused = check_publish(&note, &s, NOW + 60).unwrap_err();
        assert_eq!(
            refused,
            PublishRefusal::Session(SessionRefusal(ConditionError::Expired))
        );
        assert!(refused.to_string().starts_with("restricted:"));
        assert_eq!(s.check(NOW + 60), Err(SessionRefusal(ConditionError::Expired)));
        // The owner's session has no window.
        assert_eq!(session(&owner).check(u64::MAX), Ok(()));
    }
}
