//! The harness suite (issue 4; spec §Conformance [L1], I1, I3, I5, §Stop and
//! Delete, §Auto-Stop; wire-facts §1–6): the real `buzz-acp` entry point
//! against a real relay (`nostr-relay-builder`, NIP-42 required), watched by
//! an independent nostr-sdk observer, driving the real `acp-test-agent`.
//!
//! Waits are on observable conditions with deadlines; the only timing
//! assertions are the spec's bounds (reaper `[T, T+1 s)`, the shutdown budget).
//! Tests run one at a time (`SERIAL`) so those bounds are not measured under
//! the load of other harness processes.

use buzz_conformance::harness_support::relay::tags;
use buzz_conformance::harness_support::{
    HarnessProc, Observer, TestRelay, agent_events, harness_command, post, wait_until,
};
use buzz_contract::nip_oa::AuthTag;
use nostr_sdk::prelude::{Keys, Kind, ToBech32};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
const AGENT: &str = env!("CARGO_BIN_EXE_acp-test-agent");
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const WAIT: Duration = Duration::from_secs(20);

struct World {
    relay: TestRelay,
    obs: Observer,
    agent: Keys,
    owner: Keys,
    log: PathBuf,
    _tmp: tempfile::TempDir,
}

impl World {
    async fn new() -> World {
        World::with_relay(TestRelay::start().await).await
    }

    async fn with_relay(relay: TestRelay) -> World {
        let obs = Observer::start(&relay.url).await;
        let tmp = tempfile::tempdir().unwrap();
        World {
            obs,
            agent: Keys::generate(),
            owner: Keys::generate(),
            log: tmp.path().join("agent.log"),
            _tmp: tmp,
            relay,
        }
    }

    /// The base environment: identity, the test agent in `mode`, short test durations.
    fn env(&self, mode: &str) -> HashMap<String, String> {
        let mut e = HashMap::new();
        for (k, v) in [
            ("BUZZ_RELAY_URL", self.relay.url.clone()),
            ("BUZZ_PRIVATE_KEY", self.agent.secret_key().to_bech32().unwrap()),
            ("BUZZ_ACP_AGENT_OWNER", self.owner.public_key().to_hex()),
            ("BUZZ_ACP_AGENT_COMMAND", AGENT.to_string()),
            ("BUZZ_ACP_AGENT_ARGS", format!(" {mode} ,")),
            ("ACP_TEST_AGENT_LOG", self.log.display().to_string()),
            ("BUZZ_ACP_RECONNECT_BASE_MS", "200".into()),
            ("BUZZ_ACP_SHUTDOWN_BUDGET_SECS", "15".into()),
            ("BUZZ_ACP_KILL_GRACE_MS", "1000".into()),
            ("BUZZ_ACP_CANCEL_GRACE_MS", "2000".into()),
            ("BUZZ_ACP_RESPAWN_BACKOFF_MS", "100".into()),
            ("BUZZ_ACP_LOG", "debug".into()),
        ] {
            e.insert(k.to_string(), v);
        }
        e
    }

    /// [`World::env`] with `extra` set on top.
    fn env_with(&self, mode: &str, extra: &[(&str, &str)]) -> HashMap<String, String> {
        let mut e = self.env(mode);
        for (k, v) in extra {
            e.insert(k.to_string(), v.to_string());
        }
        e
    }

    fn spawn(&self, env: &HashMap<String, String>) -> HarnessProc {
        HarnessProc::spawn(harness_command(HARNESS, env))
    }

    /// Spawns the harness on `env` and waits for its presence `online`.
    async fn start(&self, env: &HashMap<String, String>) -> HarnessProc {
        let h = self.spawn(env);
        self.wait_online().await;
        h
    }

    /// Waits until the test agent has logged an `event`.
    async fn wait_agent_event(&self, event: &str) {
        wait_until(WAIT, || {
            (!agent_events(&self.log, event).is_empty()).then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("the test agent logged no {event}"));
    }

    async fn mention(&self, from: &Keys, channel: &str, content: &str) -> nostr_sdk::prelude::Event {
        post(&self.relay.url, from, channel, &self.agent, content, vec![]).await
    }

    async fn wait_online(&self) {
        self.obs
            .wait_presence(WAIT, &self.agent, "online")
            .await
            .expect("agent online");
    }

    async fn wait_offline(&self) -> Instant {
        self.obs
            .wait_presence(WAIT, &self.agent, "offline")
            .await
            .expect("agent offline")
            .at
    }

    fn replies_to(&self, mention: &nostr_sdk::prelude::Event) -> Vec<nostr_sdk::prelude::Event> {
        let id = mention.id.to_hex();
        self.obs
            .messages_of(&self.agent)
            .into_iter()
            .map(|s| s.event)
            .filter(|e| tags(e).iter().any(|t| t.len() >= 2 && t[0] == "e" && t[1] == id))
            .collect()
    }

    async fn wait_reply(&self, mention: &nostr_sdk::prelude::Event) -> nostr_sdk::prelude::Event {
        wait_until(WAIT, || self.replies_to(mention).into_iter().next())
            .await
            .expect("a reply")
    }
}

/// Waits until `n` captured lines contain `needle`.
async fn wait_count(h: &HarnessProc, needle: &str, n: usize) {
    wait_until(WAIT, || (h.count_lines(needle) >= n).then_some(()))
        .await
        .unwrap_or_else(|| panic!("{n} × {needle:?}; stderr:\n{}", h.stderr()));
}

/// SIGTERM, and the harness must exit 0 within [`WAIT`].
async fn stop_gracefully(h: &mut HarnessProc) {
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "stderr:\n{}", h.stderr());
}

mod control;
mod doze;
mod exits;
mod hardening;
mod history;
mod identity;
mod permissions;
mod presence;
mod probe;
mod published;
mod stop;
mod telemetry;
mod wake;
