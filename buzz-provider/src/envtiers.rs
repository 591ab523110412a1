//! The agent environment (spec §Launch data "Environment precedence",
//! §Reserved-key rule, §Entrypoint "Payload → environment mapping";
//! wire-facts §5, §8.3), the same for every binding (issue 51 item 5).
//! Pure: payload + the provider's authoritative values in, map out.
//!
//! Three tiers, later wins:
//! 1. `launch.policy_env` — overridable behaviour defaults;
//! 2. `launch.env` — the layered user env (legacy `env_vars` only when `launch`
//!    is absent; never re-merged on top);
//! 3. authoritative values from top-level fields, written last.
//!
//! Reserved keys and host-resolved values are stripped from tiers 1–2, so no
//! user key can collide with or reconstruct a reserved one; the provider never
//! maps `provider`/`model` or the tier-1 knobs itself. `BUZZ_ACP_NO_PRESENCE`
//! in any tier is refused outright (I3).
//!
//! The image collector's deployer-only names (`POD_*`, `NODE_NAME`,
//! `CONTAINER_NAME`, `IMAGE_REF`, `IMAGE_DIGEST`, every `RUNTIME_AGENT_*`;
//! [`buzz_contract::sidecar::is_deployer_only`]) are refused outright in any
//! tier too (review b30b1a0 #6). In a pod the user tiers travel in the
//! Secret's `envFrom`, which the container's plain `env` overrides only
//! where the provider writes a name; a user value under a name the provider
//! leaves unset (an unpinned image's `IMAGE_DIGEST`, everything without
//! `telemetry_url`) would reach the collector as the deployer's word — a
//! forged digest passing the digest gate, an ingest URL never validated.
//! Refusing (rather than silently stripping, as for the harness's reserved
//! keys) tells the user why a value they set does nothing; the Kubernetes
//! provider also writes an explicit empty `IMAGE_DIGEST` for an unpinned
//! image, so the rule holds twice.

use buzz_contract::env as names;
use buzz_contract::wire::AgentPayload;
use std::collections::BTreeMap;

/// Top-level values the authoritative tier is built from, already validated.
/// Its `Debug` redacts the key and the auth tag.
#[derive(Clone, PartialEq, Eq)]
pub struct Authoritative {
    pub relay_url: String,
    /// The trimmed private key exactly as received (nsec or hex).
    pub private_key: String,
    pub auth_tag: Option<String>,
    pub owner_pubkey: Option<String>,
    pub agent_command: String,
    pub agent_args: Vec<String>,
    pub respond_to: String,
    pub respond_to_allowlist: Vec<String>,
    pub inactivity_seconds: u64,
    /// The doze bound (issue 50), written as `BUZZ_ACP_DOZE`.
    pub doze_seconds: u64,
    /// The run's start nonce, the harness's presence `run` tag.
    pub generation: String,
    /// The MCP server command the place provides (the sprig image's
    /// `buzz-dev-mcp`); `None` where there is none.
    pub mcp_command: Option<String>,
    /// A wake's hand-over (issue 33), written as the harness's wake env.
    pub wake: Option<buzz_contract::wire::WakePayload>,
}

impl std::fmt::Debug for Authoritative {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authoritative")
            .field("relay_url", &self.relay_url)
            .field("private_key", &"<redacted>")
            .field("auth_tag", &self.auth_tag.as_ref().map(|_| "<redacted>"))
            .field("owner_pubkey", &self.owner_pubkey)
            .field("agent_command", &self.agent_command)
            .field("agent_args", &self.agent_args)
            .field("respond_to", &self.respond_to)
            .field("inactivity_seconds", &self.inactivity_seconds)
            .field("doze_seconds", &self.doze_seconds)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// A user env key refused outright; the sentence names the key, never its
/// value. A binding maps it to its own refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EnvRefused(pub String);

fn refused_env(message: String) -> EnvRefused {
    EnvRefused(message)
}

fn lower_tier(tier: &BTreeMap<String, String>, name: &str) -> Result<BTreeMap<String, String>, EnvRefused> {
    let mut out = BTreeMap::new();
    for (k, v) in tier {
        if !names::is_posix_env_key(k) {
            return Err(refused_env(format!(
                "env key {k:?} in {name} is not a POSIX name ([A-Za-z_][A-Za-z0-9_]*); rename it"
            )));
        }
        if k == names::NO_PRESENCE {
            return Err(refused_env(format!(
                "{} is set in {name}; presence is the only status of a remote agent (I3), so it may not be suppressed — remove it",
                names::NO_PRESENCE
            )));
        }
        if buzz_contract::sidecar::is_deployer_only(k) {
            return Err(refused_env(format!(
                "{k} is set in {name}; it is the image collector's pod, image or ingest setting, which only the provider writes (a user value could forge the image digest or redirect usage data) — remove it"
            )));
        }
        if names::is_reserved(k) || names::is_host_resolved(k) {
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    Ok(out)
}

/// Tiers 1 and 2 from the payload: `launch` when present, else legacy `env_vars`.
pub fn lower_tiers(agent: &AgentPayload) -> Result<BTreeMap<String, String>, EnvRefused> {
    let mut env = BTreeMap::new();
    match &agent.launch {
        Some(l) => {
            env.extend(lower_tier(&l.policy_env, "launch.policy_env")?);
            env.extend(lower_tier(&l.env, "launch.env")?);
        }
        None => env.extend(lower_tier(&agent.env_vars, "env_vars")?),
    }
    Ok(env)
}

/// Tier 3, written last.
pub fn authoritative_tier(a: &Authoritative) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert(names::RELAY_URL.into(), a.relay_url.clone());
    env.insert(names::PRIVATE_KEY.into(), a.private_key.clone());
    env.insert(names::NOSTR_PRIVATE_KEY.into(), a.private_key.clone());
    if let Some(tag) = &a.auth_tag {
        env.insert(names::AUTH_TAG.into(), tag.clone());
    }
    if let Some(owner) = &a.owner_pubkey {
        env.insert(names::AGENT_OWNER.into(), owner.clone());
    }
    if !a.agent_command.is_empty() {
        env.insert(names::AGENT_COMMAND.into(), a.agent_command.clone());
    }
    if !a.agent_args.is_empty() {
        env.insert(names::AGENT_ARGS.into(), a.agent_args.join(","));
    }
    env.insert(names::RESPOND_TO.into(), a.respond_to.clone());
    if !a.respond_to_allowlist.is_empty() {
        env.insert(
            names::RESPOND_TO_ALLOWLIST.into(),
            a.respond_to_allowlist.join(","),
        );
    }
    if let Some(mcp) = &a.mcp_command {
        env.insert(names::MCP_COMMAND.into(), mcp.clone());
    }
    env.insert(
        names::EXIT_AFTER_INACTIVITY.into(),
        a.inactivity_seconds.to_string(),
    );
    env.insert(names::DOZE.into(), a.doze_seconds.to_string());
    env.insert(names::START_NONCE.into(), a.generation.clone());
    if let Some(w) = &a.wake {
        use buzz_contract::wake;
        env.insert(wake::EVENTS_ENV.into(), wake::format_events(&w.events));
        env.insert(wake::SINCE_ENV.into(), w.since.to_string());
    }
    env
}

/// The full environment: tiers 1–2, then tier 3 over them.
pub fn assemble(agent: &AgentPayload, a: &Authoritative) -> Result<BTreeMap<String, String>, EnvRefused> {
    let mut env = lower_tiers(agent)?;
    env.extend(authoritative_tier(a));
    Ok(env)
}

/// Bytes the env occupies in a Secret's data.
pub fn secret_size(env: &BTreeMap<String, String>) -> usize {
    env.iter().map(|(k, v)| k.len() + v.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use buzz_contract::wire::Launch;
    use proptest::prelude::*;

    fn auth() -> Authoritative {
        Authoritative {
            relay_url: "wss://relay.test".into(),
            private_key: "nsec1canary".into(),
            auth_tag: Some("[tag]".into()),
            owner_pubkey: Some("ab".repeat(32)),
            agent_command: "goose".into(),
            agent_args: vec!["acp".into(), "--x".into()],
            respond_to: "owner-only".into(),
            respond_to_allowlist: vec![],
            inactivity_seconds: 7200,
            doze_seconds: 300,
            generation: "0f".repeat(16),
            mcp_command: Some("buzz-dev-mcp".into()),
            wake: None,
        }
    }

    #[test]
    fn a_wake_hand_over_becomes_the_harness_s_wake_env_and_only_then() {
        let a = with_launch(&[], &[]);
        let env = assemble(&a, &auth()).unwrap();
        assert!(!env.contains_key("BUZZ_ACP_WAKE_EVENTS") && !env.contains_key("BUZZ_ACP_WAKE_SINCE"));
        let woken = Authoritative {
            wake: Some(buzz_contract::wire::WakePayload {
                events: vec!["ab".repeat(32), "cd".repeat(32)],
                since: 1_700_000_000,
            }),
            ..auth()
        };
        let env = assemble(&a, &woken).unwrap();
        assert_eq!(
            env["BUZZ_ACP_WAKE_EVENTS"],
            format!("{},{}", "ab".repeat(32), "cd".repeat(32))
        );
        assert_eq!(env["BUZZ_ACP_WAKE_SINCE"], "1700000000");
    }

    fn with_launch(policy: &[(&str, &str)], env: &[(&str, &str)]) -> AgentPayload {
        let m = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        AgentPayload {
            launch: Some(Launch {
                policy_env: m(policy),
                env: m(env),
                ..Default::default()
            }),
            env_vars: m(&[("LEGACY", "1")]),
            ..Default::default()
        }
    }

    #[test]
    fn tier_order_user_env_beats_policy_and_authoritative_beats_both() {
        let a = with_launch(
            &[("GOOSE_MODE", "auto"), ("BUZZ_ACP_MODEL", "p")],
            &[("GOOSE_MODE", "chat")],
        );
        let env = assemble(&a, &auth()).unwrap();
        assert_eq!(env["GOOSE_MODE"], "chat", "tier 2 beats tier 1 (spec DECISION G)");
        assert_eq!(env["BUZZ_ACP_MODEL"], "p");
        assert_eq!(env["BUZZ_PRIVATE_KEY"], "nsec1canary");
        assert_eq!(env["NOSTR_PRIVATE_KEY"], "nsec1canary");
        assert_eq!(env["BUZZ_ACP_AGENT_ARGS"], "acp,--x");
        assert_eq!(env["BUZZ_ACP_MCP_COMMAND"], "buzz-dev-mcp");
        assert_eq!(env["BUZZ_ACP_EXIT_AFTER_INACTIVITY"], "7200");
        assert_eq!(env["BUZZ_ACP_DOZE"], "300");
        assert_eq!(env["BUZZ_MANAGED_AGENT_START_NONCE"], "0f".repeat(16));
        assert!(
            !env.contains_key("LEGACY"),
            "legacy env_vars is never re-merged when launch is present"
        );
    }

    #[test]
    fn legacy_env_vars_only_without_launch() {
        let mut a = with_launch(&[], &[]);
        a.launch = None;
        let env = assemble(&a, &auth()).unwrap();
        assert_eq!(env["LEGACY"], "1");
    }

    #[test]
    fn reserved_and_host_resolved_keys_are_stripped_from_lower_tiers() {
        let a = with_launch(
            &[("BUZZ_RELAY_URL", "wss://evil"), ("PATH", "/host/bin")],
            &[
                ("BUZZ_PRIVATE_KEY", "x"),
                ("BUZZ_ACP_EXIT_AFTER_INACTIVITY", "0"),
                ("HOME", "/Users/me"),
                ("CLAUDE_CODE_EXECUTABLE", "/Applications/x"),
                ("BUZZ_ACP_SETUP_PAYLOAD", "{}"),
                ("BUZZ_MANAGED_AGENT", "1"),
                ("BUZZ_API_TOKEN", "t"),
            ],
        );
        let mut au = auth();
        au.auth_tag = None;
        let env = assemble(&a, &au).unwrap();
        assert_eq!(env["BUZZ_RELAY_URL"], "wss://relay.test");
        assert_eq!(env["BUZZ_ACP_EXIT_AFTER_INACTIVITY"], "7200");
        assert_eq!(env["BUZZ_ACP_DOZE"], "300");
        for k in [
            "PATH",
            "HOME",
            "CLAUDE_CODE_EXECUTABLE",
            "BUZZ_ACP_SETUP_PAYLOAD",
            "BUZZ_MANAGED_AGENT",
            "BUZZ_API_TOKEN",
            "BUZZ_AUTH_TAG",
        ] {
            assert!(!env.contains_key(k), "{k} must not reach the pod");
        }
    }

    #[test]
    fn no_presence_in_any_tier_is_refused() {
        for (p, e) in [
            (vec![("BUZZ_ACP_NO_PRESENCE", "1")], vec![]),
            (vec![], vec![("BUZZ_ACP_NO_PRESENCE", "1")]),
        ] {
            let a = with_launch(&p, &e);
            assert!(assemble(&a, &auth()).is_err());
        }
        let mut a = with_launch(&[], &[]);
        a.launch = None;
        a.env_vars.insert("BUZZ_ACP_NO_PRESENCE".into(), "true".into());
        assert!(assemble(&a, &auth()).is_err());
    }

    #[test]
    fn the_collectors_deployer_only_names_are_refused_in_every_tier() {
        let digest = format!("sha256:{}", "a".repeat(64));
        for key in [
            "IMAGE_DIGEST",
            "IMAGE_REF",
            "RUNTIME_AGENT_INGEST_URL",
            "RUNTIME_AGENT_SPOOL_DIR",
            "RUNTIME_AGENT_ANY_FUTURE_KNOB",
            "POD_UID",
            "POD_NAME",
            "POD_NAMESPACE",
            "NODE_NAME",
            "CONTAINER_NAME",
        ] {
            for (p, e) in [
                (vec![(key, digest.as_str())], vec![]),
                (vec![], vec![(key, digest.as_str())]),
            ] {
                let err = assemble(&with_launch(&p, &e), &auth()).unwrap_err();
                let text = err.to_string();
                assert!(text.contains(key), "the error names the key: {text}");
                assert!(!text.contains(&digest), "never the value: {text}");
            }
            let mut legacy = with_launch(&[], &[]);
            legacy.launch = None;
            legacy.env_vars.insert(key.into(), "x".into());
            assert!(assemble(&legacy, &auth()).is_err(), "{key} in env_vars");
        }
        // Ordinary process env the sidecar also gets stays the user's.
        let env = assemble(&with_launch(&[], &[("TZ", "UTC"), ("LANG", "C")]), &auth()).unwrap();
        assert_eq!((env["TZ"].as_str(), env["LANG"].as_str()), ("UTC", "C"));
    }

    #[test]
    fn non_posix_keys_are_refused() {
        let a = with_launch(&[], &[("BUZZ_AUTH_TAG=x", "y")]);
        let e = assemble(&a, &auth()).unwrap_err().to_string();
        assert!(e.contains("POSIX"), "{e}");
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Z_][A-Z0-9_]{0,8}",
            proptest::sample::select(buzz_contract::env::RESERVED_ENV_KEYS.to_vec()).prop_map(str::to_string),
            proptest::sample::select(buzz_contract::env::HOST_RESOLVED_KEYS.to_vec())
                .prop_map(str::to_string),
        ]
        .prop_filter("refused keys are tested separately", |k| {
            k != "BUZZ_ACP_NO_PRESENCE" && !buzz_contract::sidecar::is_deployer_only(k)
        })
    }

    proptest! {
        /// The tier algebra: every key of the result comes from exactly the
        /// highest tier that holds it; reserved/host keys come only from tier 3.
        #[test]
        fn tier_algebra(policy in proptest::collection::btree_map(key(), "[a-z]{0,6}", 0..8),
                        user in proptest::collection::btree_map(key(), "[a-z]{0,6}", 0..8)) {
            let a = AgentPayload { launch: Some(Launch { policy_env: policy.clone(), env: user.clone(), ..Default::default() }), ..Default::default() };
            let au = auth();
            let env = assemble(&a, &au).unwrap();
            let top = authoritative_tier(&au);
            for (k, v) in &env {
                let expected = top.get(k).or_else(|| {
                    if names::is_reserved(k) || names::is_host_resolved(k) { None } else { user.get(k).or(policy.get(k)) }
                });
                prop_assert_eq!(Some(v), expected, "key {}", k);
            }
            for k in top.keys() { prop_assert!(env.contains_key(k)); }
            for (k, _) in user.iter().chain(policy.iter()) {
                if !(names::is_reserved(k) || names::is_host_resolved(k)) { prop_assert!(env.contains_key(k)); }
                else if !top.contains_key(k) { prop_assert!(!env.contains_key(k)); }
            }
        }
    }
}
