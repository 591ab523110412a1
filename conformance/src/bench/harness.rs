//! The `harness` benchmark (issue 4): figures for `buzz-acp` against the
//! in-process relay with the real `acp-test-agent`, printed, never asserted.
//!
//! Keys: `idle_rss_mb` (lazy pool, online, idle), `mention_to_prompt_ms_p50`
//! and `_p99` (200 sequential mentions, publish → the agent receiving
//! `session/prompt`), `shutdown_32_stuck_ms` (SIGTERM → exit with 32 slots
//! whose agents ignore cancel and SIGTERM, default budget: each is cancelled
//! once silent for the stall bound), `shutdown_progressing_ms` and
//! `progressing_reply_published` (one stalled prompt and one that streams for
//! 6 s: the stop waits for the progressing one only), `reaper_late_ms`
//! (how long after T = 2 s the reaper fired, lazy pool never woken),
//! `flood_rss_mb` (RSS once 10 000 mentions from a stranger in `anyone` mode,
//! over 100 channels, have reached an agent that never answers: the queue
//! bounds hold memory flat).

use crate::harness_support::{HarnessProc, Observer, TestRelay, agent_events, harness_command, wait_until};
use anyhow::{Context, anyhow};
use nostr_sdk::prelude::{Client, EventBuilder, Keys, Kind, Tag, ToBech32};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const MENTIONS: usize = 200;

/// Finds (building if needed) a binary of this crate beside the bench binary.
pub(crate) fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| anyhow!("no exe dir"))?;
    let path = dir.join(name);
    // Under `cargo run` (CARGO is set) always ask cargo, so a stale sibling is rebuilt.
    if !path.exists() || std::env::var_os("CARGO").is_some() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let release = dir.file_name().is_some_and(|n| n == "release");
        let mut c = std::process::Command::new(cargo);
        c.args(["build", "--quiet", "-p", "buzz-conformance", "--bin", name]);
        if release {
            c.arg("--release");
        }
        let status = c.status().context("building a bench binary")?;
        anyhow::ensure!(status.success(), "building {name} failed");
    }
    Ok(path)
}

struct Bench {
    harness: String,
    agent: String,
    relay: TestRelay,
    obs: Observer,
    tmp: tempfile::TempDir,
}

impl Bench {
    fn env(&self, agent: &Keys, owner: &Keys, mode: &str, log: &Path) -> HashMap<String, String> {
        [
            ("BUZZ_RELAY_URL", self.relay.url.clone()),
            (
                "BUZZ_PRIVATE_KEY",
                agent.secret_key().to_bech32().unwrap_or_default(),
            ),
            ("BUZZ_ACP_AGENT_OWNER", owner.public_key().to_hex()),
            ("BUZZ_ACP_AGENT_COMMAND", self.agent.clone()),
            ("BUZZ_ACP_AGENT_ARGS", mode.to_string()),
            ("ACP_TEST_AGENT_LOG", log.display().to_string()),
            ("BUZZ_ACP_LOG", "info".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    async fn online(&self, agent: &Keys) -> anyhow::Result<()> {
        let pk = agent.public_key();
        self.obs
            .wait_for(Duration::from_secs(30), |e| {
                e.kind == Kind::from(20001) && e.pubkey == pk && e.content == "online"
            })
            .await
            .map(|_| ())
            .ok_or_else(|| anyhow!("harness never came online"))
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn idle_rss(b: &Bench) -> anyhow::Result<f64> {
    let (agent, owner) = (Keys::generate(), Keys::generate());
    let mut env = b.env(&agent, &owner, "echo", &b.tmp.path().join("rss.log"));
    env.insert("BUZZ_ACP_LAZY_POOL".into(), "true".into());
    let mut h = HarnessProc::spawn(harness_command(&b.harness, &env));
    b.online(&agent).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss = super::rss_mb(h.pid as u32)?;
    h.signal(libc::SIGTERM);
    h.wait_exit(Duration::from_secs(30)).await;
    Ok(rss)
}

async fn mention_latency(b: &Bench) -> anyhow::Result<(f64, f64)> {
    let (agent, owner) = (Keys::generate(), Keys::generate());
    let log = b.tmp.path().join("latency.log");
    let mut h = HarnessProc::spawn(harness_command(&b.harness, &b.env(&agent, &owner, "echo", &log)));
    b.online(&agent).await?;
    let client = Client::builder().signer(owner.clone()).build();
    client.add_relay(b.relay.url.as_str()).await?;
    client.connect().await;
    client.wait_for_connection(Duration::from_secs(5)).await;
    let mut lat = Vec::with_capacity(MENTIONS);
    for i in 0..MENTIONS {
        let ev = EventBuilder::new(Kind::from(9), format!("m{i}"))
            .tags([
                Tag::parse(["h", "bench"])?,
                Tag::parse(["p", &agent.public_key().to_hex()])?,
            ])
            .sign_with_keys(&owner)?;
        let sent = now_ms();
        client.send_event(&ev).await?;
        let want = format!("m{i}");
        let got = wait_until(Duration::from_secs(30), || {
            agent_events(&log, "prompt")
                .into_iter()
                .find(|v| v["text"] == want.as_str())
                .and_then(|v| v["t_ms"].as_u64())
        })
        .await
        .ok_or_else(|| anyhow!("mention {i} never reached the agent"))?;
        lat.push(got.saturating_sub(sent) as f64);
        // Wait for the reply so that every mention finds the channel idle.
        let id = ev.id;
        b.obs
            .wait_for(Duration::from_secs(30), |e| {
                e.pubkey == agent.public_key()
                    && e.tags.iter().any(|t| t.as_slice().get(1) == Some(&id.to_hex()))
            })
            .await
            .ok_or_else(|| anyhow!("mention {i} got no reply"))?;
    }
    client.shutdown().await;
    h.signal(libc::SIGTERM);
    h.wait_exit(Duration::from_secs(30)).await;
    lat.sort_by(|a, b| a.total_cmp(b));
    Ok((percentile(&lat, 50.0), percentile(&lat, 99.0)))
}

async fn shutdown_stuck(b: &Bench) -> anyhow::Result<f64> {
    let (agent, owner) = (Keys::generate(), Keys::generate());
    let log = b.tmp.path().join("stuck.log");
    let mut env = b.env(&agent, &owner, "stuck", &log);
    env.insert("BUZZ_ACP_AGENTS".into(), "32".into());
    let mut h = HarnessProc::spawn(harness_command(&b.harness, &env));
    b.online(&agent).await?;
    for i in 0..32 {
        crate::harness_support::post(&b.relay.url, &owner, &format!("c{i}"), &agent, "stuck", vec![]).await;
    }
    wait_until(Duration::from_secs(60), || {
        (agent_events(&log, "prompt").len() == 32).then_some(())
    })
    .await
    .ok_or_else(|| anyhow!("32 turns never all started"))?;
    let t0 = Instant::now();
    h.signal(libc::SIGTERM);
    h.wait_exit(Duration::from_secs(120))
        .await
        .ok_or_else(|| anyhow!("harness did not exit"))?;
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

/// A stop with one stalled prompt (cancelled at once, ignores it and
/// SIGTERM) and one progressing prompt of 6 s: the time to exit, and whether
/// the progressing one's reply was published inside the drain.
async fn shutdown_progressing(b: &Bench) -> anyhow::Result<(f64, bool)> {
    let (agent, owner) = (Keys::generate(), Keys::generate());
    let log = b.tmp.path().join("progressing.log");
    let mut env = b.env(&agent, &owner, "ignore-cancel,ignore-sigterm", &log);
    env.insert("BUZZ_ACP_AGENTS".into(), "2".into());
    let mut h = HarnessProc::spawn(harness_command(&b.harness, &env));
    b.online(&agent).await?;
    crate::harness_support::post(&b.relay.url, &owner, "c1", &agent, "[hang]", vec![]).await;
    let slow =
        crate::harness_support::post(&b.relay.url, &owner, "c2", &agent, "[slow:6000] go", vec![]).await;
    wait_until(Duration::from_secs(60), || {
        (agent_events(&log, "prompt").len() == 2).then_some(())
    })
    .await
    .ok_or_else(|| anyhow!("the two turns never started"))?;
    let t0 = Instant::now();
    h.signal(libc::SIGTERM);
    h.wait_exit(Duration::from_secs(120))
        .await
        .ok_or_else(|| anyhow!("harness did not exit"))?;
    let took = t0.elapsed().as_secs_f64() * 1000.0;
    let id = slow.id.to_hex();
    let replied = wait_until(Duration::from_secs(5), || {
        b.obs
            .messages_of(&agent)
            .iter()
            .any(|s| {
                crate::harness_support::relay::tags(&s.event)
                    .iter()
                    .any(|t| t.len() >= 2 && t[1] == id)
            })
            .then_some(())
    })
    .await
    .is_some();
    Ok((took, replied))
}

async fn reaper_late(b: &Bench) -> anyhow::Result<f64> {
    let (agent, owner) = (Keys::generate(), Keys::generate());
    let mut env = b.env(&agent, &owner, "echo", &b.tmp.path().join("reaper.log"));
    env.insert("BUZZ_ACP_LAZY_POOL".into(), "true".into());
    env.insert("BUZZ_ACP_EXIT_AFTER_INACTIVITY".into(), "2".into());
    let mut h = HarnessProc::spawn(harness_command(&b.harness, &env));
    let start = h
        .wait_line(Duration::from_secs(30), "buzz-acp starting")
        .await
        .ok_or_else(|| anyhow!("no start line"))?;
    let fired = h
        .wait_line(Duration::from_secs(30), "inactivity bound reached")
        .await
        .ok_or_else(|| anyhow!("reaper never fired"))?;
    let secs = fired.secs_since(&start).ok_or_else(|| anyhow!("no timestamps"))?;
    h.wait_exit(Duration::from_secs(30)).await;
    Ok((secs - 2.0) * 1000.0)
}

async fn flood_rss(b: &Bench) -> anyhow::Result<f64> {
    const FLOOD: usize = 10_000;
    let (agent, owner, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let mut env = b.env(&agent, &owner, "hang", &b.tmp.path().join("flood.log"));
    env.insert("BUZZ_ACP_RESPOND_TO".into(), "anyone".into());
    env.insert("BUZZ_ACP_LOG".into(), "warn".into());
    let mut h = HarnessProc::spawn(harness_command(&b.harness, &env));
    b.online(&agent).await?;
    let client = Client::builder().signer(stranger.clone()).build();
    client.add_relay(b.relay.url.as_str()).await?;
    client.connect().await;
    client.wait_for_connection(Duration::from_secs(5)).await;
    for i in 0..FLOOD {
        let ev = EventBuilder::new(Kind::from(9), format!("flood {i}"))
            .tags([
                Tag::parse(["h", &format!("f{}", i % 100)])?,
                Tag::parse(["p", &agent.public_key().to_hex()])?,
            ])
            .sign_with_keys(&stranger)?;
        client.send_event(&ev).await?;
    }
    client.shutdown().await;
    // Every mention was either queued (at most 256 + one per slot) or shed.
    let shed_all = FLOOD - 256 - 1;
    wait_until(Duration::from_secs(120), || {
        let n = h
            .lines
            .lock()
            .ok()?
            .iter()
            .filter(|l| l.text.contains("mention shed"))
            .count();
        (n >= shed_all).then_some(())
    })
    .await
    .ok_or_else(|| anyhow!("the flood was not processed"))?;
    let rss = super::rss_mb(h.pid as u32)?;
    h.signal(libc::SIGTERM);
    h.wait_exit(Duration::from_secs(90)).await;
    Ok(rss)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<serde_json::Value> {
    let harness = sibling("buzz-acp-under-test")?.display().to_string();
    let agent = sibling("acp-test-agent")?.display().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let relay = TestRelay::start_nodelay().await;
        let obs = Observer::start(&relay.url).await;
        let b = Bench {
            harness,
            agent,
            relay,
            obs,
            tmp: tempfile::tempdir()?,
        };
        let idle_rss_mb = idle_rss(&b).await?;
        let (p50, p99) = mention_latency(&b).await?;
        let reaper = reaper_late(&b).await?;
        let stuck = shutdown_stuck(&b).await?;
        let (progressing, replied) = shutdown_progressing(&b).await?;
        let flood = flood_rss(&b).await?;
        Ok(serde_json::json!({
            "idle_rss_mb": round1(idle_rss_mb),
            "mention_to_prompt_ms_p50": round1(p50),
            "mention_to_prompt_ms_p99": round1(p99),
            "shutdown_32_stuck_ms": stuck.round(),
            "shutdown_progressing_ms": progressing.round(),
            "progressing_reply_published": replied,
            "reaper_late_ms": round1(reaper),
            "flood_rss_mb": round1(flood),
        }))
    })
}
