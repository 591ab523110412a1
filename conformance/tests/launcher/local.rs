//! Launcher conformance, case 8: the local backend with the real harness.

use super::*;

// ---- 8. local backend with the real harness ----------------------------------------------

/// A relay and agent `agent` on the local backend, running the scripted ACP agent.
async fn local_agent() -> (
    buzz_conformance::harness_support::TestRelay,
    World,
    desktop_launcher::record::AgentRecord,
) {
    let relay = buzz_conformance::harness_support::TestRelay::start().await;
    let w = World::new("unused");
    let mut rec = w.store.agent("agent").unwrap();
    rec.backend = Backend::Local;
    rec.relay_url = relay.url.clone();
    rec.agent_command = Some(env!("CARGO_BIN_EXE_acp-test-agent").to_string());
    w.store.save_agent(&rec).unwrap();
    (relay, w, rec)
}

/// `start` spawns the real harness (`buzz-acp`) from the same resolver against
/// a real NIP-42 relay, `chat` gets the scripted ACP agent's reply, and `stop`
/// ends in presence `offline` and harness exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_backend_start_chat_stop_with_the_real_harness() {
    let (relay, w, rec) = local_agent().await;
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

/// Rule (issue 34): `usage` shows each turn's figures as the agent reported
/// them, sealed to the owner on the relay: the library call, and the CLI's
/// table, total line and `--json`; `log` shows the conversation in order,
/// each mention with its reply, across a restart of the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_log_show_each_turn_across_a_restart() {
    let (_relay, w, _rec) = local_agent().await;
    let log = w.store.log_path("agent");
    let show_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let harness = Path::new(env!("CARGO_BIN_EXE_buzz-acp-under-test"));
    let start = || async {
        let watched = app::start_local_watched(
            &w.store,
            "agent",
            harness,
            Duration::from_secs(60),
            &mut |_, _| {},
            Box::new(|| {}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", show_log()));
        let app::Watched::Started(started) = watched else {
            panic!("the harness already ran; log:\n{}", show_log());
        };
        started
            .online_or_error(&w.store, "agent", Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e}; log:\n{}", show_log()));
        started
    };
    // Nostr times are whole seconds: each message in a second of its own,
    // so the expected order is the one they were sent in.
    let store = &w.store;
    let next_second = || {
        tokio::time::sleep(app::until_after_second(
            app::unix_now(),
            std::time::SystemTime::now(),
        ))
    };
    let chat = |text: &'static str| async move {
        next_second().await;
        app::chat(store, "agent", text, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e}; log:\n{}", show_log()))
    };
    let _first = start().await;
    chat("[usage:1200,80,1300,4500] one").await;
    chat("[usage:300,20,330,6000] two").await;
    next_second().await;
    app::stop(&w.store, "agent", Duration::from_secs(60))
        .await
        .unwrap();
    let _second = start().await;
    chat("three").await;
    // The usage event follows the reply: wait for the third.
    let mut found = app::usage::Usage::default();
    for _ in 0..50 {
        found = app::usage::usage(&w.store, Some("agent"), 0).await.unwrap();
        if found.turns.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(found.turns.len(), 3, "{found:?}");
    assert!(found.skipped.is_empty(), "{:?}", found.skipped);
    let t: Vec<_> = found
        .turns
        .iter()
        .map(|t| t.metric.turn.clone().unwrap())
        .collect();
    assert_eq!((t[0].input_tokens, t[0].output_tokens), (Some(1200), Some(80)));
    assert_eq!(t[1].input_tokens, Some(300));
    assert!(t[2].is_unknown());
    // Issue 50 item 3: the hours' record, run 1 awake then stopped, run 2 awake.
    let states: Vec<_> = found.changes.iter().map(|c| c.state.as_str()).collect();
    assert_eq!(states, ["awake", "stopped", "awake"], "{:?}", found.changes);

    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_buzz-launcher-under-test"))
            .args(args)
            .env("BUZZ_LAUNCHER_HOME", w.store.root())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let table = cli(&["usage", "agent"]);
    assert!(table.starts_with("WHEN (UTC)"), "{table}");
    assert!(
        table.contains("agent, over the last ") && table.contains(", dozing 0s, asleep 0s, stopped "),
        "{table}"
    );
    assert!(table.contains("1 200") && table.contains("$0.0045"), "{table}");
    assert!(
        table.contains("agent: 3 turn(s); 1 500 in (2 of 3 turns reported), 100 out (2 of 3 turns reported); $0.0060 (2 of 3 turns reported)"),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&cli(&["usage", "--json"])).unwrap();
    assert_eq!(json["turns"][0]["metric"]["turn"]["inputTokens"], 1200);
    assert_eq!(
        json["turns"][2]["metric"]["turn"]["inputTokens"],
        serde_json::Value::Null
    );
    assert_eq!(
        json["measured"],
        serde_json::json!({}),
        "a local agent has no collector"
    );
    let hour: serde_json::Value =
        serde_json::from_str(&cli(&["usage", "agent", "--since", "1h", "--json"])).unwrap();
    assert_eq!(hour["turns"].as_array().unwrap().len(), 3);
    let later = (app::unix_now() + 3600).to_string();
    let none: serde_json::Value =
        serde_json::from_str(&cli(&["usage", "--since", &later, "--json"])).unwrap();
    assert_eq!(none["turns"], serde_json::json!([]));

    // The conversation, in order, each mention with its echo under it; the
    // first two from before the restart, and the owner's stop between.
    let log = cli(&["log", "agent"]);
    let said: Vec<&str> = log
        .lines()
        .map(|l| l.split_once(": ").map_or(l, |(_, t)| t))
        .collect();
    assert_eq!(
        said,
        vec![
            "[usage:1200,80,1300,4500] one",
            "echo: [usage:1200,80,1300,4500] one",
            "[usage:300,20,330,6000] two",
            "echo: [usage:300,20,330,6000] two",
            "!shutdown",
            "three",
            "echo: three",
        ],
        "{log}"
    );
    assert!(
        log.lines().all(|l| l.contains("you: ") || l.starts_with("  ")),
        "{log}"
    );

    app::stop(&w.store, "agent", Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}; log:\n{}", show_log()));
}
