//! Scrubbing everything a provider emits (spec §Provider Output Is Untrusted,
//! Known Defect 3 "Security follow-through"), on top of `buzz_contract::redact`.
//!
//! Literal values (length ≥ 4) from `env_vars`, `launch.env` and
//! `launch.policy_env`, the nsec and the agent key's hex are replaced longest
//! first; then any `nsec1…` or `sprt_tok_…` token is replaced.

use buzz_contract::redact::Literals;
pub use buzz_contract::redact::scrub_tokens;
use buzz_contract::wire::DeployRequest;

/// Replaces secrets in provider output before it is stored or shown.
#[derive(Clone, Default, Debug)]
pub struct Redactor {
    literals: Literals,
    /// The subset that is secret material (not policy knobs): used for handles.
    secret_literals: Literals,
}

impl Redactor {
    /// A redactor for the given literal values (short ones are ignored).
    pub fn new<I: IntoIterator<Item = String>>(values: I) -> Redactor {
        let literals = Literals::new(values);
        Redactor {
            secret_literals: literals.clone(),
            literals,
        }
    }

    /// Adds values scrubbed from text but not from handles (policy knobs).
    fn with_policy_values<I: IntoIterator<Item = String>>(mut self, values: I) -> Redactor {
        self.literals = self.literals.with(values);
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
        self.secret_literals.scrub(handle)
    }

    /// Scrubs `text`.
    pub fn scrub(&self, text: &str) -> String {
        self.literals.scrub(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
