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
    let id = w.store.identity("agent").unwrap();
    let sig = buzz_contract::nip_oa::AuthTag::parse(id.auth_tag.as_deref().unwrap())
        .unwrap()
        .sig;
    (
        w,
        vec![
            id.nsec,
            hex,
            sig,
            "env-canary-value-1234".into(),
            "launch-only-canary-5678".into(),
            "sprt_tok_abc123".into(),
        ],
    )
}

/// Asserts that no substring of 12 or more bytes of any secret (and no
/// shorter secret whole) appears in `out`.
pub(crate) fn assert_no_fragment(what: &str, out: &str, secrets: &[String]) {
    for s in secrets {
        assert!(
            !desktop_launcher::redact::contains_fragment(out, s, desktop_launcher::redact::FRAGMENT_MIN),
            "{what}: a fragment of a secret leaked into:\n{out}"
        );
    }
}

/// Everything the launcher wrote for this world, outside the key files and
/// the record (which holds the user's env layer by design).
fn written_state(w: &World) -> String {
    let mut all = String::new();
    for dir in ["deploy", "logs", "staging"] {
        if let Ok(entries) = std::fs::read_dir(w.root().join("state").join(dir)) {
            for e in entries.flatten() {
                all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    all
}

fn assert_redacted(behaviour: &str) {
    let (w, secrets) = echo_world(behaviour);
    let (r, lines) = start(&w);
    let e = err_text(r);
    let stored = w.store.deploy_state("agent").unwrap().last_error.unwrap();
    // The bookkeeping file (where last_error is persisted); the record itself
    // holds the user's env layer and model by design.
    let state_file = written_state(&w);
    for out in [&e, &stored, &lines.join("\n"), &state_file] {
        assert_no_fragment(behaviour, out, &secrets);
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

/// Secrets placed across every cut the launcher makes in provider output (the
/// 200-character status line, the 1 KiB status window, the 64 KiB stderr
/// cap), at several offsets: no fragment of 12 or more characters of any
/// secret reaches the status lines, the error, or the stored state.
#[test]
fn secrets_cut_at_every_boundary_leave_no_fragment_of_twelve_or_more() {
    for k in [12, 20, 31, 45, 60] {
        let (w, secrets) = echo_world("cut");
        let mut rec = w.store.agent("agent").unwrap();
        rec.env.insert(
            "LONG_SECRET".into(),
            "long-env-canary-0123456789abcdefghijklmnopqrstuvwxyz".into(),
        );
        w.store.save_agent(&rec).unwrap();
        let mut secrets = secrets;
        secrets.push("long-env-canary-0123456789abcdefghijklmnopqrstuvwxyz".into());
        w.fake_config(&json!({"cut_offset": k}));
        let (r, lines) = start(&w);
        let e = err_text(r);
        assert!(e.contains("exited with status 1"), "{e}");
        let what = format!("offset {k}");
        assert_no_fragment(&what, &e, &secrets);
        assert_no_fragment(&what, &lines.join("\n"), &secrets);
        assert_no_fragment(&what, &written_state(&w), &secrets);
        // The cuts were really exercised: status lines were shown and the
        // error carries the tail of the capped stderr.
        assert!(lines.len() >= 2, "{what}: {lines:?}");
        assert!(e.contains("[REDACTED]"), "{what}: {e}");
    }
}
