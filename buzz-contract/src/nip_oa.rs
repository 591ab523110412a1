//! NIP-OA owner attestation (wire-facts §1).
//!
//! `["auth", <owner_pubkey_hex>, <conditions>, <sig_hex>]`, where `sig` is a
//! BIP-340 Schnorr signature by the owner over
//! `SHA256("nostr:agent-auth:" + <agent_pubkey_hex> + ":" + <conditions>)`.
//! `conditions` is `""` or `&`-joined clauses `kind=<n>`, `created_at<N`, `created_at>N`;
//! [`evaluate_conditions`] checks them against an event the way NIP-26 does
//! (every clause must hold; time bounds are strict).

use crate::keys::is_hex64_lower;
use nostr::secp256k1::{Message, XOnlyPublicKey, schnorr::Signature};
use nostr::{Keys, SECP256K1, Tag};
use sha2::{Digest, Sha256};

/// A parsed NIP-OA tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthTag {
    /// Owner pubkey, 64 lowercase hex.
    pub owner: String,
    /// Conditions string as signed.
    pub conditions: String,
    /// Signature, 128 lowercase hex.
    pub sig: String,
}

/// Why an auth tag was refused. Carries no input text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthTagError {
    #[error("the auth tag is not a JSON array of 4 strings")]
    Shape,
    #[error("the auth tag's first element is not \"auth\"")]
    Name,
    #[error("the auth tag's owner is not 64 lowercase hex")]
    Owner,
    #[error("the auth tag's conditions are malformed")]
    Conditions,
    #[error("the auth tag's signature is not 128 lowercase hex")]
    SigShape,
    #[error("the auth tag's owner equals the agent")]
    OwnerIsAgent,
    #[error("the auth tag's signature does not verify for this agent")]
    BadSignature,
}

fn message(agent_pubkey_hex: &str, conditions: &str) -> Message {
    let digest: [u8; 32] = Sha256::digest(format!("nostr:agent-auth:{agent_pubkey_hex}:{conditions}")).into();
    Message::from_digest(digest)
}

/// Checks the conditions grammar.
pub fn conditions_valid(conditions: &str) -> bool {
    if conditions.is_empty() {
        return true;
    }
    conditions.split('&').all(|clause| {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if let Some(n) = clause.strip_prefix("kind=") {
            digits(n)
        } else if let Some(n) = clause.strip_prefix("created_at<") {
            digits(n)
        } else if let Some(n) = clause.strip_prefix("created_at>") {
            digits(n)
        } else {
            false
        }
    })
}

/// Why an attestation's conditions do not cover an event (NIP-26 condition
/// semantics, which NIP-OA reuses: every clause must hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    #[error("the auth tag's conditions are malformed")]
    Malformed,
    #[error("the auth tag does not cover this event kind")]
    Kind,
    #[error("the auth tag has expired (created_at< bound passed)")]
    Expired,
    #[error("the auth tag is not valid yet (created_at> bound not reached)")]
    NotYetValid,
}

/// One parsed condition clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// `kind=<n>`: the event's kind must be `n`.
    Kind(u64),
    /// `created_at<N`: the event's `created_at` must be strictly below `N`.
    Before(u64),
    /// `created_at>N`: the event's `created_at` must be strictly above `N`.
    After(u64),
}

/// Parses a conditions string into clauses (`""` is no clause). A number
/// that does not fit a `u64` is malformed.
pub fn parse_conditions(conditions: &str) -> Result<Vec<Condition>, ConditionError> {
    if conditions.is_empty() {
        return Ok(Vec::new());
    }
    conditions
        .split('&')
        .map(|clause| {
            let num = |s: &str| -> Result<u64, ConditionError> {
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(ConditionError::Malformed);
                }
                s.parse().map_err(|_| ConditionError::Malformed)
            };
            if let Some(n) = clause.strip_prefix("kind=") {
                num(n).map(Condition::Kind)
            } else if let Some(n) = clause.strip_prefix("created_at<") {
                num(n).map(Condition::Before)
            } else if let Some(n) = clause.strip_prefix("created_at>") {
                num(n).map(Condition::After)
            } else {
                Err(ConditionError::Malformed)
            }
        })
        .collect()
}

/// Evaluates `conditions` for an event of `kind` created at `created_at`
/// (unix seconds). Every clause must hold, as in NIP-26: two different
/// `kind=` clauses can never both hold. Time bounds are strict.
pub fn evaluate_conditions(conditions: &str, kind: u64, created_at: u64) -> Result<(), ConditionError> {
    for c in parse_conditions(conditions)? {
        match c {
            Condition::Kind(k) if k != kind => return Err(ConditionError::Kind),
            Condition::Before(n) if created_at >= n => return Err(ConditionError::Expired),
            Condition::After(n) if created_at <= n => return Err(ConditionError::NotYetValid),
            _ => {}
        }
    }
    Ok(())
}

impl AuthTag {
    /// Parses the JSON array form (shape only; see [`AuthTag::verify`]).
    pub fn parse(json: &str) -> Result<AuthTag, AuthTagError> {
        let v: Vec<String> = serde_json::from_str(json.trim()).map_err(|_| AuthTagError::Shape)?;
        let [name, owner, conditions, sig]: [String; 4] = v.try_into().map_err(|_| AuthTagError::Shape)?;
        if name != "auth" {
            return Err(AuthTagError::Name);
        }
        if !is_hex64_lower(&owner) {
            return Err(AuthTagError::Owner);
        }
        if !conditions_valid(&conditions) {
            return Err(AuthTagError::Conditions);
        }
        if sig.len() != 128 || !sig.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(AuthTagError::SigShape);
        }
        Ok(AuthTag {
            owner,
            conditions,
            sig,
        })
    }

    /// Verifies the owner's signature over this agent's pubkey.
    pub fn verify(&self, agent_pubkey_hex: &str) -> Result<(), AuthTagError> {
        if self.owner == agent_pubkey_hex {
            return Err(AuthTagError::OwnerIsAgent);
        }
        let owner_bytes: [u8; 32] = hex::decode(&self.owner)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(AuthTagError::Owner)?;
        let owner = XOnlyPublicKey::from_slice(&owner_bytes).map_err(|_| AuthTagError::Owner)?;
        let sig_bytes = hex::decode(&self.sig).map_err(|_| AuthTagError::SigShape)?;
        let sig = Signature::from_slice(&sig_bytes).map_err(|_| AuthTagError::SigShape)?;
        SECP256K1
            .verify_schnorr(&sig, &message(agent_pubkey_hex, &self.conditions), &owner)
            .map_err(|_| AuthTagError::BadSignature)
    }

    /// Parses and verifies in one step; returns the owner hex.
    pub fn verified_owner(json: &str, agent_pubkey_hex: &str) -> Result<String, AuthTagError> {
        let tag = AuthTag::parse(json)?;
        tag.verify(agent_pubkey_hex)?;
        Ok(tag.owner)
    }

    /// Checks that this tag's conditions cover an event of `kind` created at
    /// `created_at` (see [`evaluate_conditions`]).
    pub fn covers(&self, kind: u64, created_at: u64) -> Result<(), ConditionError> {
        evaluate_conditions(&self.conditions, kind, created_at)
    }

    /// Checks that this tag's time window (its `created_at<` / `created_at>`
    /// clauses, kind clauses ignored) holds at unix time `now`: what a relay
    /// asks of an admitted agent's session after its AUTH, so an attestation
    /// that expires ends the agent's access.
    pub fn in_force(&self, now: u64) -> Result<(), ConditionError> {
        for c in parse_conditions(&self.conditions)? {
            match c {
                Condition::Before(n) if now >= n => return Err(ConditionError::Expired),
                Condition::After(n) if now <= n => return Err(ConditionError::NotYetValid),
                _ => {}
            }
        }
        Ok(())
    }

    /// Mints a tag: the owner signs the agent's pubkey with `conditions`.
    pub fn mint(owner: &Keys, agent_pubkey_hex: &str, conditions: &str) -> Result<AuthTag, AuthTagError> {
        if !conditions_valid(conditions) {
            return Err(AuthTagError::Conditions);
        }
        let owner_hex = owner.public_key().to_hex();
        if owner_hex == agent_pubkey_hex {
            return Err(AuthTagError::OwnerIsAgent);
        }
        let sig = owner.sign_schnorr(&message(agent_pubkey_hex, conditions));
        Ok(AuthTag {
            owner: owner_hex,
            conditions: conditions.to_string(),
            sig: hex::encode(sig.serialize()),
        })
    }

    /// The JSON array string (`BUZZ_AUTH_TAG`'s value).
    pub fn to_json(&self) -> String {
        serde_json::json!(["auth", self.owner, self.conditions, self.sig]).to_string()
    }

    /// The tag as a nostr event tag (for the NIP-42 auth event).
    pub fn to_tag(&self) -> Tag {
        Tag::parse(["auth", &self.owner, &self.conditions, &self.sig]).expect("a 4-element tag always parses")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mint_then_verify_round_trips() {
        let owner = Keys::generate();
        let agent = Keys::generate().public_key().to_hex();
        let tag = AuthTag::mint(&owner, &agent, "").unwrap();
        let json = tag.to_json();
        assert_eq!(
            AuthTag::verified_owner(&json, &agent).unwrap(),
            owner.public_key().to_hex()
        );
        let other = Keys::generate().public_key().to_hex();
        assert_eq!(
            AuthTag::verified_owner(&json, &other),
            Err(AuthTagError::BadSignature)
        );
    }

    #[test]
    fn conditions_are_signed() {
        let owner = Keys::generate();
        let agent = Keys::generate().public_key().to_hex();
        let mut tag = AuthTag::mint(&owner, &agent, "kind=9&created_at<2000000000").unwrap();
        assert!(tag.verify(&agent).is_ok());
        tag.conditions = "kind=9".into();
        assert_eq!(tag.verify(&agent), Err(AuthTagError::BadSignature));
    }

    #[test]
    fn shape_errors() {
        assert_eq!(AuthTag::parse("not json"), Err(AuthTagError::Shape));
        assert_eq!(AuthTag::parse(r#"["auth","a","",""]"#), Err(AuthTagError::Owner));
        let o = "a".repeat(64);
        assert_eq!(
            AuthTag::parse(&format!(r#"["auth","{o}","",""]"#)),
            Err(AuthTagError::SigShape)
        );
        assert_eq!(
            AuthTag::parse(&format!(r#"["nope","{o}","",""]"#)),
            Err(AuthTagError::Name)
        );
        assert_eq!(
            AuthTag::parse(&format!(r#"["auth","{o}","bad",""]"#)),
            Err(AuthTagError::Conditions)
        );
        assert_eq!(AuthTag::parse(r#"["auth","a","b"]"#), Err(AuthTagError::Shape));
    }

    #[test]
    fn owner_equal_to_agent_is_invalid() {
        let k = Keys::generate();
        let me = k.public_key().to_hex();
        assert_eq!(AuthTag::mint(&k, &me, ""), Err(AuthTagError::OwnerIsAgent));
    }

    #[test]
    fn conditions_are_evaluated_clause_by_clause() {
        assert_eq!(evaluate_conditions("", 22242, 5), Ok(()));
        assert_eq!(evaluate_conditions("kind=9", 9, 5), Ok(()));
        assert_eq!(evaluate_conditions("kind=9", 22242, 5), Err(ConditionError::Kind));
        assert_eq!(
            evaluate_conditions("kind=1&kind=9", 9, 5),
            Err(ConditionError::Kind)
        );
        assert_eq!(evaluate_conditions("created_at<100", 1, 99), Ok(()));
        assert_eq!(
            evaluate_conditions("created_at<100", 1, 100),
            Err(ConditionError::Expired)
        );
        assert_eq!(evaluate_conditions("created_at>100", 1, 101), Ok(()));
        assert_eq!(
            evaluate_conditions("created_at>100", 1, 100),
            Err(ConditionError::NotYetValid)
        );
        assert_eq!(evaluate_conditions("created_at>10&created_at<20", 1, 15), Ok(()));
        assert_eq!(
            evaluate_conditions("created_at<99999999999999999999", 1, 1),
            Err(ConditionError::Malformed)
        );
        assert_eq!(evaluate_conditions("nope", 1, 1), Err(ConditionError::Malformed));
        let owner = Keys::generate();
        let agent = Keys::generate().public_key().to_hex();
        let tag = AuthTag::mint(&owner, &agent, "created_at<1000").unwrap();
        assert_eq!(tag.covers(22242, 999), Ok(()));
        assert_eq!(tag.covers(22242, 1000), Err(ConditionError::Expired));
    }

    #[test]
    fn the_time_window_ignores_kind_clauses_and_is_strict() {
        let owner = Keys::generate();
        let agent = Keys::generate().public_key().to_hex();
        let tag = AuthTag::mint(&owner, &agent, "kind=9&created_at>100&created_at<200").unwrap();
        assert_eq!(tag.in_force(150), Ok(()));
        assert_eq!(tag.in_force(100), Err(ConditionError::NotYetValid));
        assert_eq!(tag.in_force(200), Err(ConditionError::Expired));
        assert_eq!(
            AuthTag::mint(&owner, &agent, "").unwrap().in_force(u64::MAX),
            Ok(())
        );
    }

    #[test]
    fn condition_grammar() {
        for ok in ["", "kind=9", "created_at<5&created_at>1", "kind=1&kind=9"] {
            assert!(conditions_valid(ok), "{ok}");
        }
        for bad in ["kind=", "kind=x", "foo=1", "&", "kind=9&"] {
            assert!(!conditions_valid(bad), "{bad}");
        }
    }
}
