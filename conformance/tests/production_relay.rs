//! A production relay nobody here wrote (issue 35 item 1): nostr-rs-relay
//! with NIP-42 on and its SQLite store (`harness_support::nostr_rs_relay`),
//! in place of the suite's own relays, end to end:
//! - the real harness on it, launched as on a VPS
//!   (`scripts/launch-harness.sh` and an env file): `online` once its subscription is live, the
//!   owner's mention answered, a stranger's not, and the owner's
//!   `!shutdown` ending in `offline` with `["stop","owner"]` and exit 0,
//!   the offline known read by the relay that acknowledges no ephemeral
//!   event;
//! - the real launcher with a local agent on it: Start, chat, what the
//!   agent is doing live (its observer frames, ephemeral: forwarded to the
//!   watch and never stored), `usage` and `log` from what the relay stored,
//!   across a stop and a Start, and a stop that sees `offline`;
//! - `buzz-launcher demo --relay URL`: every step green on it, and the
//!   relay left running;
//! - a real coding agent's turn: claude-agent-acp, against the fake model
//!   API, runs its shell tool in the workdir and answers through it.
//!
//! Where nostr-rs-relay differs from our relays, docs/relays.md says how
//! and what the code does about it.

use buzz_conformance::fake_model::agents::RealAgent;
use buzz_conformance::fake_model::{Script, Turn};
use buzz_conformance::harness_support::harness_command;
use buzz_conformance::harness_support::nostr_rs_relay::NostrRsRelay;
use buzz_conformance::harness_support::proc::path_dir_with_buzz_acp;
use buzz_conformance::harness_support::relay::tags;
use buzz_conformance::harness_support::{HarnessProc, Observer, post};
use buzz_conformance::launcher_support::chat_watched;
use buzz_conformance::real_agents_support::AgentWorld;
use desktop_launcher::activity::Doing;
use desktop_launcher::app;
use desktop_launcher::conversation_view::{self, Entry};
use desktop_launcher::record::Backend;
use desktop_launcher::store::Store;
use nostr_sdk::prelude::{Keys, ToBech32};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
const AGENT: &str = env!("CARGO_BIN_EXE_acp-test-agent");
const WAIT: Duration = Duration::from_secs(30);
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// One at a time: a real agent is a Node process of hundreds of MB, and
/// the others' waits are bounded.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_launched_as_on_a_vps_answers_its_owner_and_stops_through_nostr_rs_relay() {
    let _g = SERIAL.lock().await;
    let relay = NostrRsRelay::start(LOOPBACK);
    let obs = Observer::start(&relay.url).await;
    let (agent, owner, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let env: HashMap<String, String> = [
        ("BUZZ_RELAY_URL", relay.url.clone()),
        ("BUZZ_PRIVATE_KEY", agent.secret_key().to_bech32().unwrap()),
        ("BUZZ_ACP_AGENT_OWNER", owner.public_key().to_hex()),
        ("BUZZ_ACP_AGENT_COMMAND", AGENT.to_string()),
        ("BUZZ_ACP_AGENT_ARGS", " echo ,".to_string()),
        ("BUZZ_ACP_LOG", "debug".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    // The VPS path: an env file of mode 0600, `scripts/launch-harness.sh`
    // finds `buzz-acp` on PATH and execs it in place.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.env");
    let body: String = env.iter().map(|(k, v)| format!("{k}='{v}'\n")).collect();
    std::fs::write(&file, body).unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (_bins, bin_dir) = path_dir_with_buzz_acp(HARNESS);
    let mut c = tokio::process::Command::new("bash");
    c.arg(buzz_conformance::package_dir().join("../scripts/launch-harness.sh"))
        .arg(&file)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut h = HarnessProc::spawn(c);
    let why = |h: &HarnessProc| format!("harness:\n{}\nrelay:\n{}", h.stderr(), relay.log());
    obs.wait_presence(WAIT, &agent, "online")
        .await
        .unwrap_or_else(|| panic!("never online; {}", why(&h)));

    let m = post(&relay.url, &owner, "c1", &agent, "hello production", vec![]).await;
    let s = post(&relay.url, &stranger, "c1", &agent, "let me in", vec![]).await;
    let reply = obs
        .wait_for(WAIT, |e| {
            e.pubkey == agent.public_key() && e.content == "echo: hello production"
        })
        .await
        .unwrap_or_else(|| panic!("no answer; {}", why(&h)));
    assert!(
        tags(&reply.event)
            .iter()
            .any(|t| t[0] == "e" && t[1] == m.id.to_hex()),
        "the answer names its mention: {:?}",
        tags(&reply.event)
    );

    post(&relay.url, &owner, "c1", &agent, "!shutdown", vec![]).await;
    let off = obs
        .wait_presence(WAIT, &agent, "offline")
        .await
        .unwrap_or_else(|| panic!("never offline; {}", why(&h)));
    assert!(
        tags(&off.event).iter().any(|t| t == &["stop", "owner"]),
        "{:?}",
        tags(&off.event)
    );
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "{}", why(&h));
    // nostr-rs-relay acknowledges no ephemeral event: the harness learns
    // that it read the offline from the EOSE of a REQ sent behind it, and
    // its stop does not wait out the bound for an OK that never comes.
    assert!(
        h.stderr()
            .contains("presence offline published acknowledged=false read=true"),
        "{}",
        why(&h)
    );
    let stranger_answered = obs
        .matching(|e| {
            e.pubkey == agent.public_key()
                && e.tags.iter().any(|t| t.as_slice().get(1) == Some(&s.id.to_hex()))
        })
        .len();
    assert_eq!(stranger_answered, 0, "a stranger is not answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_launcher_starts_chats_watches_and_stops_a_local_agent_on_nostr_rs_relay() {
    let _g = SERIAL.lock().await;
    let relay = NostrRsRelay::start(LOOPBACK);
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("state")).unwrap();
    store.init_owner(None).unwrap();
    let mut rec = store.create_agent("agent", &relay.url).unwrap();
    rec.backend = Backend::Local;
    rec.agent_command = Some(AGENT.to_string());
    rec.agent_args = vec!["echo".into()];
    rec.relay_observer = true;
    store.save_agent(&rec).unwrap();
    let log = store.log_path("agent");
    let show = || {
        format!(
            "harness:\n{}\nrelay:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            relay.log()
        )
    };
    let start = || async {
        let watched = app::start_local_watched(
            &store,
            "agent",
            Path::new(HARNESS),
            WAIT,
            &mut |_, _| {},
            Box::new(|| {}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}; {}", show()));
        let app::Watched::Started(started) = watched else {
            panic!("the harness already ran; {}", show());
        };
        started
            .online_or_error(&store, "agent", WAIT)
            .unwrap_or_else(|e| panic!("{e}; {}", show()));
        started
    };
    // Each chat in a second of its own: Nostr times are whole seconds.
    let next_second = || {
        tokio::time::sleep(app::until_after_second(
            app::unix_now(),
            std::time::SystemTime::now(),
        ))
    };

    let first = start().await;
    // What it does, live: the watch opens before the mention.
    let (reply, doing) = chat_watched(&store, "agent", "[usage:1200,80,1300,4500][tool:300] one", WAIT).await;
    let reply = reply.unwrap_or_else(|e| panic!("{e}; {}", show()));
    assert_eq!(reply, "echo: [usage:1200,80,1300,4500][tool:300] one");
    assert!(
        doing.iter().any(|d| matches!(d, Doing::Running(_))) && doing.last() == Some(&Doing::Idle),
        "the tool ran, then the turn ended: {doing:?}"
    );

    next_second().await;
    app::stop(&store, "agent", WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}; {}", show()));
    drop(first);
    let _second = start().await;
    next_second().await;
    let reply = app::chat(&store, "agent", "two", WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}; {}", show()));
    assert_eq!(reply, "echo: two");

    // What the relay stored: each turn's usage, and the conversation.
    let mut found = app::usage::Usage::default();
    for _ in 0..50 {
        found = app::usage::usage(&store, Some("agent"), 0).await.unwrap();
        if found.turns.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(found.skipped.is_empty(), "{:?}", found.skipped);
    assert_eq!(found.turns.len(), 2, "{found:?}");
    let t = found.turns[0].metric.turn.clone().unwrap();
    assert_eq!((t.input_tokens, t.output_tokens), (Some(1200), Some(80)));
    let conv = app::conversation::conversation(&store, "agent", 0)
        .await
        .unwrap_or_else(|e| panic!("{e}; {}", show()));
    // In any order, as the relay holds it (nostr-rs-relay: newest first);
    // by turn as `log` shows it.
    let said: Vec<String> = conversation_view::turns(conv.clone())
        .into_iter()
        .flat_map(|t| match t {
            Entry::Turn { mention, replies } => std::iter::once(mention).chain(replies).collect(),
            Entry::Alone(s) => vec![s],
        })
        .map(|s| s.text)
        .collect();
    assert_eq!(
        said,
        [
            "[usage:1200,80,1300,4500][tool:300] one",
            "echo: [usage:1200,80,1300,4500][tool:300] one",
            "!shutdown",
            "two",
            "echo: two",
        ],
        "{conv:?}"
    );
    app::stop(&store, "agent", WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}; {}", show()));
}

#[test]
fn the_demo_runs_every_step_on_nostr_rs_relay_and_leaves_it_running() {
    let _g = SERIAL.blocking_lock();
    let relay = NostrRsRelay::start(LOOPBACK);
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_buzz-launcher-under-test"))
        .args(["demo", "--relay", &relay.url, "--state-dir"])
        .arg(tmp.path().join("state"))
        .env("BUZZ_ACP_BIN", HARNESS)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("demo ok: every step succeeded"),
        "{stdout}\n{}\nrelay:\n{}",
        String::from_utf8_lossy(&out.stderr),
        relay.log()
    );
    assert!(
        stdout.contains(&format!("relay {} answers", relay.url)),
        "{stdout}"
    );
    assert!(
        std::net::TcpStream::connect(relay.url.trim_start_matches("ws://")).is_ok(),
        "the demo left the user's relay running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_real_claude_turn_runs_its_shell_tool_and_answers_through_nostr_rs_relay() {
    let _g = SERIAL.lock().await;
    let (lead, done) = ("I'll create the file.", "Done: proof.txt written.");
    let w = AgentWorld::on_production_relay(Script::new().turn(Turn::say_then_shell(
        lead,
        "echo proof-ok-42 > proof.txt",
        done,
    )))
    .await;
    let mut h = HarnessProc::spawn(harness_command(HARNESS, &w.env(RealAgent::Claude)));
    w.wait_online(WAIT).await;
    let m = w.mention("c1", "please write proof.txt").await;
    let r = w.wait_reply(&m, Duration::from_secs(60)).await;
    assert_eq!(r.content, format!("{lead}\n\n{done}"), "{}", h.stderr());
    assert_eq!(w.work_file("proof.txt").as_deref(), Some("proof-ok-42\n"));
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "{}", h.stderr());
}
