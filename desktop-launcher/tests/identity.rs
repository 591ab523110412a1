//! "Is this process ours" through the real binary (review b30b1a0 findings
//! 1 and 5): a recorded pid that names another state dir's relay or an
//! unrelated process is never signalled; the demo's cleanup signals only a
//! harness whose recorded identity verifies; only the relay that bound the
//! port is recorded; concurrent first uses start one relay.

mod common;

use common::*;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

/// Finding 5 (a): state dir A's `relay.json` names state dir B's live
/// relay (pid reuse after a reboot, or a copied file). A's next use starts
/// its own relay and B's keeps running.
#[test]
fn another_state_dirs_relay_behind_a_recorded_pid_is_never_signalled() {
    let tmp = tempfile::tempdir().unwrap();
    let b = home_with_agent(&tmp.path().join("b"), "b1");
    let _stop_b = StopRelay(&b);
    let o = run(&b, &["status", "--listen", "0"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let b_state = relay_state(&b);
    let b_pid = b_state["pid"].as_u64().unwrap() as u32;
    assert_eq!(relays_of(&b), [b_pid]);

    let a = home_with_agent(&tmp.path().join("a"), "a1");
    let _stop_a = StopRelay(&a);
    let a_port = relay_state(&a)["port"].as_u64().unwrap();
    // Once as an older launcher wrote it (a bare pid), once as a full copy
    // of B's record (its identity verifies: only the data dir says whose it is).
    let mut copied = b_state.clone();
    copied["port"] = a_port.into();
    for record in [serde_json::json!({"port": a_port, "pid": b_pid}), copied] {
        std::fs::write(a.join("relay.json"), record.to_string()).unwrap();
        let o = run(&a, &["status", "--listen", "0"], &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!(
                "recorded pid {b_pid} was stale (not this state dir's relay: left alone)"
            )),
            "{}",
            stderr(&o)
        );
        assert_eq!(relays_of(&b), [b_pid], "B's relay was signalled");
        let a_pid = relay_state(&a)["pid"].as_u64().unwrap() as u32;
        assert_ne!(a_pid, b_pid);
        assert_eq!(relays_of(&a), [a_pid]);
        let o = run(&a, &["relay", "stop"], &[]);
        assert_eq!(stdout(&o).trim(), format!("relay stopped (pid {a_pid})"));
        assert!(wait_until(Duration::from_secs(10), || relays_of(&a).is_empty()));
    }
    // `relay stop` in A with B's pid recorded signals nothing either.
    std::fs::write(
        a.join("relay.json"),
        serde_json::json!({"port": a_port, "pid": b_pid}).to_string(),
    )
    .unwrap();
    let o = run(&a, &["relay", "stop"], &[]);
    assert_eq!(stdout(&o).trim(), "relay not running");
    assert_eq!(relays_of(&b), [b_pid]);
    // B's relay is still the one B recorded: had anything signalled it, it
    // would have ended (it exits on SIGTERM) and B would find it gone.
    let o = run(&b, &["relay", "stop"], &[]);
    assert_eq!(stdout(&o).trim(), format!("relay stopped (pid {b_pid})"));
}

/// Finding 5 (b): a reused `--state-dir` whose bookkeeping names a pid
/// that now leads an unrelated process group, and a demo that fails (the
/// relay port is taken): the cleanup leaves that group alone.
#[test]
fn a_failed_demo_never_signals_a_stale_local_pid() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let home = home_with_agent(&state, "demo");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    std::fs::write(
        home.join("relay.json"),
        serde_json::json!({"port": port}).to_string(),
    )
    .unwrap();
    // The harness is found (and built) first: the bystander must outlive the build.
    let h = harness();
    let mut bystander = Command::new("sleep").arg("600").process_group(0).spawn().unwrap();
    std::fs::write(
        home.join("deploy/demo.json"),
        serde_json::json!({"local_pid": bystander.id()}).to_string(),
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["demo", "--state-dir"])
        .arg(&state)
        .env("BUZZ_ACP_BIN", &h)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains("demo failed at step"), "{}", stdout(&o));
    let alive = bystander.try_wait().unwrap().is_none();
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(alive, "the demo's cleanup signalled an unrelated process group");
    drop(taken);
}

/// Finding 1: a relay that did not bind the port is never recorded, and
/// the port's other listener does not count as "started".
#[test]
fn a_relay_that_lost_the_port_is_not_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let home = home_with_agent(tmp.path(), "a1");
    let _stop = StopRelay(&home);
    let port = relay_state(&home)["port"].as_u64().unwrap() as u16;
    let stranger = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let o = run(&home, &["status", "--listen", "0"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "the embedded relay exited (exit status: 1) before it served port {port}"
        )),
        "{}",
        stderr(&o)
    );
    assert!(relay_state(&home)["pid"].is_null(), "{}", relay_state(&home));
    let o = run(&home, &["relay", "status"], &[]);
    assert!(stdout(&o).contains("not running"), "{}", stdout(&o));
    drop(stranger);
}

/// Finding 1: first uses at the same time in a fresh state dir (several
/// commands, or Start plus chat on the page) start exactly one relay, and
/// the recorded one is the one serving.
#[test]
fn concurrent_first_uses_start_one_relay_and_record_it() {
    let tmp = tempfile::tempdir().unwrap();
    let home = home_with_agent(tmp.path(), "a1");
    let _stop = StopRelay(&home);
    let kids: Vec<_> = (0..4)
        .map(|_| {
            Command::new(BIN)
                .args(["status", "--listen", "0"])
                .env("BUZZ_LAUNCHER_HOME", &home)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = kids.into_iter().map(|k| k.wait_with_output().unwrap()).collect();
    for o in &outs {
        assert!(o.status.success(), "{}", stderr(o));
    }
    let started = outs
        .iter()
        .filter(|o| stderr(o).contains("embedded relay: started pid"))
        .count();
    assert_eq!(started, 1, "{:?}", outs.iter().map(stderr).collect::<Vec<_>>());
    let pid = relay_state(&home)["pid"].as_u64().unwrap() as u32;
    assert_eq!(relays_of(&home), [pid]);
    let o = run(&home, &["relay", "status"], &[]);
    assert!(
        stdout(&o).contains(&format!("running (pid {pid})")),
        "{}",
        stdout(&o)
    );
}
