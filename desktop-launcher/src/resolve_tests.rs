//! Unit tests of the launch resolver, named after the spec rules they pin.

use super::*;
use crate::record::{Backend, Persona};
use buzz_contract::keys::pubkey_hex;
use nostr_sdk::{Keys, ToBech32};

struct Fx {
    rec: AgentRecord,
    settings: Settings,
    id: Identity,
}

fn fx() -> Fx {
    let owner = Keys::generate();
    let agent = Keys::generate();
    let pk = pubkey_hex(&agent);
    let tag = AuthTag::mint(&owner, &pk, "").unwrap().to_json();
    let mut rec = AgentRecord::new("scout", &pk, "wss://relay.example.com");
    rec.backend = Backend::Provider {
        id: "kubernetes".into(),
        config: Default::default(),
        path_cache: None,
    };
    Fx {
        rec,
        settings: Settings::default(),
        id: Identity {
            nsec: agent.secret_key().to_bech32().unwrap(),
            auth_tag: Some(tag),
            owner_pubkey: Some(pubkey_hex(&owner)),
            secret_env: BTreeMap::new(),
        },
    }
}

fn resolve(f: &Fx) -> Result<Resolved, ResolveError> {
    resolve_launch(&f.rec, &f.settings, &f.id, Target::Remote)
}

#[test]
fn i1_empty_nsec_is_refused_before_anything_runs() {
    let mut f = fx();
    f.id.nsec = "  ".into();
    assert_eq!(resolve(&f), Err(ResolveError::EmptyKey("scout".into())));
    f.id.nsec = String::new();
    assert_eq!(resolve(&f), Err(ResolveError::EmptyKey("scout".into())));
}

#[test]
fn i1_malformed_or_mismatched_key_is_refused() {
    let mut f = fx();
    f.id.nsec = "nsec1garbage".into();
    assert_eq!(resolve(&f), Err(ResolveError::MalformedKey("scout".into())));
    let mut f = fx();
    f.id.nsec = Keys::generate().secret_key().to_bech32().unwrap();
    assert!(matches!(
        resolve(&f),
        Err(ResolveError::KeyMismatch(_)) | Err(ResolveError::BadAuthTag(..))
    ));
}

#[test]
fn owner_rule_missing_owner_and_tag_is_refused() {
    let mut f = fx();
    f.id.auth_tag = None;
    f.id.owner_pubkey = None;
    assert_eq!(resolve(&f), Err(ResolveError::NoOwner("scout".into())));
    // Either one suffices.
    let mut f = fx();
    f.id.owner_pubkey = None;
    assert!(
        resolve(&f).unwrap().launch.owner_pubkey.is_some(),
        "owner from the tag"
    );
    let mut f = fx();
    f.id.auth_tag = None;
    assert!(resolve(&f).is_ok());
}

#[test]
fn owner_pubkey_is_emitted_in_launch() {
    let f = fx();
    let r = resolve(&f).unwrap();
    assert_eq!(r.launch.owner_pubkey, f.id.owner_pubkey);
}

#[test]
fn relay_mesh_provider_is_refused_for_remote_deploy() {
    let mut f = fx();
    f.rec.provider = Some("relay-mesh".into());
    assert_eq!(resolve(&f), Err(ResolveError::RelayMesh("scout".into())));
    // A persona that resolves to relay-mesh is refused too.
    let mut f = fx();
    f.settings.personas.insert(
        "p".into(),
        Persona {
            provider: Some("relay-mesh".into()),
            ..Default::default()
        },
    );
    f.rec.persona = Some("p".into());
    assert_eq!(resolve(&f), Err(ResolveError::RelayMesh("scout".into())));
}

#[test]
fn reserved_keys_are_stripped_from_every_user_layer() {
    let mut f = fx();
    f.settings
        .global_env
        .insert("BUZZ_PRIVATE_KEY".into(), "x".into());
    f.settings.global_env.insert("PATH".into(), "/host/bin".into());
    f.rec.env.insert("BUZZ_ACP_NO_PRESENCE".into(), "1".into());
    f.rec
        .env
        .insert("BUZZ_ACP_EXIT_AFTER_INACTIVITY".into(), "5".into());
    f.rec.env.insert("BUZZ_AUTH_TAG".into(), "x".into());
    f.rec.env.insert("MY_VAR".into(), "ok".into());
    let r = resolve(&f).unwrap();
    for k in [
        "BUZZ_PRIVATE_KEY",
        "PATH",
        "BUZZ_ACP_NO_PRESENCE",
        "BUZZ_ACP_EXIT_AFTER_INACTIVITY",
        "BUZZ_AUTH_TAG",
    ] {
        assert!(
            !r.launch.env.contains_key(k) && !r.user_env.contains_key(k),
            "{k}"
        );
        assert!(!r.launch.policy_env.contains_key(k), "{k}");
    }
    assert_eq!(r.launch.env["MY_VAR"], "ok");
    assert_eq!(r.stripped.len(), 5);
}

#[test]
fn posix_key_validation_refuses_smuggled_keys() {
    let mut f = fx();
    f.rec.env.insert("BUZZ_AUTH_TAG=x".into(), "y".into());
    let e = resolve(&f).unwrap_err();
    assert!(
        matches!(
            e,
            ResolveError::BadEnvKey {
                layer: Layer::Agent,
                ..
            }
        ),
        "{e:?}"
    );
    let mut f = fx();
    f.settings.global_env.insert("A B".into(), "y".into());
    assert!(matches!(
        resolve(&f),
        Err(ResolveError::BadEnvKey {
            layer: Layer::Global,
            ..
        })
    ));
}

#[test]
fn env_layers_global_below_persona_below_agent() {
    let mut f = fx();
    f.settings.global_env.insert("K".into(), "global".into());
    f.settings.global_env.insert("G".into(), "g".into());
    f.settings.personas.insert(
        "p".into(),
        Persona {
            env: [
                ("K".to_string(), "persona".to_string()),
                ("P".to_string(), "p".to_string()),
            ]
            .into(),
            ..Default::default()
        },
    );
    f.rec.persona = Some("p".into());
    let r = resolve(&f).unwrap();
    assert_eq!(r.launch.env["K"], "persona");
    f.rec.env.insert("K".into(), "agent".into());
    let r = resolve(&f).unwrap();
    assert_eq!(r.launch.env["K"], "agent");
    assert_eq!(
        (r.launch.env["G"].as_str(), r.launch.env["P"].as_str()),
        ("g", "p")
    );
    assert_eq!(r.user_env, r.launch.env, "no runtime vars without a model");
}

#[test]
fn runtime_metadata_goose_gets_model_and_provider_vars() {
    let mut f = fx();
    f.rec.model = Some("gpt-x".into());
    f.rec.provider = Some("openai".into());
    let r = resolve(&f).unwrap();
    assert_eq!(r.launch.command, "goose");
    assert_eq!(r.launch.args, vec!["acp"]);
    assert_eq!(r.launch.env["GOOSE_MODEL"], "gpt-x");
    assert_eq!(r.launch.env["GOOSE_PROVIDER"], "openai");
    assert_eq!(r.launch.policy_env["GOOSE_MODE"], "auto");
    assert!(!r.launch.env.contains_key("BUZZ_AGENT_PROVIDER"));
}

#[test]
fn runtime_metadata_provider_locked_runtime_gets_no_provider_var() {
    let mut f = fx();
    f.rec.agent_command = Some("claude-agent-acp".into());
    f.rec.model = Some("opus".into());
    f.rec.provider = Some("anthropic".into());
    let r = resolve(&f).unwrap();
    assert!(r.launch.env.is_empty(), "{:?}", r.launch.env);
    assert_eq!(r.launch.policy_env["BUZZ_ACP_MODEL"], "opus");
    assert!(!r.launch.policy_env.contains_key("GOOSE_MODE"));
}

#[test]
fn runtime_metadata_buzz_agent_vars_and_mcp_hooks() {
    let mut f = fx();
    f.rec.agent_command = Some("buzz-agent".into());
    f.rec.model = Some("m".into());
    f.rec.provider = Some("p".into());
    let r = resolve(&f).unwrap();
    assert_eq!(r.launch.env["BUZZ_AGENT_MODEL"], "m");
    assert_eq!(r.launch.env["BUZZ_AGENT_PROVIDER"], "p");
    assert_eq!(r.launch.policy_env["MCP_HOOK_SERVERS"], "*");
    assert!(r.launch.args.is_empty());
}

#[test]
fn user_env_overrides_runtime_metadata_in_tier_two() {
    let mut f = fx();
    f.rec.model = Some("a".into());
    f.rec.env.insert("GOOSE_MODEL".into(), "override".into());
    assert_eq!(resolve(&f).unwrap().launch.env["GOOSE_MODEL"], "override");
}

#[test]
fn command_and_args_fall_back_to_the_persona_definition() {
    let mut f = fx();
    f.settings.personas.insert(
        "p".into(),
        Persona {
            agent_command: Some("codex-acp".into()),
            agent_args: vec!["--fast".into()],
            system_prompt: Some("persona prompt".into()),
            ..Default::default()
        },
    );
    f.rec.persona = Some("p".into());
    f.rec.system_prompt = Some("record prompt".into());
    let r = resolve(&f).unwrap();
    assert_eq!(r.launch.command, "codex-acp");
    assert_eq!(r.launch.args, vec!["--fast"]);
    assert_eq!(
        r.system_prompt.as_deref(),
        Some("persona prompt"),
        "live persona first"
    );
    f.rec.agent_args = vec![" --own ".into(), "".into()];
    assert_eq!(resolve(&f).unwrap().launch.args, vec!["--own"]);
}

#[test]
fn command_must_be_a_name_not_a_host_path() {
    let mut f = fx();
    f.rec.agent_command = Some("/usr/local/bin/goose".into());
    assert_eq!(resolve(&f), Err(ResolveError::BadCommand("scout".into())));
    // Locally a host path is the user's choice.
    let r = resolve_launch(&f.rec, &f.settings, &f.id, Target::Local).unwrap();
    assert_eq!(r.launch.command, "/usr/local/bin/goose");
    let mut f = fx();
    f.rec.agent_args = vec!["a,b".into()];
    assert_eq!(resolve(&f), Err(ResolveError::ArgHasComma("scout".into())));
}

#[test]
fn policy_env_is_exactly_the_spec_list() {
    let mut f = fx();
    f.rec.model = Some("m".into());
    f.rec.system_prompt = Some("be kind".into());
    f.rec.idle_timeout_seconds = Some(900);
    f.rec.max_turn_duration_seconds = Some(7200);
    f.rec.parallelism = Some(3);
    f.rec.turn_timeout_seconds = Some(60);
    f.rec.relay_observer = true;
    f.settings.team_instructions = Some("team".into());
    let r = resolve(&f).unwrap();
    let keys: Vec<&str> = r.launch.policy_env.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        vec![
            "BUZZ_ACP_AGENTS",
            "BUZZ_ACP_IDLE_TIMEOUT",
            "BUZZ_ACP_LAZY_POOL",
            "BUZZ_ACP_MAX_TURN_DURATION",
            "BUZZ_ACP_MODEL",
            "BUZZ_ACP_RELAY_OBSERVER",
            "BUZZ_ACP_SESSION_TITLE",
            "BUZZ_ACP_SYSTEM_PROMPT",
            "BUZZ_ACP_TEAM_INSTRUCTIONS",
            "GOOSE_MODE",
        ]
    );
    assert_eq!(r.launch.policy_env["BUZZ_ACP_LAZY_POOL"], "true");
    assert_eq!(r.launch.policy_env["BUZZ_ACP_RELAY_OBSERVER"], "true");
    assert_eq!(r.launch.policy_env["BUZZ_ACP_AGENTS"], "3");
}

#[test]
fn policy_env_nulls_are_omitted() {
    let r = resolve(&fx()).unwrap();
    for k in [
        "BUZZ_ACP_MODEL",
        "BUZZ_ACP_SYSTEM_PROMPT",
        "BUZZ_ACP_IDLE_TIMEOUT",
        "BUZZ_ACP_MAX_TURN_DURATION",
        "BUZZ_ACP_AGENTS",
        "BUZZ_ACP_TEAM_INSTRUCTIONS",
        "BUZZ_ACP_DEDUP",
        "BUZZ_ACP_MULTIPLE_EVENT_HANDLING",
        "BUZZ_MANAGED_AGENT",
    ] {
        assert!(!r.launch.policy_env.contains_key(k), "{k}");
    }
}

#[test]
fn launch_data_is_computed_from_record_and_config_alone() {
    // The launcher's own environment must not leak into launch data.
    let f = fx();
    let before = resolve(&f).unwrap();
    // SAFETY: single-threaded mutation of a variable nothing else in this crate's tests reads.
    unsafe { std::env::set_var("GOOSE_MODE", "manual") };
    let after = resolve(&f).unwrap();
    unsafe { std::env::remove_var("GOOSE_MODE") };
    assert_eq!(before, after);
    assert_eq!(after.launch.policy_env["GOOSE_MODE"], "auto");
}

#[test]
fn session_title_drops_control_chars_and_caps_at_80() {
    assert_eq!(sanitize_session_title("a\u{0}b\nc\u{7f}d"), "abcd");
    let long = "é".repeat(100);
    assert_eq!(sanitize_session_title(&long).chars().count(), 80);
    let mut f = fx();
    f.rec.display_name = Some("Scout\u{0} one".into());
    assert_eq!(
        resolve(&f).unwrap().launch.policy_env["BUZZ_ACP_SESSION_TITLE"],
        "Scout one"
    );
}

#[test]
fn respond_to_gate_is_validated() {
    let mut f = fx();
    f.rec.respond_to = "Anyone".into();
    assert!(matches!(resolve(&f), Err(ResolveError::Gate(..))));
    let mut f = fx();
    f.rec.respond_to = "allowlist".into();
    assert!(matches!(resolve(&f), Err(ResolveError::Gate(..))));
    f.rec.respond_to_allowlist = vec!["A".repeat(64)];
    assert_eq!(resolve(&f).unwrap().respond_to_allowlist, vec!["a".repeat(64)]);
}

#[test]
fn local_spawn_uses_the_same_resolver_with_tier_three_last() {
    let mut f = fx();
    f.rec.backend = Backend::Local;
    f.rec.env.insert("MY".into(), "v".into());
    f.rec.env.insert("BUZZ_ACP_MODEL".into(), "user-override".into());
    f.rec.model = Some("m".into());
    let r = resolve_launch(&f.rec, &f.settings, &f.id, Target::Local).unwrap();
    let env = local_env(&f.rec, &r, &f.id, &"0".repeat(32));
    assert_eq!(env["BUZZ_ACP_MODEL"], "user-override", "tier 2 beats tier 1");
    assert_eq!(env["BUZZ_PRIVATE_KEY"], f.id.nsec);
    assert_eq!(env["NOSTR_PRIVATE_KEY"], f.id.nsec);
    assert_eq!(env["BUZZ_RELAY_URL"], "wss://relay.example.com");
    assert_eq!(env["BUZZ_ACP_AGENT_COMMAND"], "goose");
    assert_eq!(env["BUZZ_ACP_AGENT_ARGS"], "acp");
    assert_eq!(env["BUZZ_ACP_AGENT_OWNER"], f.id.owner_pubkey.clone().unwrap());
    assert_eq!(env["BUZZ_MANAGED_AGENT_START_NONCE"], "0".repeat(32));
    assert!(!env.contains_key("BUZZ_ACP_NO_PRESENCE"));
    // Relay-mesh is a remote-only refusal.
    f.rec.provider = Some("relay-mesh".into());
    assert!(resolve_launch(&f.rec, &f.settings, &f.id, Target::Local).is_ok());
}

#[test]
fn identity_debug_never_prints_the_key() {
    let f = fx();
    let s = format!("{:?}", f.id);
    assert!(!s.contains(&f.id.nsec) && !s.contains("nsec1"), "{s}");
}

#[test]
fn the_builtin_echo_agent_resolves_for_deploys_and_local_starts() {
    let mut f = fx();
    f.rec.agent_command = Some(buzz_contract::env::BUILTIN_ECHO_AGENT.into());
    let r = resolve(&f).unwrap();
    assert_eq!(r.launch.command, "builtin:echo");
    assert!(r.launch.args.is_empty());
    let local = resolve_launch(&f.rec, &f.settings, &f.id, Target::Local).unwrap();
    let env = local_env(&f.rec, &local, &f.id, &"0".repeat(32));
    assert_eq!(env[buzz_contract::env::AGENT_COMMAND], "builtin:echo");
}

#[test]
fn permission_mode_and_policy_are_tier_one_for_both_targets() {
    let mut f = fx();
    f.rec.agent_command = Some("claude-agent-acp".into());
    f.rec.model = Some("opus".into());
    f.rec.permission_mode = Some(" acceptEdits ".into());
    f.rec.permission_policy = Some("ask-owner".into());
    f.rec.permission_policy_others = Some(" ask-owner ".into());
    for target in [Target::Remote, Target::Local] {
        let r = resolve_launch(&f.rec, &f.settings, &f.id, target).unwrap();
        let p = &r.launch.policy_env;
        assert_eq!(p[names::PERMISSION_MODE], "acceptEdits", "{target:?}");
        assert_eq!(p[names::PERMISSION_POLICY], "ask-owner", "{target:?}");
        assert_eq!(p[names::PERMISSION_POLICY_OTHERS], "ask-owner", "{target:?}");
        assert_eq!(p[names::MODEL], "opus", "{target:?}");
        assert!(
            !r.launch.env.contains_key(names::PERMISSION_POLICY),
            "tier 1, not tier 2"
        );
    }
    // The local spawn writes tier 1 first: a user env override still wins.
    f.rec.backend = crate::record::Backend::Local;
    f.rec.env.insert(names::PERMISSION_POLICY.into(), "reject".into());
    let r = resolve_launch(&f.rec, &f.settings, &f.id, Target::Local).unwrap();
    let env = local_env(&f.rec, &r, &f.id, &"0".repeat(32));
    assert_eq!(env[names::PERMISSION_POLICY], "reject");
    assert_eq!(env[names::PERMISSION_MODE], "acceptEdits");
}

#[test]
fn unset_permission_knobs_are_omitted_and_bad_ones_refused() {
    let r = resolve(&fx()).unwrap();
    assert!(!r.launch.policy_env.contains_key(names::PERMISSION_MODE));
    assert!(!r.launch.policy_env.contains_key(names::PERMISSION_POLICY));
    assert!(!r.launch.policy_env.contains_key(names::PERMISSION_POLICY_OTHERS));
    let mut f = fx();
    f.rec.permission_policy_others = Some("always".into());
    assert!(matches!(
        resolve(&f),
        Err(ResolveError::Preset(_, crate::presets::PresetError::BadPolicy))
    ));
    let mut f = fx();
    f.rec.permission_policy = Some("always".into());
    let e = resolve(&f).unwrap_err();
    assert_eq!(
        e,
        ResolveError::Preset("scout".into(), crate::presets::PresetError::BadPolicy)
    );
    assert!(e.to_string().contains("allow, reject, ask-owner"), "{e}");
    let mut f = fx();
    f.rec.permission_mode = Some("two words".into());
    assert!(matches!(
        resolve_launch(&f.rec, &f.settings, &f.id, Target::Local),
        Err(ResolveError::Preset(_, crate::presets::PresetError::BadMode))
    ));
}

#[test]
fn preset_args_come_from_the_preset_table() {
    let mut f = fx();
    f.rec.agent_command = Some("gemini".into());
    assert_eq!(resolve(&f).unwrap().launch.args, vec!["--acp"]);
    f.rec.agent_args = vec!["--own".into()];
    assert_eq!(resolve(&f).unwrap().launch.args, vec!["--own"]);
    let mut f = fx();
    f.rec.agent_command = Some("claude-agent-acp".into());
    let r = resolve(&f).unwrap();
    assert_eq!(
        (r.launch.command.as_str(), r.launch.args.len()),
        ("claude-agent-acp", 0)
    );
    // A record without a command keeps the goose default, args and all.
    let r = resolve(&fx()).unwrap();
    assert_eq!(
        (r.launch.command.as_str(), r.launch.args.clone()),
        ("goose", vec!["acp".to_string()])
    );
}

#[test]
fn the_secret_env_is_the_last_user_layer_with_the_reserved_strip() {
    let mut f = fx();
    f.rec.env.insert("SHARED".into(), "plain".into());
    f.id.secret_env
        .insert("ANTHROPIC_API_KEY".into(), "sk-secret".into());
    f.id.secret_env.insert("SHARED".into(), "secret".into());
    f.id.secret_env.insert("BUZZ_AUTH_TAG".into(), "x".into());
    let r = resolve(&f).unwrap();
    assert_eq!(r.launch.env["ANTHROPIC_API_KEY"], "sk-secret");
    assert_eq!(
        r.user_env["ANTHROPIC_API_KEY"], "sk-secret",
        "env_vars of the deploy"
    );
    assert_eq!(r.launch.env["SHARED"], "secret");
    assert!(!r.launch.env.contains_key("BUZZ_AUTH_TAG"));
    assert_eq!(
        r.stripped,
        vec![Stripped {
            layer: Layer::AgentSecret,
            key: "BUZZ_AUTH_TAG".into(),
            reason: "reserved"
        }]
    );
    let s = format!("{:?}", f.id);
    assert!(s.contains("ANTHROPIC_API_KEY") && !s.contains("sk-secret"), "{s}");
    let mut f = fx();
    f.id.secret_env.insert("A B".into(), "v".into());
    assert!(matches!(
        resolve(&f),
        Err(ResolveError::BadEnvKey {
            layer: Layer::AgentSecret,
            ..
        })
    ));
}
