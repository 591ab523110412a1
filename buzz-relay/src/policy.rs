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
//!   connection too, not only at its next AUTH. [`Session::expires_at`]
//!   tells the connection when to close the subscriptions the agent
//!   already holds (review b30b1a0 finding 11: an open subscription must
//!   stop delivering, `NEG-*` included).
//!
//! A presence (kind 20001) must be authored by the authenticated key and
//! dated at most [`PRESENCE_MAX_AHEAD`] ahead of the relay's clock, else
//! `OK false invalid:` (review afa2bf1 finding 9): the relay keeps each
//! author's latest-dated presence, so one from the future would hide every
//! honest one until its date.
//!
//! Two more checks close review b30b1a0's findings 2 and 11:
//!
//! - the AUTH event's `relay` tag must name this relay ([`OwnUrls`]), else
//!   `invalid:`: an AUTH signed for another relay cannot be replayed here;
//! - an agent must still be enrolled: its record exists in the launcher's
//!   state dir, read at every AUTH ([`Enrollment`], read by the shell,
//!   [`super::agents`]). A deleted agent's key is refused with
//!   `restricted:`, and a live session of a removed agent ends
//!   ([`Session::remove`]). The owner is never looked up.

use super::limits::PRESENCE_MAX_AHEAD;
use super::own_urls::OwnUrls;
use buzz_contract::nip_oa::{AuthTag, AuthTagError, Condition, ConditionError, parse_conditions};
use buzz_contract::presence::{KIND_AUTH, KIND_PRESENCE};
use nostr_sdk::prelude::{Event, Kind, PublicKey};

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
    /// Set once the agent's record is gone from the state dir.
    pub removed: bool,
}

impl Session {
    /// The authenticated key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey::from_hex(&self.key).expect("a session's key is an authenticated event's author")
    }

    /// The session an accepted AUTH event by `key` opens.
    pub fn new(key: String, admitted: Admitted) -> Session {
        let attestation = match admitted {
            Admitted::Owner => None,
            Admitted::Agent(tag) => Some(tag),
        };
        Session {
            key,
            attestation,
            removed: false,
        }
    }

    /// Whether this is an agent's session (the owner's is never looked up).
    pub fn is_agent(&self) -> bool {
        self.attestation.is_some()
    }

    /// Whether the session may still act at unix time `now`: always for
    /// the owner; for an agent while its record exists and its
    /// attestation's time window holds.
    pub fn check(&self, now: u64) -> Result<(), SessionRefusal> {
        match &self.attestation {
            None => Ok(()),
            Some(_) if self.removed => Err(SessionRefusal::Removed),
            Some(tag) => tag.in_force(now).map_err(SessionRefusal::Attestation),
        }
    }

    /// The unix time from which the attestation no longer holds (its
    /// smallest `created_at<` bound); `None` for the owner and for an
    /// attestation without an end.
    pub fn expires_at(&self) -> Option<u64> {
        let tag = self.attestation.as_ref()?;
        // A tag whose conditions do not parse was never admitted
        // (`covers` parses them at AUTH); no end is then the honest answer.
        parse_conditions(&tag.conditions)
            .ok()?
            .into_iter()
            .filter_map(|c| match c {
                Condition::Before(n) => Some(n),
                _ => None,
            })
            .min()
    }

    /// Ends an agent's session because its record was removed.
    pub fn remove(&mut self) {
        if self.is_agent() {
            self.removed = true;
        }
    }
}

/// Why an authenticated agent's session may no longer act.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionRefusal {
    #[error("restricted: the NIP-OA attestation that admitted this agent no longer holds ({0})")]
    Attestation(ConditionError),
    #[error("restricted: this agent was removed from the launcher (its record is gone)")]
    Removed,
}

/// What the launcher's agent records say about an AUTH's key, read by the
/// shell at AUTH time ([`super::agents::AgentDirectory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enrollment {
    /// The relay keeps no agent directory: every agent the owner attested is enrolled.
    Unchecked,
    /// A record with this pubkey exists.
    Enrolled,
    /// No record has this pubkey.
    Absent,
    /// The records could not be read (fail closed, but transient: `error:`).
    Unreadable,
}

/// Why an AUTH event was refused. Carries no key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthRefusal {
    #[error("invalid: an AUTH event must be kind 22242")]
    Kind,
    #[error("invalid: the AUTH event does not answer this connection's challenge")]
    Challenge,
    #[error("invalid: the AUTH event has no relay tag")]
    RelayTag,
    #[error("invalid: the AUTH event's relay tag names another relay, not this one ({ours})")]
    OtherRelay {
        /// This relay's own URLs, comma-separated (public).
        ours: String,
    },
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
    #[error("restricted: this agent key has no record in the launcher (deleted, or never created here)")]
    NotEnrolled,
    #[error("error: the relay cannot read the launcher's agent records; try again")]
    RecordsUnreadable,
}

fn tag_values<'a>(event: &'a Event, name: &str) -> impl Iterator<Item = &'a [String]> {
    let name = name.to_string();
    event
        .tags
        .iter()
        .map(|t| t.as_slice())
        .filter(move |s| s.first().map(String::as_str) == Some(name.as_str()))
}

/// What an AUTH event is checked against: the connection's challenge, the
/// relay's URLs and its owner.
#[derive(Debug, Clone, Copy)]
pub struct AuthContext<'a> {
    /// The challenge this connection was sent.
    pub challenge: &'a str,
    /// The URLs this relay answers to.
    pub urls: &'a OwnUrls,
    /// The owner's pubkey, 64 lowercase hex.
    pub owner_hex: &'a str,
}

/// Decides an AUTH event at unix time `now`. An admitted agent must still
/// pass [`check_enrollment`].
pub fn check_auth(event: &Event, cx: AuthContext<'_>, now: u64) -> Result<Admitted, AuthRefusal> {
    if event.kind != Kind::from(KIND_AUTH) {
        return Err(AuthRefusal::Kind);
    }
    if !tag_values(event, "challenge").any(|t| t.get(1).map(String::as_str) == Some(cx.challenge)) {
        return Err(AuthRefusal::Challenge);
    }
    let relays: Vec<&str> = tag_values(event, "relay")
        .filter_map(|t| t.get(1).map(String::as_str))
        .filter(|v| !v.is_empty())
        .collect();
    if relays.is_empty() {
        return Err(AuthRefusal::RelayTag);
    }
    if !relays.iter().any(|r| cx.urls.contains(r)) {
        return Err(AuthRefusal::OtherRelay {
            ours: cx.urls.list().collect::<Vec<_>>().join(", "),
        });
    }
    if event.created_at.as_secs().abs_diff(now) > AUTH_MAX_SKEW_SECS {
        return Err(AuthRefusal::Stale);
    }
    if event.verify().is_err() {
        return Err(AuthRefusal::Signature);
    }
    let author = event.pubkey.to_hex();
    if author == cx.owner_hex {
        return Ok(Admitted::Owner);
    }
    let Some(tag) = tag_values(event, "auth").next() else {
        return Err(AuthRefusal::Stranger);
    };
    let json = serde_json::Value::from(tag.to_vec()).to_string();
    let tag = AuthTag::parse(&json)
        .and_then(|t| t.verify(&author).map(|()| t))
        .map_err(AuthRefusal::AuthTag)?;
    if tag.owner != cx.owner_hex {
        return Err(AuthRefusal::OtherOwner);
    }
    tag.covers(u64::from(KIND_AUTH), event.created_at.as_secs())
        .map_err(AuthRefusal::Conditions)?;
    Ok(Admitted::Agent(tag))
}

/// An admitted agent must still have its record; the owner always passes.
pub fn check_enrollment(admitted: Admitted, enrollment: Enrollment) -> Result<Admitted, AuthRefusal> {
    match (&admitted, enrollment) {
        (Admitted::Owner, _) | (_, Enrollment::Unchecked | Enrollment::Enrolled) => Ok(admitted),
        (_, Enrollment::Absent) => Err(AuthRefusal::NotEnrolled),
        (_, Enrollment::Unreadable) => Err(AuthRefusal::RecordsUnreadable),
    }
}

/// Why an authenticated connection may not publish an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishRefusal {
    #[error("restricted: presence (kind 20001) must be authored by the authenticated key")]
    PresenceAuthor,
    #[error(
        "invalid: this presence's created_at is {ahead_secs} s ahead of the relay's clock (at most {skew_secs} s is accepted); check the publisher's clock"
    )]
    PresenceFromTheFuture { ahead_secs: u64, skew_secs: u64 },
    #[error(transparent)]
    Session(#[from] SessionRefusal),
}

/// Checks an EVENT from the authenticated `session` at unix time `now`.
/// A presence must be its author's own and dated at most
/// [`PRESENCE_MAX_AHEAD`] ahead of `now` (review afa2bf1 finding 9: one
/// dated later would be kept, [`super::presence_keep`], and mask every
/// honest one until its date).
pub fn check_publish(event: &Event, session: &Session, now: u64) -> Result<(), PublishRefusal> {
    session.check(now)?;
    if event.kind != Kind::from(KIND_PRESENCE) {
        return Ok(());
    }
    if event.pubkey.to_hex() != session.key {
        return Err(PublishRefusal::PresenceAuthor);
    }
    let skew_secs = PRESENCE_MAX_AHEAD.as_secs();
    let ahead_secs = event.created_at.as_secs().saturating_sub(now);
    if ahead_secs > skew_secs {
        return Err(PublishRefusal::PresenceFromTheFuture {
            ahead_secs,
            skew_secs,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr_sdk::prelude::{EventBuilder, Keys, Tag, Timestamp};
    use std::sync::LazyLock;

    /// The relay under test: bound to 127.0.0.1:7447 behind a TLS proxy.
    const BOUND: &str = "127.0.0.1:7447";
    const OURS: &str = "ws://127.0.0.1:7447";
    const PUBLIC: &str = "wss://relay.example.com";
    static URLS: LazyLock<OwnUrls> =
        LazyLock::new(|| OwnUrls::new(BOUND.parse().unwrap(), &[], &[PUBLIC.to_string()]).unwrap());

    fn auth_for(keys: &Keys, relay: &str, challenge: &str, extra: Vec<Tag>, at: u64) -> Event {
        let mut tags = vec![
            Tag::parse(["relay", relay]).unwrap(),
            Tag::parse(["challenge", challenge]).unwrap(),
        ];
        tags.extend(extra);
        EventBuilder::new(Kind::from(KIND_AUTH), "")
            .tags(tags)
            .custom_created_at(Timestamp::from(at))
            .sign_with_keys(keys)
            .unwrap()
    }

    fn auth_event(keys: &Keys, challenge: &str, extra: Vec<Tag>, at: u64) -> Event {
        auth_for(keys, OURS, challenge, extra, at)
    }

    fn check(event: &Event, challenge: &str, owner_hex: &str, now: u64) -> Result<Admitted, AuthRefusal> {
        check_auth(
            event,
            AuthContext {
                challenge,
                urls: &URLS,
                owner_hex,
            },
            now,
        )
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn the_owner_is_admitted() {
        let owner = Keys::generate();
        let e = auth_event(&owner, "c1", vec![], NOW);
        assert_eq!(
            check(&e, "c1", &owner.public_key().to_hex(), NOW),
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
            check(&e, "c", &owner.public_key().to_hex(), NOW),
            Ok(Admitted::Agent(good))
        );
        let foreign = AuthTag::mint(&other, &agent_hex, "").unwrap().to_tag();
        let e = auth_event(&agent, "c", vec![foreign], NOW);
        assert_eq!(
            check(&e, "c", &owner.public_key().to_hex(), NOW),
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
            check(&e, "c", &owner.public_key().to_hex(), NOW),
            Err(AuthRefusal::AuthTag(AuthTagError::BadSignature))
        );
    }

    #[test]
    fn strangers_and_malformed_auth_are_refused() {
        let owner = Keys::generate();
        let owner_hex = owner.public_key().to_hex();
        let stranger = Keys::generate();
        let e = auth_event(&stranger, "c", vec![], NOW);
        assert_eq!(check(&e, "c", &owner_hex, NOW), Err(AuthRefusal::Stranger));
        assert!(AuthRefusal::Stranger.to_string().starts_with("restricted:"));
        let e = auth_event(&owner, "c", vec![], NOW);
        assert_eq!(check(&e, "other", &owner_hex, NOW), Err(AuthRefusal::Challenge));
        assert_eq!(check(&e, "c", &owner_hex, NOW + 61), Err(AuthRefusal::Stale));
        assert_eq!(check(&e, "c", &owner_hex, NOW - 61), Err(AuthRefusal::Stale));
        assert_eq!(check(&e, "c", &owner_hex, NOW + 60), Ok(Admitted::Owner));
        let no_relay = EventBuilder::new(Kind::from(KIND_AUTH), "")
            .tags([Tag::parse(["challenge", "c"]).unwrap()])
            .custom_created_at(Timestamp::from(NOW))
            .sign_with_keys(&owner)
            .unwrap();
        assert_eq!(check(&no_relay, "c", &owner_hex, NOW), Err(AuthRefusal::RelayTag));
        let note = EventBuilder::new(Kind::from(1), "")
            .custom_created_at(Timestamp::from(NOW))
            .sign_with_keys(&owner)
            .unwrap();
        assert_eq!(check(&note, "c", &owner_hex, NOW), Err(AuthRefusal::Kind));
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
            check(&forged, "c", &owner.public_key().to_hex(), NOW),
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
            check(&auth_event(&agent, "c", vec![tag], NOW), "c", &owner_hex, NOW)
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

    #[test]
    fn an_auth_signed_for_another_relay_is_invalid() {
        let owner = Keys::generate();
        let owner_hex = owner.public_key().to_hex();
        let agent = Keys::generate();
        let tag = AuthTag::mint(&owner, &agent.public_key().to_hex(), "")
            .unwrap()
            .to_tag();
        for relay in [
            "wss://evil.example",
            "ws://127.0.0.1:7448",
            "wss://127.0.0.1:7447",
            "ws://127.0.0.1:7447/x",
        ] {
            let e = auth_for(&owner, relay, "c", vec![], NOW);
            let refused = check(&e, "c", &owner_hex, NOW).unwrap_err();
            assert!(
                matches!(refused, AuthRefusal::OtherRelay { .. }),
                "owner via {relay}: {refused:?}"
            );
            let text = refused.to_string();
            assert!(text.starts_with("invalid:"), "{text}");
            assert!(
                text.contains(OURS) && text.contains("wss://relay.example.com:443"),
                "{text}"
            );
            let e = auth_for(&agent, relay, "c", vec![tag.clone()], NOW);
            assert!(
                matches!(
                    check(&e, "c", &owner_hex, NOW),
                    Err(AuthRefusal::OtherRelay { .. })
                ),
                "agent via {relay}"
            );
        }
        // Our own URLs, however spelled, and the configured public URL.
        for relay in [
            OURS,
            "ws://127.0.0.1:7447/",
            "ws://localhost:7447",
            "wss://RELAY.example.com:443/",
        ] {
            let e = auth_for(&owner, relay, "c", vec![], NOW);
            assert_eq!(check(&e, "c", &owner_hex, NOW), Ok(Admitted::Owner), "{relay}");
        }
    }

    #[test]
    fn an_agent_needs_its_record_and_the_owner_never_does() {
        let owner = Keys::generate();
        let agent = Keys::generate();
        let tag = AuthTag::mint(&owner, &agent.public_key().to_hex(), "").unwrap();
        let agent_admitted = || Admitted::Agent(tag.clone());
        for e in [Enrollment::Unchecked, Enrollment::Enrolled] {
            assert_eq!(check_enrollment(agent_admitted(), e), Ok(agent_admitted()));
        }
        let gone = check_enrollment(agent_admitted(), Enrollment::Absent).unwrap_err();
        assert_eq!(gone, AuthRefusal::NotEnrolled);
        assert!(gone.to_string().starts_with("restricted:"));
        let unreadable = check_enrollment(agent_admitted(), Enrollment::Unreadable).unwrap_err();
        assert_eq!(unreadable, AuthRefusal::RecordsUnreadable);
        assert!(unreadable.to_string().starts_with("error:"));
        for e in [Enrollment::Absent, Enrollment::Unreadable] {
            assert_eq!(check_enrollment(Admitted::Owner, e), Ok(Admitted::Owner));
        }
    }

    #[test]
    fn a_session_knows_when_it_ends_and_a_removed_agent_is_refused() {
        let owner = Keys::generate();
        let agent = Keys::generate();
        let agent_hex = agent.public_key().to_hex();
        let session_with = |conditions: &str| {
            let tag = AuthTag::mint(&owner, &agent_hex, conditions).unwrap();
            Session::new(agent_hex.clone(), Admitted::Agent(tag))
        };
        assert_eq!(session_with("").expires_at(), None);
        assert_eq!(session_with("kind=22242").expires_at(), None);
        let window = format!(
            "created_at>{}&created_at<{}&created_at<{}",
            NOW - 5,
            NOW + 90,
            NOW + 30
        );
        assert_eq!(session_with(&window).expires_at(), Some(NOW + 30));
        assert_eq!(session(&owner).expires_at(), None);

        let mut s = session_with("");
        assert_eq!(s.check(NOW), Ok(()));
        s.remove();
        assert_eq!(s.check(NOW), Err(SessionRefusal::Removed));
        assert!(SessionRefusal::Removed.to_string().starts_with("restricted:"));
        let mut o = session(&owner);
        o.remove();
        assert_eq!(o.check(NOW), Ok(()), "the owner is never removed");
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

    /// Review afa2bf1 finding 9: a presence dated beyond the skew is refused.
    #[test]
    fn a_presence_dated_in_the_future_is_invalid() {
        let a = Keys::generate();
        let at = |t: u64| {
            EventBuilder::new(Kind::from(KIND_PRESENCE), "online")
                .custom_created_at(Timestamp::from(t))
                .sign_with_keys(&a)
                .unwrap()
        };
        let skew = crate::limits::PRESENCE_MAX_AHEAD.as_secs();
        assert_eq!(check_publish(&at(NOW + skew), &session(&a), NOW), Ok(()));
        assert_eq!(check_publish(&at(NOW - 3600), &session(&a), NOW), Ok(()));
        let refused = check_publish(&at(NOW + 3600), &session(&a), NOW).unwrap_err();
        assert_eq!(
            refused,
            PublishRefusal::PresenceFromTheFuture {
                ahead_secs: 3600,
                skew_secs: skew
            }
        );
        let text = refused.to_string();
        assert!(text.starts_with("invalid:"), "{text}");
        assert!(text.contains("3600 s ahead"), "{text}");
        // Only presence: another kind's date is the library's business.
        let note = EventBuilder::new(Kind::from(9), "hi")
            .custom_created_at(Timestamp::from(NOW + 3600))
            .sign_with_keys(&a)
            .unwrap();
        assert_eq!(check_publish(&note, &session(&a), NOW), Ok(()));
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
            PublishRefusal::Session(SessionRefusal::Attestation(ConditionError::Expired))
        );
        assert!(refused.to_string().starts_with("restricted:"));
        assert_eq!(
            s.check(NOW + 60),
            Err(SessionRefusal::Attestation(ConditionError::Expired))
        );
        // The owner's session has no window.
        assert_eq!(session(&owner).check(u64::MAX), Ok(()));
    }
}
