//! The probe endpoint and the `started` hook (issue 49 items 1 and 2;
//! `buzz_contract::probe`): the real `buzz-acp` opens `BUZZ_ACP_PROBE_ADDR`
//! only once its startup checks passed, answers `/readyz` with `200` only
//! while its relay session is live, and `buzz-acp started` waits for the
//! first and fails when it never comes.

use crate::*;

/// A loopback port nothing listens on (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The status code of `GET path` on `port`, or `None` when nothing answers.
async fn status(port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    out.get(9..12)?.parse().ok()
}

/// Polls `/readyz` until it answers `want`.
async fn readyz_becomes(port: u16, want: u16) {
    let end = Instant::now() + WAIT;
    while status(port, "/readyz").await != Some(want) {
        assert!(Instant::now() < end, "/readyz never answered {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `buzz-acp started --wait <secs>` with the harness's environment.
fn hook(env: &HashMap<String, String>, wait_secs: u64) -> HarnessProc {
    let mut c = harness_command(HARNESS, env);
    c.args(["started", "--wait", &wait_secs.to_string()]);
    HarnessProc::spawn(c)
}

/// Rule: the hook ends once the harness is past its startup checks; `/readyz`
/// is `200` exactly while the relay session is live (red with the flag never
/// set, or never cleared on `Down`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_endpoint_opens_after_the_checks_and_ready_follows_the_relay() {
    let _g = SERIAL.lock().await;
    let mut w = World::new().await;
    let port = free_port();
    let env = w.env_with("echo", &[("BUZZ_ACP_PROBE_ADDR", &format!("0.0.0.0:{port}"))]);
    // The hook starts first, as the kubelet may run it: it waits for the harness.
    let mut started = hook(&env, 20);
    let mut h = w.start(&env).await;
    assert_eq!(started.wait_exit(WAIT).await, Some(0), "{}", started.stderr());
    assert_eq!(status(port, "/startz").await, Some(200));
    readyz_becomes(port, 200).await;
    assert_eq!(status(port, "/").await, Some(404));

    w.relay.stop();
    readyz_becomes(port, 503).await;
    assert_eq!(status(port, "/startz").await, Some(200), "still started");
    w.relay.restart().await;
    readyz_becomes(port, 200).await;

    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
    assert_eq!(status(port, "/readyz").await, None, "gone with the harness");
}

/// Rule: a harness that fails a startup check never opens the endpoint, so
/// the hook fails at its bound (in a pod the harness's exit ends it sooner),
/// naming why; without the address the hook refuses to guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_startup_check_never_opens_it_and_the_hook_fails() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let port = free_port();
    let env = w.env_with(
        "echo",
        &[
            ("BUZZ_ACP_PROBE_ADDR", &format!("127.0.0.1:{port}")),
            ("BUZZ_ACP_AGENT_COMMAND", "/nonexistent/agent"),
        ],
    );
    let mut started = hook(&env, 2);
    let mut h = w.spawn(&env);
    assert_eq!(h.wait_exit(WAIT).await, Some(2));
    assert_eq!(started.wait_exit(WAIT).await, Some(1));
    assert!(
        started
            .stderr()
            .contains("did not pass its startup checks within 2 s"),
        "{}",
        started.stderr()
    );
    assert_eq!(status(port, "/startz").await, None, "nothing ever listened");

    let mut bare = w.env("echo");
    bare.remove("BUZZ_ACP_PROBE_ADDR");
    let mut started = hook(&bare, 2);
    assert_eq!(started.wait_exit(WAIT).await, Some(2));
    assert!(started.stderr().contains("BUZZ_ACP_PROBE_ADDR is not set"));
}

/// Rule: an address that is malformed or taken is a configuration error
/// (exit 2) before anything connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_probe_address_that_cannot_be_used_is_a_config_error() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    for addr in ["localhost:4785", "4785", taken_addr.as_str()] {
        let mut h = w.spawn(&w.env_with("echo", &[("BUZZ_ACP_PROBE_ADDR", addr)]));
        assert_eq!(h.wait_exit(WAIT).await, Some(2), "{addr}: {}", h.stderr());
        assert!(h.stderr().contains("BUZZ_ACP_PROBE_ADDR"), "{}", h.stderr());
    }
    assert!(w.obs.presence_of(&w.agent).is_empty(), "never online");
}
