//! The record fields a user types that end up in file names or in listings
//! (names, display names, relay URLs, provider ids), and the one shape they
//! must not have (spec I2: a key is never rendered): a value holding an
//! `nsec1…` or a run of 64 hex digits is a key pasted in the wrong place and
//! is refused. Pure, at the bottom of the launcher: the store refuses such a
//! record, the env-file parser such a key name, the page such a form field.

use crate::record::{AgentRecord, Backend};

/// True when `value` holds something shaped like a private key: `nsec1`
/// followed by at least 20 bech32 characters, or a run of 64 hex digits.
pub fn secret_shaped(value: &str) -> bool {
    const BECH32: &str = "qpzry9x8gf2tvdw0s3jn54khce6mua7l";
    let lower = value.to_ascii_lowercase();
    let nsec = lower
        .match_indices("nsec1")
        .any(|(i, _)| lower[i + 5..].chars().take_while(|c| BECH32.contains(*c)).count() >= 20);
    let mut run = 0usize;
    let hex64 = value.chars().any(|c| {
        run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
        run >= 64
    });
    nsec || hex64
}

/// One record field that is stored in a file name or printed by `agent list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShownField<'a> {
    /// How an error names it.
    pub label: &'static str,
    /// The Start page form's key for it.
    pub form_key: &'static str,
    pub value: &'a str,
}

/// The record fields that are stored in a file name or printed by `agent list`.
pub fn shown_fields(rec: &AgentRecord) -> Vec<ShownField<'_>> {
    let f = |label, form_key, value| ShownField {
        label,
        form_key,
        value,
    };
    let mut v = vec![
        f("name", "name", rec.name.as_str()),
        f("relay URL", "relay_url", rec.relay_url.as_str()),
    ];
    if let Some(d) = &rec.display_name {
        v.push(f("display name", "display_name", d.as_str()));
    }
    if let Backend::Provider { id, .. } = &rec.backend {
        v.push(f("provider id", "backend", id.as_str()));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr_sdk::{Keys, ToBech32};

    #[test]
    fn key_shaped_values_are_recognised() {
        let k = Keys::generate();
        let nsec = k.secret_key().to_bech32().unwrap();
        let hex = k.secret_key().to_secret_hex();
        for bad in [
            nsec.clone(),
            nsec.to_ascii_uppercase(),
            format!("x-{nsec}"),
            hex.clone(),
            hex.to_ascii_uppercase(),
            format!("ws://relay/{hex}"),
        ] {
            assert!(secret_shaped(&bad), "{bad}");
        }
        for ok in [
            "scout",
            "nsec1",
            "nsec1abc",
            &hex[..63],
            "ws://127.0.0.1:4711",
            "My Agent",
        ] {
            assert!(!secret_shaped(ok), "{ok}");
        }
    }
}
