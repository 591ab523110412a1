//! The `history` benchmark (issue 34 "Figures": the Start page's time to
//! first paint with 1 000 turns of history, goal ≤ 500 ms): printed, never
//! asserted.
//!
//! The real harness with the scripted ACP agent answers [`TURNS`] mentions
//! on the in-process NIP-42 relay, each reporting its usage, so the relay
//! holds what a long-lived agent leaves: the mentions, the replies and one
//! sealed usage event per turn. Then the real `buzz-launcher ui` serves the
//! Start page to Debian's Chromium, headless (`ui-tests/history.mjs`):
//!
//! - `page_first_contentful_paint_ms`: the page's own first paint; the
//!   history is not loaded yet (its panel loads when opened);
//! - `page_card_ms`: navigation to the agent's card drawn;
//! - `history_panel_ms`: the click that opens "Conversation and usage" to
//!   its newest 100 turns, the usage total and both plots drawn (older
//!   turns follow a page a click, `history_older_pages_ms` for all of
//!   them) — the relay read,
//!   the owner's decryption of every usage event and the page's drawing;
//!   `history_api_conversation_ms` and `history_api_usage_ms` are its two
//!   API reads as the browser timed them (they run at once).

use super::harness::sibling;
use crate::harness_support::{Observer, TestRelay, post};
use crate::ui_support::{UiProc, init, launcher};
use anyhow::{Context, anyhow, bail};
use desktop_launcher::store::Store;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Turns of history.
pub const TURNS: usize = 1000;
/// Mentions posted before waiting for their answers (the harness queues at
/// most 256).
const WAVE: usize = 200;
/// Channels the mentions are spread over (each queues at most 32).
const CHANNELS: usize = 10;
const AGENT: &str = "hist";

fn npm_prefix() -> anyhow::Result<PathBuf> {
    std::env::var_os("BUZZ_NPM_PREFIX")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/buzz-npm")))
        .ok_or_else(|| anyhow!("BUZZ_NPM_PREFIX or HOME must be set"))
}

pub fn run() -> anyhow::Result<serde_json::Value> {
    let prefix = npm_prefix()?;
    let chromium = std::env::var_os("BUZZ_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !prefix.join("node_modules/playwright-core/package.json").is_file() || !chromium.is_file() {
        bail!(
            "needs playwright-core under {} and Chromium at {} (scripts/test.sh installs both)",
            prefix.display(),
            chromium.display()
        );
    }
    let (bin, harness, agent) = (
        sibling("buzz-launcher-under-test")?,
        sibling("buzz-acp-under-test")?,
        sibling("acp-test-agent")?,
    );
    let rt = tokio::runtime::Runtime::new()?;
    let relay = rt.block_on(TestRelay::start());
    let tmp = tempfile::tempdir()?;
    let home = tmp.path().join("state");
    let envs = vec![("BUZZ_ACP_BIN".to_string(), harness.display().to_string())];
    init(&bin, &home, &envs);
    let cli = |args: &[&str]| -> anyhow::Result<()> {
        let out = launcher(&bin, &home, args, &envs);
        if !out.status.success() {
            bail!("buzz-launcher {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    };
    let agent_arg = agent.display().to_string();
    cli(&[
        "agent",
        "create",
        AGENT,
        "--relay",
        &relay.url,
        "--command",
        &agent_arg,
        "--arg",
        "echo",
    ])?;
    cli(&["start", AGENT])?;
    let store = Store::open(&home)?;
    let (owner, keys) = (store.owner()?, store.agent_keys(AGENT)?);
    let obs = rt.block_on(Observer::start(&relay.url));

    let seeding = Instant::now();
    for wave in 0..TURNS.div_ceil(WAVE) {
        let (from, to) = (wave * WAVE, ((wave + 1) * WAVE).min(TURNS));
        for n in from..to {
            let text = format!(
                "[usage:{},{},{},{}] turn {n}",
                1000 + n,
                10 + n % 90,
                1100 + n,
                300 + n
            );
            rt.block_on(post(
                &relay.url,
                &owner,
                &format!("c{}", n % CHANNELS),
                &keys,
                &text,
                vec![],
            ));
        }
        let deadline = Instant::now() + Duration::from_secs(180);
        while obs.messages_of(&keys).len() < to {
            if Instant::now() > deadline {
                bail!("{} of {to} mentions answered", obs.messages_of(&keys).len());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let seed_s = seeding.elapsed().as_secs_f64();
    cli(&["stop", AGENT, "--wait", "10"])?;

    let ui = UiProc::start(&bin, &home, &envs);
    let script = crate::package_dir().join("ui-tests/history.mjs");
    let node = Command::new("node")
        .arg(&script)
        .env("START_URL", &ui.url)
        .env("CHROMIUM", &chromium)
        .env("BUZZ_NPM_PREFIX", &prefix)
        .env("AGENT", AGENT)
        .env("TURNS", TURNS.to_string())
        .output()
        .context("run node")?;
    let stdout = String::from_utf8_lossy(&node.stdout);
    let result = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .ok_or_else(|| {
            anyhow!(
                "the browser script failed:\n{}\n{stdout}",
                String::from_utf8_lossy(&node.stderr)
            )
        })?;
    let f: serde_json::Value = serde_json::from_str(result)?;
    Ok(serde_json::json!({
        "history_turns": TURNS,
        "history_seed_s": (seed_s * 10.0).round() / 10.0,
        "page_first_contentful_paint_ms": f["fcp_ms"].as_f64().map(f64::round),
        "page_card_ms": f["cards_ms"].as_f64().map(f64::round),
        "history_panel_ms": f["history_ms"].as_f64().map(f64::round),
        "history_panel_goal_ms": 500,
        "history_messages_shown_first": f["said"],
        "history_messages_shown_after_every_older_page": f["all"],
        "history_older_pages_ms": f["older_ms"].as_f64().map(f64::round),
        "history_api_conversation_ms": f["api"]["conversation"],
        "history_api_usage_ms": f["api"]["usage"],
    }))
}
