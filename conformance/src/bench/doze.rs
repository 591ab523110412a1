//! The `doze` benchmark (issue 50, Figures): per real agent (claude-agent-acp,
//! codex-acp) behind the real harness, with the fake model API answering at
//! once and a doze bound of [`DOZE_SECS`]; printed, never asserted.
//!
//! Keys per agent:
//! - `awake_rss_mb`: the harness and its agent's processes, summed VmRSS,
//!   after a turn;
//! - `dozing_rss_mb`: the harness alone once it dozes (its agents ended;
//!   issue 50's goal: ≤ 16 MB);
//! - `first_mention_to_reply_ms`: the run's first mention (the agent
//!   started for it, `session/new`);
//! - `awake_mention_to_reply_ms`: a second mention while the agent runs;
//! - `dozing_mention_to_reply_ms`: a mention to the dozing harness: an agent
//!   started again and its conversation resumed (issue 50's goal: ≤ 3 s
//!   p50); the step it took is `doze_step`;
//! - `dozing_cpu_ms` over `dozing_secs` (`BUZZ_BENCH_DOZE_WINDOW_SECS`,
//!   default 60; the issue asks for 600): the harness's user + system CPU
//!   while it dozes, presence renewals and the reaper's checks included.
//!
//! A waker's wake from sleep is `bench wake`'s figure.

use crate::bench::harness::sibling;
use crate::fake_model::agents::RealAgent;
use crate::fake_model::{Script, Turn};
use crate::harness_support::{HarnessProc, children_of, harness_command, wait_until};
use crate::real_agents_support::AgentWorld;
use anyhow::{Context, anyhow};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);
/// The doze bound the harness runs with.
pub const DOZE_SECS: u64 = 3;

/// VmRSS of `pid`, in KiB.
fn rss_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// `pid` and every process below it.
fn tree(pid: i32) -> Vec<i32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        all.extend(children_of(all[i]));
        i += 1;
    }
    all
}

/// User + system CPU of `pid` so far, in milliseconds.
fn cpu_ms(pid: i32) -> u64 {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s[s.rfind(')')? + 2..].split_whitespace().collect::<Vec<_>>();
            // utime and stime: fields 14 and 15, the 12th and 13th after the state.
            Some(rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    // SAFETY: sysconf reads a constant of the running kernel.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100);
    ticks * 1000 / hz.max(1)
}

fn mb(kb: u64) -> f64 {
    (kb as f64 / 102.4).round() / 10.0
}

async fn timed_reply(w: &AgentWorld, text: &str) -> f64 {
    let t = Instant::now();
    let m = w.mention("c1", text).await;
    w.wait_reply(&m, WAIT).await;
    (t.elapsed().as_secs_f64() * 1000.0).round()
}

async fn one(harness: &str, agent: RealAgent, window: Duration) -> anyhow::Result<serde_json::Value> {
    let w = AgentWorld::new(
        Script::new()
            .turn(Turn::text("one"))
            .turn(Turn::text("two"))
            .turn(Turn::text("three")),
    )
    .await;
    let mut env = w.env(agent);
    env.insert("BUZZ_ACP_DOZE".into(), DOZE_SECS.to_string());
    env.insert("BUZZ_ACP_LAZY_POOL".into(), "true".into());
    env.insert("BUZZ_ACP_REAPER_CHECK_MS".into(), "200".into());
    let mut h = HarnessProc::spawn(harness_command(harness, &env));
    w.wait_online(WAIT).await;
    let first = timed_reply(&w, "remember the word zebra").await;
    let awake = timed_reply(&w, "and again").await;
    let awake_rss: u64 = tree(h.pid).into_iter().map(rss_kb).sum();
    wait_until(WAIT, || children_of(h.pid).is_empty().then_some(()))
        .await
        .context("the agent never ended for the doze")?;
    let cpu0 = cpu_ms(h.pid);
    tokio::time::sleep(window).await;
    let dozing_cpu = cpu_ms(h.pid) - cpu0;
    let dozing_rss = rss_kb(h.pid);
    anyhow::ensure!(children_of(h.pid).is_empty(), "an agent started while dozing");
    let dozing = timed_reply(&w, "which word?").await;
    let step = {
        let lines = h.lines.lock().map_err(|_| anyhow!("the log lock"))?;
        lines
            .iter()
            .rev()
            .find(|l| l.text.contains("conversation brought back"))
            .and_then(|l| {
                l.text
                    .split("step=\"")
                    .nth(1)?
                    .split('"')
                    .next()
                    .map(str::to_string)
            })
    };
    h.signal(libc::SIGTERM);
    h.wait_exit(WAIT).await;
    Ok(serde_json::json!({
        "awake_rss_mb": mb(awake_rss),
        "dozing_rss_mb": mb(dozing_rss),
        "first_mention_to_reply_ms": first,
        "awake_mention_to_reply_ms": awake,
        "dozing_mention_to_reply_ms": dozing,
        "doze_step": step,
        "dozing_cpu_ms": dozing_cpu,
        "dozing_secs": window.as_secs(),
    }))
}

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<serde_json::Value> {
    let harness = sibling("buzz-acp-under-test")?.display().to_string();
    let window = std::env::var("BUZZ_BENCH_DOZE_WINDOW_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(60), Duration::from_secs);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let mut out = serde_json::Map::new();
        for agent in [RealAgent::Claude, RealAgent::Codex] {
            let figures = one(&harness, agent, window)
                .await
                .map_err(|e| anyhow!("{}: {e:#}", agent.preset_name()))?;
            out.insert(agent.preset_name().to_string(), figures);
        }
        Ok(serde_json::Value::Object(out))
    })
}
