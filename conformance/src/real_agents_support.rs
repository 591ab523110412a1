//! Real coding agents behind the real harness (issue "real coding agents"):
//! a relay with NIP-42, an observer, a [`FakeModel`], and the environment
//! `buzz-acp` gets to run one of the three real ACP agents by its preset's
//! command *name* (spec §Launch data), found on `PATH` as a user's
//! `npm install -g` would put it. The agent's keys and endpoints come as
//! env, the way a record's `--env-file` delivers them.
//!
//! Shared by `tests/real_agents.rs` and the `agents` benchmark.

use crate::fake_model::agents::{RealAgent, agents_bin_dir};
use crate::fake_model::{FakeModel, Script};
use crate::harness_support::nostr_rs_relay::AnyRelay;
use crate::harness_support::relay::tags;
use crate::harness_support::{Observer, post, wait_until};
use nostr_sdk::prelude::{Event, Keys, ToBech32};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// The fake keys the agents are given (canaries: they must never appear
/// in what the harness publishes).
pub const ANTHROPIC_KEY: &str = "sk-ant-fake-key-canary-7f3a";
pub const OPENAI_KEY: &str = "sk-fake-openai-canary-91bd";
pub const GEMINI_KEY: &str = "fake-gemini-canary-c40e";

/// A relay, an observer, identities, a fake model API and a workdir.
pub struct AgentWorld {
    pub relay: AnyRelay,
    pub obs: Observer,
    pub agent: Keys,
    pub owner: Keys,
    pub fake: FakeModel,
    /// The agent's working directory (`BUZZ_ACP_CWD`).
    pub work: PathBuf,
    /// The agent's HOME (fresh: no config of the machine's user).
    pub home: PathBuf,
    /// The directory holding the agents' bins.
    pub bin_dir: PathBuf,
    _tmp: tempfile::TempDir,
}

const LOOPBACK: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

impl AgentWorld {
    /// Starts everything on loopback. Panics with the install command when
    /// the agents are not installed.
    pub async fn new(script: Script) -> AgentWorld {
        AgentWorld::on(AnyRelay::own(LOOPBACK).await, script).await
    }

    /// [`AgentWorld::new`] with nostr-rs-relay as the relay (issue 35).
    pub async fn on_production_relay(script: Script) -> AgentWorld {
        AgentWorld::on(AnyRelay::production(LOOPBACK), script).await
    }

    async fn on(relay: AnyRelay, script: Script) -> AgentWorld {
        let bin_dir = agents_bin_dir().unwrap_or_else(|e| panic!("{e}"));
        let obs = Observer::start(&relay.url).await;
        let tmp = tempfile::tempdir().expect("tempdir");
        let (work, home) = (tmp.path().join("work"), tmp.path().join("home"));
        std::fs::create_dir_all(&work).expect("workdir");
        std::fs::create_dir_all(&home).expect("home");
        AgentWorld {
            relay,
            obs,
            agent: Keys::generate(),
            owner: Keys::generate(),
            fake: FakeModel::start(script),
            work,
            home,
            bin_dir,
            _tmp: tmp,
        }
    }

    /// The harness environment for `agent`: identity, the preset's command
    /// name, `PATH` with the agents' bins, a fresh HOME, the workdir, and the
    /// agent's key and endpoint.
    pub fn env(&self, agent: RealAgent) -> HashMap<String, String> {
        let mut e: HashMap<String, String> = [
            ("BUZZ_RELAY_URL", self.relay.url.clone()),
            (
                "BUZZ_PRIVATE_KEY",
                self.agent.secret_key().to_bech32().expect("nsec"),
            ),
            ("BUZZ_ACP_AGENT_OWNER", self.owner.public_key().to_hex()),
            ("BUZZ_ACP_AGENT_COMMAND", agent.command().to_string()),
            (
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", self.bin_dir.display()),
            ),
            ("HOME", self.home.display().to_string()),
            ("BUZZ_ACP_CWD", self.work.display().to_string()),
            ("BUZZ_ACP_IDLE_TIMEOUT", "60".into()),
            ("BUZZ_ACP_SHUTDOWN_BUDGET_SECS", "15".into()),
            ("BUZZ_ACP_KILL_GRACE_MS", "1000".into()),
            ("BUZZ_ACP_RECONNECT_BASE_MS", "200".into()),
            ("BUZZ_ACP_LOG", "info".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut set = |k: &str, v: String| e.insert(k.to_string(), v);
        match agent {
            RealAgent::Claude => {
                set("ANTHROPIC_BASE_URL", self.fake.anthropic_base_url());
                set("ANTHROPIC_API_KEY", ANTHROPIC_KEY.into());
                // A failing API fails the turn at once instead of retrying.
                set("CLAUDE_CODE_MAX_RETRIES", "0".into());
            }
            RealAgent::Codex => {
                set("OPENAI_API_KEY", OPENAI_KEY.into());
                set("OPENAI_BASE_URL", self.fake.openai_base_url());
            }
            RealAgent::Gemini => {
                set("GEMINI_API_KEY", GEMINI_KEY.into());
                set("GOOGLE_GEMINI_BASE_URL", self.fake.gemini_base_url());
            }
        }
        e
    }

    /// The owner mentions the agent in `channel`.
    pub async fn mention(&self, channel: &str, content: &str) -> Event {
        post(
            &self.relay.url,
            &self.owner,
            channel,
            &self.agent,
            content,
            vec![],
        )
        .await
    }

    /// Waits for the agent's presence `online`.
    pub async fn wait_online(&self, timeout: Duration) {
        self.obs
            .wait_presence(timeout, &self.agent, "online")
            .await
            .expect("the agent came online");
    }

    /// The agent's kind 9 events that reply to `mention`, oldest first.
    pub fn replies_to(&self, mention: &Event) -> Vec<Event> {
        let id = mention.id.to_hex();
        self.obs
            .messages_of(&self.agent)
            .into_iter()
            .map(|s| s.event)
            .filter(|e| tags(e).iter().any(|t| t.len() >= 2 && t[0] == "e" && t[1] == id))
            .collect()
    }

    /// Waits for the `n`-th reply to `mention` (1-based).
    pub async fn wait_reply_n(&self, mention: &Event, n: usize, timeout: Duration) -> Event {
        wait_until(timeout, || self.replies_to(mention).into_iter().nth(n - 1))
            .await
            .unwrap_or_else(|| panic!("reply {n} to the mention within {timeout:?}"))
    }

    /// Waits for the first reply to `mention`.
    pub async fn wait_reply(&self, mention: &Event, timeout: Duration) -> Event {
        self.wait_reply_n(mention, 1, timeout).await
    }

    /// Kills every process whose environment names this world's HOME: the
    /// agents of a harness that did not get to stop them (a failed test
    /// drops its harness with SIGKILL, and a harness killed that way cannot
    /// reap its agents' process groups).
    fn kill_leftovers(&self) {
        let needle = format!("HOME={}", self.home.display()).into_bytes();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return;
        };
        for pid in dir
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        {
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            if environ.split(|b| *b == 0).any(|kv| kv == needle.as_slice()) {
                // SAFETY: kill(2) on a pid just read from /proc.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }

    /// The contents of a file in the workdir, if it exists.
    pub fn work_file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.work.join(name)).ok()
    }
}

impl Drop for AgentWorld {
    fn drop(&mut self) {
        self.kill_leftovers();
    }
}
