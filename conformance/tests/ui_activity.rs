//! The agent's live activity, conversation and usage on the Start page
//! (issue 34 "Tests") in a real browser: the real `buzz-launcher ui` with
//! the embedded relay, the real harness running the scripted ACP agent with
//! the observer on, and Debian's Chromium headless driven by
//! `playwright-core` (`conformance/ui-tests/activity.mjs`): a tool call
//! shows as "running …" while the tool runs, and the line says idle once
//! the turn ended (the harness publishes a turn's result ahead of its last
//! text chunk); the history panel shows the
//! mention and its reply from the relay, the usage total and both plots.
//! Prints `activity_tool_to_page_ms`, from the agent's own log of the
//! tool's start to the page showing it (goal ≤ 1000), never asserted.

use buzz_conformance::harness_support::agent_events;
use buzz_conformance::ui_support::{UiProc, init, launcher};
use desktop_launcher::store::Store;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_buzz-launcher-under-test");
const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
const AGENT: &str = env!("CARGO_BIN_EXE_acp-test-agent");

fn npm_prefix() -> PathBuf {
    std::env::var_os("BUZZ_NPM_PREFIX")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/buzz-npm")))
        .expect("BUZZ_NPM_PREFIX or HOME must be set")
}

/// Ends the embedded relay and any harness left behind.
struct Cleanup {
    home: PathBuf,
    envs: Vec<(String, String)>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = launcher(
            Path::new(BIN),
            &self.home,
            &["stop", "act", "--wait", "5"],
            &self.envs,
        );
        let _ = launcher(Path::new(BIN), &self.home, &["relay", "stop"], &self.envs);
    }
}

#[test]
fn a_running_tool_the_conversation_and_the_usage_show_on_the_page() {
    let prefix = npm_prefix();
    let chromium = std::env::var_os("BUZZ_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        prefix.join("node_modules/playwright-core/package.json").is_file() && chromium.is_file(),
        "needs playwright-core under {} and Chromium at {} (scripts/test.sh installs both)",
        prefix.display(),
        chromium.display()
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("state");
    let log = tmp.path().join("agent.log");
    let envs = vec![("BUZZ_ACP_BIN".to_string(), HARNESS.to_string())];
    init(Path::new(BIN), &home, &envs);
    let _cleanup = Cleanup {
        home: home.clone(),
        envs: envs.clone(),
    };
    let log_env = format!("ACP_TEST_AGENT_LOG={}", log.display());
    let args = [
        "agent",
        "create",
        "act",
        "--command",
        AGENT,
        "--arg",
        "echo",
        "--env",
        log_env.as_str(),
        "--relay-observer",
        "true",
    ];
    let out = launcher(Path::new(BIN), &home, &args, &envs);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ui = UiProc::start(Path::new(BIN), &home, &envs);
    let shots = buzz_conformance::package_dir().join("../target/ui-screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let script = buzz_conformance::package_dir().join("ui-tests/activity.mjs");
    let node = Command::new("node")
        .arg(&script)
        .env("START_URL", &ui.url)
        .env("CHROMIUM", &chromium)
        .env("BUZZ_NPM_PREFIX", &prefix)
        .env("SHOT_DIR", &shots)
        .env("AGENT", "act")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&node.stdout);
    let result = BufReader::new(stdout.as_bytes())
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("RESULT ").map(str::to_string));
    let Some(result) = result else {
        let harness_log =
            std::fs::read_to_string(Store::open(&home).expect("store").log_path("act")).unwrap_or_default();
        panic!(
            "the browser script failed:\n{}\n{stdout}\nharness log:\n{harness_log}",
            String::from_utf8_lossy(&node.stderr)
        );
    };
    let figures: serde_json::Value = serde_json::from_str(&result).expect("result json");
    // The measured turn's tool is the last (warm-up turns come first).
    let last_t = |event: &str| {
        agent_events(&log, event)
            .last()
            .and_then(|e| e["t_ms"].as_u64())
            .unwrap_or_else(|| panic!("the agent's log has no {event}"))
    };
    let started = last_t("tool_started");
    let finished = last_t("tool_finished");
    let seen = figures["activity_seen_at_ms"]
        .as_u64()
        .expect("when the page showed it");
    println!("activity_tool_to_page_ms {}", seen.saturating_sub(started));
    println!("activity_text {}", figures["activity_text"]);
    assert!(
        seen < finished,
        "the page showed the tool only after it finished ({seen} vs {finished})"
    );
    assert!(
        figures["activity_text"]
            .as_str()
            .unwrap_or("")
            .contains("a quiet build"),
        "{figures}"
    );
}
