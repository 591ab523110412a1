//! What an agent reports to its owner (issue 34 item 1): one kind-44200
//! usage event per turn with the agent's own figures, and, with
//! `BUZZ_ACP_RELAY_OBSERVER=true`, its ACP frames as kind-24200 events, both
//! NIP-44 sealed to the owner: a stranger on the relay reads ciphertext. The
//! test agent reports usage as claude-agent-acp does (`[usage:…]`), runs a
//! quiet tool (`[tool:MS]`) and floods one (`[flood:BYTES]`).

use super::*;
use buzz_contract::observer::{self, Frame, Gap};
use buzz_contract::turn_metric::{self, StopReason, TurnMetric};
use nostr_sdk::prelude::{Event, nip44};

fn open<T: serde::de::DeserializeOwned>(reader: &Keys, e: &Event) -> Result<T, String> {
    let plain = nip44::decrypt(reader.secret_key(), &e.pubkey, &e.content).map_err(|e| e.to_string())?;
    serde_json::from_str(&plain).map_err(|e| format!("{e}: {plain}"))
}

fn sealed_of(w: &World, kind: u16) -> Vec<Event> {
    w.obs
        .matching(|e| e.pubkey == w.agent.public_key() && e.kind == Kind::from(kind))
        .into_iter()
        .map(|s| s.event)
        .collect()
}

async fn wait_metrics(w: &World, n: usize) -> Vec<(Event, TurnMetric)> {
    wait_until(WAIT, || {
        let got = sealed_of(w, turn_metric::KIND);
        (got.len() >= n).then_some(got)
    })
    .await
    .unwrap_or_else(|| panic!("{n} usage event(s)"))
    .into_iter()
    .map(|e| {
        let m = open(&w.owner, &e).expect("the owner opens a usage event");
        (e, m)
    })
    .collect()
}

/// Rule: each turn's usage reaches the owner sealed, with the agent's figures, `null` where it reported none, and only ciphertext for anyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_turn_s_usage_is_sealed_to_the_owner_with_the_agent_s_own_figures() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let mut h = w.start(&w.env("echo")).await;

    let first = w.mention(&w.owner, "c1", "[usage:1200,80,1300,4500] hi").await;
    w.wait_reply(&first).await;
    let (e, m) = wait_metrics(&w, 1).await.remove(0);
    let tags: Vec<Vec<String>> = tags(&e);
    assert_eq!(
        tags,
        turn_metric::tags(&w.owner.public_key().to_hex(), &w.agent.public_key().to_hex()),
        "exactly the owner and the agent in the clear"
    );
    let turn = m.turn.clone().expect("turn figures");
    assert_eq!(
        (turn.input_tokens, turn.output_tokens, turn.total_tokens),
        (Some(1200), Some(80), Some(1300))
    );
    assert_eq!(turn.cost_usd, Some(0.0045));
    assert_eq!(
        (m.context_used_tokens, m.context_limit_tokens),
        (Some(1280), Some(200_000))
    );
    assert_eq!(m.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(m.turn_seq, Some(1));
    assert_eq!(m.triggering_event_ids, vec![first.id.to_hex()]);
    assert!(m.session_id.is_some() && m.harness == "buzz-acp");

    // The next turn of the session: its own share of the session's cost.
    let second = w.mention(&w.owner, "c1", "[usage:100,20,130,6000] again").await;
    w.wait_reply(&second).await;
    let (_, m2) = wait_metrics(&w, 2).await.remove(1);
    assert_eq!(m2.turn_seq, Some(2));
    assert_eq!(m2.session_id, m.session_id);
    let cost = m2.turn.as_ref().and_then(|t| t.cost_usd).expect("turn cost");
    assert!((cost - 0.0015).abs() < 1e-9, "{cost}");
    let cum = m2.cumulative.expect("cumulative");
    assert_eq!((cum.input_tokens, cum.cost_usd), (Some(1300), Some(0.006)));

    // An agent that reports nothing: the turn is there, every figure null.
    let third = w.mention(&w.owner, "c2", "no figures").await;
    w.wait_reply(&third).await;
    let (_, m3) = wait_metrics(&w, 3).await.remove(2);
    assert!(m3.turn.expect("turn").is_unknown(), "nulls, not zeros");
    assert_eq!(m3.context_used_tokens, None);
    stop_gracefully(&mut h).await;

    // A stranger on the same relay reads ciphertext only.
    let stranger = Keys::generate();
    for e in sealed_of(&w, turn_metric::KIND) {
        assert!(
            open::<TurnMetric>(&stranger, &e).is_err(),
            "a stranger opened {e:?}"
        );
        assert!(!e.content.contains("inputTokens") && !e.content.contains("sessionId"));
    }
}

/// A frame's ACP session update kind (`tool_call`, …), if it is one.
fn update_kind(f: &Frame) -> Option<&str> {
    f.payload
        .pointer("/params/update/sessionUpdate")
        .and_then(|v| v.as_str())
}

fn frames(w: &World) -> Vec<Frame> {
    sealed_of(w, observer::KIND)
        .iter()
        .map(|e| open(&w.owner, e).expect("the owner opens a frame"))
        .collect()
}

/// Rule: with the observer on, a tool call reaches the owner while it runs; a 10 MB tool output is cut and counted, the harness stays within its memory goal, and no one else can read a frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_observer_mirrors_a_running_tool_to_the_owner_and_bounds_a_flood() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let mut h = w
        .start(&w.env_with("echo", &[("BUZZ_ACP_RELAY_OBSERVER", "true")]))
        .await;

    let m = w.mention(&w.owner, "c1", "[tool:3000] build it").await;
    w.wait_agent_event("tool_started").await;
    let seen = wait_until(WAIT, || {
        frames(&w)
            .into_iter()
            .find(|f| f.kind == observer::READ && update_kind(f) == Some("tool_call"))
    })
    .await
    .expect("the tool call mirrored");
    assert!(
        agent_events(&w.log, "tool_finished").is_empty(),
        "the tool call reached the owner while the tool ran"
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let started = agent_events(&w.log, "tool_started")[0]["t_ms"]
        .as_u64()
        .unwrap_or(now_ms);
    println!(
        "observer_tool_call_to_owner_ms: {} (at most; frame seq {})",
        now_ms.saturating_sub(started),
        seen.seq
    );
    assert_eq!(seen.channel_id.as_deref(), Some("c1"));
    assert!(seen.turn_id.is_some() && seen.session_id.is_some());
    w.wait_reply(&m).await;
    let all = frames(&w);
    assert!(
        all.iter().any(|f| f.kind == observer::WRITE
            && f.payload.get("method").and_then(|v| v.as_str()) == Some("session/prompt")),
        "the harness's own prompt is mirrored"
    );
    let seqs: Vec<u64> = all.iter().map(|f| f.seq).collect();
    assert!(seqs.windows(2).all(|p| p[0] < p[1]), "in order: {seqs:?}");

    // A 10 MB tool output: cut, counted, never buffered whole.
    let flood = w.mention(&w.owner, "c1", "[flood:10000000] chatty").await;
    w.wait_reply(&flood).await;
    let got = wait_until(WAIT, || {
        let f = frames(&w);
        let elided = f
            .iter()
            .find(|f| f.payload.get("originalBytes").is_some())
            .cloned()?;
        let gap = f.iter().find(|f| f.kind == observer::GAP).cloned()?;
        Some((elided, gap))
    })
    .await
    .expect("an elided frame and a gap frame");
    assert!(got.0.cut_bytes >= 10_000_000, "{:?}", got.0.cut_bytes);
    let gap: Gap = serde_json::from_value(got.1.payload).unwrap();
    assert_eq!(gap.reason_counts.oversized, 1, "{gap:?}");
    let hwm_kb = std::fs::read_to_string(format!("/proc/{}/status", h.pid))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmHWM:")
                .map(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>())
        })
        .unwrap()
        .unwrap();
    println!(
        "observer: harness peak RSS after a 10 MB tool output: {:.1} MB",
        hwm_kb as f64 / 1024.0
    );
    assert!(
        hwm_kb < 64 * 1024,
        "the harness's memory goal is 64 MB: {hwm_kb} kB"
    );
    stop_gracefully(&mut h).await;

    let stranger = Keys::generate();
    for e in sealed_of(&w, observer::KIND) {
        assert!(open::<Frame>(&stranger, &e).is_err());
        assert_eq!(
            tags(&e),
            observer::tags(&w.owner.public_key().to_hex(), &w.agent.public_key().to_hex())
        );
    }
}

/// Rule: the observer is off unless asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_variable_no_frame_is_published() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let mut h = w.start(&w.env("echo")).await;
    let m = w.mention(&w.owner, "c1", "[tool:200] quietly").await;
    w.wait_reply(&m).await;
    wait_metrics(&w, 1).await;
    stop_gracefully(&mut h).await;
    assert!(sealed_of(&w, observer::KIND).is_empty());
}
