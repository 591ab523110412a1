//! The inactivity reaper (I5, §Auto-Stop), the shutdown budget (§Stop and Delete, Known Defect 7) and PID 1 duties.

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reaper_fires_in_bound_for_a_lazy_pool_that_never_woke() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "echo",
        &[
            ("BUZZ_ACP_LAZY_POOL", "true"),
            ("BUZZ_ACP_EXIT_AFTER_INACTIVITY", "2"),
        ],
    );
    let mut h = w.spawn(&env);
    let start = h.wait_line(WAIT, "buzz-acp starting").await.expect("start line");
    w.wait_online().await;
    let fired = h
        .wait_line(WAIT, "inactivity bound reached")
        .await
        .expect("reaper fired");
    // By the harness's own log timestamps, not by when the test read the lines.
    let late = fired.secs_since(&start).expect("timestamps");
    assert!(late >= 2.0, "not before T: {late}");
    assert!(late < 3.0, "before T+1s: {late}");
    w.wait_offline().await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
    assert!(
        agent_events(&w.log, "start").is_empty(),
        "the lazy pool never woke"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reaper_is_deferred_by_an_in_flight_turn() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "echo",
        &[
            ("BUZZ_ACP_LAZY_POOL", "true"),
            ("BUZZ_ACP_EXIT_AFTER_INACTIVITY", "2"),
            ("BUZZ_ACP_IDLE_TIMEOUT", "1"),
        ],
    );
    let mut h = w.start(&env).await;
    // A turn lasting 4 s (> T) that streams updates every 100 ms (< idle timeout).
    let m = w.mention(&w.owner, "c1", "[slow:4000] work").await;
    let reply = w.wait_reply(&m).await;
    assert_eq!(reply.content, "echo: [slow:4000] work");
    assert!(
        h.child.try_wait().unwrap().is_none(),
        "alive when the long turn ends"
    );
    let done = h.wait_line(WAIT, "turn completed").await.expect("turn end line");
    let fired = h
        .wait_line(WAIT, "inactivity bound reached")
        .await
        .expect("reaper fires later");
    // The bound restarts when the turn ends: not before T after it, by the harness's own clock.
    let after = fired.secs_since(&done).expect("timestamps");
    assert!(after >= 2.0, "deferred by the full bound after the turn: {after}");
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
}

/// Rule (§Auto-Stop): the reaper does not wait for an agent that is still
/// starting, so a hung `initialize` cannot defeat I5; a mention queued
/// behind it is not dropped silently: its asker is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mention_queued_when_the_reaper_fires_is_told_it_was_not_answered() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    // An agent that takes 4 s to come up, against a bound of 1 s.
    let args = format!("-c,sleep 4; exec {AGENT} echo");
    let env = w.env_with(
        "echo",
        &[
            ("BUZZ_ACP_LAZY_POOL", "true"),
            ("BUZZ_ACP_EXIT_AFTER_INACTIVITY", "1"),
            ("BUZZ_ACP_REAPER_CHECK_MS", "100"),
            ("BUZZ_ACP_AGENT_COMMAND", "/bin/sh"),
            ("BUZZ_ACP_AGENT_ARGS", &args),
        ],
    );
    let mut h = w.start(&env).await;
    let m = w.mention(&w.owner, "c1", "still there?").await;
    let reply = w.wait_reply(&m).await;
    assert!(
        reply.content.contains("stopped before it got to this"),
        "{}; {}",
        reply.content,
        h.stderr()
    );
    assert!(h.stderr().contains("inactivity bound reached"), "{}", h.stderr());
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_publishes_offline_and_exits_0_within_the_budget() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    // A turn that never ends: the drain point cancels it.
    let env = w.env_with("hang", &[("BUZZ_ACP_SHUTDOWN_BUDGET_SECS", "10")]);
    let mut h = w.start(&env).await;
    w.mention(&w.owner, "c1", "busy").await;
    w.wait_agent_event("prompt").await;
    let t0 = Instant::now();
    h.signal(libc::SIGTERM);
    let code = h.wait_exit(WAIT).await;
    let took = t0.elapsed();
    assert_eq!(code, Some(0));
    w.wait_offline().await;
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(
        agent_events(&w.log, "cancel").len(),
        1,
        "the in-flight turn was cancelled at the drain point"
    );
}

/// Rule: at a graceful stop a prompt that sent nothing for the stall bound
/// (4 s) is cancelled at once and not waited for, while a prompt that makes
/// progress finishes inside the drain and its reply is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_prompt_is_cancelled_at_the_stop_and_a_progressing_one_finishes() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "ignore-cancel,ignore-sigterm",
        &[
            ("BUZZ_ACP_AGENTS", "2"),
            ("BUZZ_ACP_CANCEL_GRACE_MS", "60000"),
            ("BUZZ_ACP_IDLE_TIMEOUT", "600"),
            ("BUZZ_ACP_SHUTDOWN_BUDGET_SECS", "40"),
            ("BUZZ_ACP_LOG", "info"),
        ],
    );
    let mut h = w.start(&env).await;
    w.mention(&w.owner, "c1", "[hang]").await;
    let slow = w.mention(&w.owner, "c2", "[slow:9000] progressing").await;
    wait_until(WAIT, || (agent_events(&w.log, "prompt").len() == 2).then_some(()))
        .await
        .expect("both turns in flight");
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(Duration::from_secs(60)).await, Some(0));
    w.wait_offline().await;
    let r = w.wait_reply(&slow).await;
    assert_eq!(
        r.content, "echo: [slow:9000] progressing",
        "the progressing prompt finished"
    );
    let log = h.stderr();
    assert!(
        log.contains("a turn made no progress at the stop; cancelled, not waited for"),
        "{log}"
    );
    assert!(
        !log.contains("drain point reached"),
        "the stalled turn did not hold the drain to its end: {log}"
    );
}

/// Rule: a turn running a tool is progressing, however quiet the tool
/// (review-9b395e0 #7): at a stop it finishes inside the drain, and its
/// answer goes out before `offline`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_running_a_quiet_tool_is_not_stalled_at_the_stop() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with("echo", &[("BUZZ_ACP_SHUTDOWN_BUDGET_SECS", "30")]);
    let mut h = w.start(&env).await;
    // Silent for 7 s: well past the 4 s stall bound, inside the drain.
    let m = w.mention(&w.owner, "c1", "[tool:7000] build").await;
    w.wait_agent_event("tool_started").await;
    w.mention(&w.owner, "c1", "!shutdown").await;
    assert_eq!(h.wait_exit(Duration::from_secs(40)).await, Some(0));
    let off = w.wait_offline().await;
    let r = w.wait_reply(&m).await;
    assert_eq!(r.content, "echo: [tool:7000] build", "the tool's turn finished");
    let reply_at = w
        .obs
        .messages_of(&w.agent)
        .into_iter()
        .find(|s| s.event.id == r.id)
        .unwrap()
        .at;
    assert!(reply_at <= off, "the answer went out before offline");
    assert!(agent_events(&w.log, "cancel").is_empty(), "never cancelled");
    assert!(
        !h.stderr().contains("a turn made no progress at the stop"),
        "{}",
        h.stderr()
    );
}

fn alive(pid: i64) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_stuck_slots_still_publish_offline_within_the_budget() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env_with(
        "stuck",
        &[
            ("BUZZ_ACP_AGENTS", "32"),
            ("BUZZ_ACP_SHUTDOWN_BUDGET_SECS", "12"),
            ("BUZZ_ACP_KILL_GRACE_MS", "2000"),
            ("BUZZ_ACP_CANCEL_GRACE_MS", "60000"),
            ("BUZZ_ACP_IDLE_TIMEOUT", "600"),
            ("BUZZ_ACP_LOG", "info"),
        ],
    );
    let mut h = w.start(&env).await;
    for i in 0..32 {
        w.mention(&w.owner, &format!("c{i}"), "stuck").await;
    }
    wait_until(Duration::from_secs(60), || {
        (agent_events(&w.log, "prompt").len() == 32).then_some(())
    })
    .await
    .expect("32 turns in flight");
    let pids: Vec<i64> = agent_events(&w.log, "start")
        .iter()
        .map(|v| v["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(pids.len(), 32);
    let t0 = Instant::now();
    h.signal(libc::SIGTERM);
    let code = h.wait_exit(Duration::from_secs(30)).await;
    let took = t0.elapsed();
    assert_eq!(code, Some(0));
    w.wait_offline().await;
    assert!(
        took < Duration::from_secs(12),
        "whole tail inside the budget: {took:?}"
    );
    assert_eq!(
        agent_events(&w.log, "cancel").len(),
        32,
        "every turn was asked to cancel"
    );
    wait_until(Duration::from_secs(5), || {
        pids.iter().all(|p| !alive(*p)).then_some(())
    })
    .await
    .expect("every stuck agent was killed");
}

fn children_of(ppid: i32) -> Vec<(i32, String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head
            .split_once('(')
            .map(|(_, c)| c.to_string())
            .unwrap_or_default();
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or_default().to_string();
        if f.next().and_then(|p| p.parse::<i32>().ok()) == Some(ppid) {
            out.push((pid, comm, state));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn as_pid_1_the_harness_reaps_orphaned_zombies_and_takes_sigterm() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let env = w.env("orphan");
    let mut c = tokio::process::Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc", "--kill-child", HARNESS])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(&env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut h = HarnessProc::spawn(c);
    w.wait_online().await;
    // The harness is unshare's child and PID 1 of its namespace.
    let harness = children_of(h.pid)
        .first()
        .map(|c| c.0)
        .expect("the harness under unshare");
    let orphan = wait_until(WAIT, || children_of(harness).into_iter().find(|c| c.1 == "sleep"))
        .await
        .expect("the orphaned sleep was re-parented to the harness");
    // Once it exits it must be reaped, not left as a zombie of PID 1.
    wait_until(WAIT, || {
        (!children_of(harness).iter().any(|c| c.0 == orphan.0)).then_some(())
    })
    .await
    .expect("the orphan was reaped");
    // SAFETY: kill(2) on the harness pid.
    unsafe {
        libc::kill(harness, libc::SIGTERM);
    }
    w.wait_offline().await;
    assert_eq!(
        h.wait_exit(WAIT).await,
        Some(0),
        "PID 1 handles SIGTERM through the graceful path"
    );
}
