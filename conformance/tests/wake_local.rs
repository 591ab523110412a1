//! Wake on mention, locally (issue 33 "Tests: Local"; spec I5): the real
//! `buzz-launcher serve` waker, real harnesses with the built-in echo agent
//! and a real NIP-42 relay. An agent reaped after 3 s of inactivity sleeps;
//! a stranger's mention does not wake it, a burst of 50 owner mentions
//! wakes it once and each is answered, oldest first; after it sleeps again
//! the owner's `!shutdown` stops it for good. An agent its owner stopped is
//! never woken. `status` says sleeping or stopped, and that a waker runs;
//! a second waker of the same state dir refuses, naming the first.

use buzz_conformance::harness_support::{Observer, TestRelay, post};
use buzz_conformance::ui_support::{kill_groups, launcher, processes_of, wait_until};
use desktop_launcher::app::Store;
use nostr_sdk::prelude::Keys;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_buzz-launcher-under-test");
const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
const WAIT: Duration = Duration::from_secs(60);

struct World {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    envs: Vec<(String, String)>,
    relay: TestRelay,
}

impl World {
    fn cli(&self, args: &[&str]) -> String {
        let out = launcher(Path::new(BIN), &self.home, args, &self.envs);
        assert!(
            out.status.success(),
            "buzz-launcher {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn store(&self) -> Store {
        Store::open(&self.home).expect("store")
    }

    fn keys(&self, name: &str) -> Keys {
        self.store().agent_keys(name).expect("agent keys")
    }

    fn owner(&self) -> Keys {
        self.store().owner().expect("owner")
    }

    fn create(&self, name: &str) {
        self.cli(&[
            "agent",
            "create",
            name,
            "--relay",
            &self.relay.url,
            "--agent",
            "echo",
            "--inactivity",
            "3",
            "--env",
            "BUZZ_ACP_REAPER_CHECK_MS=200",
        ]);
    }

    fn harnesses(&self) -> Vec<u32> {
        processes_of(&self.home, Path::new(HARNESS))
    }

    /// `status`'s line of `name`.
    fn status_of(&self, name: &str) -> String {
        self.cli(&["status", "--listen", "1"])
            .lines()
            .find(|l| l.starts_with(&format!("{name}\t")))
            .unwrap_or_default()
            .to_string()
    }
}

/// `buzz-launcher serve`, its stdout lines kept; killed with its harnesses.
struct Serve {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    home: PathBuf,
}

impl Serve {
    fn start(w: &World) -> Serve {
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .env("BUZZ_LAUNCHER_HOME", &w.home)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in &w.envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("serve");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("stdout");
        let keep = lines.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                keep.lock().unwrap().push(l);
            }
        });
        Serve {
            child,
            lines,
            home: w.home.clone(),
        }
    }

    fn said(&self, needle: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        kill_groups(&processes_of(&self.home, Path::new(HARNESS)));
    }
}

/// The replies of `agent` seen so far, oldest first (the echo agent
/// answers with the mention's text).
fn answered(obs: &Observer, agent: &Keys) -> Vec<String> {
    obs.messages_of(agent)
        .into_iter()
        .map(|s| s.event.content)
        .collect()
}

#[test]
fn a_sleeping_agent_wakes_on_its_owner_s_mention_and_a_stopped_one_never() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let relay = rt.block_on(TestRelay::start());
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("state");
    let w = World {
        envs: vec![("BUZZ_ACP_BIN".into(), HARNESS.into())],
        home,
        _tmp: tmp,
        relay,
    };
    w.cli(&["init"]);
    w.create("sleepy");
    w.create("stopped");
    w.create("napper");
    let (sleepy, stopped, owner) = (w.keys("sleepy"), w.keys("stopped"), w.owner());
    let obs = rt.block_on(Observer::start(&w.relay.url));
    let serve = Serve::start(&w);
    assert!(
        wait_until(WAIT, || serve.said("waker running") == 1),
        "serve: {}",
        serve.text()
    );
    // One waker per state dir: a second `serve` says who wakes and leaves.
    let mut second = Command::new(BIN)
        .arg("serve")
        .env("BUZZ_LAUNCHER_HOME", &w.home)
        .envs(w.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a second serve");
    let ended = wait_until(Duration::from_secs(10), || {
        second.try_wait().ok().flatten().is_some()
    });
    if !ended {
        let _ = second.kill();
    }
    let out = second.wait_with_output().expect("its output");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        ended && !out.status.success() && said.contains(&format!("a waker runs (pid {})", serve.child.id())),
        "a second waker: {said}"
    );
    w.cli(&["start", "sleepy"]);
    w.cli(&["start", "stopped"]);
    w.cli(&["stop", "stopped"]);
    w.cli(&["start", "napper"]);
    assert!(
        wait_until(WAIT, || w
            .status_of("sleepy")
            .contains("sleeping: a mention wakes it")),
        "sleepy never slept: {}",
        w.status_of("sleepy")
    );
    let status = w.cli(&["status", "--listen", "1"]);
    assert!(status.contains("a waker runs (pid"), "{status}");
    assert!(
        w.status_of("stopped").contains("stopped: nothing wakes it"),
        "{status}"
    );
    assert!(
        wait_until(WAIT, || w.harnesses().is_empty()),
        "the harnesses ended"
    );
    // `stop` of a sleeping agent: nothing runs to stop, and now nothing wakes it.
    let out = launcher(Path::new(BIN), &w.home, &["stop", "napper"], &w.envs);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("a mention no longer wakes it"), "{said}");
    assert!(w.status_of("napper").contains("stopped: nothing wakes it"));
    let napper = w.keys("napper");

    // A stranger does not wake an owner-only agent; the stopped one stays down.
    let stranger = Keys::generate();
    rt.block_on(post(&w.relay.url, &stranger, "c1", &sleepy, "let me in", vec![]));
    rt.block_on(post(
        &w.relay.url,
        &owner,
        "c1",
        &stopped,
        "are you there?",
        vec![],
    ));
    rt.block_on(post(&w.relay.url, &owner, "c1", &napper, "you too?", vec![]));
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        w.harnesses().is_empty(),
        "woken by a stranger or despite a stop: {}",
        serve.text()
    );
    assert_eq!(serve.said("woke"), 0, "{}", serve.text());

    // A burst of 50 over 5 channels (a channel queues at most 32, woken or
    // not) wakes it once; every mention is answered, each channel's oldest first.
    let mut sent = Vec::new();
    for i in 0..50 {
        let (text, channel) = (format!("m-{i:02}"), format!("c{}", i % 5));
        let e = rt.block_on(post(&w.relay.url, &owner, &channel, &sleepy, &text, vec![]));
        sent.push((text, channel, e.created_at.as_secs()));
    }
    let of_burst = |got: &[String]| got.iter().filter(|t| t.starts_with("m-")).count();
    assert!(
        wait_until(WAIT, || of_burst(&answered(&obs, &sleepy)) >= 50),
        "answered {} of 50: {}; the harness log: {}",
        of_burst(&answered(&obs, &sleepy)),
        serve.text(),
        // This run's log and the one before it: a burst can span two wakes.
        std::fs::read_to_string(w.home.join("logs/sleepy.log.1")).unwrap_or_default()
            + &std::fs::read_to_string(w.home.join("logs/sleepy.log")).unwrap_or_default()
    );
    let got = answered(&obs, &sleepy);
    assert!(
        !got.iter().any(|t| t.contains("let me in")),
        "the stranger was answered: {got:?}"
    );
    for c in 0..5 {
        let channel = format!("c{c}");
        let at: Vec<u64> = got
            .iter()
            .filter_map(|t| sent.iter().find(|(s, ch, _)| s == t && *ch == channel))
            .map(|(_, _, at)| *at)
            .collect();
        assert_eq!(at.len(), 10, "{channel}: {got:?}");
        assert!(
            at.windows(2).all(|p| p[0] <= p[1]),
            "{channel} answered oldest first: {got:?}"
        );
    }
    let mut unique: Vec<String> = got.iter().filter(|t| t.starts_with("m-")).cloned().collect();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 50, "each once: {got:?}");
    assert_eq!(
        serve.said("woke sleepy"),
        1,
        "one wake for the burst: {}",
        serve.text()
    );

    // Asleep again, then the owner's !shutdown: a mention no longer wakes it.
    assert!(
        wait_until(WAIT, || w.harnesses().is_empty()),
        "sleepy never slept again"
    );
    rt.block_on(post(&w.relay.url, &owner, "c1", &sleepy, "!shutdown", vec![]));
    rt.block_on(post(&w.relay.url, &owner, "c1", &sleepy, "wake up?", vec![]));
    assert!(
        wait_until(WAIT, || serve.said("stopped by its owner's !shutdown") == 1),
        "{}",
        serve.text()
    );
    assert!(w.harnesses().is_empty(), "woken after the owner's !shutdown");
    assert!(answered(&obs, &stopped).is_empty(), "the stopped agent answered");
    assert!(
        answered(&obs, &napper).is_empty(),
        "the agent stopped asleep answered"
    );
    assert!(!answered(&obs, &sleepy).iter().any(|t| t.contains("wake up?")));
}

/// The owner's own chat wakes a sleeping agent (review afa2bf1): with a
/// waker running, `chat` says the agent is asleep and that the waker wakes
/// it, and returns its reply; with none, it sends the message, says that
/// nothing wakes the agent and how to run a waker, and ends at once. A
/// stopped agent is still refused.
#[test]
fn the_owners_chat_wakes_a_sleeping_agent_and_says_so() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let relay = rt.block_on(TestRelay::start());
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("state");
    let w = World {
        envs: vec![("BUZZ_ACP_BIN".into(), HARNESS.into())],
        home,
        _tmp: tmp,
        relay,
    };
    w.cli(&["init"]);
    w.create("chatty");
    let serve = Serve::start(&w);
    assert!(
        wait_until(WAIT, || serve.said("waker running") == 1),
        "serve: {}",
        serve.text()
    );
    w.cli(&["start", "chatty"]);
    let asleep = || w.harnesses().is_empty() && w.status_of("chatty").contains("sleeping");
    assert!(
        wait_until(WAIT, asleep),
        "chatty never slept: {}",
        w.status_of("chatty")
    );

    let out = launcher(
        Path::new(BIN),
        &w.home,
        &["chat", "chatty", "are you awake?"],
        &w.envs,
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the owner's chat wakes it: {stderr}; serve: {}",
        serve.text()
    );
    assert!(stdout.contains("are you awake?"), "its reply: {stdout}");
    assert!(
        stderr.contains("chatty is asleep; the waker (pid"),
        "the chat says it is asleep and who wakes it: {stderr}"
    );
    assert_eq!(serve.said("woke chatty for 1 mention"), 1, "{}", serve.text());

    // No waker: the message is sent, and the chat says nothing wakes it.
    assert!(wait_until(WAIT, asleep), "chatty never slept again");
    drop(serve);
    let out = launcher(Path::new(BIN), &w.home, &["chat", "chatty", "anyone?"], &w.envs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("is asleep and no waker runs") && stderr.contains("buzz-launcher serve"),
        "{stderr}"
    );
    assert!(w.harnesses().is_empty(), "nothing woke it");

    // A stopped agent is refused, as before.
    let out = launcher(Path::new(BIN), &w.home, &["stop", "chatty"], &w.envs);
    assert!(!out.status.success());
    let out = launcher(Path::new(BIN), &w.home, &["chat", "chatty", "still?"], &w.envs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && !stderr.contains("asleep"),
        "a stopped agent is refused: {stderr}"
    );
}
