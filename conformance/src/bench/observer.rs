//! The `observer` benchmark (issue 34 "Figures"): printed, never asserted.
//! The real `buzz-acp` with the real `acp-test-agent` on the in-process
//! NIP-42 relay, watched by an independent subscriber.
//!
//! - `off_*` and `on_*`: [`TURNS`] turns, each a quiet tool then a
//!   streamed thought of [`CHUNKS_PER_TURN`] chunks, with the observer off
//!   and on: the harness's CPU per turn (`cpu_ms_per_turn`, `utime +
//!   stime`), its peak RSS (`hwm_mb`), and the frames the owner got;
//! - `chatty_*`: one turn whose agent streams a chunk every millisecond for
//!   [`CHATTY`]: the frames a second that reached the owner, and the frames
//!   the harness counted as skipped in its gap frames (the rate bound at
//!   work, nothing dropped silently).

use super::harness::sibling;
use crate::harness_support::{HarnessProc, Observer, TestRelay, harness_command, post};
use anyhow::anyhow;
use buzz_contract::observer::{self, Frame, Gap};
use nostr_sdk::prelude::{Keys, Kind, ToBech32, nip44};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Turns per observer setting.
pub const TURNS: usize = 20;
/// Thought chunks streamed per turn (one every 5 ms).
pub const CHUNKS_PER_TURN: u64 = 40;
/// How long the chatty turn streams.
pub const CHATTY: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(60);

struct Run {
    agent: Keys,
    owner: Keys,
    h: HarnessProc,
}

fn env(
    relay: &str,
    agent_bin: &str,
    agent: &Keys,
    owner: &Keys,
    observer: bool,
    step_ms: u64,
) -> HashMap<String, String> {
    [
        ("BUZZ_RELAY_URL", relay.to_string()),
        (
            "BUZZ_PRIVATE_KEY",
            agent.secret_key().to_bech32().unwrap_or_default(),
        ),
        ("BUZZ_ACP_AGENT_OWNER", owner.public_key().to_hex()),
        ("BUZZ_ACP_AGENT_COMMAND", agent_bin.to_string()),
        ("BUZZ_ACP_AGENT_ARGS", "echo".to_string()),
        ("ACP_TEST_AGENT_STEP_MS", step_ms.to_string()),
        ("BUZZ_ACP_RELAY_OBSERVER", observer.to_string()),
        ("BUZZ_ACP_LOG", "warn".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

async fn start(
    relay: &TestRelay,
    obs: &Observer,
    agent_bin: &str,
    observer: bool,
    step_ms: u64,
) -> anyhow::Result<Run> {
    let (agent, owner) = (Keys::generate(), Keys::generate());
    let h = HarnessProc::spawn(harness_command(
        &sibling("buzz-acp-under-test")?.display().to_string(),
        &env(&relay.url, agent_bin, &agent, &owner, observer, step_ms),
    ));
    obs.wait_presence(WAIT, &agent, "online")
        .await
        .ok_or_else(|| anyhow!("the harness never came online"))?;
    Ok(Run { agent, owner, h })
}

/// Sends `text` and waits for the agent's reply to it.
async fn turn(relay: &TestRelay, obs: &Observer, r: &Run, text: &str) -> anyhow::Result<()> {
    let m = post(&relay.url, &r.owner, "bench", &r.agent, text, vec![]).await;
    let id = m.id.to_hex();
    obs.wait_for(WAIT, |e| {
        e.pubkey == r.agent.public_key()
            && e.kind == Kind::from(9)
            && e.tags.iter().any(|t| t.as_slice().get(1) == Some(&id))
    })
    .await
    .map(|_| ())
    .ok_or_else(|| anyhow!("no reply to {text:?}"))
}

fn frames(obs: &Observer, r: &Run) -> Vec<Frame> {
    obs.matching(|e| e.pubkey == r.agent.public_key() && e.kind == Kind::from(observer::KIND))
        .into_iter()
        .filter_map(|s| {
            let plain = nip44::decrypt(r.owner.secret_key(), &s.event.pubkey, &s.event.content).ok()?;
            serde_json::from_str(&plain).ok()
        })
        .collect()
}

async fn stop(mut r: Run) {
    r.h.signal(libc::SIGTERM);
    r.h.wait_exit(WAIT).await;
}

/// CPU ms per turn, peak RSS MB and frames, for one setting.
async fn per_turn(
    relay: &TestRelay,
    obs: &Observer,
    agent_bin: &str,
    observer: bool,
) -> anyhow::Result<(f64, f64, usize)> {
    let r = start(relay, obs, agent_bin, observer, 5).await?;
    let pid = r.h.pid as u32;
    // One turn first: the agent's spawn and its session are not a turn's cost.
    turn(relay, obs, &r, "warm up").await?;
    let before = super::cpu_s(pid)?;
    let slow = CHUNKS_PER_TURN * 5;
    for i in 0..TURNS {
        turn(relay, obs, &r, &format!("[tool:20][slow:{slow}] turn {i}")).await?;
    }
    let cpu = (super::cpu_s(pid)? - before) * 1000.0 / TURNS as f64;
    let hwm = super::hwm_mb(pid)?;
    // Paced frames still on their way.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let n = frames(obs, &r).len();
    stop(r).await;
    Ok((cpu, hwm, n))
}

/// Frames a second that reached the owner during a chatty turn, and the
/// frames the harness said it skipped.
async fn chatty(relay: &TestRelay, obs: &Observer, agent_bin: &str) -> anyhow::Result<(f64, u64, f64)> {
    let r = start(relay, obs, agent_bin, true, 1).await?;
    turn(relay, obs, &r, "warm up").await?;
    let before = frames(obs, &r).len();
    let began = Instant::now();
    turn(relay, obs, &r, &format!("[slow:{}] chatter", CHATTY.as_millis())).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let took = began.elapsed().as_secs_f64();
    let all = frames(obs, &r);
    let skipped: u64 = all
        .iter()
        .filter(|f| f.kind == observer::GAP)
        .filter_map(|f| serde_json::from_value::<Gap>(f.payload.clone()).ok())
        .map(|g| g.dropped_events)
        .sum();
    let rate = (all.len() - before) as f64 / took;
    let hwm = super::hwm_mb(r.h.pid as u32)?;
    stop(r).await;
    Ok((rate, skipped, hwm))
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<serde_json::Value> {
    let agent_bin = sibling("acp-test-agent")?.display().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let relay = TestRelay::start_nodelay().await;
        let obs = Observer::start(&relay.url).await;
        let (off_cpu, off_hwm, off_frames) = per_turn(&relay, &obs, &agent_bin, false).await?;
        let (on_cpu, on_hwm, on_frames) = per_turn(&relay, &obs, &agent_bin, true).await?;
        let (rate, skipped, chatty_hwm) = chatty(&relay, &obs, &agent_bin).await?;
        Ok(serde_json::json!({
            "turns": TURNS,
            "chunks_per_turn": CHUNKS_PER_TURN,
            "off_cpu_ms_per_turn": round1(off_cpu),
            "on_cpu_ms_per_turn": round1(on_cpu),
            "off_hwm_mb": round1(off_hwm),
            "on_hwm_mb": round1(on_hwm),
            "off_frames": off_frames,
            "on_frames": on_frames,
            "chatty_frames_per_s": round1(rate),
            "chatty_skipped_frames": skipped,
            "chatty_hwm_mb": round1(chatty_hwm),
        }))
    })
}
