//! Scrubbing everything a provider emits (spec §Provider Output Is Untrusted,
//! Known Defect 3 "Security follow-through"), on top of `buzz_contract::redact`.
//!
//! Three passes, in this order:
//! 1. **Fragments.** Every run of text that contains any [`FRAGMENT_MIN`]-byte
//!    window of a secret (the nsec in both cases, the agent key's hex in both
//!    cases, the auth tag's signature, every `env_vars` and `launch.env`
//!    value) is replaced. A provider's output is cut in several places before
//!    it is shown (the stderr cap, the status-line window and length, the
//!    error tail); a cut that lands inside a secret leaves a prefix or suffix
//!    that whole-value matching cannot see. Matching windows instead of whole
//!    values makes the result independent of where the cuts fell: no
//!    substring of [`FRAGMENT_MIN`] or more bytes of a secret survives.
//! 2. **Whole literals** (length ≥ 4) from `env_vars`, `launch.env`,
//!    `launch.policy_env`, the nsec, the auth tag and the key hex, longest first.
//! 3. **Tokens:** any `nsec1…` or `sprt_tok_…`.
//!
//! The guarantee assumes secrets do not themselves contain `[` or `]` (the
//! replacement marker's brackets); the auth tag, which is JSON, contributes
//! its signature to pass 1 and its whole text to pass 2. Redaction defends
//! against a provider *echoing* what it holds; a provider that re-encodes a
//! secret on purpose can always exfiltrate it and is out of scope.

pub use crate::secrets::SecretSet;
pub use buzz_contract::redact::scrub_tokens;
use buzz_contract::redact::{Literals, REDACTED};
use buzz_contract::wire::DeployRequest;
use std::collections::HashSet;

/// The shortest secret fragment that is always redacted, in bytes.
pub const FRAGMENT_MIN: usize = 12;

/// Replaces secrets in provider output before it is stored or shown.
#[derive(Clone, Default)]
pub struct Redactor {
    literals: Literals,
    /// The subset that is secret material (not policy knobs): used for handles.
    secret_literals: Literals,
    /// Every [`FRAGMENT_MIN`]-byte window of every secret value.
    windows: HashSet<[u8; FRAGMENT_MIN]>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Redactor({:?}, {} fragment windows)",
            self.literals,
            self.windows.len()
        )
    }
}

fn windows_of(values: &[String]) -> HashSet<[u8; FRAGMENT_MIN]> {
    let mut set = HashSet::new();
    for v in values {
        for w in v.as_bytes().windows(FRAGMENT_MIN) {
            let mut a = [0u8; FRAGMENT_MIN];
            a.copy_from_slice(w);
            set.insert(a);
        }
    }
    set
}

impl Redactor {
    /// A redactor for the given secret values: short ones (< 4) are ignored,
    /// and fragments of those with at least [`FRAGMENT_MIN`] bytes are redacted too.
    pub fn new<I: IntoIterator<Item = String>>(values: I) -> Redactor {
        let values: Vec<String> = values.into_iter().collect();
        let literals = Literals::new(values.iter().cloned());
        Redactor {
            secret_literals: literals.clone(),
            literals,
            windows: windows_of(&values),
        }
    }

    /// Adds values scrubbed whole from text but not from handles (policy knobs).
    fn with_policy_values<I: IntoIterator<Item = String>>(mut self, values: I) -> Redactor {
        self.literals = self.literals.with(values);
        self
    }

    /// Adds values whose fragments are redacted but that are not matched whole.
    fn with_fragment_sources(mut self, values: &[String]) -> Redactor {
        self.windows.extend(windows_of(values));
        self
    }

    /// A redactor for a [`SecretSet`]: values whole and by fragment,
    /// whole-only values, signature fragments, policy values from text only.
    pub fn from_set(set: &SecretSet) -> Redactor {
        let mut r = Redactor::new(set.values.iter().cloned()).with_policy_values(set.policy.iter().cloned());
        r.literals = r.literals.with(set.whole_only.iter().cloned());
        r.secret_literals = r.secret_literals.with(set.whole_only.iter().cloned());
        r.with_fragment_sources(&set.fragments)
    }

    /// A redactor for one deploy request: every env value in `env_vars`,
    /// `launch.env`, `launch.policy_env`, the nsec, the auth tag, and the agent
    /// key's hex form (upper and lower case), through the same
    /// [`SecretSet`] rules as the Start page's.
    pub fn for_request(req: &DeployRequest) -> Redactor {
        let a = &req.agent;
        let mut set = SecretSet::default();
        set.env(a.env_vars.values());
        if let Some(l) = &a.launch {
            set.env(l.env.values());
            set.policy.extend(l.policy_env.values().cloned());
        }
        set.key_text(&a.private_key_nsec);
        if let Some(t) = &a.auth_tag {
            set.auth_tag(t);
        }
        Redactor::from_set(&set)
    }

    /// Replaces every run of `text` covered by a secret window.
    fn scrub_fragments(&self, text: &str) -> String {
        if self.windows.is_empty() || text.len() < FRAGMENT_MIN {
            return text.to_string();
        }
        let bytes = text.as_bytes();
        let mut covered = vec![false; bytes.len()];
        let mut any = false;
        for (i, w) in bytes.windows(FRAGMENT_MIN).enumerate() {
            let mut a = [0u8; FRAGMENT_MIN];
            a.copy_from_slice(w);
            if self.windows.contains(&a) {
                covered[i..i + FRAGMENT_MIN].iter_mut().for_each(|c| *c = true);
                any = true;
            }
        }
        if !any {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut in_run = false;
        for (i, ch) in text.char_indices() {
            // A character is redacted when any of its bytes is covered.
            let hit = covered[i..i + ch.len_utf8()].iter().any(|c| *c);
            if hit {
                if !in_run {
                    out.push_str(REDACTED);
                    in_run = true;
                }
            } else {
                in_run = false;
                out.push(ch);
            }
        }
        out
    }

    /// Scrubs a provider-chosen handle (`agent_id`): secret material and tokens
    /// only, so a handle that merely contains a policy value such as the
    /// session title stays usable.
    pub fn scrub_handle(&self, handle: &str) -> String {
        self.secret_literals.scrub(&self.scrub_fragments(handle))
    }

    /// Scrubs `text`.
    pub fn scrub(&self, text: &str) -> String {
        self.literals.scrub(&self.scrub_fragments(text))
    }
}

/// True when `text` contains a substring of `secret` of at least `min` bytes
/// (the property the redactor guarantees for `min` = [`FRAGMENT_MIN`]).
pub fn contains_fragment(text: &str, secret: &str, min: usize) -> bool {
    let (t, s) = (text.as_bytes(), secret.as_bytes());
    if s.is_empty() {
        return false;
    }
    if s.len() < min {
        return text.contains(secret);
    }
    let windows: HashSet<&[u8]> = s.windows(min).collect();
    t.windows(min).any(|x| windows.contains(x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use buzz_contract::wire::{AgentPayload, Launch};

    fn request(nsec: &str, env: &str) -> DeployRequest {
        DeployRequest {
            op: "deploy".into(),
            request_id: None,
            agent: AgentPayload {
                private_key_nsec: nsec.into(),
                env_vars: [("A".to_string(), env.to_string())].into(),
                launch: Some(Launch {
                    env: [("B".to_string(), "launch-secret".to_string())].into(),
                    policy_env: [("T".to_string(), "scout".to_string())].into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            provider_config: Default::default(),
        }
    }

    #[test]
    fn launch_env_and_policy_env_values_are_scrubbed_from_text_but_policy_values_not_from_handles() {
        let r = Redactor::for_request(&request("nsec1abcdef", "legacy-secret"));
        assert_eq!(
            r.scrub("legacy-secret launch-secret scout"),
            "[REDACTED] [REDACTED] [REDACTED]"
        );
        assert_eq!(r.scrub_handle("pod-scout-launch-secret"), "pod-scout-[REDACTED]");
    }

    #[test]
    fn a_cut_inside_a_secret_leaves_no_fragment_of_twelve_or_more() {
        let secret = "0123456789abcdefghijklmnopqrstuvwxyz";
        let r = Redactor::new([secret.to_string()]);
        let text = format!("before {secret} after");
        for start in 0..text.len() {
            for end in start..=text.len() {
                let out = r.scrub(&text[start..end]);
                assert!(
                    !contains_fragment(&out, secret, FRAGMENT_MIN),
                    "cut {start}..{end}: {out}"
                );
            }
        }
        // A fragment shorter than the window is out of the guarantee's reach.
        assert_eq!(r.scrub("head 0123456789a"), "head 0123456789a");
    }

    #[test]
    fn an_echo_with_one_character_changed_is_still_redacted() {
        let secret = "ffeeddccbbaa99887766554433221100";
        let r = Redactor::new([secret.to_string()]);
        let out = r.scrub("key ffeeddccbbaa9988X766554433221100 end");
        assert_eq!(out, "key [REDACTED]X[REDACTED] end");
    }

    #[test]
    fn multibyte_text_around_a_fragment_stays_valid() {
        let secret = "ééééééé-secret-value";
        let r = Redactor::new([secret.to_string()]);
        let out = r.scrub(&format!("x{}y", &secret[2..]));
        assert_eq!(out, "x[REDACTED]y");
    }
}
