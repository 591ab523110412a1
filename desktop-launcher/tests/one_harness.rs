//! At most one live local harness per agent key (spec I4, local scope;
//! issue 19 "Hardening" item 1) and the refusals that protect it, through
//! the real `buzz-launcher` binary, the real harness and the embedded relay:
//! a second `start` (after, or at the same time as, the first) is a no-op
//! that says so and exits 0; `delete` refuses an agent whose harness runs
//! (review b30b1a0 finding 9); names that look like a secret are refused.

mod common;

use common::*;
use std::time::Duration;

fn setup(tmp: &tempfile::TempDir) -> std::path::PathBuf {
    let home = tmp.path().join("state");
    assert!(run(&home, &["init"], &[]).status.success());
    let o = run(&home, &["agent", "create", "scout", "--agent", "echo"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    home
}

/// Ends the agent's harnesses when a test ends, even on a failed assertion.
struct KillHarnesses<'a>(&'a std::path::Path, std::path::PathBuf);

impl Drop for KillHarnesses<'_> {
    fn drop(&mut self) {
        kill_all(&processes_of(self.0, &self.1));
    }
}

#[test]
fn a_second_start_of_a_running_local_agent_is_a_no_op_that_says_so() {
    let h = harness();
    let hs = h.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let home = setup(&tmp);
    let _stop = StopRelay(&home);
    let _kill = KillHarnesses(&home, h.clone());
    let env = [("BUZZ_ACP_BIN", hs)];

    let o = run(&home, &["start", "scout", "--wait-online", "60"], &env);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).trim_end().ends_with("scout online"), "{}", stdout(&o));
    let first = processes_of(&home, &h);
    assert_eq!(first.len(), 1, "one harness after the first start: {first:?}");
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.join("deploy/scout.json")).unwrap()).unwrap();
    let run_id = st["generation"].as_str().unwrap().to_string();

    // Again, waiting and not waiting for online: nothing is spawned, exit 0.
    for extra in [&["--wait-online", "60"][..], &["--wait-online", "0"][..]] {
        let mut args = vec!["start", "scout"];
        args.extend_from_slice(extra);
        let o = run(&home, &args, &env);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert_eq!(
            stdout(&o).trim(),
            format!("scout is already running (pid {}, run {run_id})", first[0]),
            "{args:?}"
        );
        assert_eq!(processes_of(&home, &h), first, "{args:?} spawned another harness");
    }

    // delete refuses the running agent without force (finding 9).
    let o = run(&home, &["delete", "scout"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!("has a live local harness (pid {})", first[0])),
        "{}",
        stderr(&o)
    );
    assert!(home.join("agents/scout.json").is_file(), "the record was deleted");

    let o = run(&home, &["stop", "scout", "--wait", "60"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        wait_until(Duration::from_secs(30), || processes_of(&home, &h).is_empty()),
        "the harness did not end after stop"
    );

    // Two starts at once (two launcher processes): one harness.
    let spawn = || {
        std::process::Command::new(BIN)
            .args(["start", "scout", "--wait-online", "60"])
            .env("BUZZ_LAUNCHER_HOME", &home)
            .env("BUZZ_ACP_BIN", hs)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    for o in &outs {
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(o), stderr(o));
    }
    let said_already = outs
        .iter()
        .filter(|o| stdout(o).contains("scout is already running (pid "))
        .count();
    assert_eq!(
        said_already,
        1,
        "{:?}",
        outs.iter().map(stdout).collect::<Vec<_>>()
    );
    assert_eq!(processes_of(&home, &h).len(), 1, "two concurrent starts");
    let o = run(&home, &["stop", "scout", "--wait", "60"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Once stopped, delete needs no force.
    assert!(wait_until(Duration::from_secs(30), || processes_of(&home, &h).is_empty()));
    let o = run(&home, &["delete", "scout"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn names_and_display_names_that_hold_a_key_are_refused_and_never_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let home = setup(&tmp);
    let owner_nsec = std::fs::read_to_string(home.join("owner.key")).unwrap();
    let owner_nsec = owner_nsec.trim();
    let agent_nsec = std::fs::read_to_string(home.join("keys/scout.nsec")).unwrap();
    let agent_nsec = agent_nsec.trim();
    let hex = "ab".repeat(32);
    // (what the attempt is, its argv): the label, never the argv, is printed.
    let attempts: Vec<(&str, Vec<String>)> = vec![
        // The owner's nsec as a name: a valid file name, and a secret.
        (
            "the owner's nsec as a name",
            vec!["agent".into(), "create".into(), owner_nsec.into()],
        ),
        (
            "64 hex digits as a name",
            vec!["agent".into(), "create".into(), hex.clone()],
        ),
        (
            "the agent's nsec in a display name",
            vec![
                "agent".into(),
                "create".into(),
                "other".into(),
                "--display-name".into(),
                format!("my {agent_nsec}"),
            ],
        ),
        (
            "64 hex digits as an edited display name",
            vec![
                "agent".into(),
                "edit".into(),
                "scout".into(),
                "--display-name".into(),
                hex.to_ascii_uppercase(),
            ],
        ),
    ];
    for (what, args) in &attempts {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(&home, &argv, &[]);
        assert_eq!(o.status.code(), Some(1), "{what} was accepted");
        let err = stderr(&o);
        assert!(err.contains("looks like a secret"), "{err}");
        for s in [owner_nsec, agent_nsec, hex.as_str()] {
            assert!(
                !err.contains(s) && !stdout(&o).contains(s),
                "the refusal echoes the secret"
            );
        }
    }
    let o = run(&home, &["agent", "list"], &[]);
    assert!(o.status.success());
    let list = stdout(&o);
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(list.starts_with("scout\t"), "{list}");
    for s in [owner_nsec, agent_nsec] {
        assert!(!list.contains(s));
    }
    // No file is named after the refused values.
    for dir in ["agents", "keys", "deploy", "logs"] {
        for e in std::fs::read_dir(home.join(dir)).unwrap() {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(!n.contains(owner_nsec) && !n.contains(&hex), "{dir}/{n}");
        }
    }
}
