//! Agent identity parsing (wire-facts §1; spec §Deploy State Machine step 0).
//!
//! Errors never echo the input: a malformed key is still key material.

use nostr::{Keys, PublicKey};

/// Why a private key was refused. Carries no key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Empty after trimming.
    #[error("the private key is empty")]
    Empty,
    /// Neither a valid `nsec1…` nor 64 hex characters for a valid secp256k1 scalar.
    #[error("the private key is malformed: expected nsec1… (NIP-19) or 64 hex characters")]
    Malformed,
}

/// Parses an agent private key: trimmed, NIP-19 `nsec1…` or 64 hex.
pub fn parse_private_key(raw: &str) -> Result<Keys, KeyError> {
    let s = raw.trim();
    if s.is_empty() {
        return Err(KeyError::Empty);
    }
    let shaped = (s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())) || s.starts_with("nsec1");
    if !shaped {
        return Err(KeyError::Malformed);
    }
    Keys::parse(s).map_err(|_| KeyError::Malformed)
}

/// The x-only public key as 64 lowercase hex.
pub fn pubkey_hex(keys: &Keys) -> String {
    keys.public_key().to_hex()
}

/// True for exactly 64 lowercase hex characters.
pub fn is_hex64_lower(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// True for exactly 32 lowercase hex characters (a start nonce / generation token).
pub fn is_hex32_lower(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Normalises an owner pubkey: trimmed, lowercased, must be 64 hex and a valid
/// x-only point. Returns `None` otherwise.
pub fn normalize_pubkey_hex(raw: &str) -> Option<String> {
    let s = raw.trim().to_ascii_lowercase();
    if !is_hex64_lower(&s) {
        return None;
    }
    PublicKey::from_hex(&s).ok().map(|_| s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::ToBech32;

    #[test]
    fn accepts_nsec_and_hex_trimmed() {
        let keys = Keys::generate();
        let nsec = keys.secret_key().to_bech32().unwrap();
        let hex = keys.secret_key().to_secret_hex();
        assert_eq!(
            parse_private_key(&format!("  {nsec}\n")).unwrap().public_key(),
            keys.public_key()
        );
        assert_eq!(
            parse_private_key(&format!("\t{hex} ")).unwrap().public_key(),
            keys.public_key()
        );
        assert_eq!(pubkey_hex(&keys).len(), 64);
    }

    #[test]
    fn refuses_empty_and_malformed_without_echo() {
        assert_eq!(parse_private_key("  "), Err(KeyError::Empty));
        for bad in [
            "nsec1notakey",
            "abc",
            &"g".repeat(64),
            &"0".repeat(64),
            "npub1xyz",
        ] {
            let e = parse_private_key(bad).unwrap_err();
            assert_eq!(e, KeyError::Malformed, "{bad}");
            assert!(!e.to_string().contains(bad));
        }
    }

    #[test]
    fn hex_shapes() {
        assert!(is_hex64_lower(&"a".repeat(64)));
        assert!(!is_hex64_lower(&"A".repeat(64)));
        assert!(is_hex32_lower(&"0f".repeat(16)));
        assert!(!is_hex32_lower(&"0f".repeat(17)));
        let pk = Keys::generate().public_key().to_hex();
        assert_eq!(
            normalize_pubkey_hex(&format!(" {} ", pk.to_uppercase())),
            Some(pk)
        );
        assert_eq!(normalize_pubkey_hex("xyz"), None);
    }
}
