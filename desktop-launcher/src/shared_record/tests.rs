use super::*;
use buzz_contract::nip_oa::AuthTag;
use nostr_sdk::prelude::ToBech32;
use std::collections::BTreeMap;

struct World {
    owner: Keys,
    agent: Keys,
    rec: AgentRecord,
    identity: Identity,
}

fn world() -> World {
    let (owner, agent) = (Keys::generate(), Keys::generate());
    let mut rec = AgentRecord::new("scout", &agent.public_key().to_hex(), "ws://127.0.0.1:7777");
    rec.agent_command = Some("codex-acp".into());
    rec.agent_args = vec!["-c".into(), "model=\"x\"".into()];
    rec.model = Some("gpt-5.4".into());
    rec.env.insert("LOG_LEVEL".into(), "debug".into());
    rec.doze_seconds = Some(120);
    rec.display_name = Some("Scout".into());
    rec.workdir = Some("/home/me/work".into());
    rec.backend = Backend::Provider {
        id: "ssh".into(),
        config: [("host".to_string(), Value::from("me@box"))]
            .into_iter()
            .collect(),
        path_cache: Some("/opt/p".into()),
    };
    let identity = Identity {
        nsec: agent.secret_key().to_bech32().unwrap(),
        auth_tag: Some(
            AuthTag::mint(&owner, &agent.public_key().to_hex(), "")
                .unwrap()
                .to_json(),
        ),
        owner_pubkey: Some(owner.public_key().to_hex()),
        secret_env: BTreeMap::from([("OPENAI_API_KEY".into(), "sk-shared-canary".into())]),
    };
    World {
        owner,
        agent,
        rec,
        identity,
    }
}

fn local(w: &World) -> Local<'_> {
    Local {
        record: &w.rec,
        identity: &w.identity,
        agent_id: Some("buzz-acp@scout-0123456789ab"),
    }
}

#[test]
fn a_record_maps_to_upstreams_members_and_our_extension() {
    let w = world();
    let p = body(&local(&w), &w.owner.public_key(), &w.agent, None, 1_780_000_000);
    managed_record::check_payload(&p).expect("a valid payload");
    let c = &p.config;
    assert_eq!(
        (c.name.as_str(), c.relay_url.as_str()),
        ("scout", "ws://127.0.0.1:7777")
    );
    assert_eq!(c.runtime.as_deref(), Some("codex"), "the preset of codex-acp");
    assert_eq!(c.agent_command_override.as_deref(), Some("codex-acp"));
    assert_eq!(c.respond_to.as_deref(), Some("owner-only"));
    assert_eq!(c.env_vars["OPENAI_API_KEY"], "sk-shared-canary");
    assert_eq!(c.env_vars["LOG_LEVEL"], "debug");
    assert_eq!(
        c.backend,
        json!({"type": "provider", "id": "ssh", "config": {"host": "me@box"}})
    );
    assert_eq!(c.backend_agent_id.as_deref(), Some("buzz-acp@scout-0123456789ab"));
    let ours: Ours = serde_json::from_value(p.extensions[EXTENSION].clone()).unwrap();
    assert_eq!(
        ours.public_env,
        ["LOG_LEVEL"],
        "the secret env's names are not listed"
    );
    assert_eq!(
        (ours.doze_seconds, ours.display_name.as_deref()),
        (Some(120), Some("Scout"))
    );
    let text = serde_json::to_string(&p).unwrap();
    assert!(
        !text.contains("/home/me/work") && !text.contains("/opt/p"),
        "no path of this machine"
    );
    assert_eq!(p.identity.private_key_nsec, w.identity.nsec);
}

#[test]
fn another_writers_members_survive_and_the_body_changes_only_with_the_record() {
    let w = world();
    let first = body(&local(&w), &w.owner.public_key(), &w.agent, None, 1_780_000_000);
    let mut theirs = first.clone();
    theirs.extra.insert("future_top".into(), json!([1]));
    theirs.config.extra.insert("future_cfg".into(), json!("keep"));
    theirs.config.team_id = Some("team-7".into());
    theirs.extensions.insert("other:x".into(), json!(true));
    theirs.config.backend["name"] = json!("My box");
    let again = body(
        &local(&w),
        &w.owner.public_key(),
        &w.agent,
        Some(&theirs),
        1_780_000_500,
    );
    assert!(again.same_body(&theirs), "nothing of ours changed: no new head");
    assert_eq!(again.extra["future_top"], json!([1]));
    assert_eq!(again.config.extra["future_cfg"], json!("keep"));
    assert_eq!(again.config.team_id.as_deref(), Some("team-7"));
    assert_eq!(again.extensions["other:x"], json!(true));
    assert_eq!(again.config.backend["name"], json!("My box"));

    let mut edited = world_like(&w);
    edited.rec.model = Some("gpt-5.5".into());
    let changed = body(
        &local(&edited),
        &w.owner.public_key(),
        &w.agent,
        Some(&theirs),
        1_780_000_600,
    );
    assert!(!changed.same_body(&theirs), "an edit is a new body");
    let id = EventId::all_zeros();
    let next = successor(changed, &id, &theirs);
    assert_eq!(
        (next.generation, next.previous_event_id.as_deref()),
        (2, Some(id.to_hex().as_str()))
    );

    // Another backend: the old one's members go.
    edited.rec.backend = Backend::Local;
    let moved = body(
        &local(&edited),
        &w.owner.public_key(),
        &w.agent,
        Some(&theirs),
        1_780_000_700,
    );
    assert_eq!(moved.config.backend, json!({"type": "local"}));
}

fn world_like(w: &World) -> World {
    World {
        owner: w.owner.clone(),
        agent: w.agent.clone(),
        rec: w.rec.clone(),
        identity: w.identity.clone(),
    }
}

#[test]
fn a_head_materializes_back_to_the_record_its_secrets_and_its_deployment() {
    let w = world();
    let p = body(&local(&w), &w.owner.public_key(), &w.agent, None, 1_780_000_000);
    let m = materialize(&p).unwrap();
    let mut want = w.rec.clone();
    want.workdir = None;
    if let Backend::Provider { path_cache, .. } = &mut want.backend {
        *path_cache = None;
    }
    assert_eq!(
        m.record, want,
        "every shared field comes back; the paths of the other machine do not"
    );
    assert_eq!(m.secret_env, w.identity.secret_env);
    assert_eq!(
        (m.nsec.as_str(), m.auth_tag.as_deref()),
        (w.identity.nsec.as_str(), w.identity.auth_tag.as_deref())
    );
    assert_eq!(m.agent_id.as_deref(), Some("buzz-acp@scout-0123456789ab"));
    assert!(!format!("{m:?}").contains("sk-shared-canary") && !format!("{m:?}").contains(&w.identity.nsec));
}

#[test]
fn another_clients_head_files_its_env_as_secret_and_a_bad_name_or_backend_is_refused() {
    let w = world();
    let mut p = body(&local(&w), &w.owner.public_key(), &w.agent, None, 1_780_000_000);
    p.extensions.clear();
    p.config.agent_command_override = None;
    p.config.runtime = Some("claude".into());
    let m = materialize(&p).unwrap();
    assert!(
        m.record.env.is_empty() && m.secret_env.len() == 2,
        "no list of plain names: all secret"
    );
    assert_eq!(
        m.record.agent_command.as_deref(),
        Some("claude-agent-acp"),
        "the runtime's command"
    );
    p.config.name = "../etc".into();
    assert!(matches!(materialize(&p), Err(NotMaterialized::Name(_))));
    p.config.name = "ok".into();
    p.config.backend = json!({"type": "teleport"});
    assert_eq!(materialize(&p).unwrap_err(), NotMaterialized::Backend);
}
