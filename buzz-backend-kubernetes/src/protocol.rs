//! The process contract (spec §Provider Protocol, §Invocation; [L2] item 1)
//! and the checks that come before any mutation (§Deploy State Machine step 0,
//! §Launch data owner rule and relay-mesh rule, §Reserved-key rule, I1).
//!
//! One JSON object in (≤ 16 MiB, `op` = `info` | `deploy` | `undeploy`
//! ([`crate::undeploy`]), optional string
//! `request_id`, unknown fields ignored); one JSON object out. Every failure
//! the provider can describe is an in-band `{"ok":false,"error":…}` with exit
//! code 0; the binary exits non-zero only on crash paths.

use crate::config::{ProviderConfig, default_image};
use crate::consts::*;
use crate::diag::{self, Redactor};
use crate::envtiers::{self, Authoritative};
use crate::error::{DeployError, Refusal, RefusalRule, RequestError, RequestErrorKind as RK};
use crate::kubeconfig;
use crate::podspec::{self, PodIntent};
use crate::reconcile::{self, Plan, Timing};
use buzz_contract::gate::{RespondTo, validate_allowlist};
use buzz_contract::keys::{KeyError, normalize_pubkey_hex, parse_private_key, pubkey_hex};
use buzz_contract::nip_oa::{AuthTag, AuthTagError};
use buzz_contract::wire::{MAX_REQUEST_BYTES, OP_DEPLOY, OP_INFO, OP_UNDEPLOY, parse_agent};
use nostr::ToBech32;
use serde_json::{Map, Value, json};
use std::time::Instant;

/// A parsed request. Deliberately not `Debug`: it holds the raw payload.
pub enum Request {
    Info,
    Deploy {
        agent: Value,
        provider_config: Value,
    },
    /// `agent` is `{name, pubkey}`: no secret crosses ([`crate::undeploy`]).
    Undeploy {
        agent: Value,
        provider_config: Value,
    },
}

/// The in-band failure form.
pub fn failure(msg: &str) -> Value {
    json!({ "ok": false, "error": msg })
}

/// Parses the raw stdin bytes into a request.
pub fn parse_request(bytes: &[u8]) -> Result<Request, DeployError> {
    let req = |kind, field, m: &str| DeployError::from(RequestError::new(kind, field, m));
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(req(
            RK::TooLarge,
            None,
            "the request is larger than 16 MiB; send one JSON object with op \"info\" or \"deploy\"",
        ));
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        let what = if e.is_eof() {
            "is truncated"
        } else {
            "is not valid JSON"
        };
        req(
            RK::NotJson,
            None,
            &format!("the request {what} ({e}); send exactly one JSON object with op \"info\" or \"deploy\""),
        )
    })?;
    let Value::Object(mut o) = v else {
        return Err(req(
            RK::NotAnObject,
            None,
            "the request must be a JSON object with op \"info\" or \"deploy\"",
        ));
    };
    match o.get("request_id") {
        None | Some(Value::String(_)) => {}
        Some(_) => {
            return Err(req(
                RK::WrongType,
                Some("request_id"),
                "request_id must be a string",
            ));
        }
    }
    let op = match o.get("op") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(req(
                RK::WrongType,
                Some("op"),
                "op must be a string: \"info\" or \"deploy\"",
            ));
        }
        None => {
            return Err(req(
                RK::Missing,
                Some("op"),
                "the request has no op; expected \"info\" or \"deploy\"",
            ));
        }
    };
    match op.as_str() {
        OP_INFO => Ok(Request::Info),
        OP_DEPLOY | OP_UNDEPLOY => {
            let agent = match o.remove("agent") {
                Some(a @ Value::Object(_)) => a,
                Some(_) => {
                    return Err(req(
                        RK::WrongType,
                        Some("agent"),
                        &format!("{op}'s agent must be a JSON object"),
                    ));
                }
                None => {
                    return Err(req(
                        RK::Missing,
                        Some("agent"),
                        &format!("{op} needs an agent object"),
                    ));
                }
            };
            let provider_config = match o.remove("provider_config") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(c) => c,
            };
            Ok(if op == OP_DEPLOY {
                Request::Deploy {
                    agent,
                    provider_config,
                }
            } else {
                Request::Undeploy {
                    agent,
                    provider_config,
                }
            })
        }
        other => {
            let shown: String = other.chars().take(32).collect();
            Err(req(
                RK::UnknownOp,
                Some("op"),
                &format!(
                    "unknown op {shown:?}; this provider implements \"info\", \"deploy\" and \"undeploy\""
                ),
            ))
        }
    }
}

/// Every secret value the payload carries, for scrubbing output (L2 item 5).
pub fn redactor_for(agent: &Value) -> Redactor {
    let mut values: Vec<String> = Vec::new();
    let s = |v: &Value| v.as_str().map(str::to_string);
    if let Some(k) = agent.get("private_key_nsec").and_then(s) {
        values.push(k.trim().to_string());
        if let Ok(keys) = parse_private_key(&k) {
            values.push(keys.secret_key().to_secret_hex());
            let Ok(bech32) = keys.secret_key().to_bech32();
            values.push(bech32);
        }
        values.push(k);
    }
    values.extend(agent.get("auth_tag").and_then(s));
    let maps = [
        agent.get("env_vars"),
        agent.pointer("/launch/env"),
        agent.pointer("/launch/policy_env"),
    ];
    for m in maps.into_iter().flatten() {
        if let Some(o) = m.as_object() {
            values.extend(o.values().filter_map(s));
        }
    }
    Redactor::new(values)
}

/// The redactor of everything a deploy or undeploy writes: the payload's
/// secrets and the kubeconfig's credentials ([`kubeconfig::file_secrets`]).
pub fn output_redactor(agent: &Value) -> Redactor {
    redactor_for(agent).with(kubeconfig::file_secrets())
}

fn refused(rule: RefusalRule, m: String) -> DeployError {
    Refusal::new(rule, m).into()
}

/// All checks before any cluster contact; returns the deploy plan.
pub fn prepare(agent_v: &Value, config_v: &Value, default_image: Option<&str>) -> Result<Plan, DeployError> {
    let config = ProviderConfig::parse(config_v, default_image)?;
    let agent = parse_agent(agent_v)
        .map_err(|e| RequestError::new(RK::Payload, Some("agent"), format!("the deploy payload's {e}")))?;
    // Step 0: derive identity from the key before anything else.
    let keys = parse_private_key(&agent.private_key_nsec).map_err(|e| match e {
        KeyError::Empty => refused(RefusalRule::Identity,
            "agent.private_key_nsec is empty: refusing to deploy an agent without an identity (I1); check the agent's key in the keyring".into(),
        ),
        KeyError::Malformed => refused(RefusalRule::Identity,
            "agent.private_key_nsec is malformed: expected nsec1… or 64 hex characters; nothing was deployed".into(),
        ),
    })?;
    let pubkey = pubkey_hex(&keys);
    let launch = agent.launch.as_ref();
    let owner_pubkey = match launch
        .and_then(|l| l.owner_pubkey.as_deref())
        .filter(|s| !s.trim().is_empty())
    {
        Some(raw) => Some(normalize_pubkey_hex(raw).ok_or_else(|| {
            refused(
                RefusalRule::Owner,
                "agent.launch.owner_pubkey must be a 64-hex public key".into(),
            )
        })?),
        None => None,
    };
    // The agent can never be its own owner: `!shutdown` would have to come
    // from the agent itself, so the owner gate could never open.
    if owner_pubkey.as_deref() == Some(pubkey.as_str()) {
        return Err(refused(RefusalRule::Owner,
            "agent.launch.owner_pubkey is the agent's own public key; the owner must be the person who controls the agent, so nothing was deployed".into(),
        ));
    }
    let mut auth_tag = agent
        .auth_tag
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    if let Some(tag) = &auth_tag
        && let Err(e) = AuthTag::verified_owner(tag, &pubkey)
    {
        if e == AuthTagError::OwnerIsAgent {
            return Err(refused(RefusalRule::Owner,
                "agent.auth_tag names the agent itself as its owner; the owner must be the person who controls the agent, so nothing was deployed".into(),
            ));
        }
        if owner_pubkey.is_none() {
            return Err(refused(
                RefusalRule::Owner,
                format!(
                    "agent.auth_tag does not verify for this agent's key ({e}) and launch.owner_pubkey is absent; without an owner the agent could never honour !shutdown, so nothing was deployed"
                ),
            ));
        }
        diag::line(&format!(
            "agent.auth_tag does not verify ({e}); it is not passed to the pod, and the harness uses launch.owner_pubkey"
        ));
        // A tag known to be bad never reaches the pod (BUZZ_AUTH_TAG).
        auth_tag = None;
    }
    if auth_tag.is_none() && owner_pubkey.is_none() {
        return Err(refused(RefusalRule::Owner,
            "the payload has neither auth_tag nor launch.owner_pubkey; without an owner the agent could never honour !shutdown, so nothing was deployed".into(),
        ));
    }
    if agent.provider.as_deref().map(str::trim) == Some("relay-mesh") {
        return Err(refused(RefusalRule::RelayMesh,
            "this agent uses Buzz shared compute (relay-mesh), which only works on this computer; choose a model provider the pod can reach, or run the agent locally".into(),
        ));
    }
    // The rule every front end applies (issue 24 item 3), one place.
    let relay_url = buzz_contract::relay_url::check(&agent.relay_url).map_err(|e| match e {
        buzz_contract::relay_url::RelayUrlError::Empty => refused(
            RefusalRule::Relay,
            "agent.relay_url is empty; the agent needs a relay to connect to".into(),
        ),
        e => refused(RefusalRule::Relay, format!("agent.relay_url: {e}")),
    })?;
    let respond_to = RespondTo::parse(agent.respond_to.trim())
        .map_err(|e| refused(RefusalRule::RespondTo, format!("agent.{e}")))?;
    let allowlist = validate_allowlist(respond_to, &agent.respond_to_allowlist)
        .map_err(|e| refused(RefusalRule::RespondTo, format!("agent.{e}")))?;
    let (agent_command, agent_args) = match launch {
        Some(l) => (l.command.trim().to_string(), l.args.clone()),
        None => (agent.agent_command.trim().to_string(), agent.agent_args.clone()),
    };
    if agent_command.contains('/') {
        return Err(refused(
            RefusalRule::AgentCommand,
            "the agent command must be a command name resolved in the image, not a host path".into(),
        ));
    }
    let authoritative = Authoritative {
        relay_url,
        private_key: agent.private_key_nsec.trim().to_string(),
        auth_tag,
        owner_pubkey,
        agent_command,
        agent_args,
        respond_to: respond_to.as_str().to_string(),
        respond_to_allowlist: allowlist,
        inactivity_seconds: config.inactivity_seconds,
        generation: "0".repeat(32),
    };
    let env = envtiers::assemble(&agent, &authoritative)?;
    let size = envtiers::secret_size(&env);
    if size > SECRET_MAX_BYTES - 4096 {
        return Err(refused(
            RefusalRule::EnvTooLarge,
            format!(
                "the agent environment is {size} bytes, more than a Kubernetes Secret holds (1 MiB); trim the env"
            ),
        ));
    }
    let intent = PodIntent::from_config(&config);
    Ok(Plan {
        namespace: config.namespace.clone(),
        agent_id: podspec::pod_name(&pubkey),
        fingerprint: podspec::fingerprint(&intent),
        pubkey,
        intent,
        agent,
        authoritative,
    })
}

/// The budget in force, measured from `started` (the process start):
/// 600 s or `BUZZ_K8S_DEPLOY_DEADLINE_SECS`; see [`crate::timing`].
pub fn timing(started: Instant) -> Timing {
    Timing::from_env(started)
}

/// Runs a deploy end to end; the caller redacts the error. `started` is the
/// process start, from which the deadline is measured.
pub async fn deploy(agent: &Value, provider_config: &Value, started: Instant) -> Result<String, DeployError> {
    let plan = prepare(agent, provider_config, default_image().as_deref())?;
    let context = provider_config
        .get("context")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let connected = kubeconfig::connect(context).await?;
    let cluster = crate::cluster::KubeCluster::new(connected.client, &plan.namespace);
    reconcile::deploy(&cluster, &plan, timing(started))
        .await
        .map_err(|e| kubeconfig::name_endpoint(kubeconfig::name_exec_plugin(e, context), &connected.endpoint))
}

/// Prepends the spec's PATH entries so kubeconfig exec plugins resolve (§K8s Auth).
/// Call while the process is still single-threaded.
pub fn augment_path() {
    let mut parts = path_prepend();
    if let Some(p) = std::env::var_os("PATH") {
        parts.extend(std::env::split_paths(&p).map(|p| p.to_string_lossy().into_owned()));
    }
    let mut seen = std::collections::HashSet::new();
    parts.retain(|p| seen.insert(p.clone()));
    if let Ok(joined) = std::env::join_paths(parts) {
        // SAFETY: called from main before any thread is spawned.
        unsafe { std::env::set_var("PATH", joined) };
    }
}

/// Handles one request and returns the response object (never panics on
/// input). `started` is the process start (the deadline's origin).
pub fn handle(bytes: &[u8], started: Instant) -> Value {
    let request = match parse_request(bytes) {
        Ok(r) => r,
        Err(e) => return failure(&e.to_string()),
    };
    match request {
        Request::Info => crate::info::response(default_image().as_deref()),
        Request::Deploy {
            agent,
            provider_config,
        } => {
            let redactor = output_redactor(&agent);
            diag::set_redactor(redactor.clone());
            augment_path();
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return failure(&format!("could not start the async runtime: {e}")),
            };
            match rt.block_on(deploy(&agent, &provider_config, started)) {
                Ok(agent_id) => json!({ "ok": true, "agent_id": agent_id }),
                Err(e) => failure(&redactor.scrub(&e.to_string())),
            }
        }
        Request::Undeploy {
            agent,
            provider_config,
        } => crate::undeploy::run::handle(&agent, &provider_config, started),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    /// Malformed requests are told apart by kind and field, not by text.
    #[test]
    fn request_errors_are_typed_by_kind_and_field() {
        let big = vec![b' '; MAX_REQUEST_BYTES + 1];
        let cases: [(&[u8], RK, Option<&str>); 9] = [
            (&big, RK::TooLarge, None),
            (b"{\"op\":", RK::NotJson, None),
            (b"nope", RK::NotJson, None),
            (b"[1]", RK::NotAnObject, None),
            (
                b"{\"op\":\"info\",\"request_id\":7}",
                RK::WrongType,
                Some("request_id"),
            ),
            (b"{\"op\":1}", RK::WrongType, Some("op")),
            (b"{}", RK::Missing, Some("op")),
            (b"{\"op\":\"deploy\",\"agent\":[]}", RK::WrongType, Some("agent")),
            (b"{\"op\":\"destroy\"}", RK::UnknownOp, Some("op")),
        ];
        for (bytes, kind, field) in cases {
            match parse_request(bytes) {
                Err(DeployError::Request(e)) => assert_eq!((e.kind, e.field), (kind, field), "{e}"),
                Err(other) => panic!("expected a request error, got {other:?}"),
                Ok(_) => panic!(
                    "expected a request error for {:?}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
                ),
            }
        }
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
