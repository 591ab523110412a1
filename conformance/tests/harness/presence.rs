//! Presence (I3, wire-facts §3) and the relay connection (wire-facts §2): online after the subscription, republish, run/seq, offline; relays that never challenge; reconnect.

use crate::*;
use buzz_conformance::harness_support::relay::tag;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn presence_online_after_subscription_periodic_run_seq_and_offline_on_sigterm() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let nonce = "0123456789abcdef0123456789abcdef";
    let env = w.env_with(
        "echo",
        &[
            ("BUZZ_ACP_PRESENCE_INTERVAL_SECS", "1"),
            ("BUZZ_MANAGED_AGENT_START_NONCE", nonce),
        ],
    );
    let mut h = w.spawn(&env);
    let a = w.agent.clone();
    let two = wait_until(WAIT, || {
        let p = w.obs.presence_of(&a);
        (p.len() >= 2).then_some(p)
    })
    .await
    .expect("online, then a periodic republish");
    // Online only after the subscription is live: pinned on the relay side
    // (EOSE sent before the first presence event arrived) by
    // `a_relay_that_challenges_on_open_is_answered_and_served`.
    for (i, s) in two.iter().take(2).enumerate() {
        assert_eq!(s.event.content, "online");
        assert_eq!(
            tags(&s.event),
            vec![
                vec!["run".to_string(), nonce.into()],
                vec!["seq".to_string(), i.to_string()]
            ],
            "exactly run and seq"
        );
    }
    // The agent answers, so online was true.
    let m = w.mention(&w.owner, "c1", "hello").await;
    w.wait_reply(&m).await;
    h.signal(libc::SIGTERM);
    let off = w.wait_offline().await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
    let p = w.obs.presence_of(&a);
    let last = p.iter().find(|s| s.event.content == "offline").unwrap();
    assert_eq!(tag(&last.event, "run"), Some(nonce));
    let seqs: Vec<u64> = p
        .iter()
        .map(|s| tag(&s.event, "seq").unwrap().parse().unwrap())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "seq +1 per publish: {seqs:?}"
    );
    assert!(off >= two[1].at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_presence_knob_is_honoured_locally() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with("echo", &[("BUZZ_ACP_NO_PRESENCE", "true")]);
    let mut h = w.spawn(&env);
    // No presence to wait for: the subscription's line says the harness
    // listens. A mention made earlier may fall before the second it
    // started in, which it never answers (seen in CI).
    wait_count(&h, "subscription live", 1).await;
    let m = w.mention(&w.owner, "c1", "hi").await;
    w.wait_reply(&m).await;
    h.signal(libc::SIGINT);
    assert_eq!(
        h.wait_exit(WAIT).await,
        Some(0),
        "SIGINT takes the same path as SIGTERM"
    );
    assert!(w.obs.presence_of(&w.agent).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn works_with_a_relay_that_never_challenges() {
    let _g = SERIAL.lock().await;
    let w = World::with_relay(TestRelay::start_with(false).await).await;
    let env = w.env_with("echo", &[("BUZZ_ACP_REPLY_P_TAG", "false")]);
    let mut h = w.start(&env).await;
    let m = w.mention(&w.owner, "c1", "open relay").await;
    let r = w.wait_reply(&m).await;
    assert_eq!(r.content, "echo: open relay");
    assert!(tags(&r).iter().all(|t| t[0] != "p"), "asker p-tag configured off");
    assert!(
        !h.stderr().contains("answering NIP-42 challenge"),
        "no challenge was ever sent"
    );
    h.signal(libc::SIGTERM);
    w.wait_offline().await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn relay_restart_reconnects_resubscribes_restores_presence_without_duplicate_dispatch() {
    let _g = SERIAL.lock().await;
    let mut w = World::new().await;
    let env = w.env_with(
        "echo",
        &[
            // The default 60 s interval: no periodic tick can stand in for the re-announce.
            // The reconnect waits ≥ 1.6 s, so the observer is live again before it.
            ("BUZZ_ACP_RECONNECT_BASE_MS", "2000"),
        ],
    );
    let mut h = w.start(&env).await;
    let m1 = w.mention(&w.owner, "c1", "before").await;
    w.wait_reply(&m1).await;
    let before = w.obs.presence_of(&w.agent).len();
    w.relay.restart().await;
    h.wait_line(WAIT, "relay down")
        .await
        .expect("the harness saw the drop");
    w.obs.wait_live().await;
    // Re-authenticated and re-subscribed.
    wait_count(&h, "subscription live", 2).await;
    let auths = h.count_lines("answering NIP-42 challenge");
    assert!(auths >= 2, "re-authenticated on the new connection");
    let a = w.agent.clone();
    wait_until(WAIT, || (w.obs.presence_of(&a).len() > before).then_some(()))
        .await
        .expect("presence re-announced after reconnect");
    let re = w.obs.presence_of(&a).last().unwrap().event.clone();
    assert_eq!(re.content, "online");
    assert!(tag(&re, "seq").unwrap().parse::<u64>().unwrap() >= 1);
    let m2 = w.mention(&w.owner, "c1", "after").await;
    w.wait_reply(&m2).await;
    let texts: Vec<String> = agent_events(&w.log, "prompt")
        .iter()
        .map(|v| v["text"].as_str().unwrap().to_string())
        .collect();
    // The re-subscription overlaps the accepted mention: the relay replayed it...
    h.wait_line(WAIT, "duplicate event dropped")
        .await
        .expect("the first mention was replayed after the reconnect");
    // ...and it was not dispatched twice.
    assert_eq!(
        texts,
        vec!["before".to_string(), "after".into()],
        "the replayed mention was not dispatched twice"
    );
    assert_eq!(w.replies_to(&m1).len(), 1);
    stop_gracefully(&mut h).await;
}
