//! What is a secret (spec I2 "never rendered", §Provider Output Is
//! Untrusted; review b30b1a0 code-quality "What is a secret is built
//! separately for the Start page and for the gate" and "Fail-open
//! redaction"): one builder, [`SecretSet`], that both the gate's
//! per-request redactor ([`crate::redact::Redactor::for_request`]) and the
//! Start page's state-dir redactor ([`SecretSet::of_store`]) fill, so a key
//! or an auth tag contributes the same forms everywhere:
//!
//! - a key: its nsec and its hex, each in lower and upper case;
//! - an auth tag: its whole JSON (matched whole) and its signature, both cases
//!   (matched by fragment: the rest of the tag is a public owner key);
//! - an env value: as typed (the agent's secret env, `keys/<name>.env`, too);
//! - a policy value (`launch.policy_env`): scrubbed from text, not from handles.
//!
//! [`SecretSet::of_store`] fails closed: a key file, record or settings file
//! that exists but cannot be read or parsed is an error, never a smaller set.
//!
//! [`secret_shaped`] is the pure rule for user-typed fields that end up in
//! file names or in `agent list` (names, display names, relay URLs, provider
//! ids): a value holding an `nsec1…` or a run of 64 hex digits is refused.

use crate::record::{AgentRecord, Backend};
use crate::store::{Store, StoreError};
use nostr_sdk::Keys;

/// The secrets a redactor scrubs.
#[derive(Debug, Clone, Default)]
pub struct SecretSet {
    /// Scrubbed whole and by fragment.
    pub values: Vec<String>,
    /// Scrubbed whole only (an auth tag's JSON: only its signature is secret
    /// material, so fragments of its public parts must not be redacted).
    pub whole_only: Vec<String>,
    /// Scrubbed by fragment only (auth-tag signatures).
    pub fragments: Vec<String>,
    /// Scrubbed whole from text, never from handles (policy knobs).
    pub policy: Vec<String>,
    /// The key material among `values` and `fragments` (keys in every form,
    /// signatures): what [`SecretSet::holds_key`] looks for.
    key_forms: Vec<String>,
}

impl SecretSet {
    /// Adds a key in every form it can be echoed in.
    pub fn key(&mut self, keys: &Keys) {
        let forms = buzz_contract::redact::key_forms(keys);
        self.key_forms.extend(forms.iter().cloned());
        self.values.extend(forms);
    }

    /// Adds a key given as text (nsec or hex) in every form; text that does
    /// not parse is added as typed.
    pub fn key_text(&mut self, text: &str) {
        let t = text.trim();
        let forms = [t.to_ascii_uppercase(), t.to_string()];
        self.key_forms.extend(forms.iter().cloned());
        self.values.extend(forms);
        if let Ok(k) = buzz_contract::keys::parse_private_key(t) {
            self.key(&k);
        }
    }

    /// Adds an auth tag: its whole text and its signature.
    pub fn auth_tag(&mut self, tag: &str) {
        self.whole_only.push(tag.to_string());
        if let Ok(t) = buzz_contract::nip_oa::AuthTag::parse(tag) {
            let forms = buzz_contract::redact::auth_tag_sig_forms(&t);
            self.key_forms.extend(forms.iter().cloned());
            self.fragments.extend(forms);
        }
    }

    /// Adds env values.
    pub fn env<'a>(&mut self, values: impl IntoIterator<Item = &'a String>) {
        self.values.extend(values.into_iter().cloned());
    }

    /// True when `text` contains key material of this set (a key in any
    /// form, a signature), whole. Env values are not looked for: a display
    /// name may well share a word with one.
    pub fn holds_key(&self, text: &str) -> bool {
        self.key_forms
            .iter()
            .filter(|v| v.len() >= 4)
            .any(|v| text.contains(v.as_str()))
    }

    /// Every secret of the state dir: the owner key, every agent's key and
    /// auth tag, and the env values of agents, personas and the global
    /// layer. Fails closed (see the module doc).
    pub fn of_store(store: &Store) -> Result<SecretSet, StoreError> {
        let mut set = SecretSet::default();
        match store.owner() {
            Ok(k) => set.key(&k),
            Err(StoreError::NoOwner) => {}
            Err(e) => return Err(e),
        }
        let settings = store.settings()?;
        set.env(settings.global_env.values());
        set.env(settings.personas.values().flat_map(|p| p.env.values()));
        for rec in store.agents()? {
            set.env(rec.env.values());
            let id = store.identity(&rec.name)?;
            set.env(id.secret_env.values());
            if !id.nsec.is_empty() {
                set.key_text(&id.nsec);
            }
            if let Some(t) = &id.auth_tag {
                set.auth_tag(t);
            }
        }
        Ok(set)
    }
}

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
    use nostr_sdk::ToBech32;

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

    #[test]
    fn a_key_contributes_every_form_and_a_tag_its_signature() {
        let k = Keys::generate();
        let mut s = SecretSet::default();
        s.key(&k);
        let hex = k.secret_key().to_secret_hex();
        assert!(s.holds_key(&format!("a {} b", hex.to_ascii_uppercase())));
        assert!(s.holds_key(&k.secret_key().to_bech32().unwrap()));
        assert!(!s.holds_key("nothing here"));
        s.env([&"an-env-value".to_string()]);
        assert!(!s.holds_key("an-env-value"), "env values are not key material");
        assert_eq!(s.values.len(), 5);
    }
}
