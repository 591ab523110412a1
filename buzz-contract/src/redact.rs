//! Secret scrubbing shared by every component (spec §Provider Output Is
//! Untrusted, [L2] item 5; DESIGN.md Decision 4). Pure text in, text out.
//!
//! Two passes: known literal values (length ≥ 4, longest first, so a value
//! that contains another is scrubbed whole), then tokens whoever's they are:
//! any `nsec1…` or `sprt_tok_…` token, and every secret *shape* of
//! [`shapes`] (URL user info, bearer tokens, secret-named values, API key
//! formats, JWTs, PEM private keys; issue 24 item 4).
//!
//! A prefix with no key body after it is a hint, not a key, and is kept:
//! "expected nsec1… or 64 hex characters" stays readable (issue 24 item 5).

pub mod shapes;
pub use shapes::{scrub_shapes, scrub_url_userinfo};

/// Values shorter than this are not scrubbed (they would shred ordinary text).
pub const MIN_LEN: usize = 4;
/// What a scrubbed value becomes.
pub const REDACTED: &str = "[REDACTED]";

/// A set of literal secret values, ready to scrub.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Literals(Vec<String>);

impl std::fmt::Debug for Literals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Literals({} values)", self.0.len())
    }
}

impl Literals {
    /// No value: scrubs only tokens (a `static`'s initial value).
    pub const EMPTY: Literals = Literals(Vec::new());

    /// The values of length ≥ [`MIN_LEN`], longest first, deduplicated.
    pub fn new<I: IntoIterator<Item = String>>(values: I) -> Literals {
        let mut v: Vec<String> = values
            .into_iter()
            .filter(|v| v.chars().count() >= MIN_LEN)
            .collect();
        v.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        v.dedup();
        Literals(v)
    }

    /// This set plus more values.
    pub fn with<I: IntoIterator<Item = String>>(&self, values: I) -> Literals {
        Literals::new(self.0.iter().cloned().chain(values))
    }

    /// Replaces every literal in `text`.
    pub fn scrub_literals(&self, text: &str) -> String {
        let mut s = text.to_string();
        for lit in &self.0 {
            if s.contains(lit.as_str()) {
                s = s.replace(lit.as_str(), REDACTED);
            }
        }
        s
    }

    /// Both passes: literals, then tokens.
    pub fn scrub(&self, text: &str) -> String {
        scrub_tokens(&self.scrub_literals(text))
    }
}

/// Every form a private key is echoed in: its hex and its nsec, each in
/// lower and upper case. One rule for every side that scrubs a key (the
/// launcher's secret set, the harness's published texts).
pub fn key_forms(keys: &nostr::Keys) -> Vec<String> {
    use nostr::ToBech32;
    let hex = keys.secret_key().to_secret_hex();
    let Ok(nsec) = keys.secret_key().to_bech32();
    vec![hex.to_ascii_uppercase(), hex, nsec.to_ascii_uppercase(), nsec]
}

/// The secret forms of a NIP-OA auth tag: its signature in both cases (the
/// rest of the tag is a public owner key and public conditions). The tag's
/// whole JSON is scrubbed whole by its holder, as typed.
pub fn auth_tag_sig_forms(tag: &crate::nip_oa::AuthTag) -> Vec<String> {
    vec![tag.sig.to_ascii_lowercase(), tag.sig.to_ascii_uppercase()]
}

const TOKEN_PREFIXES: &[&str] = &["nsec1", "sprt_tok_"];

fn token_char(prefix: &str, b: u8) -> bool {
    if prefix == "nsec1" {
        b.is_ascii_alphanumeric()
    } else {
        b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
    }
}

/// Replaces `nsec1…` (any case) and `sprt_tok_…` tokens that have a body
/// (a bare prefix is a hint), then every shape of [`scrub_shapes`].
pub fn scrub_tokens(text: &str) -> String {
    scrub_shapes(&scrub_prefixed(text))
}

fn scrub_prefixed(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        // Byte comparison: the prefixes are ASCII, so a hit starts on a char boundary.
        let hit = TOKEN_PREFIXES
            .iter()
            .find(|p| lower.as_bytes()[i..].starts_with(p.as_bytes()));
        match hit {
            Some(p) => {
                let mut end = i + p.len();
                while end < bytes.len() && token_char(p, bytes[end]) {
                    end += 1;
                }
                if end == i + p.len() {
                    i = end;
                    continue;
                }
                out.push_str(&text[copied..i]);
                out.push_str(REDACTED);
                copied = end;
                i = end;
            }
            _ => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_length_four_or_more_are_scrubbed_longest_first() {
        let r = Literals::new(["abcd".to_string(), "abcdefgh".to_string(), "xyz".to_string()]);
        assert_eq!(r.scrub("abcdefgh abcd xyz"), "[REDACTED] [REDACTED] xyz");
    }

    #[test]
    fn nsec_and_sprt_tokens_are_scrubbed() {
        assert_eq!(
            scrub_tokens("key=nsec1qqqsyqcyq5rqwzqf, NSEC1ABC. t=sprt_tok_a-b_c!"),
            "key=[REDACTED], [REDACTED]. t=[REDACTED]!"
        );
        assert_eq!(scrub_tokens("héllo nsec1x é"), "héllo [REDACTED] é");
        assert_eq!(scrub_tokens("no secrets"), "no secrets");
    }

    #[test]
    fn a_bare_prefix_is_a_hint_and_stays() {
        for hint in [
            "agent.private_key_nsec is malformed: expected nsec1… or 64 hex characters",
            "a key starts with nsec1 or is 64 hex; tokens start sprt_tok_",
        ] {
            assert_eq!(scrub_tokens(hint), hint);
        }
        assert_eq!(scrub_tokens("nsec1… nsec1qqqq"), "nsec1… [REDACTED]");
    }

    #[test]
    fn literals_then_tokens_then_shapes() {
        let r = Literals::new(["known-value".to_string()]);
        assert_eq!(
            r.scrub("known-value nsec1abc token: kube-canary wss://u:p@h"),
            "[REDACTED] [REDACTED] token: [REDACTED] wss://[REDACTED]@h"
        );
    }

    #[test]
    fn a_key_has_four_forms_and_a_tag_its_signature_in_both_cases() {
        let k = nostr::Keys::generate();
        let forms = key_forms(&k);
        assert_eq!(forms.len(), 4);
        let hex = k.secret_key().to_secret_hex();
        assert!(forms.contains(&hex) && forms.contains(&hex.to_ascii_uppercase()));
        assert!(
            forms
                .iter()
                .filter(|f| f.to_ascii_lowercase().starts_with("nsec1"))
                .count()
                == 2
        );
        let owner = nostr::Keys::generate();
        let tag = crate::nip_oa::AuthTag::mint(&owner, &k.public_key().to_hex(), "").unwrap();
        let sig = auth_tag_sig_forms(&tag);
        assert_eq!(
            sig,
            vec![tag.sig.to_ascii_lowercase(), tag.sig.to_ascii_uppercase()]
        );
    }

    #[test]
    fn debug_shows_no_values() {
        assert_eq!(
            format!("{:?}", Literals::new(["secret-value".to_string()])),
            "Literals(1 values)"
        );
    }
}
