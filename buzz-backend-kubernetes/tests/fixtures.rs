//! The provider reads the launcher's golden wire fixtures (recorded from the
//! launcher's real serializer; see fixtures/README.md) — never a private copy.

use buzz_backend_kubernetes::error::{DeployError, RefusalRule};
use buzz_backend_kubernetes::protocol::{Request, parse_request, prepare};
use serde_json::Value;

fn fixture(name: &str) -> (Vec<u8>, Value) {
    let path =
        std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .join("../fixtures/provider-wire")
            .join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v = serde_json::from_slice(&bytes).unwrap();
    (bytes, v)
}

const DEFAULT: &str =
    "ghcr.io/block/buzz-sprig@sha256:0000000000000000000000000000000000000000000000000000000000000000";

fn prepared(name: &str) -> Result<buzz_backend_kubernetes::reconcile::Plan, DeployError> {
    let (bytes, _) = fixture(name);
    let Request::Deploy {
        agent,
        provider_config,
    } = parse_request(&bytes).unwrap()
    else {
        panic!("deploy")
    };
    prepare(&agent, &provider_config, Some(DEFAULT))
}

#[test]
fn info_request_fixture_parses() {
    let (bytes, _) = fixture("info-request.json");
    assert!(matches!(parse_request(&bytes).unwrap(), Request::Info));
}

#[test]
fn full_launch_fixture_maps_three_tiers() {
    let plan = prepared("deploy-full-launch.json").unwrap();
    let env = buzz_backend_kubernetes::envtiers::assemble(&plan.agent, &plan.authoritative).unwrap();
    let (_, v) = fixture("deploy-full-launch.json");
    let launch = &v["agent"]["launch"];
    for (k, val) in launch["env"].as_object().unwrap() {
        assert_eq!(env[k], val.as_str().unwrap(), "tier 2 {k}");
    }
    assert_eq!(
        env["GOOSE_MODE"], "auto",
        "tier 1 survives where tier 2 is silent"
    );
    assert_eq!(
        env["BUZZ_ACP_AGENT_OWNER"],
        launch["owner_pubkey"].as_str().unwrap()
    );
    assert_eq!(env["BUZZ_AUTH_TAG"], v["agent"]["auth_tag"].as_str().unwrap());
    assert_eq!(env["BUZZ_ACP_RESPOND_TO"], "allowlist");
    assert_eq!(env["BUZZ_ACP_RESPOND_TO_ALLOWLIST"], "a".repeat(64));
    assert_eq!(env["BUZZ_ACP_EXIT_AFTER_INACTIVITY"], "0");
    assert!(
        !env.contains_key("BUZZ_AGENT_PROVIDER"),
        "provider is never mapped by the provider"
    );
    assert_eq!(plan.intent.restart_policy, "OnFailure", "inactivity_seconds 0");
    assert_eq!(plan.namespace, "buzz-agents-abc123");
}

#[test]
fn legacy_fixture_uses_env_vars_only_without_launch() {
    let plan = prepared("deploy-legacy-no-launch.json").unwrap();
    let env = buzz_backend_kubernetes::envtiers::assemble(&plan.agent, &plan.authoritative).unwrap();
    let (_, v) = fixture("deploy-legacy-no-launch.json");
    for (k, val) in v["agent"]["env_vars"].as_object().unwrap() {
        assert_eq!(env[k], val.as_str().unwrap());
    }
    assert_eq!(env["BUZZ_ACP_AGENT_COMMAND"], "goose");
}

#[test]
fn no_owner_fixture_is_refused_before_any_mutation() {
    let e = prepared("deploy-no-owner.json").unwrap_err();
    assert!(
        matches!(e, DeployError::Refused(ref r) if r.rule == RefusalRule::Owner && r.to_string().contains("owner")),
        "{e}"
    );
}

#[test]
fn relay_mesh_fixture_is_refused() {
    let e = prepared("deploy-relay-mesh.json").unwrap_err();
    assert!(
        matches!(e, DeployError::Refused(ref r) if r.rule == RefusalRule::RelayMesh),
        "{e}"
    );
}
