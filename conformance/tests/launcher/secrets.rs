//! Launcher conformance, case 5: echoed secrets come back redacted (spec §Provider Output Is Untrusted, Known Defect 3).

use super::*;

// ---- 5. echoed secrets -----------------------------------------------------------

fn echo_world(behaviour: &str) -> (World, Vec<String>) {
    let w = World::new(behaviour);
    w.install(fake(), behaviour, None);
    let mut rec = w.store.agent("agent").unwrap();
    rec.env
        .insert("USER_SECRET".into(), "env-canary-value-1234".into());
    // The LLM provider reaches only launch.env (GOOSE_PROVIDER): a launch-only secret.
    rec.provider = Some("launch-only-canary-5678".into());
    w.store.save_agent(&rec).unwrap();
    let keys = w.store.agent_keys("agent").unwrap();
    let hex = keys.secret_key().to_secret_hex();
    std::fs::write(w.workdir.join("fake-agent-hex"), &hex).unwrap();
    let nsec = w.store.identity("agent").unwrap().nsec;
    (
        w,
        vec![
            nsec,
            hex,
            "env-canary-value-1234".into(),
            "launch-only-canary-5678".into(),
            "sprt_tok_abc123".into(),
        ],
    )
}

fn assert_redacted(behaviour: &str) {
    let (w, secrets) = echo_world(behaviour);
    let (r, lines) = start(&w);
    let e = err_text(r);
    let stored = w.store.deploy_state("agent").unwrap().last_error.unwrap();
    // The bookkeeping file (where last_error is persisted); the record itself
    // holds the user's env layer and model by design.
    let state_file = std::fs::read_to_string(w.root().join("state/deploy/agent.json")).unwrap();
    for out in [&e, &stored, &lines.join("\n"), &state_file] {
        for s in &secrets {
            assert!(!out.contains(s.as_str()), "{behaviour}: secret leaked into {out}");
        }
    }
    assert!(e.contains("[REDACTED]"), "{behaviour}: {e}");
    assert!(
        lines.iter().any(|l| l.contains("[REDACTED]")),
        "{behaviour}: {lines:?}"
    );
}

#[test]
fn echoed_secrets_in_band_error_and_status_lines_are_redacted() {
    assert_redacted("echo");
}

#[test]
fn echoed_secrets_on_stderr_of_a_failed_exit_are_redacted() {
    assert_redacted("echoexit");
}
