//! Doze (issue 50 items 1 and 2): with no turn for `BUZZ_ACP_DOZE`
//! seconds the harness ends its agent processes, stays on its relay with
//! presence `away`, and the next mention its gate accepts is answered by a
//! new agent in its old conversation (the test agent offers neither
//! `session/resume` nor `session/load`, so the conversation comes back as
//! the channel's history, issue 32).
//!
//! - the agent's processes are gone while dozing (read from `/proc`), and
//!   the same harness process answers the next mention with the first
//!   turn's words;
//! - a stranger's mention does not end the doze under `owner-only`;
//! - the owner's `!cancel` is told nothing runs, `!shutdown` stops at once;
//! - the doze clock is reset by a turn's end, not only by its start;
//! - the inactivity bound (spec I5) still ends a dozing harness on time,
//!   and its `away` says when (`sleeps_at`).

use crate::*;
use buzz_conformance::harness_support::children_of;
use nostr_sdk::prelude::Event;

/// A harness that keeps its receipts in `state` and dozes after `doze` s.
fn env_dozing(
    w: &World,
    state: &std::path::Path,
    doze: &str,
    extra: &[(&str, &str)],
) -> HashMap<String, String> {
    let state = state.display().to_string();
    let mut base = vec![
        ("BUZZ_ACP_STATE_DIR", state.as_str()),
        ("BUZZ_ACP_DOZE", doze),
        ("BUZZ_ACP_LAZY_POOL", "true"),
        ("BUZZ_ACP_REAPER_CHECK_MS", "200"),
    ];
    base.extend_from_slice(extra);
    w.env_with("echo", &base)
}

/// Presence events of the agent seen so far, oldest first.
fn presences(w: &World) -> Vec<String> {
    w.obs
        .presence_of(&w.agent)
        .into_iter()
        .map(|s| s.event.content)
        .collect()
}

/// Waits until the agent's latest presence says `content`.
async fn wait_latest_presence(w: &World, content: &str, h: &HarnessProc) -> Instant {
    wait_until(WAIT, || {
        let all = w.obs.presence_of(&w.agent);
        all.last().filter(|s| s.event.content == content).map(|s| s.at)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "presence {content}; seen {:?}; stderr:\n{}",
            presences(w),
            h.stderr()
        )
    })
}

/// Waits until the harness `h` has no child process.
async fn wait_no_agent(h: &HarnessProc) {
    wait_until(WAIT, || children_of(h.pid).is_empty().then_some(()))
        .await
        .unwrap_or_else(|| panic!("agent processes left while dozing: {:?}", children_of(h.pid)));
}

async fn answered(w: &World, m: &Event) -> Event {
    w.wait_reply(m).await
}

/// The states of the agent's state changes (kind 44201) so far, oldest
/// first, each opened with the owner's key.
fn states(w: &World) -> Vec<String> {
    let mut changes: Vec<buzz_contract::awake::StateChange> = w
        .obs
        .matching(|e| e.pubkey == w.agent.public_key() && e.kind.as_u16() == buzz_contract::awake::KIND)
        .into_iter()
        .map(|s| {
            let plain =
                nostr_sdk::nips::nip44::decrypt(w.owner.secret_key(), &s.event.pubkey, &s.event.content)
                    .expect("sealed to the owner");
            serde_json::from_str(&plain).expect("a state change")
        })
        .collect();
    changes.sort_by_key(|c| c.seq);
    changes
        .into_iter()
        .map(|c| c.state.as_str().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dozing_agent_frees_its_processes_and_answers_the_next_mention_in_its_conversation() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let state = tempfile::tempdir().unwrap();
    let mut h = w.start(&env_dozing(&w, state.path(), "2", &[])).await;
    let m = w.mention(&w.owner, "c1", "remember zebra-7731").await;
    answered(&w, &m).await;
    assert!(!children_of(h.pid).is_empty(), "an agent runs after the turn");

    wait_latest_presence(&w, "away", &h).await;
    wait_no_agent(&h).await;
    assert_eq!(h.count_lines("agent ended for the doze"), 1, "{}", h.stderr());

    let m = w.mention(&w.owner, "c1", "what did I ask you to remember?").await;
    let r = answered(&w, &m).await;
    assert!(
        r.content.contains("zebra-7731"),
        "the woken agent answers in its old conversation: {}; stderr:\n{}",
        r.content,
        h.stderr()
    );
    wait_latest_presence(&w, "online", &h).await;
    assert!(h.child.try_wait().unwrap().is_none(), "the same harness answered");
    assert_eq!(
        agent_events(&w.log, "initialize").len(),
        2,
        "a second agent started for it"
    );
    stop_gracefully(&mut h).await;
    // The hours' record (issue 50 item 3): each change, stored, sealed.
    let want = ["awake", "dozing", "awake", "stopped"];
    wait_until(WAIT, || (states(&w).len() >= want.len()).then_some(())).await;
    assert_eq!(states(&w), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_strangers_mention_does_not_end_the_doze_and_the_owners_commands_work_while_dozing() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let state = tempfile::tempdir().unwrap();
    let mut h = w.start(&env_dozing(&w, state.path(), "1", &[])).await;
    wait_latest_presence(&w, "away", &h).await;

    let stranger = Keys::generate();
    let m = w.mention(&stranger, "c1", "wake up").await;
    // The owner's `!cancel` after it: its answer proves the stranger's
    // mention was read (one relay, one subscription, in order).
    let cancel = w.mention(&w.owner, "c1", "!cancel").await;
    let r = answered(&w, &cancel).await;
    assert!(r.content.contains("nothing is running"), "{}", r.content);
    assert!(
        w.replies_to(&m).is_empty(),
        "a stranger is not answered under owner-only"
    );
    assert_eq!(
        presences(&w).last().map(String::as_str),
        Some("away"),
        "still dozing"
    );
    assert!(agent_events(&w.log, "initialize").is_empty(), "no agent started");

    w.mention(&w.owner, "c1", "!shutdown").await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "stderr:\n{}", h.stderr());
    // The relay acknowledged the `offline` before the exit; the observer's
    // copy may still be on its way.
    wait_latest_presence(&w, "offline", &h).await;
    assert!(
        agent_events(&w.log, "initialize").is_empty(),
        "the stop woke no agent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_doze_clock_starts_again_when_a_turn_ends() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let state = tempfile::tempdir().unwrap();
    let mut h = w.start(&env_dozing(&w, state.path(), "2", &[])).await;
    // The turn streams for 3 s: longer than the bound, counted from its start.
    let m = w.mention(&w.owner, "c1", "[slow:3000] a long one").await;
    answered(&w, &m).await;
    let done = Instant::now();
    let away = wait_latest_presence(&w, "away", &h).await;
    let after = away.saturating_duration_since(done);
    assert!(
        after >= Duration::from_millis(1500),
        "dozed {after:?} after the turn ended; the bound is 2 s from its end"
    );
    stop_gracefully(&mut h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_inactivity_bound_still_ends_a_dozing_harness_on_time() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let state = tempfile::tempdir().unwrap();
    let env = env_dozing(&w, state.path(), "1", &[("BUZZ_ACP_EXIT_AFTER_INACTIVITY", "4")]);
    let mut h = w.start(&env).await;
    let m = w.mention(&w.owner, "c1", "hello").await;
    answered(&w, &m).await;
    let done = Instant::now();
    let done_unix = nostr_sdk::prelude::Timestamp::now().as_secs();
    wait_latest_presence(&w, "away", &h).await;
    // The `away` says when the bound will end it (the launcher shows it).
    let away = w.obs.presence_of(&w.agent).pop().expect("away").event;
    let sleeps_at = tags(&away)
        .into_iter()
        .find(|t| t.first().map(String::as_str) == Some("sleeps_at"))
        .and_then(|t| t.get(1)?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no sleeps_at on {away:?}"));
    assert!(
        (done_unix + 2..=done_unix + 5).contains(&sleeps_at),
        "sleeps_at {sleeps_at}, the last turn ended at {done_unix} and the bound is 4 s"
    );
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "stderr:\n{}", h.stderr());
    // The relay acknowledged the `offline` before the exit; the observer's
    // copy may still be on its way (seen in CI: `away` read after the exit).
    wait_latest_presence(&w, "offline", &h).await;
    let offline = w.obs.presence_of(&w.agent).pop().expect("a presence");
    assert!(
        tags(&offline.event).iter().any(|t| t == &["stop", "idle"]),
        "it sleeps, as before the doze: {:?}",
        offline.event
    );
    let after = offline.at.saturating_duration_since(done);
    assert!(
        after >= Duration::from_millis(3500) && after < Duration::from_secs(8),
        "ended {after:?} after the last turn; the bound is 4 s"
    );
    // Ended by its bound, it is asleep (a waker may wake it), not stopped.
    let want = ["awake", "dozing", "asleep"];
    wait_until(WAIT, || (states(&w).len() >= want.len()).then_some(())).await;
    assert_eq!(states(&w), want);
}
