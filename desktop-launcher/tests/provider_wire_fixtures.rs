//! Golden provider-wire fixtures (spec §Conformance note; DESIGN.md "Fixtures
//! are recorded, not invented"): `fixtures/provider-wire/*.json` are produced
//! by the launcher's real serializer. This test regenerates them when
//! `BUZZ_UPDATE_FIXTURES=1` and otherwise asserts whole-object equality.
//!
//! The keys here are fixed TEST keys, published on purpose; never use them.

use buzz_contract::nip_oa::AuthTag;
use desktop_launcher::payload;
use desktop_launcher::record::Identity;
use desktop_launcher::record::{AgentRecord, Backend, Persona, Settings};
use desktop_launcher::resolve::{self, Target};
use nostr_sdk::secp256k1::{Keypair, Message};
use nostr_sdk::{Keys, SECP256K1, SecretKey, ToBech32};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

const OWNER_SECRET_HEX: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const AGENT_SECRET_HEX: &str = "2222222222222222222222222222222222222222222222222222222222222222";

fn keys(hex: &str) -> Keys {
    Keys::new(SecretKey::from_hex(hex).unwrap())
}

/// A deterministic NIP-OA tag (no aux randomness) so the fixture is stable;
/// it is verified with the contract's verifier below.
fn deterministic_tag(owner_secret_hex: &str, agent_hex: &str) -> String {
    let owner = keys(owner_secret_hex);
    let pair = Keypair::from_seckey_slice(SECP256K1, &hex::decode(owner_secret_hex).unwrap()).unwrap();
    let digest: [u8; 32] = Sha256::digest(format!("nostr:agent-auth:{agent_hex}:")).into();
    let sig = SECP256K1.sign_schnorr_no_aux_rand(&Message::from_digest(digest), &pair);
    let tag = AuthTag {
        owner: owner.public_key().to_hex(),
        conditions: String::new(),
        sig: hex::encode(sig.serialize()),
    };
    let json = tag.to_json();
    assert_eq!(
        AuthTag::verified_owner(&json, agent_hex).unwrap(),
        owner.public_key().to_hex()
    );
    json
}

fn world() -> (AgentRecord, Settings, Identity) {
    let owner = keys(OWNER_SECRET_HEX);
    let agent = keys(AGENT_SECRET_HEX);
    let agent_hex = agent.public_key().to_hex();
    let mut rec = AgentRecord::new("scout", &agent_hex, "wss://relay.example.com");
    rec.display_name = Some("Scout\u{7} the agent".into());
    rec.persona = Some("researcher".into());
    rec.model = Some("gpt-4.1".into());
    rec.provider = Some("openai".into());
    rec.system_prompt = Some("You are Scout.".into());
    rec.turn_timeout_seconds = Some(600);
    rec.idle_timeout_seconds = Some(900);
    rec.max_turn_duration_seconds = Some(7200);
    rec.parallelism = Some(2);
    rec.respond_to = "allowlist".into();
    rec.respond_to_allowlist = vec!["a".repeat(64)];
    rec.env.insert("AGENT_ONLY".into(), "agent-value".into());
    rec.env.insert("SHARED".into(), "agent-wins".into());
    rec.env.insert("BUZZ_ACP_NO_PRESENCE".into(), "1".into());
    rec.backend = Backend::Provider {
        id: "kubernetes".into(),
        config: Default::default(),
        path_cache: None,
    };
    let mut settings = Settings::default();
    settings.global_env.insert("SHARED".into(), "global".into());
    settings.global_env.insert("PATH".into(), "/host/only/bin".into());
    settings
        .global_env
        .insert("OPENAI_API_KEY".into(), "sk-test-fixture-not-a-real-key".into());
    settings.personas.insert(
        "researcher".into(),
        Persona {
            env: [("PERSONA_ONLY".to_string(), "persona-value".to_string())].into(),
            ..Default::default()
        },
    );
    settings.team_instructions = Some("Be brief.".into());
    let id = Identity {
        nsec: agent.secret_key().to_bech32().unwrap(),
        auth_tag: Some(deterministic_tag(OWNER_SECRET_HEX, &agent_hex)),
        owner_pubkey: Some(owner.public_key().to_hex()),
        secret_env: Default::default(),
    };
    (rec, settings, id)
}

fn schema() -> Value {
    json!({"properties": {
        "namespace": {"type": "string"},
        "image": {"type": "string"},
        "cpu_request": {"type": "string"},
        "inactivity_seconds": {"type": "integer"},
        "memory_limit": {"type": "string"}
    }})
}

fn config() -> serde_json::Map<String, Value> {
    // As a user left the form: a zero typed as text, a cleared numeric field (KD8).
    let raw = json!({
        "namespace": "buzz-agents-abc123",
        "cpu_request": "1",
        "inactivity_seconds": "0",
        "memory_limit": ""
    });
    payload::normalize_provider_config(raw.as_object().unwrap(), Some(&schema())).unwrap()
}

fn full_launch() -> Value {
    let (rec, settings, id) = world();
    let resolved = resolve::resolve_launch(&rec, &settings, &id, Target::Remote).unwrap();
    let req = payload::build_deploy_request(&rec, &resolved, &id, config(), "fixture-deploy-1").unwrap();
    serde_json::to_value(&req).unwrap()
}

fn fixtures() -> Vec<(&'static str, Value)> {
    let info = serde_json::to_value(payload::info_request("fixture-info-1")).unwrap();
    let full = full_launch();
    // Legacy (pre-launch, spec Known Defect 3): the same payload without the `launch` field.
    let mut legacy = full.clone();
    legacy["agent"].as_object_mut().unwrap().remove("launch");
    legacy["request_id"] = json!("fixture-deploy-legacy");
    // Negative: neither auth_tag nor launch.owner_pubkey. The launcher refuses to
    // build this (owner rule); the provider must refuse it too before any mutation.
    let mut no_owner = full.clone();
    no_owner["agent"]["auth_tag"] = Value::Null;
    no_owner["agent"]["launch"]["owner_pubkey"] = Value::Null;
    no_owner["request_id"] = json!("fixture-deploy-no-owner");
    // Negative: the effective provider is relay-mesh. The launcher refuses to
    // build this; the provider must refuse it too before any mutation.
    let mut mesh = full.clone();
    mesh["agent"]["provider"] = json!("relay-mesh");
    mesh["request_id"] = json!("fixture-deploy-relay-mesh");
    vec![
        ("info-request.json", info),
        ("deploy-full-launch.json", full),
        ("deploy-legacy-no-launch.json", legacy),
        ("deploy-no-owner.json", no_owner),
        ("deploy-relay-mesh.json", mesh),
    ]
}

fn dir() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("../fixtures/provider-wire")
}

/// With `BUZZ_UPDATE_FIXTURES=1` the fixtures are rewritten from the
/// serializer, and the test still fails when that changed any of them (so an
/// update run can never pass silently over drift); rerun without the variable
/// after reviewing the diff.
#[test]
fn provider_wire_fixtures_match_the_serializer() {
    let update = std::env::var("BUZZ_UPDATE_FIXTURES").is_ok_and(|v| v == "1");
    let mut drifted = Vec::new();
    for (name, value) in fixtures() {
        let path = dir().join(name);
        let committed: Option<Value> = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        if committed.as_ref() != Some(&value) {
            drifted.push(name);
            if update {
                std::fs::create_dir_all(dir()).unwrap();
                let mut text = serde_json::to_string_pretty(&value).unwrap();
                text.push('\n');
                std::fs::write(&path, text).unwrap();
            }
        }
    }
    assert!(
        drifted.is_empty(),
        "{drifted:?} drifted from the serializer{}; review the diff",
        if update {
            " and were rewritten; rerun without BUZZ_UPDATE_FIXTURES"
        } else {
            "; regenerate with BUZZ_UPDATE_FIXTURES=1"
        }
    );
}

#[test]
fn full_launch_fixture_shows_the_rules_it_records() {
    let v = full_launch();
    let a = &v["agent"];
    let l = &a["launch"];
    assert_eq!(l["command"], "goose");
    assert_eq!(l["args"], json!(["acp"]));
    assert_eq!(l["env"]["GOOSE_MODEL"], "gpt-4.1");
    assert_eq!(l["env"]["SHARED"], "agent-wins");
    assert!(l["env"].get("PATH").is_none() && l["env"].get("BUZZ_ACP_NO_PRESENCE").is_none());
    assert_eq!(l["policy_env"]["BUZZ_ACP_SESSION_TITLE"], "Scout the agent");
    assert_eq!(l["policy_env"]["GOOSE_MODE"], "auto");
    assert_eq!(v["provider_config"]["inactivity_seconds"], json!(0));
    assert!(
        v["provider_config"].get("memory_limit").is_none(),
        "KD8: cleared is omitted"
    );
    // The launcher itself refuses the two negative shapes.
    let (rec, settings, mut id) = world();
    id.auth_tag = None;
    id.owner_pubkey = None;
    assert_eq!(
        resolve::resolve_launch(&rec, &settings, &id, Target::Remote),
        Err(resolve::ResolveError::NoOwner("scout".into()))
    );
    let (mut rec, settings, id) = world();
    rec.provider = Some("relay-mesh".into());
    rec.persona = None;
    assert_eq!(
        resolve::resolve_launch(&rec, &settings, &id, Target::Remote),
        Err(resolve::ResolveError::RelayMesh("scout".into()))
    );
}
