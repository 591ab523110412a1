//! Nobody but the owner can stop or silence the agent, and every stop is
//! bounded, announced and final (issue 12; spec I1, I3, I5, §Stop,
//! §Auto-Stop; wire-facts §2–§4, §6).

use crate::*;
use buzz_conformance::harness_support::deny_relay::DenyRelay;
use buzz_conformance::harness_support::post_raw;
use std::sync::atomic::Ordering;

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Rule: `since` comes only from accepted events, clamped to now.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_strangers_future_dated_mention_cannot_make_the_agent_deaf() {
    let _g = SERIAL.lock().await;
    let mut w = World::new().await;
    let mut h = w.start(&w.env("echo")).await;
    let stranger = Keys::generate();
    let agent_hex = w.agent.public_key().to_hex();
    post_raw(
        &w.relay.url,
        &stranger,
        "from tomorrow",
        vec![vec!["h".into(), "c1".into()], vec!["p".into(), agent_hex]],
        Some(now_secs() + 86_400),
    )
    .await;
    h.wait_line(WAIT, "inbound event dropped")
        .await
        .expect("the gate saw and dropped the stranger's mention");
    w.relay.restart().await;
    wait_count(&h, "subscription live", 2).await;
    w.mention(&w.owner, "c1", "!shutdown").await;
    assert_eq!(
        h.wait_exit(WAIT).await,
        Some(0),
        "the owner's !shutdown still reaches the agent after the reconnect"
    );
}

/// Rule: owner control is never channel-scoped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owner_stop_reaches_a_channel_scoped_agent_from_another_channel_or_none() {
    let _g = SERIAL.lock().await;
    for tags_of in ["other channel", "no h tag"] {
        let w = World::new().await;
        let env = w.env_with("echo", &[("BUZZ_ACP_CHANNELS", "c1")]);
        let mut h = w.start(&env).await;
        let mut tags = vec![vec!["p".to_string(), w.agent.public_key().to_hex()]];
        if tags_of == "other channel" {
            tags.push(vec!["h".into(), "c2".into()]);
        }
        post_raw(&w.relay.url, &w.owner, "!shutdown", tags, None).await;
        assert_eq!(h.wait_exit(WAIT).await, Some(0), "{tags_of}");
        w.wait_offline().await;
    }
}

/// Rule: `initialize` is bounded; a hung agent is killed and counts as a failed start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_hung_in_initialize_is_killed_and_counts_as_a_failed_start() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "hang-init",
        &[
            ("BUZZ_ACP_IDLE_TIMEOUT", "1"),
            ("BUZZ_ACP_MAX_AGENT_FAILURES", "2"),
        ],
    );
    let mut h = w.spawn(&env);
    assert_eq!(h.wait_exit(WAIT).await, Some(5), "two failed starts: agents dead");
    assert_eq!(
        h.count_lines("agent did not answer initialize in time"),
        2,
        "{}",
        h.stderr()
    );
    assert_eq!(agent_events(&w.log, "initialize").len(), 2);
}

/// Rule: the reaper fires even when no turn ever started.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_fires_while_the_only_agent_hangs_in_initialize() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "hang-init",
        &[
            ("BUZZ_ACP_LAZY_POOL", "true"),
            ("BUZZ_ACP_EXIT_AFTER_INACTIVITY", "2"),
            ("BUZZ_ACP_IDLE_TIMEOUT", "600"),
        ],
    );
    let mut h = w.start(&env).await;
    w.mention(&w.owner, "c1", "never served").await;
    wait_until(WAIT, || {
        (!agent_events(&w.log, "initialize").is_empty()).then_some(())
    })
    .await
    .expect("the lazy slot woke and hangs in initialize");
    h.wait_line(WAIT, "inactivity bound reached")
        .await
        .expect("the reaper fired");
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
    w.wait_offline().await;
}

/// Rules: `session/new` is bounded (the asker is told), and `!cancel` ends a wait on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_session_new_is_bounded_and_cancellable() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with("hang-new", &[("BUZZ_ACP_IDLE_TIMEOUT", "1")]);
    let mut h = w.start(&env).await;
    let m = w.mention(&w.owner, "c1", "start").await;
    let r = w.wait_reply(&m).await;
    assert_eq!(
        r.content,
        "⚠️ The agent could not answer: the agent did not start a session in time"
    );
    assert!(h.stderr().contains("agent did not answer session/new in time"));
    stop_gracefully(&mut h).await;

    let w = World::new().await;
    let env = w.env_with("hang-new", &[("BUZZ_ACP_IDLE_TIMEOUT", "600")]);
    let mut h = w.start(&env).await;
    w.mention(&w.owner, "c1", "start").await;
    wait_until(WAIT, || {
        (!agent_events(&w.log, "session_new").is_empty()).then_some(())
    })
    .await
    .expect("session/new sent");
    w.mention(&w.owner, "c1", "!cancel").await;
    h.wait_line(WAIT, "session/new abandoned")
        .await
        .expect("!cancel ends the wait on session/new");
    h.wait_line(WAIT, "reason=\"cancel\"").await.unwrap();
    stop_gracefully(&mut h).await;
}

/// Rule: a stop without a live session still publishes `offline` (one bounded attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stop_during_a_reconnect_still_publishes_offline() {
    let _g = SERIAL.lock().await;
    let mut w = World::new().await;
    let env = w.env_with(
        "echo",
        &[
            // The first reconnect comes ≥ 8 s after the drop: the stop lands inside the backoff.
            ("BUZZ_ACP_RECONNECT_BASE_MS", "10000"),
        ],
    );
    let mut h = w.start(&env).await;
    w.relay.restart().await;
    h.wait_line(WAIT, "relay reconnect scheduled")
        .await
        .expect("in the reconnect backoff");
    w.obs.wait_live().await;
    stop_gracefully(&mut h).await;
    w.wait_offline().await;
    assert_eq!(
        h.count_lines("subscription live"),
        1,
        "the stop came before any reconnect"
    );
}

/// Rule: a socket whose subscription never goes live is dropped and reconnected.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscription_that_never_goes_live_is_reconnected() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let relay = DenyRelay::accepting().await;
    relay.mute_eose.store(true, Ordering::SeqCst);
    let env = w.env_with(
        "echo",
        &[
            ("BUZZ_RELAY_URL", &relay.url),
            ("BUZZ_ACP_SUBSCRIBE_TIMEOUT_MS", "1000"),
        ],
    );
    let mut h = w.spawn(&env);
    h.wait_line(WAIT, "subscription did not go live in time")
        .await
        .expect("the stalled subscription has a deadline");
    relay.mute_eose.store(false, Ordering::SeqCst);
    let online = wait_until(WAIT, || {
        relay
            .events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == 20001 && e["content"] == "online")
            .then_some(())
    })
    .await;
    assert!(online.is_some(), "online after reconnecting: {}", h.stderr());
    assert!(relay.connections.load(Ordering::SeqCst) >= 2);
    stop_gracefully(&mut h).await;
}

/// Rule: shutdown drains — running turns finish and reply; the rest is cancelled at the drain point.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_drains_finishing_turns_and_cancels_the_rest_at_the_drain_point() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "echo",
        &[("BUZZ_ACP_AGENTS", "2"), ("BUZZ_ACP_SHUTDOWN_DRAIN_SECS", "4")],
    );
    let mut h = w.start(&env).await;
    let quick = w.mention(&w.owner, "c1", "[slow:1500] finishing").await;
    let long = w.mention(&w.owner, "c2", "[slow:60000] endless").await;
    wait_until(WAIT, || (agent_events(&w.log, "prompt").len() == 2).then_some(()))
        .await
        .expect("both turns in flight");
    stop_gracefully(&mut h).await;
    let off = w.wait_offline().await;
    let replies = w.replies_to(&quick);
    assert_eq!(replies.len(), 1, "the finishing turn replied during the drain");
    assert_eq!(replies[0].content, "echo: [slow:1500] finishing");
    let reply_at = w
        .obs
        .messages_of(&w.agent)
        .into_iter()
        .find(|s| s.event.id == replies[0].id)
        .unwrap()
        .at;
    assert!(reply_at <= off, "the reply went out before offline");
    assert!(w.replies_to(&long).is_empty());
    let cancels = agent_events(&w.log, "cancel");
    assert_eq!(cancels.len(), 1, "only the endless turn was cancelled");
    assert!(h.stderr().contains("drain point reached"));
}

/// Rule: an agent's failure is answered, with its message and the auth hint, rate-limited per channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_failure_is_answered_once_per_channel_with_the_auth_hint() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let mut h = w.start(&w.env("fail-prompt")).await;
    let m1 = w.mention(&w.owner, "c1", "hello").await;
    let r = w.wait_reply(&m1).await;
    assert!(
        r.content
            .starts_with("⚠️ The agent could not answer: Authentication required"),
        "{}",
        r.content
    );
    assert!(r.content.contains("claude /login"), "{}", r.content);
    let m2 = w.mention(&w.owner, "c1", "again").await;
    h.wait_line(WAIT, "error reply suppressed by the per-channel rate limit")
        .await
        .expect("the second failure in the channel is not answered");
    assert!(w.replies_to(&m2).is_empty());
    // Another channel has its own allowance.
    let m3 = w.mention(&w.owner, "c2", "elsewhere").await;
    w.wait_reply(&m3).await;
    stop_gracefully(&mut h).await;
}

/// Rule: `systemPrompt` rides `session/new` only when advertised; otherwise it leads the first prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_system_prompt_follows_the_agents_capability() {
    let _g = SERIAL.lock().await;
    for (mode, advertised) in [("echo", false), ("sp-cap", true)] {
        let w = World::new().await;
        let env = w.env_with(
            mode,
            &[
                ("BUZZ_ACP_SYSTEM_PROMPT", "be brief"),
                ("BUZZ_ACP_TEAM_INSTRUCTIONS", "team rules"),
            ],
        );
        let mut h = w.start(&env).await;
        let m1 = w.mention(&w.owner, "c1", "first").await;
        w.wait_reply(&m1).await;
        let m2 = w.mention(&w.owner, "c1", "second").await;
        w.wait_reply(&m2).await;
        stop_gracefully(&mut h).await;
        let sessions = agent_events(&w.log, "session_new");
        assert_eq!(sessions.len(), 1);
        let texts: Vec<String> = agent_events(&w.log, "prompt")
            .iter()
            .map(|v| v["text"].as_str().unwrap().to_string())
            .collect();
        if advertised {
            assert_eq!(sessions[0]["system_prompt"], "be brief\n\nteam rules");
            assert_eq!(texts, vec!["first".to_string(), "second".into()]);
        } else {
            assert!(sessions[0]["system_prompt"].is_null(), "{mode}");
            assert_eq!(
                texts,
                vec!["be brief\n\nteam rules\nfirst".to_string(), "second".into()]
            );
        }
    }
}

/// Rule: queues are bounded; overflow is shed with a log line and one short reply per channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mention_flood_is_shed_past_the_queue_bound() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "hang",
        &[("BUZZ_ACP_RESPOND_TO", "anyone"), ("BUZZ_ACP_LOG", "info")],
    );
    let mut h = w.start(&env).await;
    let stranger = Keys::generate();
    // One turn in flight, 32 queued (the per-channel bound), 7 shed.
    for i in 0..40 {
        w.mention(&stranger, "c1", &format!("flood {i}")).await;
    }
    wait_count(&h, "mention shed", 7).await;
    let busy = wait_until(WAIT, || {
        let m: Vec<_> = w
            .obs
            .messages_of(&w.agent)
            .into_iter()
            .filter(|s| s.event.content.contains("too many requests are waiting"))
            .collect();
        (!m.is_empty()).then_some(m)
    })
    .await
    .expect("the shed asker is told");
    assert_eq!(busy.len(), 1, "one busy reply per channel per interval");
    assert_eq!(h.count_lines("mention shed"), 7);
    assert_eq!(agent_events(&w.log, "prompt").len(), 1);
    w.mention(&w.owner, "c1", "!shutdown").await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
}

/// Rule: a reply signed but not acknowledged when its session ends is resent after the reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reply_whose_acknowledgement_is_lost_is_resent_after_the_reconnect() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let relay = DenyRelay::accepting().await;
    let env = w.env_with("echo", &[("BUZZ_RELAY_URL", &relay.url)]);
    let mut h = w.spawn(&env);
    let online = |n: usize| {
        relay
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == 20001 && e["content"] == "online")
            .count()
            >= n
    };
    wait_until(WAIT, || online(1).then_some(()))
        .await
        .expect("online");
    relay.swallow_next_message.store(true, Ordering::SeqCst);
    let mention = nostr_sdk::prelude::EventBuilder::new(Kind::from(9), "hello")
        .tags([
            nostr_sdk::prelude::Tag::parse(["h", "c1"]).unwrap(),
            nostr_sdk::prelude::Tag::parse(["p", &w.agent.public_key().to_hex()]).unwrap(),
        ])
        .sign_with_keys(&w.owner)
        .unwrap();
    relay.inject(serde_json::to_value(&mention).unwrap());
    h.wait_line(WAIT, "relay down")
        .await
        .expect("the socket closed under the unacknowledged reply");
    let id = mention.id.to_hex();
    let reply = wait_until(WAIT, || {
        relay
            .events
            .lock()
            .unwrap()
            .iter()
            .find(|e| {
                e["kind"] == 9
                    && e["tags"]
                        .as_array()
                        .is_some_and(|t| t.iter().any(|t| t[0] == "e" && t[1] == id.as_str()))
            })
            .cloned()
    })
    .await;
    let reply = reply.unwrap_or_else(|| panic!("the reply was resent; stderr:\n{}", h.stderr()));
    assert_eq!(reply["content"], "echo: hello");
    assert!(h.stderr().contains("unacknowledged events kept for resending"));
    stop_gracefully(&mut h).await;
}

/// The real `@zed-industries/claude-code-acp`, installed from npm by
/// `scripts/test.sh` (path in `BUZZ_CLAUDE_CODE_ACP`, default
/// `~/.cache/buzz-npm/node_modules/.bin/claude-code-acp`).
fn real_claude_code_acp() -> PathBuf {
    let p = std::env::var_os("BUZZ_CLAUDE_CODE_ACP")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/buzz-npm/node_modules/.bin/claude-code-acp")
        });
    assert!(
        p.exists(),
        "the real claude-code-acp is missing at {}; fix: npm install --prefix ~/.cache/buzz-npm \
         --no-audit --no-fund @zed-industries/claude-code-acp@0.16.2 (or set BUZZ_CLAUDE_CODE_ACP)",
        p.display()
    );
    p
}

/// Rules: the system prompt, team instructions and model reach the real
/// agent in the forms it reads (proved by a tap on the ACP messages), and
/// its failure without credentials is answered with its message and hint.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_real_claude_code_acp_gets_its_forms_and_its_failure_is_answered() {
    let _g = SERIAL.lock().await;
    let real = real_claude_code_acp();
    let w = World::new().await;
    let dir = tempfile::tempdir().unwrap();
    // The tap, under the real agent's name: the harness picks that agent's adapter.
    let link = dir.path().join("claude-code-acp");
    std::os::unix::fs::symlink(AGENT, &link).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let tap_log = dir.path().join("tap.log");
    let mut env = w.env("echo");
    for (k, v) in [
        ("BUZZ_ACP_AGENT_COMMAND", link.display().to_string()),
        ("BUZZ_ACP_AGENT_ARGS", " , ".to_string()),
        ("ACP_TAP_EXEC", real.display().to_string()),
        ("ACP_TAP_LOG", tap_log.display().to_string()),
        // As root it refuses to run without this; no credentials, empty home.
        ("IS_SANDBOX", "1".to_string()),
        ("HOME", home.display().to_string()),
        ("BUZZ_ACP_SYSTEM_PROMPT", "be brief".to_string()),
        ("BUZZ_ACP_TEAM_INSTRUCTIONS", "team rules".to_string()),
        ("BUZZ_ACP_MODEL", "claude-test-model".to_string()),
        ("BUZZ_ACP_IDLE_TIMEOUT", "120".to_string()),
    ] {
        env.insert(k.into(), v);
    }
    let mut h = w.start(&env).await;
    let m = w.mention(&w.owner, "c1", "hello").await;
    let r = wait_until(Duration::from_secs(150), || w.replies_to(&m).into_iter().next())
        .await
        .unwrap_or_else(|| panic!("no reply; stderr:\n{}", h.stderr()));
    assert!(
        r.content.starts_with("⚠️ The agent could not answer: "),
        "{}",
        r.content
    );
    assert!(
        r.content.contains("claude /login"),
        "the auth hint: {}",
        r.content
    );
    stop_gracefully(&mut h).await;
    let msgs: Vec<serde_json::Value> = std::fs::read_to_string(&tap_log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let sent = |method: &str| {
        msgs.iter()
            .find(|v| v["dir"] == "to_agent" && v["msg"]["method"] == method)
            .map(|v| v["msg"]["params"].clone())
    };
    let new = sent("session/new").expect("session/new went through the tap");
    assert_eq!(
        new["_meta"]["systemPrompt"],
        serde_json::json!({"append": "be brief\n\nteam rules"})
    );
    assert_eq!(
        new["_meta"]["claudeCode"]["options"]["model"],
        "claude-test-model"
    );
    assert!(new.get("systemPrompt").is_none(), "not advertised, so not sent");
    let init = msgs
        .iter()
        .find(|v| v["dir"] == "from_agent" && v["msg"]["result"]["authMethods"].is_array())
        .expect("the initialize answer");
    assert!(init["msg"]["result"]["agentCapabilities"]["sessionCapabilities"]["systemPrompt"].is_null());
    if let Some(p) = sent("session/prompt") {
        assert_eq!(
            p["prompt"],
            serde_json::json!([{"type": "text", "text": "hello"}]),
            "the system prompt went on session/new, not into the prompt"
        );
    }
}
