//! The channel's history for a new session of a known conversation (issue
//! 32 item 1, the third way back; review afa2bf1 finding 6), through a real
//! relay's `limit`: the test agent offers neither `session/resume` nor
//! `session/load`, so a restarted harness gives the owner's next turn the
//! channel's history.
//!
//! - A flood of strangers' mentions (more than the relay is asked for)
//!   never hides the owner's history: the request asks for the class's own
//!   authors.
//! - A woken run's history never repeats the mentions that woke it: they
//!   are its turns.

use crate::*;
use buzz_conformance::harness_support::relay::post_raw;
use buzz_contract::wake::{EVENTS_ENV, SINCE_ENV, format_events};
use nostr_sdk::prelude::Timestamp;

/// A harness that keeps its receipts in `state`, answering anyone.
fn env_in(w: &World, state: &std::path::Path, extra: &[(&str, &str)]) -> HashMap<String, String> {
    let state = state.display().to_string();
    let mut base = vec![
        ("BUZZ_ACP_STATE_DIR", state.as_str()),
        ("BUZZ_ACP_RESPOND_TO", "anyone"),
    ];
    base.extend_from_slice(extra);
    w.env_with("echo", &base)
}

/// Starts a harness and waits for its own `online` (not an earlier run's).
async fn start_fresh(w: &World, env: &HashMap<String, String>) -> HarnessProc {
    let since = Timestamp::now().as_secs();
    let h = w.spawn(env);
    let pk = w.agent.public_key();
    w.obs
        .wait_for(WAIT, |e| {
            e.kind == Kind::from(20001)
                && e.pubkey == pk
                && e.content == "online"
                && e.created_at.as_secs() >= since
        })
        .await
        .unwrap_or_else(|| panic!("the second run came online: {}", h.stderr()));
    h
}

/// Run 1: the owner's words in c1, answered; then a stop.
async fn first_run(w: &World, state: &std::path::Path) {
    let mut h = w.start(&env_in(w, state, &[])).await;
    let m = w.mention(&w.owner, "c1", "remember zebra-7731").await;
    w.wait_reply(&m).await;
    stop_gracefully(&mut h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_strangers_never_hides_the_owners_history() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let state = tempfile::tempdir().unwrap();
    let stranger = Keys::generate();
    // More than the relay is asked for (4 × 20) on each side of the owner's
    // words, so neither a relay that keeps the newest nor one that keeps
    // the oldest of a `limit` returns them unless asked by author.
    let now = Timestamp::now().as_secs();
    let tags = vec![
        vec!["h".to_string(), "c1".to_string()],
        vec!["p".to_string(), w.agent.public_key().to_hex()],
    ];
    for i in 0..81 {
        post_raw(
            &w.relay.url,
            &stranger,
            &format!("old noise {i}"),
            tags.clone(),
            Some(now - 300 + i),
        )
        .await;
    }
    first_run(&w, state.path()).await;
    for i in 0..81 {
        w.mention(&stranger, "c1", &format!("noise {i}")).await;
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut h = start_fresh(&w, &env_in(&w, state.path(), &[])).await;
    let m = w.mention(&w.owner, "c1", "what did I ask you to remember?").await;
    let r = w.wait_reply(&m).await;
    assert!(
        r.content.contains("zebra-7731"),
        "the owner's history reached the new session: {}; log: {}",
        r.content,
        h.stderr()
    );
    assert!(
        !r.content.contains("noise"),
        "a stranger's words in the owner's history: {}",
        r.content
    );
    stop_gracefully(&mut h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_woken_runs_history_never_repeats_the_mentions_that_woke_it() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let state = tempfile::tempdir().unwrap();
    first_run(&w, state.path()).await;
    let woke = w.mention(&w.owner, "c1", "the waking ask").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let events = format_events(&[woke.id.to_hex()]);
    let look = Timestamp::now().as_secs().to_string();
    let env = env_in(&w, state.path(), &[(EVENTS_ENV, &events), (SINCE_ENV, &look)]);
    let mut h = start_fresh(&w, &env).await;
    let r = w.wait_reply(&woke).await;
    assert!(
        r.content.contains("zebra-7731"),
        "the history came: {}",
        r.content
    );
    assert_eq!(
        r.content.matches("the waking ask").count(),
        1,
        "the waking mention is the prompt, not its history too: {}",
        r.content
    );
    stop_gracefully(&mut h).await;
}
