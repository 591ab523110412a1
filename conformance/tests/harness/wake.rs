//! A harness a launcher's waker started (issue 33; `buzz_contract::wake`):
//! it answers exactly the mentions it was handed, in order, through its
//! own gate, never one from before the owner's last `!shutdown` and never
//! an owner command among them; what was sent while it was being started
//! reaches it as it would a running harness. Its last presence says why
//! it stopped (`["stop", reason]`).

use crate::*;
use buzz_conformance::harness_support::relay::post_raw;
use buzz_contract::wake::{EVENTS_ENV, SINCE_ENV, format_events};
use nostr_sdk::prelude::Timestamp;

/// A kind 9 of `from` in channel `c1` mentioning the agent, dated `at`.
async fn said(w: &World, from: &Keys, content: &str, at: u64) -> nostr_sdk::prelude::Event {
    let t = vec![
        vec!["h".to_string(), "c1".to_string()],
        vec!["p".to_string(), w.agent.public_key().to_hex()],
    ];
    post_raw(&w.relay.url, from, content, t, Some(at)).await
}

/// The agent's `offline` presence, as the observer saw it. Waited for: the
/// harness exits once the relay acknowledged it, which can be before the
/// relay's fan-out reached the observer.
async fn last_offline(w: &World) -> nostr_sdk::prelude::Event {
    w.obs
        .wait_presence(WAIT, &w.agent, "offline")
        .await
        .expect("offline")
        .event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_woken_harness_answers_what_woke_it_in_order_and_never_an_old_command() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let stranger = Keys::generate();
    let now = Timestamp::now().as_secs();
    let before_stop = said(&w, &w.owner, "before the stop", now - 100).await;
    said(&w, &w.owner, "!shutdown", now - 90).await;
    let first = said(&w, &w.owner, "first", now - 60).await;
    let second = said(&w, &w.owner, "second", now - 50).await;
    let third = said(&w, &w.owner, "third", now - 50).await;
    let strangers = said(&w, &stranger, "let me in", now - 40).await;
    let cancel = said(&w, &w.owner, "!cancel", now - 30).await;
    let unnamed = said(&w, &w.owner, "not handed over", now - 20).await;
    // The waker looked 5 s ago; this one came while the agent was started.
    let look = now - 5;
    let gap = said(&w, &w.owner, "sent while waking", now - 3).await;

    let named = [&before_stop, &third, &first, &second, &strangers, &cancel]
        .map(|e| e.id.to_hex())
        .to_vec();
    let events = format_events(&named);
    let since = look.to_string();
    let env = w.env_with("echo", &[(EVENTS_ENV, &events), (SINCE_ENV, &since)]);
    let mut h = w.start(&env).await;
    for m in [&first, &second, &third, &gap] {
        w.wait_reply(m).await;
    }
    let order: Vec<String> = w
        .obs
        .messages_of(&w.agent)
        .into_iter()
        .map(|s| s.event.content)
        .collect();
    let pos = |c: &str| order.iter().position(|o| o == c);
    assert!(
        pos("echo: first") < pos("echo: third")
            && pos("echo: third") < pos("echo: second")
            && pos("echo: second") < pos("echo: sent while waking"),
        "answered oldest first, then in the waker's order, then what came meanwhile: {order:?}"
    );
    wait_count(&h, "a waking mention is not answered", 3).await;
    let log = h.stderr();
    assert!(
        log.contains("BeforeRun") && log.contains("Gated") && log.contains("EarlierCommand"),
        "{log}"
    );
    for m in [&before_stop, &strangers, &cancel, &unnamed] {
        assert!(w.replies_to(m).is_empty(), "{:?} was answered", m.content);
    }
    assert!(
        h.child.try_wait().unwrap().is_none(),
        "the slept run's !shutdown did not stop the woken one"
    );
    stop_gracefully(&mut h).await;
    let last = last_offline(&w).await;
    assert!(
        tags(&last).iter().any(|t| t == &["stop", "signal"]),
        "a SIGTERM says so: {:?}",
        tags(&last)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_inactivity_stop_says_idle_in_its_last_presence_and_log() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "echo",
        &[
            ("BUZZ_ACP_EXIT_AFTER_INACTIVITY", "1"),
            ("BUZZ_ACP_REAPER_CHECK_MS", "100"),
        ],
    );
    let mut h = w.start(&env).await;
    w.wait_offline().await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
    let last = last_offline(&w).await;
    assert!(
        tags(&last).iter().any(|t| t == &["stop", "idle"]),
        "{:?}",
        tags(&last)
    );
    assert!(
        h.stderr().contains("harness exiting code=0 stop=\"idle\""),
        "{}",
        h.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_malformed_wake_list_is_a_config_error() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    for (events, since) in [("not-an-id", "1"), (&*"a".repeat(64), "")] {
        let env = w.env_with("echo", &[(EVENTS_ENV, events), (SINCE_ENV, since)]);
        let mut h = w.spawn(&env);
        assert_eq!(h.wait_exit(WAIT).await, Some(2), "{}", h.stderr());
        assert!(h.stderr().contains("BUZZ_ACP_WAKE_"), "{}", h.stderr());
    }
}

/// A waking mention the relay did not hand over at the first fetch (it
/// timed out, was refused, or its session died; here: not on the relay
/// yet) is asked for once more and answered (review afa2bf1 finding 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waking_mention_the_first_fetch_missed_is_asked_for_again_and_answered() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let now = Timestamp::now().as_secs();
    let tags = vec![
        vec!["h".to_string(), "c1".to_string()],
        vec!["p".to_string(), w.agent.public_key().to_hex()],
    ];
    // Its id, known before it is published: an event's id is the digest of
    // its fields, so publishing the same fields later gives the same event.
    let late = nostr_sdk::prelude::EventBuilder::new(Kind::from(9), "late one")
        .tags(
            tags.iter()
                .map(|t| nostr_sdk::prelude::Tag::parse(t.clone()).unwrap()),
        )
        .custom_created_at(Timestamp::from(now - 10))
        .sign_with_keys(&w.owner)
        .unwrap();
    let events = format_events(&[late.id.to_hex()]);
    let look = (now - 5).to_string();
    let env = w.env_with("echo", &[(EVENTS_ENV, &events), (SINCE_ENV, &look)]);
    let mut h = w.start(&env).await;
    wait_count(&h, "not every mention that woke this run came", 1).await;
    let sent = post_raw(&w.relay.url, &w.owner, "late one", tags, Some(now - 10)).await;
    assert_eq!(sent.id, late.id, "the same event");
    let r = w.wait_reply(&sent).await;
    assert_eq!(r.content, "echo: late one");
    stop_gracefully(&mut h).await;
}
