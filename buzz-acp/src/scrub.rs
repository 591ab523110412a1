//! One scrub for every text the harness publishes (issue 30 item 1;
//! review-9b395e0 finding 1; DESIGN.md Decision 4: "an nsec, auth tag or env
//! value never appears in … a stdout response"; spec §Provider Output Is
//! Untrusted, whose redaction rule this applies to the harness's own output).
//!
//! The agent process holds the agent's key (`NOSTR_PRIVATE_KEY`, for the git
//! helpers) and its API key, so anything it says can carry them: an `env` in
//! an answer, a prompt-injected file quoted back, a tool title, an error
//! message. Everything the harness signs passes through [`Scrub`]: the type
//! of an event's content is [`Published`], and the only ways to make one are
//! [`Scrub::publish`], [`Scrub::publish_with`] and [`Published::fixed`] (a
//! constant of this crate). Answers, error replies, owner questions, the
//! notes the harness posts, and any later kind (observer frames, usage
//! events) take the same path, because [`crate::events::sign`] accepts
//! nothing else.
//!
//! What is scrubbed, literally, then by shape ([`buzz_contract::redact`]):
//! - the agent's key in every form ([`buzz_contract::redact::key_forms`]: hex
//!   and nsec, both cases; any other `nsec1…` token by shape);
//! - the NIP-OA auth tag: its JSON as configured and as serialised, and its
//!   signature in both cases;
//! - the values of the harness's secret env: every variable whose name is a
//!   secret by the launcher's rule ([`buzz_contract::agents::secret_env_name`],
//!   one function for both sides) and the harness-only identity variables;
//! - every secret shape: API key formats, bearer tokens, URL user info,
//!   secret-named assignments, JWTs, PEM private keys.
//!
//! A text that lost something says so: [`WITHHELD_NOTE`] ends it, inside the
//! 64 KiB content bound, so the asker knows the answer was not the agent's
//! whole text.
//!
//! **Decision:** the system prompt and team instructions are not secrets.
//! The owner writes them for the agent, which may quote or paraphrase them;
//! a literal scrub could not stop a paraphrase, so it would promise a
//! protection it cannot give, and it would shred legitimate answers. They
//! stay out of the logs as before (they are never logged).

use crate::events::MAX_CONTENT_BYTES;
use buzz_contract::nip_oa::AuthTag;
use buzz_contract::redact::{self, Literals};
use nostr_sdk::prelude::Keys;

/// What ends a published text from which a secret was removed.
pub const WITHHELD_NOTE: &str = "\n\n[a secret was withheld from this message]";

/// The content of an event the harness signs: scrubbed, within the bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    text: String,
    withheld: bool,
}

impl Published {
    /// A constant text of this crate (presence states, the queued reaction).
    pub fn fixed(text: &'static str) -> Published {
        Published {
            text: text.to_string(),
            withheld: false,
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the scrub removed something from it.
    pub fn withheld(&self) -> bool {
        self.withheld
    }
}

/// The secrets of this harness, ready to scrub any text it publishes.
#[derive(Clone)]
pub struct Scrub {
    literals: Literals,
}

impl std::fmt::Debug for Scrub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scrub({:?})", self.literals)
    }
}

impl Scrub {
    /// The scrub of an agent with `keys`, its auth tag and the environment
    /// `env` (name, value) it runs in (the tag as configured rides
    /// `BUZZ_AUTH_TAG`, a secret name).
    pub fn new<I>(keys: &Keys, auth_tag: Option<&AuthTag>, env: I) -> Scrub
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let mut values = redact::key_forms(keys);
        if let Some(tag) = auth_tag {
            values.push(tag.to_json());
            values.extend(redact::auth_tag_sig_forms(tag));
        }
        values.extend(env.into_iter().filter(|(k, _)| secret_name(k)).map(|(_, v)| v));
        Scrub {
            literals: Literals::new(values),
        }
    }

    /// `text` with every secret replaced, and whether anything was.
    fn clean(&self, text: &str) -> (String, bool) {
        let out = self.literals.scrub(text);
        let changed = out != text;
        (out, changed)
    }

    /// The published form of `text`: scrubbed, within the content bound,
    /// ending in [`WITHHELD_NOTE`] when something was removed.
    pub fn publish(&self, text: &str) -> Published {
        self.publish_with(text, str::to_string)
    }

    /// Like [`Scrub::publish`], with the scrubbed text first shaped by
    /// `shape` (cut, framed); the shaped text is scrubbed again, so nothing
    /// the shape adds escapes the rule.
    pub fn publish_with(&self, text: &str, shape: impl FnOnce(&str) -> String) -> Published {
        let (inner, a) = self.clean(text);
        let (shaped, b) = self.clean(&shape(&inner));
        if !(a || b) {
            return Published {
                text: clamp(&shaped, MAX_CONTENT_BYTES).to_string(),
                withheld: false,
            };
        }
        let room = MAX_CONTENT_BYTES - WITHHELD_NOTE.len();
        let mut out = clamp(shaped.trim_end(), room).to_string();
        out.push_str(WITHHELD_NOTE);
        Published {
            text: out,
            withheld: true,
        }
    }

    /// Scrubs every string of `v` (keys and values) in place; true when
    /// something was removed.
    pub fn scrub_value(&self, v: &mut serde_json::Value) -> bool {
        use serde_json::Value;
        match v {
            Value::String(s) => {
                let (out, changed) = self.clean(s);
                *s = out;
                changed
            }
            Value::Array(a) => a.iter_mut().fold(false, |w, x| self.scrub_value(x) | w),
            Value::Object(o) => {
                let mut changed = false;
                for (k, x) in std::mem::take(o) {
                    let (k, kc) = self.clean(&k);
                    let mut x = x;
                    changed |= kc | self.scrub_value(&mut x);
                    o.insert(k, x);
                }
                changed
            }
            _ => false,
        }
    }

    /// The published form of a structured payload (usage events, observer
    /// frames): `value` serialised with every string scrubbed. The caller
    /// bounds its size (a cut would break the JSON); a payload that lost
    /// something says so in its own `withheld` field.
    pub fn publish_value(&self, value: &impl serde::Serialize) -> Published {
        let mut v = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
        let withheld = self.scrub_value(&mut v);
        if let (true, serde_json::Value::Object(o)) = (withheld, &mut v) {
            o.insert("withheld".into(), true.into());
        }
        Published {
            text: v.to_string(),
            withheld,
        }
    }
}

/// True when the value of env `name` is scrubbed: a secret by the shared
/// rule, or one of the harness's identity variables.
pub fn secret_name(name: &str) -> bool {
    use buzz_contract::env;
    buzz_contract::agents::secret_env_name(name)
        || env::HARNESS_ONLY_SECRETS.contains(&name)
        || name == env::NOSTR_PRIVATE_KEY
}

fn clamp(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr_sdk::prelude::ToBech32;

    fn world() -> (Keys, AuthTag, String, Scrub) {
        let agent = Keys::generate();
        let owner = Keys::generate();
        let tag = AuthTag::mint(&owner, &agent.public_key().to_hex(), "").unwrap();
        let raw = format!(" {} ", tag.to_json());
        let env = vec![
            ("BUZZ_AUTH_TAG".to_string(), raw.clone()),
            ("ANTHROPIC_API_KEY".to_string(), "canary-api-key-0042".to_string()),
            ("GITHUB_TOKEN".to_string(), "canary-gh-token".to_string()),
            ("ANTHROPIC_BASE_URL".to_string(), "http://127.0.0.1:9".to_string()),
            ("PATH".to_string(), "/usr/bin".to_string()),
        ];
        let s = Scrub::new(&agent, Some(&tag), env);
        (agent, tag, raw, s)
    }

    #[test]
    fn the_key_in_every_form_the_tag_and_secret_env_are_withheld() {
        let (agent, tag, raw, s) = world();
        let hex = agent.secret_key().to_secret_hex();
        let nsec = agent.secret_key().to_bech32().unwrap();
        for secret in [
            hex.clone(),
            hex.to_ascii_uppercase(),
            nsec.clone(),
            nsec.to_ascii_uppercase(),
            tag.sig.clone(),
            tag.sig.to_ascii_uppercase(),
            tag.to_json(),
            raw.trim().to_string(),
            "canary-api-key-0042".to_string(),
            "canary-gh-token".to_string(),
        ] {
            let p = s.publish(&format!("env says: X={secret} done"));
            assert!(!p.as_str().contains(&secret), "{secret} leaked: {}", p.as_str());
            assert!(p.withheld(), "{}", p.as_str());
            assert!(p.as_str().starts_with("env says: X="), "{}", p.as_str());
        }
    }

    #[test]
    fn public_values_and_plain_text_pass_untouched() {
        let (agent, _, _, s) = world();
        let text = format!(
            "agent {} at http://127.0.0.1:9 on /usr/bin",
            agent.public_key().to_hex()
        );
        let p = s.publish(&text);
        assert_eq!(p.as_str(), text);
        assert!(!p.withheld());
    }

    #[test]
    fn a_shape_of_someone_elses_secret_is_withheld_too() {
        let (_, _, _, s) = world();
        let other = Keys::generate().secret_key().to_bech32().unwrap();
        let p = s.publish(&format!("found {other} and sk-ant-api03-abcdefghijklmnop"));
        assert!(!p.as_str().contains(&other) && !p.as_str().contains("abcdefghijklmnop"));
        assert!(p.withheld());
    }

    #[test]
    fn the_note_survives_the_content_bound() {
        let (agent, _, _, s) = world();
        let nsec = agent.secret_key().to_bech32().unwrap();
        let long = format!("{nsec} {}", "é".repeat(MAX_CONTENT_BYTES));
        let p = s.publish(&long);
        assert!(p.as_str().len() <= MAX_CONTENT_BYTES);
        assert!(p.withheld() && !p.as_str().contains(&nsec));
        let plain = "x".repeat(MAX_CONTENT_BYTES + 10);
        assert_eq!(s.publish(&plain).as_str().len(), MAX_CONTENT_BYTES);
    }

    #[test]
    fn what_a_shape_adds_is_scrubbed_as_well() {
        let (agent, _, _, s) = world();
        let hex = agent.secret_key().to_secret_hex();
        let p = s.publish_with("plain", |t| format!("{t} {hex}"));
        assert!(!p.as_str().contains(&hex) && p.withheld());
        let cut = s.publish_with(&format!("{hex}{hex}"), |t| t.chars().take(20).collect());
        assert!(!cut.as_str().contains(&hex[..12]), "scrubbed before the cut");
    }

    #[test]
    fn secret_names_follow_the_shared_rule() {
        for n in [
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "MY_TOKEN",
            "NOSTR_PRIVATE_KEY",
            "BUZZ_AUTH_TAG",
        ] {
            assert!(secret_name(n), "{n}");
        }
        for n in ["PATH", "HOME", "ANTHROPIC_BASE_URL", "BUZZ_RELAY_URL"] {
            assert!(!secret_name(n), "{n}");
        }
    }
}
