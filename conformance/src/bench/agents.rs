//! The `agents` benchmark (issue "real coding agents"): per real agent
//! (claude-agent-acp, codex-acp, gemini-cli) behind the real harness, with
//! the fake model API answering at once; printed, never asserted.
//!
//! Keys per agent: `spawn_to_initialize_ms` and `session_new_ms` (from the
//! harness's own log lines), `first_mention_to_reply_ms` (publish → the
//! reply seen on the relay, `session/new` included) and
//! `warm_mention_to_reply_ms` (the same channel again: the session is
//! reused), `restart_mention_to_reply_ms` and `restart_step` (a stop, a new
//! harness on the same HOME and workdir, and a mention in the same channel:
//! the conversation brought back by the step the agent's preset takes,
//! issue 32), `peak_rss_mb` (the summed VmRSS of the agent's process group,
//! sampled every 50 ms from spawn to the second reply), `image_archive_mb`
//! and `image_mb` (the `buzz-sprig-<agent>` OCI archive, and the image
//! uncompressed, when `scripts/image-build.sh --agent` has built it: its env
//! file `$BUZZ_IMAGE_CACHE/image-<agent>.env`; else null).

use crate::bench::harness::sibling;
use crate::fake_model::agents::RealAgent;
use crate::fake_model::{Script, Turn};
use crate::harness_support::{HarnessProc, harness_command, wait_until};
use crate::real_agents_support::AgentWorld;
use anyhow::{Context, anyhow};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);

/// The summed VmRSS, in KiB, of every process in process group `pgid`.
fn group_rss_kb(pgid: i32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    // pgrp is the 3rd field after the parenthesised command.
                    let rest = &s[s.rfind(')')? + 2..];
                    rest.split_whitespace().nth(2)?.parse::<i32>().ok()
                })
                == Some(pgid)
        })
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

/// The number after `key=` in the first harness log line containing `needle`.
fn logged_ms(h: &HarnessProc, needle: &str, key: &str) -> Option<f64> {
    let lines = h.lines.lock().ok()?;
    let line = lines.iter().find(|l| l.text.contains(needle))?;
    let at = line.text.find(&format!("{key}="))? + key.len() + 1;
    line.text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The quoted value of `key=` on the first harness log line containing `needle`.
fn logged_str(h: &HarnessProc, needle: &str, key: &str) -> Option<String> {
    let lines = h.lines.lock().ok()?;
    let line = lines.iter().find(|l| l.text.contains(needle))?;
    let at = line.text.find(&format!("{key}=\""))? + key.len() + 2;
    Some(line.text[at..].split('"').next()?.to_string())
}

/// After a stop: a new harness on the same world, its own `online` seen
/// (one more than `before`), then the first mention in `c1` timed to its
/// reply. Returns the time and the step that brought the conversation back.
async fn restarted(
    harness: &str,
    w: &AgentWorld,
    env: &std::collections::HashMap<String, String>,
) -> anyhow::Result<(f64, String)> {
    let online = || {
        w.obs
            .presence_of(&w.agent)
            .into_iter()
            .filter(|s| s.event.content == "online")
            .count()
    };
    let before = online();
    let mut h = HarnessProc::spawn(harness_command(harness, env));
    wait_until(WAIT, || (online() > before).then_some(()))
        .await
        .context("the restarted harness never came online")?;
    let t = Instant::now();
    let m = w.mention("c1", "and after the restart?").await;
    w.wait_reply(&m, WAIT).await;
    let took = t.elapsed().as_secs_f64() * 1000.0;
    let step = logged_str(&h, "conversation brought back", "step")
        .context("the restarted harness did not bring the conversation back")?;
    h.signal(libc::SIGTERM);
    h.wait_exit(WAIT).await;
    Ok((took.round(), step))
}

fn agent_pid(h: &HarnessProc) -> Option<i32> {
    let lines = h.lines.lock().ok()?;
    let line = lines.iter().find(|l| l.text.contains("agent spawned"))?;
    let at = line.text.find("pid=")? + 4;
    line.text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The variant image's sizes in MB (the OCI archive, and uncompressed as
/// podman stores it), from image-build.sh's env file for it.
fn image_mb(agent: RealAgent) -> Option<(f64, f64)> {
    let cache = std::env::var_os("BUZZ_IMAGE_CACHE")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(std::path::PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))?;
            Some(base.join("buzz-image"))
        })?;
    let name = agent.preset_name();
    let env = std::fs::read_to_string(cache.join(format!("image-{name}.env"))).ok()?;
    let value = |suffix: &str| {
        env.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            let v: f64 = v.trim_matches(['\'', '"']).parse().ok()?;
            k.ends_with(suffix).then_some((v / 1_048_576.0).round())
        })
    };
    Some((value("_IMAGE_ARCHIVE_SIZE")?, value("_IMAGE_SIZE")?))
}

async fn one(harness: &str, agent: RealAgent) -> anyhow::Result<serde_json::Value> {
    let w = AgentWorld::new(Script::new().turn(Turn::text("ok"))).await;
    let env = w.env(agent);
    let mut h = HarnessProc::spawn(harness_command(harness, &env));
    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    w.wait_online(WAIT).await;
    let deadline = Instant::now() + WAIT;
    let pid = loop {
        if let Some(p) = agent_pid(&h) {
            break p;
        }
        anyhow::ensure!(Instant::now() < deadline, "the agent never spawned");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        tokio::task::spawn_blocking(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(group_rss_kb(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let t = Instant::now();
    let m = w.mention("c1", "hello").await;
    w.wait_reply(&m, WAIT).await;
    let first = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let m = w.mention("c1", "again").await;
    w.wait_reply(&m, WAIT).await;
    let warm = t.elapsed().as_secs_f64() * 1000.0;
    done.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    let init = logged_ms(&h, "agent initialized", "since_spawn_ms").context("no initialize figure")?;
    let new = logged_ms(&h, "session opened", "took_ms").context("no session/new figure")?;
    h.signal(libc::SIGTERM);
    h.wait_exit(WAIT).await;
    let (restart, step) = restarted(harness, &w, &env).await?;
    Ok(serde_json::json!({
        "spawn_to_initialize_ms": init,
        "session_new_ms": new,
        "first_mention_to_reply_ms": first.round(),
        "warm_mention_to_reply_ms": warm.round(),
        "restart_mention_to_reply_ms": restart,
        "restart_step": step,
        "peak_rss_mb": (peak.load(Ordering::Relaxed) as f64 / 1024.0).round(),
        "image_archive_mb": image_mb(agent).map(|s| s.0),
        "image_mb": image_mb(agent).map(|s| s.1),
    }))
}

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<serde_json::Value> {
    let harness = sibling("buzz-acp-under-test")?.display().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let mut out = serde_json::Map::new();
        for agent in RealAgent::ALL {
            let figures = one(&harness, agent)
                .await
                .map_err(|e| anyhow!("{}: {e:#}", agent.preset_name()))?;
            out.insert(agent.preset_name().to_string(), figures);
        }
        Ok(serde_json::Value::Object(out))
    })
}
