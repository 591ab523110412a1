//! What is a secret (spec I2 "never rendered", §Provider Output Is
//! Untrusted; review b30b1a0 code-quality "What is a secret is built
//! separately for the Start page and for the gate" and "Fail-open
//! redaction"): one builder, [`SecretSet`], that both the gate's
//! per-request redactor ([`crate::redact::Redactor::for_request`]) and the
//! Start page's state-dir redactor ([`crate::store::Store::secrets`]) fill, so a key
//! or an auth tag contributes the same forms everywhere:
//!
//! - a key: its nsec and its hex, each in lower and upper case;
//! - an auth tag: its whole JSON (matched whole) and its signature, both cases
//!   (matched by fragment: the rest of the tag is a public owner key);
//! - an env value: as typed (the agent's secret env, `keys/<name>.env`, too);
//! - a policy value (`launch.policy_env`): scrubbed from text, not from handles.
//!
//! [`crate::store::Store::secrets`] fails closed: a key file, record or settings file
//! that exists but cannot be read or parsed is an error, never a smaller set.
//!
//! What a user-typed field must not look like is [`crate::shown`]'s rule.

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr_sdk::ToBech32;

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
