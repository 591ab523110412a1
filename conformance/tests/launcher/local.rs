//! Launcher conformance, case 8: the local backend with the real harness.

use super::*;

// ---- 8. local backend with the real harness ----------------------------------------------

/// `start` spawns the real harness (`buzz-acp`) from the same resolver against
/// a real NIP-42 relay, `chat` gets the scripted ACP agent's reply, and `stop`
/// ends in presence `offline` and harness exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_backend_start_chat_stop_with_the_real_harness() {
    use buzz_conformance::harness_support::TestRelay;
    let relay = TestRelay::start().await;
    let w = World::new("unused");
    let mut rec = w.store.agent("agent").unwrap();
    rec.backend = Backend::Local;
    rec.relay_url = relay.url.clone();
    rec.agent_command = Some(env!("CARGO_BIN_EXE_acp-test-agent").to_string());
    w.store.save_agent(&rec).unwrap();
    let log = w.store.log_path("agent");
    let show_log = || std::fs::read_to_string(&log).unwrap_or_default();

    // Subscribe before the harness starts: presence is ephemeral.
    let owner = w.store.owner().unwrap();
    let watcher = relay::connect(&relay.url, owner, Duration::from_secs(5))
        .await
        .unwrap();
    let authors = vec![rec.pubkey.clone()];
    let mut feed = relay::subscribe_presence(&watcher, &relay.url, &authors, 0)
        .await
        .unwrap();
    let mut tracker = Tracker::new(authors, Duration::from_secs(180));
    let app::LocalStart::Spawned { mut child, nonce } = app::start_local(
        &w.store,
        "agent",
        Path::new(env!("CARGO_BIN_EXE_buzz-acp-under-test")),
    )
    .unwrap() else {
        panic!("no harness ran before this start");
    };
    let pk = rec.pubkey.clone();
    let online = feed
        .pump(&mut tracker, Duration::from_secs(60), &mut |_, _| {}, &|t| {
            t.state(&pk) == Derived::Online
        })
        .await;
    assert!(online, "the harness never reported online; log:\n{}", show_log());
    // The running generation is the one the launcher started.
    assert_eq!(tracker.last(&pk).unwrap().run.as_deref(), Some(nonce.as_str()));

    let reply = app::chat(&w.store, "agent", "hello launcher", Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", show_log()));
    assert!(reply.contains("hello launcher"), "{reply}");

    app::stop(&w.store, "agent", Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", show_log()));
    let status = tokio::task::spawn_blocking(move || {
        let end = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return Some(s);
            }
            if std::time::Instant::now() > end {
                let _ = child.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    let status =
        status.unwrap_or_else(|| panic!("the harness did not exit after stop; log:\n{}", show_log()));
    assert_eq!(status.code(), Some(0), "log:\n{}", show_log());
    // The key never reaches the harness log.
    let nsec = w.store.identity("agent").unwrap().nsec;
    assert!(!show_log().contains(&nsec));
}
