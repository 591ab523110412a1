//! NIP-OA owner attestation (wire-facts §1).
//!
//! `["auth", <owner_pubkey_hex>, <conditions>, <sig_hex>]`, where `sig` is a
//! BIP-340 Schnorr signature by the owner over
//! `SHA256("nostr:agent-auth:" + <agent_pubkey_hex> + ":" + <conditions>)`.
//! `conditions` is `""` or `&`-joined clauses `kind=<n>`, `created_at<N`, `created_at>N`.

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
    fn condition_grammar() {
        for ok in ["", "kind=9", "created_at<5&created_at>1", "kind=1&kind=9"] {
            assert!(conditions_valid(ok), "{ok}");
        }
        for bad in ["kind=", "kind=x", "foo=1", "&", "kind=9&"] {
            assert!(!conditions_valid(bad), "{bad}");
        }
    }
}
