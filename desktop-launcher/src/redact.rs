//! Scrubbing everything a provider emits (spec §Provider Output Is Untrusted,
//! Known Defect 3 "Security follow-through").
//!
//! Literal values (length ≥ 4) from `env_vars`, `launch.env` and
//! `launch.policy_env`, the nsec and the agent key's hex are replaced longest
//! first; then any `nsec1…` or `sprt_tok_…` token is replaced.

use crate::limits::{REDACT_MIN_LEN, REDACTED};
use buzz_contract::wire::DeployRequest;

/// Replaces secrets in provider output before it is stored or shown.
#[derive(Clone, Default)]
pub struct Redactor {
    literals: Vec<String>,
    /// The subset that is secret material (not policy knobs): used for handles.
    secret_literals: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} literals)", self.literals.len())
    }
}

const TOKEN_PREFIXES: &[&str] = &["nsec1", "sprt_tok_"];

fn token_char(prefix: &str, b: u8) -> bool {
    if prefix == "nsec1" {
        b.is_ascii_alphanumeric()
    } else {
        b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
    }
}

impl Redactor {
    /// A redactor for the given literal values (short ones are ignored).
    pub fn new<I: IntoIterator<Item = String>>(values: I) -> Redactor {
        let literals = prepare(values);
        Redactor {
            secret_literals: literals.clone(),
            literals,
        }
    }

    /// Adds values scrubbed from text but not from handles (policy knobs).
    fn with_policy_values<I: IntoIterator<Item = String>>(mut self, values: I) -> Redactor {
        self.literals = prepare(self.literals.drain(..).chain(values));
        self
    }

    /// A redactor for one deploy request: every env value in `env_vars`,
    /// `launch.env`, `launch.policy_env`, the nsec, the auth tag, and the agent
    /// key's hex form (upper and lower case).
    pub fn for_request(req: &DeployRequest) -> Redactor {
        let a = &req.agent;
        let mut values: Vec<String> = a.env_vars.values().cloned().collect();
        if let Some(l) = &a.launch {
            values.extend(l.env.values().cloned());
        }
        values.push(a.private_key_nsec.trim().to_string());
        if let Some(t) = &a.auth_tag {
            values.push(t.clone());
        }
        if let Ok(keys) = buzz_contract::keys::parse_private_key(&a.private_key_nsec) {
            let hex = keys.secret_key().to_secret_hex();
            values.push(hex.to_ascii_uppercase());
            values.push(hex);
        }
        let policy = a.launch.iter().flat_map(|l| l.policy_env.values().cloned());
        Redactor::new(values).with_policy_values(policy)
    }

    /// Scrubs a provider-chosen handle (`agent_id`): secret material and tokens
    /// only, so a handle that merely contains a policy value such as the
    /// session title stays usable.
    pub fn scrub_handle(&self, handle: &str) -> String {
        let mut s = handle.to_string();
        for lit in &self.secret_literals {
            if s.contains(lit.as_str()) {
                s = s.replace(lit.as_str(), REDACTED);
            }
        }
        scrub_tokens(&s)
    }

    /// Scrubs `text`.
    pub fn scrub(&self, text: &str) -> String {
        let mut s = text.to_string();
        for lit in &self.literals {
            if s.contains(lit.as_str()) {
                s = s.replace(lit.as_str(), REDACTED);
            }
        }
        scrub_tokens(&s)
    }
}

fn prepare<I: IntoIterator<Item = String>>(values: I) -> Vec<String> {
    let mut literals: Vec<String> = values
        .into_iter()
        .filter(|v| v.chars().count() >= REDACT_MIN_LEN)
        .collect();
    literals.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    literals.dedup();
    literals
}

/// Replaces `nsec1…` (any case) and `sprt_tok_…` tokens.
pub fn scrub_tokens(text: &str) -> String {
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
        let r = Redactor::new(["abcd".to_string(), "abcdefgh".to_string(), "xyz".to_string()]);
        assert_eq!(r.scrub("abcdefgh abcd xyz"), "[REDACTED] [REDACTED] xyz");
    }

    #[test]
    fn launch_env_and_policy_env_values_are_scrubbed_from_text_but_policy_values_not_from_handles() {
        use buzz_contract::wire::{AgentPayload, Launch};
        let req = DeployRequest {
            op: "deploy".into(),
            request_id: None,
            agent: AgentPayload {
                private_key_nsec: "nsec1abcdef".into(),
                env_vars: [("A".to_string(), "legacy-secret".to_string())].into(),
                launch: Some(Launch {
                    env: [("B".to_string(), "launch-secret".to_string())].into(),
                    policy_env: [("T".to_string(), "scout".to_string())].into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            provider_config: Default::default(),
        };
        let r = Redactor::for_request(&req);
        assert_eq!(
            r.scrub("legacy-secret launch-secret scout"),
            "[REDACTED] [REDACTED] [REDACTED]"
        );
        assert_eq!(r.scrub_handle("pod-scout-launch-secret"), "pod-scout-[REDACTED]");
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
}
