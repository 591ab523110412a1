//! Stop then Start on the page within one second (issue 30 item 8): the
//! stop's `offline` and the new run's `online` can carry the same
//! `created_at` second, and the page's dot must follow the run, never the
//! arrival. The embedded relay and the built-in echo agent make a round fast.

use super::*;
use buzz_conformance::ui_support::wait_until;

/// How many Stop-then-Start rounds.
const ROUNDS: usize = 20;

#[test]
fn ui_stop_then_start_within_a_second_shows_online_every_time() {
    let mut s = setup();
    s.envs.push((
        "BUZZ_ACP_BIN".to_string(),
        env!("CARGO_BIN_EXE_buzz-acp-under-test").to_string(),
    ));
    let ui = s.ui();
    let r = ui.call(
        "POST",
        "/api/agents",
        Some(r#"{"name":"quick","relay_url":"","agent_command":"builtin:echo"}"#),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let agent = || ui.call("GET", "/api/agents/quick", None).json();
    let start = || {
        let r = ui.call("POST", "/api/agents/quick/start", None);
        assert_eq!(r.status, 202, "{}", r.body);
        // The Start ends (its `online` noted, or its failure recorded).
        assert!(
            wait_until(Duration::from_secs(60), || agent()["busy"] == false),
            "the Start did not end: {}",
            ui.stderr_text()
        );
    };
    start();
    for round in 0..ROUNDS {
        let a = agent();
        assert!(
            wait_until(Duration::from_secs(1), || agent()["presence"] == "online"),
            "round {round}: the dot is {} a second after the Start ended: {a}",
            agent()["presence"]
        );
        let r = ui.call("POST", "/api/agents/quick/stop", None);
        assert_eq!(r.status, 200, "round {round}: {}", r.body);
        // At once: the stop returns once the second of its `!shutdown` is
        // over, so the new run's `online` can share the `offline`'s second.
        start();
    }
    assert!(
        wait_until(Duration::from_secs(1), || agent()["presence"] == "online"),
        "after the last round the dot is {}",
        agent()["presence"]
    );
    let r = ui.call("POST", "/api/agents/quick/stop", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let out = launcher(Path::new(BIN), &s.home, &["relay", "stop"], &s.envs);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
