//! The harness's core cases through the embedded relay (issue "First run on
//! embedded defaults", Tests: "the harness's existing suite passes against
//! the embedded relay too"): the real `buzz-acp` entry point authenticates
//! with its NIP-OA tag, goes online, answers a mention and stops on the
//! owner's `!shutdown` with presence offline and exit 0 — once with the
//! scripted `acp-test-agent` (as `tests/harness/` runs it on
//! `nostr-relay-builder`'s relay) and once with the built-in echo agent;
//! plus reconnection across a relay restart, and (review b30b1a0 #3) a run
//! started right after a stop that survives a relay restart: its
//! re-subscription must not replay the previous run's stored `!shutdown`.
//!
//! The observer is an owner-authenticated nostr-sdk client (the embedded
//! relay serves nobody else), not the launcher's relay code.

use buzz_conformance::harness_support::relay::tags;
use buzz_conformance::harness_support::{HarnessProc, harness_command, wait_until};
use buzz_contract::nip_oa::AuthTag;
use buzz_relay::{self, Limits, RelayConfig, Running};
use nostr_sdk::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
const AGENT: &str = env!("CARGO_BIN_EXE_acp-test-agent");
const WAIT: Duration = Duration::from_secs(20);
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn relay_config(owner: &Keys, listen: &str, data: Option<&std::path::Path>) -> RelayConfig {
    RelayConfig {
        listen: listen.parse().unwrap(),
        allow_public: false,
        data: data.map(std::path::Path::to_path_buf),
        owner_hex: owner.public_key().to_hex(),
        limits: Limits::default(),
    }
}

struct World {
    /// `None` only while a restart waits for the old relay to let go.
    relay: Option<Running>,
    owner: Keys,
    agent: Keys,
    client: Client,
    seen: Arc<Mutex<Vec<Event>>>,
    /// The relay's event log, when it keeps one (it then survives restarts).
    data: Option<tempfile::TempDir>,
}

impl World {
    async fn new() -> World {
        World::start(None).await
    }

    /// A relay that keeps its event log on disk: stored events survive a restart.
    async fn persistent() -> World {
        World::start(Some(tempfile::tempdir().expect("relay data dir"))).await
    }

    async fn start(data: Option<tempfile::TempDir>) -> World {
        let owner = Keys::generate();
        let relay = buzz_relay::serve(relay_config(
            &owner,
            "127.0.0.1:0",
            data.as_ref().map(|d| d.path()),
        ))
        .await
        .expect("embedded relay serves");
        let client = Client::builder()
            .signer(owner.clone())
            .opts(ClientOptions::new().automatic_authentication(true))
            .build();
        client
            .pool()
            .add_relay(
                relay.url(),
                RelayOptions::new()
                    .reconnect(true)
                    .retry_interval(Duration::from_millis(300))
                    .adjust_retry_interval(false),
            )
            .await
            .unwrap();
        client.connect().await;
        client.wait_for_connection(Duration::from_secs(5)).await;
        let seen: Arc<Mutex<Vec<Event>>> = Arc::default();
        let mut notes = client.notifications();
        let sink = seen.clone();
        tokio::spawn(async move {
            while let Ok(n) = notes.recv().await {
                if let RelayPoolNotification::Message {
                    message: RelayMessage::Event { event, .. },
                    ..
                } = n
                {
                    let e = event.into_owned();
                    let mut s = sink.lock().unwrap();
                    if !s.iter().any(|x| x.id == e.id) {
                        s.push(e);
                    }
                }
            }
        });
        client
            .subscribe(Filter::new().kinds([Kind::from(9), Kind::from(20001)]), None)
            .await
            .expect("subscribed");
        World {
            relay: Some(relay),
            owner,
            agent: Keys::generate(),
            client,
            seen,
            data,
        }
    }

    fn relay(&self) -> &Running {
        self.relay.as_ref().expect("a running relay")
    }

    /// Stops the relay and serves again on the same port (and data dir).
    async fn restart_relay(&mut self) {
        let old = self.relay.take().expect("a running relay");
        let addr = old.addr().to_string();
        old.shutdown();
        // Dropped before serving again: the data dir stays locked while it lives.
        drop(old);
        let data = self.data.as_ref().map(|d| d.path().to_path_buf());
        let mut again = None;
        for _ in 0..100 {
            match buzz_relay::serve(relay_config(&self.owner, &addr, data.as_deref())).await {
                Ok(x) => {
                    again = Some(x);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        self.relay = Some(again.expect("the relay restarts on its port"));
    }

    /// Waits until the agent's `online` count exceeds `before`, re-sending
    /// the observer's REQ meanwhile. The observer is a plain nostr-sdk
    /// client: after a relay restart it may re-send its REQ before its own
    /// NIP-42 AUTH completes, and the relay rightly closes that subscription
    /// (`auth-required:`). It asks again until it hears the agent (presence
    /// is republished every second in these tests and never replayed).
    async fn wait_online_after(&self, before: usize, what: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.presence("online") <= before {
            assert!(tokio::time::Instant::now() < deadline, "{what}");
            let _ = self
                .client
                .subscribe(Filter::new().kinds([Kind::from(9), Kind::from(20001)]), None)
                .await;
            let _ = wait_until(Duration::from_secs(3), || {
                (self.presence("online") > before).then_some(())
            })
            .await;
        }
    }

    fn env(&self, command: &str, args: &str) -> HashMap<String, String> {
        let tag = AuthTag::mint(&self.owner, &self.agent.public_key().to_hex(), "")
            .unwrap()
            .to_json();
        let mut e = HashMap::new();
        for (k, v) in [
            ("BUZZ_RELAY_URL", self.relay().url()),
            ("BUZZ_PRIVATE_KEY", self.agent.secret_key().to_bech32().unwrap()),
            ("BUZZ_AUTH_TAG", tag),
            ("BUZZ_ACP_AGENT_COMMAND", command.to_string()),
            ("BUZZ_ACP_AGENT_ARGS", args.to_string()),
            ("BUZZ_ACP_RECONNECT_BASE_MS", "200".into()),
            ("BUZZ_ACP_SHUTDOWN_BUDGET_SECS", "15".into()),
            ("BUZZ_ACP_LOG", "debug".into()),
        ] {
            e.insert(k.to_string(), v);
        }
        e
    }

    fn presence(&self, content: &str) -> usize {
        let a = self.agent.public_key();
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.kind == Kind::from(20001) && e.pubkey == a && e.content == content)
            .count()
    }

    async fn wait_presence(&self, content: &str, at_least: usize) {
        wait_until(WAIT, || (self.presence(content) >= at_least).then_some(()))
            .await
            .unwrap_or_else(|| panic!("presence {content} #{at_least} from the agent"));
    }

    async fn mention(&self, content: &str) -> Event {
        let ev = EventBuilder::new(Kind::from(9), content)
            .tags([
                Tag::parse(["h", "c1"]).unwrap(),
                Tag::public_key(self.agent.public_key()),
            ])
            .sign_with_keys(&self.owner)
            .unwrap();
        self.client.send_event(&ev).await.expect("mention accepted");
        ev
    }

    async fn wait_reply(&self, m: &Event) -> Event {
        let id = m.id.to_hex();
        let a = self.agent.public_key();
        wait_until(WAIT, || {
            self.seen
                .lock()
                .unwrap()
                .iter()
                .find(|e| {
                    e.kind == Kind::from(9)
                        && e.pubkey == a
                        && tags(e).iter().any(|t| t.len() >= 2 && t[0] == "e" && t[1] == id)
                })
                .cloned()
        })
        .await
        .expect("a reply from the agent")
    }
}

async fn online_mention_reply_shutdown(command: &str, args: &str, text: &str, expect: &str) {
    let w = World::new().await;
    let mut h = HarnessProc::spawn(harness_command(HARNESS, &w.env(command, args)));
    w.wait_presence("online", 1).await;
    let m = w.mention(text).await;
    let reply = w.wait_reply(&m).await;
    assert_eq!(reply.content, expect);
    w.mention("!shutdown").await;
    w.wait_presence("offline", 1).await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "{}", h.stderr());
    w.client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_scripted_agent_runs_the_loop_through_the_embedded_relay() {
    let _g = SERIAL.lock().await;
    online_mention_reply_shutdown(AGENT, "echo", "hello", "echo: hello").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_builtin_echo_agent_answers_a_mention_through_the_embedded_relay() {
    let _g = SERIAL.lock().await;
    online_mention_reply_shutdown("builtin:echo", "", "ping from the owner", "ping from the owner").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_without_the_owners_tag_is_refused_and_never_online() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let mut env = w.env("builtin:echo", "");
    // A tag minted by someone else: the relay must refuse the agent.
    let other = Keys::generate();
    env.insert(
        "BUZZ_AUTH_TAG".into(),
        AuthTag::mint(&other, &w.agent.public_key().to_hex(), "")
            .unwrap()
            .to_json(),
    );
    let mut h = HarnessProc::spawn(harness_command(HARNESS, &env));
    let code = h.wait_exit(WAIT).await;
    assert_eq!(
        code,
        Some(buzz_acp::exit::Exit::AuthDenied.code()),
        "a terminal restricted: ends the harness with the relay-denied-auth code: {}",
        h.stderr()
    );
    assert!(h.stderr().contains("restricted:"), "{}", h.stderr());
    assert_eq!(w.presence("online"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_harness_reconnects_and_reannounces_after_an_embedded_relay_restart() {
    let _g = SERIAL.lock().await;
    let mut w = World::new().await;
    let mut env = w.env("builtin:echo", "");
    // The harness re-announces within ~0.2 s of the restart, possibly before
    // the observer has re-subscribed (presence is never replayed): a short
    // republish interval lets the observer see it online again regardless.
    env.insert("BUZZ_ACP_PRESENCE_INTERVAL_SECS".into(), "1".into());
    let mut h = HarnessProc::spawn(harness_command(HARNESS, &env));
    w.wait_presence("online", 1).await;
    let before = w.presence("online");
    w.restart_relay().await;
    // Re-authenticated, re-subscribed and online again.
    w.wait_online_after(before, "presence online from the agent after the restart")
        .await;
    let m = w.mention("after the restart").await;
    assert_eq!(w.wait_reply(&m).await.content, "after the restart");
    w.mention("!shutdown").await;
    w.wait_presence("offline", 1).await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
    w.client.shutdown().await;
}

/// Review b30b1a0 #3: `stop`, an immediate `start` (within a second), a
/// mention in the new run's first seconds, then a relay restart. The new
/// run's re-subscription must not reach back below its own start, where the
/// relay keeps the previous run's `!shutdown`: the harness stays up, comes
/// back online and still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_started_right_after_a_stop_survives_a_relay_restart() {
    let _g = SERIAL.lock().await;
    let mut w = World::persistent().await;
    let mut env = w.env("builtin:echo", "");
    env.insert("BUZZ_ACP_PRESENCE_INTERVAL_SECS".into(), "1".into());

    // The first run, stopped by the owner: the relay stores the !shutdown.
    let mut first = HarnessProc::spawn(harness_command(HARNESS, &env));
    w.wait_presence("online", 1).await;
    let shutdown = w.mention("!shutdown").await;
    assert_eq!(first.wait_exit(WAIT).await, Some(0), "{}", first.stderr());

    // The next run starts as soon as the !shutdown's second is over (what
    // the launcher's stop waits for), so within a second of the stop.
    let second = shutdown.created_at.as_secs() + 1;
    let now = std::time::SystemTime::now();
    let wait = (std::time::UNIX_EPOCH + Duration::from_secs(second))
        .duration_since(now)
        .unwrap_or_default();
    tokio::time::sleep(wait).await;
    let before = w.presence("online");
    let mut h = HarnessProc::spawn(harness_command(HARNESS, &env));
    w.wait_online_after(before, "the second run goes online").await;

    // A mention accepted in the run's first seconds: without the floor, the
    // re-subscription's `since` (this event − 5 s) reaches below the start.
    let m = w.mention("right after the start").await;
    assert!(
        m.created_at.as_secs() < shutdown.created_at.as_secs() + 5,
        "the mention must be within the overlap of the stored !shutdown"
    );
    assert_eq!(w.wait_reply(&m).await.content, "right after the start");

    let before = w.presence("online");
    w.restart_relay().await;
    w.wait_online_after(before, "presence online from the second run after the restart")
        .await;
    let m = w.mention("after the restart").await;
    assert_eq!(w.wait_reply(&m).await.content, "after the restart");
    assert!(
        h.child.try_wait().expect("try_wait").is_none(),
        "the second run must still be running: {}",
        h.stderr()
    );
    assert!(
        !h.stderr().contains("owner !shutdown received"),
        "the previous run's !shutdown was replayed: {}",
        h.stderr()
    );
    w.mention("!shutdown").await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "{}", h.stderr());
    w.client.shutdown().await;
}
