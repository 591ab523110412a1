//! The checks that come before any mutation (spec §Deploy State Machine
//! step 0, §Launch data owner rule and relay-mesh rule, §Reserved-key rule,
//! I1): the request's agent and provider config become a [`Plan`], or a
//! typed refusal that names its rule. The payload's checks are every
//! provider's ([`buzz_provider::payload`]); this binding adds the Secret's
//! size and the pod's intent. Pure: no cluster contact, no clock.

use crate::config::ProviderConfig;
use crate::consts::*;
use crate::envtiers;
use crate::error::{DeployError, Refusal, RefusalRule};
use crate::podspec::{self, PodIntent};
use crate::reconcile::Plan;
use buzz_provider::payload::{self, Checked, Rejected, Settings};
use serde_json::Value;

fn refused(rule: RefusalRule, m: String) -> DeployError {
    Refusal::new(rule, m).into()
}

impl From<Rejected> for DeployError {
    fn from(r: Rejected) -> Self {
        match r {
            Rejected::Request(e) => e.into(),
            Rejected::Refused(e) => e.into(),
        }
    }
}

/// All checks before any cluster contact; returns the deploy plan.
pub fn prepare(agent_v: &Value, config_v: &Value, default_image: Option<&str>) -> Result<Plan, DeployError> {
    let config = ProviderConfig::parse(config_v, default_image)?;
    let generation = "0".repeat(32);
    let Checked {
        agent,
        pubkey,
        authoritative,
        env,
    } = payload::check(
        agent_v,
        Settings {
            inactivity_seconds: config.inactivity_seconds,
            doze_seconds: config.doze_seconds,
            generation: &generation,
            mcp_command: Some(MCP_COMMAND),
            command_resolved: "in the image",
        },
    )?;
    let size = envtiers::secret_size(&env);
    if size > SECRET_MAX_BYTES - 4096 {
        return Err(refused(
            RefusalRule::EnvTooLarge,
            format!(
                "the agent environment is {size} bytes, more than a Kubernetes Secret holds (1 MiB); trim the env"
            ),
        ));
    }
    let intent = PodIntent::from_config(&config, &pubkey);
    Ok(Plan {
        namespace: config.namespace.clone(),
        workspace: config.workspace.clone(),
        egress: config.egress.clone(),
        agent_id: podspec::pod_name(&pubkey),
        fingerprint: podspec::fingerprint(&intent),
        pubkey,
        intent,
        agent,
        authoritative,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::RequestErrorKind as RK;
    use buzz_contract::nip_oa::AuthTag;
    use buzz_contract::wire::parse_agent;
    use nostr::ToBech32;
    use proptest::prelude::*;
    use serde_json::json;

    fn agent(env_value: &str, nsec: &str) -> Value {
        json!({
            "relay_url": "wss://relay.test",
            "private_key_nsec": nsec,
            "env_vars": { "LEGACY": env_value },
            "launch": { "command": "goose", "args": ["acp"], "env": { "API_X": env_value },
                        "policy_env": { "P": env_value }, "owner_pubkey": "ab".repeat(32) },
        })
    }

    fn cfg() -> Value {
        json!({ "namespace": "ns", "image": "registry.test/s:v1" })
    }

    proptest! {
        /// Secret values (the key and every env value) never change the
        /// create-intent fingerprint: the plan's intent cannot see them.
        #[test]
        fn secret_values_never_change_the_fingerprint(v1 in "[ -~]{0,40}", v2 in "[ -~]{0,40}") {
            let k1 = nostr::Keys::generate().secret_key().to_bech32().unwrap();
            let k2 = nostr::Keys::generate().secret_key().to_secret_hex();
            let a = prepare(&agent(&v1, &k1), &cfg(), None).unwrap();
            let b = prepare(&agent(&v2, &k2), &cfg(), None).unwrap();
            prop_assert_eq!(a.fingerprint, b.fingerprint);
        }
    }

    #[test]
    fn plan_debug_output_never_shows_the_key() {
        let nsec = nostr::Keys::generate().secret_key().to_bech32().unwrap();
        let plan = prepare(&agent("env-canary", &nsec), &cfg(), None).unwrap();
        let shown = format!("{plan:?}");
        assert!(!shown.contains(&nsec) && !shown.contains("env-canary"), "{shown}");
    }

    fn refusal(a: &Value) -> String {
        match prepare(a, &cfg(), None) {
            Err(DeployError::Refused(r)) => r.to_string(),
            Err(other) => panic!("expected a refusal, got {other:?}"),
            Ok(_) => panic!("expected a refusal, got a plan"),
        }
    }

    /// A malformed agent object is a payload error, not a refusal.
    #[test]
    fn a_malformed_agent_is_a_payload_error() {
        match prepare(&json!({"relay_url": 5}), &cfg(), None) {
            Err(DeployError::Request(e)) => assert_eq!((e.kind, e.field), (RK::Payload, Some("agent"))),
            other => panic!("expected a payload error, got {:?}", other.err()),
        }
    }

    /// Each refusal names the rule it enforces.
    #[test]
    fn refusals_carry_their_rule() {
        let nsec = nostr::Keys::generate().secret_key().to_bech32().unwrap();
        let with = |f: &dyn Fn(&mut Value)| {
            let mut a = agent("v", &nsec);
            f(&mut a);
            a
        };
        let cases: Vec<(Value, RefusalRule)> = vec![
            (
                with(&|a| a["private_key_nsec"] = json!("")),
                RefusalRule::Identity,
            ),
            (
                with(&|a| a["private_key_nsec"] = json!("nsec1nope")),
                RefusalRule::Identity,
            ),
            (
                with(&|a| a["launch"]["owner_pubkey"] = json!("zz")),
                RefusalRule::Owner,
            ),
            (
                with(&|a| a["launch"]["owner_pubkey"] = Value::Null),
                RefusalRule::Owner,
            ),
            (
                with(&|a| a["provider"] = json!("relay-mesh")),
                RefusalRule::RelayMesh,
            ),
            (
                with(&|a| a["relay_url"] = json!("https://relay.test")),
                RefusalRule::Relay,
            ),
            (
                with(&|a| a["respond_to"] = json!("everyone-ish")),
                RefusalRule::RespondTo,
            ),
            (
                with(&|a| a["launch"]["command"] = json!("/usr/bin/goose")),
                RefusalRule::AgentCommand,
            ),
            (
                with(&|a| a["launch"]["env"]["BAD-NAME"] = json!("x")),
                RefusalRule::Env,
            ),
            (
                with(&|a| a["launch"]["env"]["BIG"] = json!("x".repeat(SECRET_MAX_BYTES))),
                RefusalRule::EnvTooLarge,
            ),
        ];
        for (a, rule) in cases {
            match prepare(&a, &cfg(), None) {
                Err(DeployError::Refused(r)) => assert_eq!(r.rule, rule, "{r}"),
                Err(other) => panic!("expected a {rule:?} refusal, got {other:?}"),
                Ok(_) => panic!("expected a {rule:?} refusal, got a plan"),
            }
        }
    }

    #[test]
    fn owner_rules() {
        let nsec = nostr::Keys::generate().secret_key().to_bech32().unwrap();
        let mut a = agent("v", &nsec);
        a["launch"]["owner_pubkey"] = json!("not-hex");
        assert_eq!(
            refusal(&a),
            "agent.launch.owner_pubkey must be a 64-hex public key"
        );
        a["launch"]["owner_pubkey"] = Value::Null;
        assert!(refusal(&a).starts_with("the payload has neither auth_tag nor launch.owner_pubkey"));
        a["auth_tag"] = json!("[\"auth\",\"x\"]");
        assert!(refusal(&a).starts_with("agent.auth_tag does not verify for this agent's key"));
        a["launch"]["owner_pubkey"] = json!("ab".repeat(32));
        let plan = prepare(&a, &cfg(), None).expect("a bad tag falls back to owner_pubkey");
        assert_eq!(plan.authoritative.owner_pubkey, Some("ab".repeat(32)));
    }

    #[test]
    fn an_owner_equal_to_the_agent_is_refused() {
        let keys = nostr::Keys::generate();
        let nsec = keys.secret_key().to_bech32().unwrap();
        let mut a = agent("v", &nsec);
        a["launch"]["owner_pubkey"] = json!(keys.public_key().to_hex().to_uppercase());
        assert!(
            refusal(&a).starts_with("agent.launch.owner_pubkey is the agent's own public key"),
            "normalized before the comparison"
        );
    }

    #[test]
    fn an_auth_tag_whose_owner_is_the_agent_is_refused() {
        let keys = nostr::Keys::generate();
        let nsec = keys.secret_key().to_bech32().unwrap();
        let agent_hex = keys.public_key().to_hex();
        // `mint` refuses this shape, so it is built by hand (the owner check precedes the signature's).
        let tag = json!(["auth", agent_hex, "", "00".repeat(64)]).to_string();
        let mut a = agent("v", &nsec);
        a["auth_tag"] = json!(tag);
        assert!(
            refusal(&a).starts_with("agent.auth_tag names the agent itself as its owner"),
            "even with a valid launch.owner_pubkey to fall back to"
        );
    }

    #[test]
    fn a_tag_that_fails_verification_never_reaches_the_pod() {
        let nsec = nostr::Keys::generate().secret_key().to_bech32().unwrap();
        let mut a = agent("v", &nsec);
        let stranger = nostr::Keys::generate();
        let foreign = AuthTag::mint(&stranger, &"cd".repeat(32), "").unwrap().to_json();
        a["auth_tag"] = json!(foreign);
        let plan = prepare(&a, &cfg(), None).expect("falls back to owner_pubkey");
        assert_eq!(plan.authoritative.auth_tag, None);
        let agent = parse_agent(&a).unwrap();
        let env = envtiers::assemble(&agent, &plan.authoritative).unwrap();
        assert!(
            !env.contains_key("BUZZ_AUTH_TAG"),
            "{:?}",
            env.keys().collect::<Vec<_>>()
        );
        assert_eq!(env["BUZZ_ACP_AGENT_OWNER"], "ab".repeat(32));
    }

    #[test]
    fn relay_and_command_rules() {
        let nsec = nostr::Keys::generate().secret_key().to_bech32().unwrap();
        let mut a = agent("v", &nsec);
        a["relay_url"] = json!("  ");
        assert!(refusal(&a).starts_with("agent.relay_url is empty"));
        a["relay_url"] = json!("https://relay.test");
        assert_eq!(
            refusal(&a),
            "agent.relay_url: a relay speaks WebSocket, not https://; write the URL with wss:// (or ws:// for a relay without TLS)"
        );
        // The shared rule refuses credentials without quoting them.
        a["relay_url"] = json!("wss://user:hunter2@relay.test");
        let r = refusal(&a);
        assert!(
            r.starts_with("agent.relay_url: the relay URL carries credentials"),
            "{r}"
        );
        assert!(!r.contains("hunter2"), "{r}");
        a["relay_url"] = json!("wss://relay.test");
        a["provider"] = json!(" relay-mesh ");
        assert!(
            prepare(&a, &cfg(), None)
                .unwrap_err()
                .to_string()
                .contains("relay-mesh")
        );
        a["provider"] = Value::Null;
        a["launch"]["command"] = json!("/Users/me/.local/bin/goose");
        assert!(
            prepare(&a, &cfg(), None)
                .unwrap_err()
                .to_string()
                .contains("not a host path")
        );
        a["launch"]["command"] = json!("goose");
        a["respond_to"] = json!("allowlist");
        assert!(
            prepare(&a, &cfg(), None)
                .unwrap_err()
                .to_string()
                .contains("allowlist is empty")
        );
        a["private_key_nsec"] = json!("   ");
        assert!(
            prepare(&a, &cfg(), None)
                .unwrap_err()
                .to_string()
                .contains("without an identity")
        );
    }

    #[test]
    fn oversized_env_is_refused() {
        let nsec = nostr::Keys::generate().secret_key().to_bech32().unwrap();
        let a = agent(&"x".repeat(600 * 1024), &nsec);
        assert!(
            prepare(&a, &cfg(), None)
                .unwrap_err()
                .to_string()
                .contains("more than a Kubernetes Secret holds")
        );
    }
}
