//! Real-parts support for the harness suite (DESIGN.md Decision 2): an
//! in-process `nostr-relay-builder` relay with NIP-42 required, an
//! independent nostr-sdk observer, identities that post mentions, the
//! `buzz-acp` process under test with captured stderr, and a stub relay that
//! denies authentication (the one relay behaviour `LocalRelay` cannot show).

pub mod deny_relay;
pub mod nostr_rs_relay;
pub mod proc;
pub mod relay;

pub use proc::{HarnessProc, children_of, harness_command};
pub use relay::{Observer, TestRelay, post, post_raw, publish, stored};

use std::time::Duration;

/// Polls `f` every 20 ms until it returns `Some` or `timeout` passes.
pub async fn wait_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if tokio::time::Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Lines of an `acp-test-agent` log file, parsed.
pub fn agent_log(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Agent log entries of one `event` kind.
pub fn agent_events(path: &std::path::Path, event: &str) -> Vec<serde_json::Value> {
    agent_log(path)
        .into_iter()
        .filter(|v| v["event"] == event)
        .collect()
}
