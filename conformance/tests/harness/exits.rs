//! The pinned exit-code contract (Known Defect 6, [L1] item 4) and the other launchers ([L1] items 2, 3, 5).

use crate::*;
use buzz_conformance::harness_support::deny_relay::DenyRelay;
use buzz_conformance::harness_support::proc::path_dir_with_buzz_acp;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_exit_code_is_pinned() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    // 0: intentional stop (also pinned by the !shutdown, SIGTERM and reaper tests).
    let mut h = w.spawn(&w.env("echo"));
    w.wait_online().await;
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "intentional");
    // 2: configuration error.
    for (k, v) in [
        ("BUZZ_ACP_AGENTS", "33"),
        ("BUZZ_ACP_RESPOND_TO", "Anyone"),
        ("BUZZ_ACP_RESPOND_TO", "allowlist"),
        (
            "BUZZ_MANAGED_AGENT_START_NONCE",
            "ABCDEF0123456789ABCDEF0123456789",
        ),
        ("BUZZ_ACP_LAZY_POOL", "maybe"),
        ("BUZZ_RELAY_URL", "http://127.0.0.1:1"),
    ] {
        let mut env = w.env("echo");
        env.insert(k.into(), v.into());
        let mut h = w.spawn(&env);
        assert_eq!(h.wait_exit(WAIT).await, Some(2), "config {k}={v}");
    }
    // 3: identity refusal.
    let mut env = w.env("echo");
    env.remove("BUZZ_ACP_AGENT_OWNER");
    assert_eq!(w.spawn(&env).wait_exit(WAIT).await, Some(3), "identity");
    // 4: terminal relay auth denial.
    for prefix in ["restricted:", "blocked:", "auth-required:"] {
        let deny = DenyRelay::start(prefix).await;
        let mut env = w.env("echo");
        env.insert("BUZZ_RELAY_URL".into(), deny.url.clone());
        let tag = AuthTag::mint(&w.owner, &w.agent.public_key().to_hex(), "").unwrap();
        env.insert("BUZZ_AUTH_TAG".into(), tag.to_json());
        let mut h = w.spawn(&env);
        assert_eq!(h.wait_exit(WAIT).await, Some(4), "auth denied {prefix}");
        assert!(deny.auths.load(std::sync::atomic::Ordering::SeqCst) >= 1);
        // The kind 22242 answer carried exactly relay + challenge + the NIP-OA tag.
        let auth = deny.last_auth.lock().unwrap().clone().expect("an AUTH event");
        assert_eq!(auth["kind"], 22242);
        assert_eq!(
            auth["tags"],
            serde_json::json!([
                ["relay", deny.url],
                ["challenge", "stub-challenge"],
                ["auth", tag.owner, "", tag.sig]
            ])
        );
    }
    // 5: all agents dead (a command that cannot start, and one that crashes on every prompt).
    let mut env = w.env("echo");
    env.insert("BUZZ_ACP_AGENT_COMMAND".into(), "/nonexistent/agent".into());
    env.insert("BUZZ_ACP_AGENTS".into(), "2".into());
    env.insert("BUZZ_ACP_MAX_AGENT_FAILURES".into(), "2".into());
    let mut h = w.spawn(&env);
    assert_eq!(h.wait_exit(WAIT).await, Some(5), "agents dead");
    let mut env = w.env("crash");
    env.insert("BUZZ_ACP_MAX_AGENT_FAILURES".into(), "2".into());
    let mut h = w.spawn(&env);
    w.wait_online().await;
    let m1 = w.mention(&w.owner, "c1", "boom 1").await;
    wait_until(WAIT, || (agent_events(&w.log, "prompt").len() == 1).then_some(()))
        .await
        .unwrap();
    h.wait_line(WAIT, "agent slot will respawn").await.unwrap();
    w.mention(&w.owner, "c1", "boom 2").await;
    assert_eq!(h.wait_exit(WAIT).await, Some(5), "crash loop → agents dead");
    assert!(w.replies_to(&m1).is_empty());
    // 6: relay lost.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("ws://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut env = w.env("echo");
    env.insert("BUZZ_RELAY_URL".into(), dead_url);
    env.insert("BUZZ_ACP_RELAY_LOST_AFTER_SECS".into(), "1".into());
    env.insert("BUZZ_ACP_RECONNECT_BASE_MS".into(), "100".into());
    let mut h = w.spawn(&env);
    assert_eq!(h.wait_exit(WAIT).await, Some(6), "relay lost");
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/launch-harness.sh")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn launch_script_refuses_missing_identity_and_execs_the_harness_in_place() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let tmp = tempfile::tempdir().unwrap();
    let (_bin_dir, bin_path) = path_dir_with_buzz_acp(HARNESS);
    let full = w.env("echo");
    let write_env = |name: &str, drop: Option<&str>| {
        let p = tmp.path().join(name);
        let body: String = full
            .iter()
            .filter(|(k, _)| Some(k.as_str()) != drop)
            .map(|(k, v)| format!("{k}='{v}'\n"))
            .collect();
        std::fs::write(&p, body).unwrap();
        p
    };
    for missing in ["BUZZ_PRIVATE_KEY", "BUZZ_RELAY_URL", "BUZZ_ACP_AGENT_OWNER"] {
        let p = write_env(missing, Some(missing));
        let mut c = tokio::process::Command::new("bash");
        c.arg(script())
            .arg(&p)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin_path.display()));
        let out = c.output().await.unwrap();
        assert_ne!(out.status.code(), Some(0), "{missing}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("refusing to launch"), "{missing}: {err}");
        assert!(
            !err.contains("buzz-acp starting"),
            "{missing}: the harness never ran"
        );
    }
    let p = write_env("ok.env", None);
    let mut c = tokio::process::Command::new("bash");
    c.arg(script())
        .arg(&p)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin_path.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut h = HarnessProc::spawn(c);
    w.wait_online().await;
    let exe = std::fs::read_link(format!("/proc/{}/exe", h.pid)).unwrap();
    assert_eq!(
        std::fs::canonicalize(&exe).unwrap(),
        std::fs::canonicalize(HARNESS).unwrap(),
        "the launched PID is the harness itself (exec, not a child)"
    );
    let environ = std::fs::read(format!("/proc/{}/environ", h.pid)).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains("BUZZ_ACP_NO_PRESENCE"));
    h.signal(libc::SIGTERM);
    w.wait_offline().await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "the signal reached the harness");
}

#[test]
fn systemd_unit_example_follows_the_exit_code_contract() {
    let unit = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/buzz-acp.service"),
    )
    .unwrap();
    let lines: Vec<&str> = unit.lines().map(str::trim).collect();
    assert!(lines.contains(&"Restart=on-failure"));
    assert!(!lines.iter().any(|l| l.starts_with("Restart=always")));
    assert!(lines.contains(&"KillSignal=SIGTERM"));
    assert!(
        lines.contains(&"TimeoutStopSec=60"),
        "equal to the default shutdown budget"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ExecStart=") && l.contains("launch-harness.sh"))
    );
}

/// The Buzz relay's own behaviour (wire-facts §2): the challenge arrives when
/// the socket opens. The harness answers it with a verifying kind 22242 event
/// carrying the NIP-OA tag, subscribes, goes `online`, and on SIGTERM goes
/// `offline` and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_that_challenges_on_open_is_answered_and_served() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let relay = DenyRelay::accepting().await;
    let mut env = w.env("echo");
    env.insert("BUZZ_RELAY_URL".into(), relay.url.clone());
    let tag = AuthTag::mint(&w.owner, &w.agent.public_key().to_hex(), "").unwrap();
    env.insert("BUZZ_AUTH_TAG".into(), tag.to_json());
    let mut h = w.spawn(&env);
    let presence = |content: &str| {
        relay
            .events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == 20001 && e["content"] == content)
    };
    let online = wait_until(WAIT, || presence("online").then_some(())).await;
    assert!(
        online.is_some(),
        "no online presence; harness stderr:\n{}",
        h.stderr()
    );
    let auth = relay.last_auth.lock().unwrap().clone().expect("an AUTH event");
    assert_eq!(auth["pubkey"], w.agent.public_key().to_hex());
    assert!(
        auth["tags"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(["auth", tag.owner, "", tag.sig])),
        "the AUTH answer carries the NIP-OA tag: {auth}"
    );
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
    assert!(presence("offline"), "offline published before exit");
}
