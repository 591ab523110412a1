//! Launcher conformance, case 7: validation before anything is invoked (I1, owner rule, relay-mesh, I2, Known Defect 8).

use super::*;

// ---- 7. validation: I1, I2, KD8 ---------------------------------------------------------

fn refused_before_invocation(w: &World) -> String {
    let e = err_text(start(w).0);
    assert!(w.calls().is_empty(), "the provider was invoked: {:?}", w.calls());
    e
}

#[test]
fn i1_empty_nsec_is_refused_before_the_provider_runs() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    std::fs::write(w.root().join("state/keys/agent.nsec"), "  \n").unwrap();
    let e = refused_before_invocation(&w);
    assert!(e.contains("private key is empty"), "{e}");
}

#[test]
fn owner_rule_missing_owner_is_refused_before_the_provider_runs() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    std::fs::remove_file(w.root().join("state/owner.key")).unwrap();
    std::fs::remove_file(w.root().join("state/keys/agent.auth")).unwrap();
    let e = refused_before_invocation(&w);
    assert!(e.contains("neither an auth tag nor an owner"), "{e}");
}

#[test]
fn relay_mesh_is_refused_before_the_provider_runs() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    let mut rec = w.store.agent("agent").unwrap();
    rec.provider = Some("relay-mesh".into());
    w.store.save_agent(&rec).unwrap();
    let e = refused_before_invocation(&w);
    assert!(e.contains("relay-mesh"), "{e}");
}

#[test]
fn posix_env_key_is_refused_before_the_provider_runs() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    let mut rec = w.store.agent("agent").unwrap();
    rec.env.insert("BUZZ_AUTH_TAG=x".into(), "y".into());
    w.store.save_agent(&rec).unwrap();
    let e = refused_before_invocation(&w);
    assert!(e.contains("not a POSIX name"), "{e}");
}

#[test]
fn i2_secretish_or_nested_config_is_refused_before_the_provider_runs() {
    for cfg in [
        json!({"api_token": "x"}),
        json!({"nested": {"a": 1}}),
        json!({"ssh_key_path": "/x"}),
    ] {
        let w = World::new("ok");
        w.install(fake(), "ok", None);
        set_config(&w, cfg.clone());
        let e = refused_before_invocation(&w);
        assert!(e.contains("provider_config"), "{cfg}: {e}");
    }
}

#[test]
fn kd8_cleared_numeric_field_is_omitted_and_zero_is_a_number() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    set_config(&w, json!({"inactivity_seconds": "", "namespace": "ns"}));
    start(&w).0.unwrap();
    let deploy = w.calls().into_iter().find(|c| c["op"] == "deploy").unwrap();
    assert_eq!(deploy["provider_config"], json!({"namespace": "ns"}));

    let w = World::new("ok");
    w.install(fake(), "ok", None);
    set_config(&w, json!({"inactivity_seconds": "0"}));
    start(&w).0.unwrap();
    let deploy = w.calls().into_iter().find(|c| c["op"] == "deploy").unwrap();
    assert_eq!(deploy["provider_config"], json!({"inactivity_seconds": 0}));
}

#[test]
fn kd8_non_numeric_value_for_a_numeric_field_sends_no_secret() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    set_config(&w, json!({"inactivity_seconds": "soon"}));
    let e = err_text(start(&w).0);
    assert!(e.contains("must be a number"), "{e}");
    assert!(!w.nsec_was_sent());
}

#[test]
fn strict_mode_refuses_an_unapproved_digest_then_accepts_it_once_approved() {
    let w = World::new("ok");
    let path = w.install(fake(), "ok", None);
    let mut opts = w.options(None);
    opts.gate.strict = true;
    let e = app::start_provider(&w.store, "agent", &opts, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("not approved"), "{e}");
    assert!(w.calls().is_empty());
    let digest = desktop_launcher::gate::stage(&path).unwrap().sha256.clone();
    w.store.approve("ok", &digest).unwrap();
    opts.gate.approvals = w.store.approvals().unwrap();
    app::start_provider(&w.store, "agent", &opts, &mut |_| {}).unwrap();
}

#[test]
fn delete_refuses_a_deployed_agent_without_force() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    start(&w).0.unwrap();
    let e = app::delete(&w.store, "agent", false).unwrap_err().to_string();
    assert!(e.contains("--force-remote-delete"), "{e}");
    app::delete(&w.store, "agent", true).unwrap();
    assert!(matches!(
        w.store.agent("agent"),
        Err(desktop_launcher::store::StoreError::NoAgent(n)) if n == "agent"
    ));
}

/// An owner imported after the agent was created disagrees with the owner in
/// the agent's auth tag: start (and stop) refuse before anything runs or is
/// published; re-minting the tag with the current owner fixes it.
#[test]
fn owner_that_disagrees_with_the_auth_tag_is_refused_until_the_tag_is_reminted() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    std::fs::remove_file(w.root().join("state/owner.key")).unwrap();
    let other = Keys::generate();
    w.store
        .init_owner(Some(&other.secret_key().to_secret_hex()))
        .unwrap();
    let e = refused_before_invocation(&w);
    assert!(
        e.contains("auth tag names owner") && e.contains("agent retag"),
        "{e}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stop = rt
        .block_on(app::stop(&w.store, "agent", Duration::from_secs(1)))
        .unwrap_err();
    assert!(
        matches!(
            stop,
            AppError::Resolve(desktop_launcher::resolve::ResolveError::OwnerMismatch { .. })
        ),
        "{stop}"
    );
    w.store.retag("agent").unwrap();
    start(&w).0.unwrap();
}

/// An owner equal to the agent key is refused.
#[test]
fn owner_equal_to_the_agent_key_is_refused() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    let nsec = w.store.identity("agent").unwrap().nsec;
    std::fs::remove_file(w.root().join("state/owner.key")).unwrap();
    std::fs::remove_file(w.root().join("state/keys/agent.auth")).unwrap();
    w.store.init_owner(Some(&nsec)).unwrap();
    let e = refused_before_invocation(&w);
    assert!(e.contains("an agent cannot own itself"), "{e}");
    assert!(matches!(
        w.store.retag("agent"),
        Err(desktop_launcher::store::StoreError::Mint(_))
    ));
}

/// An edit made while a deploy runs is not lost when the deploy finishes,
/// and the stored digest is the deployed record's, so the drift shows.
#[test]
fn an_edit_during_a_deploy_survives_it() {
    let w = World::new("edit");
    w.install(fake(), "edit", None);
    let record = w.root().join("state/agents/agent.json");
    w.fake_config(&json!({"edit_record": record}));
    let d = start(&w).0.unwrap();
    assert_eq!(d.agent_id, "fake-edit");
    let rec = w.store.agent("agent").unwrap();
    assert_eq!(
        rec.model.as_deref(),
        Some("edited-during-deploy"),
        "the edit was lost"
    );
    let st = w.store.deploy_state("agent").unwrap();
    assert_ne!(st.record_digest.as_deref(), Some(rec.launch_digest().as_str()));
    assert!(matches!(
        rec.backend,
        Backend::Provider {
            path_cache: Some(_),
            ..
        }
    ));
}
