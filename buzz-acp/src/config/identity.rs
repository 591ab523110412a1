//! Identity resolution: the agent's keys and its owner (spec I1, §Launch data
//! owner rule; wire-facts §1).
//!
//! [`resolve_identity`] refuses, in order, a missing or malformed key, a
//! missing relay URL and a missing owner — all before any connection. A
//! configured `BUZZ_AUTH_TAG` names the owner only if it verifies for this
//! agent and its conditions cover the kind 22242 AUTH event it rides on,
//! created now; otherwise the reason is kept ([`TagRejection`]) and the
//! `BUZZ_ACP_AGENT_OWNER` fallback applies. An owner equal to the agent is
//! refused. The resolved [`Identity`]'s `Debug` never shows the key or the tag.

use super::{IdentityError, StartupError, non_empty};
use crate::cli::Cli;
use buzz_contract::keys;
use buzz_contract::nip_oa::{AuthTag, AuthTagError, ConditionError};
use buzz_contract::presence::KIND_AUTH;
use nostr_sdk::prelude::Keys;

/// Why a configured `BUZZ_AUTH_TAG` does not name the owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagRejection {
    /// Malformed, or its signature does not verify for this agent.
    #[error(transparent)]
    Invalid(#[from] AuthTagError),
    /// It verifies, but its conditions do not cover this agent's AUTH now.
    #[error(transparent)]
    Conditions(#[from] ConditionError),
}

/// The resolved identity. `Debug` is redacted.
#[derive(Clone)]
pub struct Identity {
    /// The agent keys.
    pub keys: Keys,
    /// Agent pubkey, 64 lowercase hex.
    pub pubkey: String,
    /// Resolved owner, 64 lowercase hex.
    pub owner: String,
    /// The verified NIP-OA tag to add to the NIP-42 event, if any.
    pub auth_tag: Option<AuthTag>,
    /// Why a configured auth tag was not used, if it was not.
    pub auth_tag_rejected: Option<TagRejection>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("pubkey", &self.pubkey)
            .field("owner", &self.owner)
            .field("auth_tag", &self.auth_tag.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Resolves the identity (wire-facts §1 owner resolution). Order of refusal:
/// key, relay URL, owner — all before any connection. An auth tag names the
/// owner only if it verifies and its conditions cover the kind 22242 AUTH
/// event it rides on, created now (an expired attestation is not an owner).
/// An owner equal to the agent is refused: self-authored events are dropped,
/// so such an agent could never be stopped.
pub fn resolve_identity(cli: &Cli, now_secs: u64) -> Result<Identity, StartupError> {
    let raw_key = cli.private_key.as_deref().ok_or(IdentityError::KeyMissing)?;
    let keys = keys::parse_private_key(raw_key).map_err(IdentityError::Key)?;
    if cli.relay_url.as_deref().is_none_or(|u| u.trim().is_empty()) {
        return Err(IdentityError::RelayMissing.into());
    }
    let pubkey = keys::pubkey_hex(&keys);
    let mut auth_tag = None;
    let mut auth_tag_rejected = None;
    if let Some(raw) = cli.auth_tag.as_deref().filter(|s| !s.trim().is_empty()) {
        let checked = AuthTag::parse(raw)
            .and_then(|t| t.verify(&pubkey).map(|()| t))
            .map_err(TagRejection::from)
            .and_then(|t| {
                t.covers(u64::from(KIND_AUTH), now_secs)
                    .map(|()| t)
                    .map_err(TagRejection::from)
            });
        match checked {
            Ok(t) => auth_tag = Some(t),
            Err(e) => auth_tag_rejected = Some(e),
        }
    }
    let owner = match &auth_tag {
        Some(t) => t.owner.clone(),
        None => match non_empty(cli.agent_owner.as_ref()) {
            Some(o) => keys::normalize_pubkey_hex(&o).ok_or(IdentityError::OwnerMalformed)?,
            None => return Err(IdentityError::NoOwner.into()),
        },
    };
    if owner == pubkey {
        return Err(IdentityError::OwnerIsAgent.into());
    }
    Ok(Identity {
        keys,
        pubkey,
        owner,
        auth_tag,
        auth_tag_rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{NOW, config, nonce, owned};
    use crate::exit::Exit;
    use buzz_contract::keys::KeyError;
    use nostr_sdk::prelude::ToBech32;

    #[test]
    fn identity_refusals_in_order() {
        let k = Keys::generate();
        let nsec = k.secret_key().to_bech32().unwrap();
        let owner = Keys::generate().public_key().to_hex();
        let e = |a: &[&str]| config(a).unwrap_err();
        assert_eq!(e(&[]), StartupError::Identity(IdentityError::KeyMissing));
        assert_eq!(
            e(&["--private-key", "  "]),
            StartupError::Identity(IdentityError::Key(KeyError::Empty))
        );
        assert_eq!(
            e(&["--private-key", "nsec1garbage"]),
            StartupError::Identity(IdentityError::Key(KeyError::Malformed))
        );
        assert_eq!(
            e(&["--private-key", &nsec]),
            StartupError::Identity(IdentityError::RelayMissing)
        );
        assert_eq!(
            e(&["--private-key", &nsec, "--relay-url", "ws://x"]),
            StartupError::Identity(IdentityError::NoOwner)
        );
        let ok = config(&[
            "--private-key",
            &nsec,
            "--relay-url",
            "ws://x",
            "--agent-owner",
            &owner,
        ])
        .unwrap();
        assert_eq!(ok.identity.owner, owner);
        assert_eq!(ok.run_nonce, nonce());
        assert!(!format!("{:?}", ok).contains(&k.secret_key().to_secret_hex()));
    }

    #[test]
    fn verifying_auth_tag_wins_and_bad_tag_falls_back() {
        let agent = Keys::generate();
        let hex = agent.secret_key().to_secret_hex();
        let owner = Keys::generate();
        let other = Keys::generate().public_key().to_hex();
        let tag = AuthTag::mint(&owner, &agent.public_key().to_hex(), "")
            .unwrap()
            .to_json();
        let base = ["--private-key", &hex, "--relay-url", "wss://r.example"];
        let mut a = base.to_vec();
        a.extend(["--auth-tag", &tag, "--agent-owner", &other]);
        let c = config(&a).unwrap();
        assert_eq!(c.identity.owner, owner.public_key().to_hex());
        assert!(c.identity.auth_tag.is_some());
        // A tag minted for another agent does not verify: fall back to the owner env.
        let wrong = AuthTag::mint(&owner, &other, "").unwrap().to_json();
        let mut b = base.to_vec();
        b.extend(["--auth-tag", &wrong, "--agent-owner", &other]);
        let c = config(&b).unwrap();
        assert_eq!(c.identity.owner, other);
        assert_eq!(
            c.identity.auth_tag_rejected,
            Some(TagRejection::Invalid(AuthTagError::BadSignature))
        );
        // ...and without a fallback, refuse.
        let mut d = base.to_vec();
        d.extend(["--auth-tag", &wrong]);
        assert_eq!(
            config(&d).unwrap_err(),
            StartupError::Identity(IdentityError::NoOwner)
        );
    }

    #[test]
    fn malformed_owner_without_a_tag_is_no_owner() {
        let hex = Keys::generate().secret_key().to_secret_hex();
        let a = owned(&hex, "xyz");
        let e = config(&a).unwrap_err();
        assert_eq!(e, StartupError::Identity(IdentityError::OwnerMalformed));
        assert_eq!(e.exit(), Exit::Identity);
    }

    #[test]
    fn the_agent_cannot_own_itself() {
        let agent = Keys::generate();
        let hex = agent.secret_key().to_secret_hex();
        let me = agent.public_key().to_hex();
        let a = owned(&hex, &me);
        let e = config(&a).unwrap_err();
        assert_eq!(e, StartupError::Identity(IdentityError::OwnerIsAgent));
        assert_eq!(e.exit(), Exit::Identity);
        // Upper-case spelling of the same key is the same key.
        let upper = me.to_uppercase();
        let a = owned(&hex, &upper);
        assert_eq!(
            config(&a).unwrap_err(),
            StartupError::Identity(IdentityError::OwnerIsAgent)
        );
    }

    #[test]
    fn an_expired_or_not_yet_valid_attestation_is_not_an_owner() {
        let agent = Keys::generate();
        let hex = agent.secret_key().to_secret_hex();
        let owner = Keys::generate();
        let me = agent.public_key().to_hex();
        let fallback = Keys::generate().public_key().to_hex();
        for (conditions, why) in [
            (format!("created_at<{NOW}"), ConditionError::Expired),
            (format!("created_at>{NOW}"), ConditionError::NotYetValid),
            ("kind=9".to_string(), ConditionError::Kind),
        ] {
            let tag = AuthTag::mint(&owner, &me, &conditions).unwrap().to_json();
            let a = ["--private-key", &hex, "--relay-url", "ws://r", "--auth-tag", &tag];
            assert_eq!(
                config(&a).unwrap_err(),
                StartupError::Identity(IdentityError::NoOwner),
                "{conditions}"
            );
            let mut b = a.to_vec();
            b.extend(["--agent-owner", &fallback]);
            let c = config(&b).unwrap();
            assert_eq!(c.identity.owner, fallback, "{conditions}");
            assert_eq!(c.identity.auth_tag_rejected, Some(TagRejection::Conditions(why)));
            assert!(c.identity.auth_tag.is_none());
        }
        let live = format!("created_at>{}&created_at<{}&kind=22242", NOW - 1, NOW + 1);
        let tag = AuthTag::mint(&owner, &me, &live).unwrap().to_json();
        let a = ["--private-key", &hex, "--relay-url", "ws://r", "--auth-tag", &tag];
        let c = config(&a).unwrap();
        assert_eq!(c.identity.owner, owner.public_key().to_hex());
    }
}
