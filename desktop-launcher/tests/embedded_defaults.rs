//! The `buzz-launcher` binary on embedded defaults (issue "First run on
//! embedded defaults"): `demo` end to end in a temp dir (exit code and
//! printed steps), `demo` without a harness (the exact build command),
//! `relay` refusing a public address and naming a port in use, `agent
//! create` without `--relay`, and the embedded relay started in the
//! background, its stale pid replaced (never signalled), and `relay stop`.

mod common;

use common::{BIN, StopRelay, harness, run, stderr, stdout};
use std::process::Command;

#[test]
fn demo_runs_every_step_in_a_temp_dir_and_exits_0() {
    let h = harness();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let o = Command::new(BIN)
        .args(["demo", "--state-dir"])
        .arg(&state)
        .env("BUZZ_ACP_BIN", &h)
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    for step in [
        "[0/9] prereq   ok",
        "[1/9] init     ok",
        "[2/9] create   ok",
        "[3/9] relay    ok",
        "[4/9] start    ok",
        "[5/9] chat     ok",
        "[6/9] status   ok",
        "[7/9] stop     ok",
        "[8/9] status   ok",
        "[9/9] cleanup  ok",
        "demo ok: every step succeeded",
    ] {
        assert!(out.contains(step), "missing `{step}` in:\n{out}");
    }
    assert!(out.contains("reply: hello from the buzz demo"), "{out}");
    // `status` hears the local agent's presence, or names its verified harness `running`.
    assert!(
        out.contains("demo online") || out.contains("demo running"),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("demo_total_ms ")), "{out}");
    // The relay was stopped at the end.
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("relay.json")).unwrap()).unwrap();
    assert!(st["pid"].is_null(), "{st}");
    // Canary: no secret (owner key, agent nsec, auth tag signature) in the
    // demo's output, its step logs, the harness and relay logs or the event log.
    let nsec = std::fs::read_to_string(state.join("keys/demo.nsec")).unwrap();
    let owner_key = std::fs::read_to_string(state.join("owner.key")).unwrap();
    let tag: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(state.join("keys/demo.auth")).unwrap()).unwrap();
    let mut texts = vec![out.clone(), stderr(&o)];
    for dir in [state.join("logs"), state.join("relay")] {
        for e in std::fs::read_dir(&dir).unwrap() {
            texts.push(String::from_utf8_lossy(&std::fs::read(e.unwrap().path()).unwrap()).into_owned());
        }
    }
    assert!(texts.len() >= 10, "step logs, harness log, relay log, event log");
    for secret in [nsec.trim(), owner_key.trim(), tag[3].as_str()] {
        assert!(secret.len() >= 60);
        for t in &texts {
            assert!(!t.contains(secret), "a secret leaked");
            assert!(!t.contains(&secret[..24]), "a secret fragment leaked");
        }
    }
    // A second run on the same state dir, at once, reuses the owner and the
    // agent. The relay stores kind 9 and the harness subscribes from its
    // start second: the first run's `stop` returns only once the second of
    // its `!shutdown` is over, so that command cannot stop this run.
    let o = Command::new(BIN)
        .args(["demo", "--state-dir"])
        .arg(&state)
        .env("BUZZ_ACP_BIN", &h)
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("(existing)") && out.contains("(existing, built-in echo agent)"),
        "{out}"
    );
}

#[test]
fn demo_without_a_harness_names_the_build_command_and_fails() {
    let tmp = tempfile::tempdir().unwrap();
    // A copy of the launcher alone in a directory, with no buzz-acp beside it or on PATH.
    let lone = tmp.path().join("bin");
    std::fs::create_dir(&lone).unwrap();
    let exe = lone.join("buzz-launcher");
    std::fs::copy(BIN, &exe).unwrap();
    let o = Command::new(&exe)
        .args(["demo", "--state-dir"])
        .arg(tmp.path().join("state"))
        .env_remove("BUZZ_ACP_BIN")
        .env("PATH", &lone)
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("prereq   FAILED"), "{out}");
    assert!(
        out.contains("cargo build --release -p buzz-acp -p desktop-launcher"),
        "{out}"
    );
    assert!(
        out.contains("https://sh.rustup.rs"),
        "no cargo on this PATH: {out}"
    );
    assert!(out.contains("demo failed at step `prereq`"), "{out}");
}

#[test]
fn relay_refuses_a_public_address_without_the_flag_and_names_a_port_in_use() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();
    assert!(run(home, &["init"], &[]).status.success());
    let o = run(home, &["relay", "--listen", "0.0.0.0:0"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not a loopback address; pass --allow-public"),
        "{}",
        stderr(&o)
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let o = run(home, &["relay", "--listen", &format!("127.0.0.1:{port}")], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!("port {port} is already in use")),
        "{}",
        stderr(&o)
    );
    // A data dir that cannot be created.
    let file = home.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let bad = file.join("data");
    let o = run(
        home,
        &[
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--data",
            bad.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!(
            "the relay data directory {} is not writable",
            bad.display()
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn agents_default_to_the_embedded_relay_which_starts_in_the_background_and_replaces_a_stale_pid() {
    let tmp = tempfile::tempdir().unwrap();
    let home = &tmp.path().join("home");
    assert!(run(home, &["init"], &[]).status.success());
    let _stop = StopRelay(home);
    let o = run(home, &["agent", "create", "a1", "--agent", "echo"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.join("agents/a1.json")).unwrap()).unwrap();
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.join("relay.json")).unwrap()).unwrap();
    let port = st["port"].as_u64().unwrap();
    assert_eq!(rec["relay_url"], format!("ws://127.0.0.1:{port}"));
    assert_eq!(rec["agent_command"], "builtin:echo");

    // A stale pid is replaced on first use and never signalled. The stale
    // pid is a real `buzz-launcher relay` (another state dir's): its argv is
    // what this state dir's relay would have, so only its recorded identity
    // tells them apart (review b30b1a0 finding 5).
    let other = tmp.path().join("other");
    assert!(run(&other, &["init"], &[]).status.success());
    let _stop_other = StopRelay(&other);
    assert!(
        run(&other, &["agent", "create", "b1", "--agent", "echo"], &[])
            .status
            .success()
    );
    let o = run(&other, &["status", "--listen", "0"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let foreign: serde_json::Value =
        serde_json::from_slice(&std::fs::read(other.join("relay.json")).unwrap()).unwrap();
    let foreign_pid = foreign["pid"].as_u64().unwrap();
    let foreign_alive = || std::path::Path::new(&format!("/proc/{foreign_pid}")).exists();
    std::fs::write(
        home.join("relay.json"),
        serde_json::json!({"port": port, "pid": foreign_pid}).to_string(),
    )
    .unwrap();
    let o = run(home, &["status", "--listen", "1"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("recorded pid {foreign_pid} was stale")),
        "{}",
        stderr(&o)
    );
    assert!(
        foreign_alive(),
        "a foreign process behind a stale pid is never signalled"
    );
    // Had it been signalled, it would have ended by now (it exits on SIGTERM).
    let o = run(&other, &["relay", "stop"], &[]);
    assert_eq!(stdout(&o).trim(), format!("relay stopped (pid {foreign_pid})"));
    let o = run(home, &["relay", "status"], &[]);
    assert!(stdout(&o).contains("running (pid "), "{}", stdout(&o));
    // A second command reuses it.
    let o = run(home, &["status", "--listen", "1"], &[]);
    assert!(!stderr(&o).contains("embedded relay: started"), "{}", stderr(&o));
    let o = run(home, &["relay", "stop"], &[]);
    assert!(stdout(&o).starts_with("relay stopped (pid "), "{}", stdout(&o));
    let o = run(home, &["relay", "status"], &[]);
    assert!(stdout(&o).contains("not running"), "{}", stdout(&o));
    let o = run(home, &["relay", "stop"], &[]);
    assert_eq!(stdout(&o).trim(), "relay not running");
}
