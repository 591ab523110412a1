//! Issue 24 items 1 and 2, through the real `buzz-launcher` binary, the
//! real harness and the embedded relay: every wait says what it waits for
//! and ends early when the answer is known, and an agent that cannot start
//! says why. One test per mistake: its exact message, its exit code and a
//! generous bound on its wall time ("answers within 5 s"), never a benchmark.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// "Answers at once": a generous bound for a command that waits for nothing.
const AT_ONCE: Duration = Duration::from_secs(5);

/// Runs the launcher and times it.
fn timed(home: &Path, args: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    let t = Instant::now();
    let o = run(home, args, env);
    (o, t.elapsed())
}

fn last_line(s: &str) -> String {
    s.lines().last().unwrap_or_default().to_string()
}

/// The embedded relay's URL of a state dir.
fn relay_url(home: &Path) -> String {
    let o = run(home, &["relay", "status"], &[]);
    stdout(&o)
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

/// Ends the agent's harnesses and the relay when a test ends.
struct Cleanup {
    home: PathBuf,
    harness: Option<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(h) = &self.harness {
            kill_all(&processes_of(&self.home, h));
        }
        let _ = run(&self.home, &["relay", "stop"], &[]);
    }
}

fn setup(tmp: &tempfile::TempDir, harness: Option<PathBuf>) -> (PathBuf, Cleanup) {
    let home = home_with_agent(&tmp.path().join("state"), "scout");
    let cleanup = Cleanup {
        home: home.clone(),
        harness,
    };
    (home, cleanup)
}

/// The agent's bookkeeping (`deploy/scout.json`).
fn deploy_state(home: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(home.join("deploy/scout.json")).unwrap()).unwrap()
}

/// The recorded pid of the agent's harness.
fn harness_pid(home: &Path) -> u32 {
    deploy_state(home)["local_pid"].as_u64().unwrap() as u32
}

/// The agent's row in a `status` answer.
fn status_row(o: &Output) -> String {
    stdout(o)
        .lines()
        .find(|l| l.starts_with("scout\t"))
        .unwrap()
        .to_string()
}

/// `agent edit scout ARGS`, which must succeed.
fn edit(home: &Path, args: &[&str]) {
    let mut all = vec!["agent", "edit", "scout"];
    all.extend_from_slice(args);
    let o = run(home, &all, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Starts the echo agent on the harness `hs` and waits for it to be online.
fn start_echo(home: &Path, hs: &str) {
    let o = run(
        home,
        &["start", "scout", "--wait-online", "60"],
        &[("BUZZ_ACP_BIN", hs)],
    );
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(last_line(&stdout(&o)), "scout online");
}

/// [`setup`] on the real harness, with `scout` started and online; the
/// state dir and the harness.
fn setup_online(tmp: &tempfile::TempDir) -> (PathBuf, PathBuf, Cleanup) {
    let h = harness();
    let (home, c) = setup(tmp, Some(h.clone()));
    start_echo(&home, h.to_str().unwrap());
    (home, h, c)
}

#[test]
fn chat_refuses_empty_text_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, _c) = setup(&tmp, None);
    for text in ["", "  \n"] {
        let (o, took) = timed(&home, &["chat", "scout", text], &[]);
        assert_eq!(o.status.code(), Some(1));
        assert_eq!(
            last_line(&stderr(&o)),
            "error: nothing to send: the message for `scout` is empty; give its text, e.g. `buzz-launcher chat scout \"hello\"`"
        );
        assert!(took < AT_ONCE, "{took:?}");
    }
}

/// Never started here, nothing answers on the relay: no 300 s of silence.
#[test]
fn chat_to_a_never_started_agent_fails_within_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, _c) = setup(&tmp, None);
    let (o, took) = timed(&home, &["chat", "scout", "hello"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let url = relay_url(&home);
    assert_eq!(
        last_line(&stderr(&o)),
        format!(
            "error: no harness of agent `scout` was started here, and none answered on {url}: \
             no 👀 reaction and no presence within 3s; start it with `buzz-launcher start scout`"
        )
    );
    assert!(
        stderr(&o).contains("scout: sending; waiting up to 300s for it to queue the message (👀) and reply"),
        "{}",
        stderr(&o)
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
}

/// A harness that was killed: chat and stop answer at once with how it ended,
/// and status shows it offline with the same reason — never `never seen … deployed`.
#[test]
fn a_dead_harness_is_named_by_chat_stop_and_status_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, h, _c) = setup_online(&tmp);
    kill_all(&[harness_pid(&home)]);
    assert!(wait_until(Duration::from_secs(10), || processes_of(&home, &h).is_empty()));
    let ended = "its harness ended without logging an exit code (killed, or its machine restarted)";

    let (o, took) = timed(&home, &["chat", "scout", "hello"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = last_line(&stderr(&o));
    assert!(
        err.starts_with(&format!(
            "error: agent `scout` is not running: {ended}; last log lines: "
        )),
        "{err}"
    );
    assert!(
        err.ends_with("; start it with `buzz-launcher start scout`"),
        "{err}"
    );
    assert!(took < AT_ONCE, "{took:?}");

    let (o, took) = timed(&home, &["stop", "scout"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        last_line(&stderr(&o)).ends_with(
            "(nothing to stop; --force sends !shutdown and waits anyway, for a harness run elsewhere)"
        ),
        "{}",
        stderr(&o)
    );
    assert!(took < AT_ONCE, "{took:?}");

    let (o, took) = timed(&home, &["status"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let row = status_row(&o);
    assert!(row.starts_with(&format!("scout\toffline\t{ended}")), "{row}");
    // The `stop` above stopped it for good: the row says so (issue 33).
    assert!(
        row.ends_with("\tnot deployed\tlocal  (stopped: nothing wakes it; press Start)"),
        "{row}"
    );
    assert!(!row.contains("never seen"), "{row}");
    assert_eq!(last_line(&stdout(&o)), "0 deployed, 0 online");
    assert!(took < AT_ONCE, "{took:?}");
}

/// `status` with one online local agent on the embedded relay: the relay
/// keeps the agent's last presence (`buzz_relay::presence_keep`), so the
/// row is `online` at once, not after a 60 s republish.
#[test]
fn status_of_a_running_local_agent_answers_within_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, _, _c) = setup_online(&tmp);
    let (o, took) = timed(&home, &["status"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let row = status_row(&o);
    assert!(
        row.starts_with("scout\tonline\tseen ") && row.ends_with("s ago\tdeployed\tlocal"),
        "{row}"
    );
    assert_eq!(last_line(&stdout(&o)), "1 deployed, 1 online");
    assert!(
        stderr(&o)
            .contains("local agents: checking their harness processes; listening 2s for their presence"),
        "{}",
        stderr(&o)
    );
    assert!(took < AT_ONCE, "{took:?}");
}

/// A chat shows its progress: queued (the harness's 👀), then the reply.
#[test]
fn chat_shows_queued_then_the_reply() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, _, _c) = setup_online(&tmp);
    let (o, took) = timed(&home, &["chat", "scout", "hello there"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "hello there");
    let err = stderr(&o);
    let sending = err.find("scout: sending; waiting up to 300s").expect(&err);
    let queued = err
        .find("scout: queued (👀); waiting for the agent to take it")
        .expect(&err);
    assert!(sending < queued, "{err}");
    assert!(took < AT_ONCE, "{took:?}");
}

/// Item 1: an agent command that exits before `initialize` (`/bin/false`):
/// the mention's reply says why within seconds, and the harness then exits 5.
#[test]
fn a_mention_to_an_agent_that_cannot_start_is_answered_with_why_within_seconds() {
    let h = harness();
    let hs = h.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (home, _c) = setup(&tmp, Some(h.clone()));
    edit(&home, &["--command", "/bin/false"]);
    start_echo(&home, hs);
    let (o, took) = timed(&home, &["chat", "scout", "hello"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim(),
        "⚠️ The agent could not answer: the agent command `/bin/false` exited (status 1) before it \
         answered ACP `initialize`; check that it is an ACP agent and starts by hand with its args \
         (its stderr is in the harness log)"
    );
    assert!(took < AT_ONCE, "{took:?}");
    assert!(wait_until(Duration::from_secs(10), || processes_of(&home, &h).is_empty()));
    let o = run(&home, &["status"], &[]);
    let row = status_row(&o);
    assert!(
        row.starts_with(
            "scout\toffline\tits harness exited with code 5 (all agents dead: the agent command could not start or kept dying); last log lines: "
        ),
        "{row}"
    );
}

/// A local start refuses a command that is not installed, before any spawn.
#[test]
fn start_refuses_a_missing_custom_command_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, _c) = setup(&tmp, None);
    edit(&home, &["--command", "no-such-agent-cmd"]);
    let (o, took) = timed(&home, &["start", "scout"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        last_line(&stderr(&o)),
        "error: agent command `no-such-agent-cmd` is not on PATH; install it, or give its full path with \
         `buzz-launcher agent edit scout --command /path/to/no-such-agent-cmd`"
    );
    assert!(!home.join("logs/scout.log").exists(), "a harness was spawned");
    assert!(took < AT_ONCE, "{took:?}");
}

/// `start` watches its child: a harness that exits is reported at once
/// with its code, what the code means and this run's lines only.
#[test]
fn start_reports_a_harness_that_exits_at_once_with_this_runs_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, _c) = setup(&tmp, None);
    let fake = tmp.path().join("fake-harness");
    let counter = tmp.path().join("runs");
    executable(
        &fake,
        "#!/bin/sh\nn=$(cat \"$FAKE_COUNTER\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$FAKE_COUNTER\"\n\
         echo \"error: attempt $n refused\" >&2\nexit 3\n",
    );
    let env = [
        ("BUZZ_ACP_BIN", fake.to_str().unwrap()),
        ("FAKE_COUNTER", counter.to_str().unwrap()),
    ];
    let log = home.join("logs/scout.log");
    for attempt in [1, 2] {
        let (o, took) = timed(&home, &["start", "scout"], &env);
        assert_eq!(o.status.code(), Some(1));
        assert_eq!(
            last_line(&stderr(&o)),
            format!(
                "error: the harness of `scout` exited with code 3 (an identity refusal: a missing or malformed key, \
                 relay URL or owner); last log lines: error: attempt {attempt} refused; its log: {}",
                log.display()
            )
        );
        assert!(took < AT_ONCE, "{took:?}");
    }
    // The log holds this run only; the previous one is kept beside it.
    let now = std::fs::read_to_string(&log).unwrap();
    assert!(now.contains("attempt 2") && !now.contains("attempt 1"), "{now}");
    assert!(
        std::fs::read_to_string(home.join("logs/scout.log.1"))
            .unwrap()
            .contains("attempt 1")
    );
    // The failure is the record's last error (what the Start page shows).
    let st = deploy_state(&home);
    assert!(
        st["last_error"].as_str().unwrap().contains("exited with code 3"),
        "{st}"
    );
}

/// The real harness refused by a relay (another owner's embedded relay):
/// `start` says so at once with code 4, not after 60 s.
#[test]
fn start_reports_a_refused_relay_login_at_once() {
    let h = harness();
    let hs = h.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (home, _c) = setup(&tmp, Some(h.clone()));
    // Another owner's relay, in the foreground.
    let other = tmp.path().join("other");
    assert!(run(&other, &["init"], &[]).status.success());
    let mut relay = std::process::Command::new(BIN)
        .args(["relay", "--listen", "127.0.0.1:0"])
        .env("BUZZ_LAUNCHER_HOME", &other)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(relay.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    let url = first.trim().strip_prefix("relay ").unwrap().to_string();
    edit(&home, &["--relay", &url]);
    let (o, took) = timed(&home, &["start", "scout"], &[("BUZZ_ACP_BIN", hs)]);
    let _ = relay.kill();
    let _ = relay.wait();
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let err = last_line(&stderr(&o));
    assert!(
        err.starts_with(
            "error: the harness of `scout` exited with code 4 (the relay refused the agent's login: NIP-42 auth denied); \
             last log lines: ERROR relay denied authentication reason=restricted: "
        ),
        "{err}"
    );
    assert!(took < AT_ONCE, "{took:?}");
}

/// `stop` of an agent never started here says so at once; `--force` waits.
#[test]
fn stop_of_an_agent_that_is_not_running_says_so_at_once_and_force_waits() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, _c) = setup(&tmp, None);
    let (o, took) = timed(&home, &["stop", "scout"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        last_line(&stderr(&o)),
        "error: agent `scout` is not running here: no harness of it was started by this launcher \
         (nothing to stop; --force sends !shutdown and waits anyway, for a harness run elsewhere)"
    );
    assert!(took < AT_ONCE, "{took:?}");
    let (o, _) = timed(&home, &["stop", "scout", "--force", "--wait", "2"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("sent !shutdown to scout; waiting up to 2s for its presence offline"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        last_line(&stderr(&o)),
        "error: agent `scout` did not report presence offline within 2s; it may not be running or its relay may be unreachable"
    );
}

/// A relay that accepts TCP and never answers: named as such within seconds.
#[test]
fn a_relay_that_never_answers_its_handshake_is_named_within_seconds() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}", silent.local_addr().unwrap());
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in silent.incoming().flatten() {
            keep.lock().unwrap().push(s);
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("state");
    assert!(run(&home, &["init"], &[]).status.success());
    let o = run(
        &home,
        &["agent", "create", "scout", "--agent", "echo", "--relay", &url],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let named = format!(
        "relay {url} accepted the TCP connection but did not answer the WebSocket handshake within 3s; \
         is this the relay's address (host, port, ws:// or wss://)?"
    );
    let (o, took) = timed(&home, &["chat", "scout", "hello"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(last_line(&stderr(&o)), format!("error: {named}"));
    assert!(took < AT_ONCE, "{took:?}");
    let (o, took) = timed(&home, &["status"], &[]);
    assert!(o.status.success());
    assert!(
        stderr(&o).contains(&format!("warning: {named}")),
        "{}",
        stderr(&o)
    );
    assert!(took < AT_ONCE, "{took:?}");
}

/// Item 1: the Start page shows why a local agent went offline — here a
/// harness killed without a word: how its run ended, from its log.
#[test]
fn the_start_page_shows_why_a_local_agent_went_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, h, _c) = setup_online(&tmp);
    let run_id = deploy_state(&home)["generation"].as_str().unwrap().to_string();
    kill_all(&[harness_pid(&home)]);
    assert!(wait_until(Duration::from_secs(10), || processes_of(&home, &h).is_empty()));
    let body = Page::open(&home, &[]).get_body("/api/agents");
    let v: serde_json::Value = serde_json::from_str(body.trim()).unwrap_or_else(|_| panic!("{body}"));
    let scout = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "scout")
        .unwrap();
    let reason = scout["last_error"].as_str().unwrap_or_else(|| panic!("{scout}"));
    assert!(
        reason.starts_with(&format!(
            "the harness (run {run_id}) ended without logging an exit code (killed, or its machine restarted)"
        )),
        "{reason}"
    );
    assert_eq!(scout["running"], false, "{scout}");
}

/// A stop whose local harness ends without a word ends with it, not after
/// the 240 s default.
#[test]
fn stop_ends_when_the_local_harness_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, _c) = setup(&tmp, None);
    let fake = tmp.path().join("quiet-harness");
    executable(&fake, "#!/bin/sh\nsleep 2\n");
    let env = [("BUZZ_ACP_BIN", fake.to_str().unwrap())];
    let o = run(&home, &["start", "scout", "--wait-online", "0"], &env);
    assert!(o.status.success(), "{}", stderr(&o));
    let (o, took) = timed(&home, &["stop", "scout"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim(),
        "scout offline (its harness ended without logging an exit code (killed, or its machine restarted))"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
}
