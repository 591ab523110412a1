//! Owner control before the gate, the respond-to gate, and turns through the real ACP agent (wire-facts §4, §6).

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owner_shutdown_exits_0_with_offline_and_non_owner_shutdown_is_ordinary() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with("echo", &[("BUZZ_ACP_RESPOND_TO", "anyone")]);
    let mut h = w.start(&env).await;
    let stranger = Keys::generate();
    let m = w.mention(&stranger, "c1", "  !shutdown ").await;
    let r = w.wait_reply(&m).await;
    assert_eq!(r.content, "echo:   !shutdown ");
    assert!(
        h.child.try_wait().unwrap().is_none(),
        "a stranger's !shutdown does not stop the agent"
    );
    w.mention(&w.owner, "c1", "!shutdown").await;
    w.wait_offline().await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn respond_to_matrix_across_all_four_modes() {
    let _g = SERIAL.lock().await;
    let listed = Keys::generate();
    let stranger = Keys::generate();
    // (mode, owner answered, listed answered, stranger answered)
    for (mode, o, l, s) in [
        ("owner-only", true, false, false),
        ("allowlist", true, true, false),
        ("anyone", true, true, true),
        ("nobody", false, false, false),
    ] {
        let w = World::new().await;
        let mut env = w.env("echo");
        env.insert("BUZZ_ACP_RESPOND_TO".into(), mode.into());
        env.insert(
            "BUZZ_ACP_RESPOND_TO_ALLOWLIST".into(),
            listed.public_key().to_hex().to_uppercase(),
        );
        let mut h = w.start(&env).await;
        let ms = w.mention(&stranger, "c1", "from stranger").await;
        let ml = w.mention(&listed, "c1", "from listed").await;
        let mo = w.mention(&w.owner, "c1", "from owner").await;
        // Every mention is decided before the stop: answered ones have their
        // reply, gated ones their drop line.
        for (m, answered) in [(&ms, s), (&ml, l), (&mo, o)] {
            if answered {
                w.wait_reply(m).await;
            }
        }
        let gated = [o, l, s].iter().filter(|a| !**a).count();
        wait_until(WAIT, || {
            let n = h
                .lines
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.text.contains("inbound event dropped") && l.text.contains("Gated"))
                .count();
            (n >= gated).then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("{mode}: {gated} mentions gated"));
        w.mention(&w.owner, "c1", "!shutdown").await;
        assert_eq!(h.wait_exit(WAIT).await, Some(0), "{mode}");
        let prompts: Vec<String> = agent_events(&w.log, "prompt")
            .iter()
            .map(|v| v["text"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(prompts.contains(&"from owner".to_string()), o, "{mode} owner");
        assert_eq!(prompts.contains(&"from listed".to_string()), l, "{mode} listed");
        assert_eq!(
            prompts.contains(&"from stranger".to_string()),
            s,
            "{mode} stranger"
        );
        assert_eq!(!w.replies_to(&ml).is_empty(), l, "{mode} listed reply");
        assert_eq!(!w.replies_to(&ms).is_empty(), s, "{mode} stranger reply");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mention_to_reply_through_the_real_agent_with_tags() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "permission",
        &[
            ("BUZZ_ACP_SYSTEM_PROMPT", "be brief"),
            ("BUZZ_ACP_LAZY_POOL", "1"),
        ],
    );
    let mut h = w.start(&env).await;
    let m = w.mention(&w.owner, "chan-x", "do it").await;
    let r = w.wait_reply(&m).await;
    assert_eq!(r.content, "permission: yes", "permission answered allow_once");
    assert_eq!(r.kind, Kind::from(9));
    assert_eq!(
        tags(&r),
        vec![
            vec!["h".to_string(), "chan-x".into()],
            vec!["e".into(), m.id.to_hex(), "".into(), "reply".into()],
            vec!["p".into(), w.owner.public_key().to_hex()],
        ]
    );
    // A mention inside a thread: the reply names the root and the parent.
    let root = "f".repeat(64);
    let nested = post(
        &w.relay.url,
        &w.owner,
        "chan-x",
        &w.agent,
        "again",
        vec![vec!["e".into(), root.clone(), "".into(), "root".into()]],
    )
    .await;
    let r2 = w.wait_reply(&nested).await;
    let t = tags(&r2);
    assert!(t.contains(&vec!["e".to_string(), root, "".into(), "root".into()]));
    assert!(t.contains(&vec![
        "e".to_string(),
        nested.id.to_hex(),
        "".into(),
        "reply".into()
    ]));
    let sessions = agent_events(&w.log, "session_new");
    assert_eq!(sessions.len(), 1, "one session per channel");
    // The agent does not advertise sessionCapabilities.systemPrompt, so the
    // system prompt leads the session's first prompt instead (ACP).
    assert!(sessions[0]["system_prompt"].is_null());
    let prompts = agent_events(&w.log, "prompt");
    assert_eq!(prompts[0]["text"], "be brief\ndo it");
    assert_eq!(prompts[1]["text"], "again");
    stop_gracefully(&mut h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_timeout_and_owner_cancel_end_the_turn() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with("hang", &[("BUZZ_ACP_IDLE_TIMEOUT", "1")]);
    let mut h = w.start(&env).await;
    w.mention(&w.owner, "c1", "first").await;
    h.wait_line(WAIT, "reason=\"idle timeout\"")
        .await
        .expect("idle timeout cancels");
    h.wait_line(WAIT, "turn cancelled").await.expect("turn ended");
    assert_eq!(agent_events(&w.log, "cancel").len(), 1);
    stop_gracefully(&mut h).await;

    let w = World::new().await;
    let mut h = w.start(&w.env("hang")).await;
    w.mention(&w.owner, "c2", "long").await;
    w.wait_agent_event("prompt").await;
    w.mention(&w.owner, "c2", "!cancel").await;
    h.wait_line(WAIT, "reason=\"cancel\"")
        .await
        .expect("owner !cancel cancels");
    w.wait_agent_event("cancel").await;
    stop_gracefully(&mut h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn typing_indicator_max_turn_cap_and_replies_off() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "echo",
        &[
            ("BUZZ_ACP_TYPING", "true"),
            ("BUZZ_ACP_REPLY", "false"),
            ("BUZZ_ACP_MAX_TURN_DURATION", "1"),
        ],
    );
    let mut h = w.start(&env).await;
    // Streams updates every 100 ms (so the idle timeout never fires) for 5 s > the 1 s cap.
    let m = w.mention(&w.owner, "c9", "[slow:5000] long").await;
    let a = w.agent.public_key();
    let typing = w
        .obs
        .wait_for(WAIT, |e| e.kind == Kind::from(20002) && e.pubkey == a)
        .await
        .expect("a typing indicator while the turn runs");
    assert_eq!(
        tags(&typing.event),
        vec![
            vec!["h".to_string(), "c9".into()],
            vec!["e".into(), m.id.to_hex()]
        ]
    );
    h.wait_line(WAIT, "reason=\"max turn duration\"")
        .await
        .expect("the hard cap cancels");
    let m2 = w.mention(&w.owner, "c9", "quick").await;
    wait_until(WAIT, || {
        agent_events(&w.log, "prompt")
            .iter()
            .any(|v| v["text"] == "quick")
            .then_some(())
    })
    .await
    .unwrap();
    h.wait_line(WAIT, "stop_reason=\"EndTurn\"")
        .await
        .expect("the second turn completed");
    w.mention(&w.owner, "c9", "!shutdown").await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
    assert!(w.replies_to(&m2).is_empty(), "replies configured off");
    assert!(w.obs.messages_of(&w.agent).is_empty());
}

/// A mention accepted into the queue gets a `👀` reaction (kind 7, NIP-25
/// tags; wire-facts §4), a gated one none; `BUZZ_ACP_REACT_QUEUED=false`
/// turns the reaction off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queued_mention_gets_an_eyes_reaction_and_a_gated_one_none() {
    let _g = SERIAL.lock().await;
    for on in [true, false] {
        let w = World::new().await;
        let mut env = w.env("echo");
        if !on {
            env.insert("BUZZ_ACP_REACT_QUEUED".into(), "false".into());
        }
        let mut h = w.start(&env).await;
        let stranger = Keys::generate();
        let gated = w.mention(&stranger, "c3", "from a stranger").await;
        let m = w.mention(&w.owner, "c3", "hello").await;
        w.wait_reply(&m).await;
        let a = w.agent.public_key();
        if on {
            let r = w
                .obs
                .wait_for(WAIT, |e| e.kind == Kind::from(7) && e.pubkey == a)
                .await
                .expect("a reaction to the queued mention");
            assert_eq!(r.event.content, "👀");
            assert_eq!(
                tags(&r.event),
                vec![
                    vec!["h".to_string(), "c3".into()],
                    vec!["e".into(), m.id.to_hex()],
                    vec!["p".into(), w.owner.public_key().to_hex()],
                    vec!["k".into(), "9".into()],
                ]
            );
        }
        w.mention(&w.owner, "c3", "!shutdown").await;
        assert_eq!(h.wait_exit(WAIT).await, Some(0));
        let reactions = w.obs.matching(|e| e.kind == Kind::from(7) && e.pubkey == a);
        let to = |id: String| {
            reactions
                .iter()
                .filter(|r| tags(&r.event).contains(&vec!["e".to_string(), id.clone()]))
                .count()
        };
        assert_eq!(
            to(m.id.to_hex()),
            usize::from(on),
            "reactions to the owner's mention (on: {on})"
        );
        assert_eq!(
            to(gated.id.to_hex()),
            0,
            "a gated mention is not queued, so not reacted to"
        );
        assert_eq!(
            reactions.len(),
            usize::from(on),
            "no other reaction (the !shutdown is control, not work)"
        );
    }
}
