//! The harness's core cases through the embedded relay (issue "First run on
//! embedded defaults", Tests: "the harness's existing suite passes against
//! the embedded relay too"): the real `buzz-acp` entry point authenticates
//! with its NIP-OA tag, goes online, answers a mention and stops on the
//! owner's `!shutdown` with presence offline and exit 0 — once with the
//! scripted `acp-test-agent` (as `tests/harness/` runs it on
//! `nostr-relay-builder`'s relay) and once with the built-in echo agent;
//! plus reconnection across a relay restart.
//!
//! The observer is an owner-authenticated nostr-sdk client (the embedded
//! relay serves nobody else), not the launcher's relay code.

use buzz_conformance::harness_support::relay::tags;
use buzz_conformance::harness_support::{HarnessProc, harness_command, wait_until};
use buzz_contract::nip_oa::AuthTag;
use desktop_launcher::relayd::{self, Limits, RelayConfig, Running};
use nostr_sdk::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
const AGENT: &str = env!("CARGO_BIN_EXE_acp-test-agent");
const WAIT: Duration = Duration::from_secs(20);
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn serve(owner: &Keys, listen: &str) -> Running {
    relayd::serve(RelayConfig {
        listen: listen.parse().unwrap(),
        allow_public: false,
        data: None,
        owner_hex: owner.public_key().to_hex(),
        limits: Limits::default(),
    })
    .await
    .expect("embedded relay serves")
}

struct World {
    relay: Running,
    owner: Keys,
    agent: Keys,
    client: Client,
    seen: Arc<Mutex<Vec<Event>>>,
}

impl World {
    async fn new() -> World {
        let owner = Keys::generate();
        let relay = serve(&owner, "127.0.0.1:0").await;
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
            relay,
            owner,
            agent: Keys::generate(),
            client,
            seen,
        }
    }

    fn env(&self, command: &str, args: &str) -> HashMap<String, String> {
        let tag = AuthTag::mint(&self.owner, &self.agent.public_key().to_hex(), "")
            .unwrap()
            .to_json();
        let mut e = HashMap::new();
        for (k, v) in [
            ("BUZZ_RELAY_URL", self.relay.url()),
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
    assert_ne!(code, Some(0), "a refused agent is not an intentional stop");
    assert!(code.is_some(), "a terminal restricted: ends the harness");
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
    let addr = w.relay.addr().to_string();
    w.relay.shutdown();
    drop(std::mem::replace(&mut w.relay, {
        let mut r = None;
        for _ in 0..100 {
            match relayd::serve(RelayConfig {
                listen: addr.parse().unwrap(),
                allow_public: false,
                data: None,
                owner_hex: w.owner.public_key().to_hex(),
                limits: Limits::default(),
            })
            .await
            {
                Ok(x) => {
                    r = Some(x);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        r.expect("the relay restarts on its port")
    }));
    // Re-authenticated, re-subscribed and online again. The observer is a
    // plain nostr-sdk client: on reconnect it may re-send its REQ before its
    // own NIP-42 AUTH completes, and the relay rightly closes that
    // subscription (`auth-required:`). It asks again until it hears the
    // agent (presence is republished every second and never replayed).
    let deadline = tokio::time::Instant::now() + WAIT;
    while w.presence("online") < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "presence online #2 from the agent after the restart"
        );
        let _ = w
            .client
            .subscribe(Filter::new().kinds([Kind::from(9), Kind::from(20001)]), None)
            .await;
        let _ = wait_until(Duration::from_secs(3), || {
            (w.presence("online") >= 2).then_some(())
        })
        .await;
    }
    let m = w.mention("after the restart").await;
    assert_eq!(w.wait_reply(&m).await.content, "after the restart");
    w.mention("!shutdown").await;
    w.wait_presence("offline", 1).await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
    w.client.shutdown().await;
}
