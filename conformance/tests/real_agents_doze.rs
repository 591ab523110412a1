//! Doze with the real ACP agents against the fake model API on loopback
//! (issue 50, Tests "Local"): mention 1 in channel C; after the doze bound
//! no agent process is left (read from `/proc`) and presence is `away`;
//! then mention 2 in C, with no launcher running, is answered by the same
//! harness, and the model request that answers it carries mention 1's
//! turn, brought back by `session/resume`.
//!
//! One test at a time: each agent is a Node or native process of
//! 80–400 MB on two shared cores.

use buzz_conformance::fake_model::agents::RealAgent;
use buzz_conformance::fake_model::{Script, Turn};
use buzz_conformance::harness_support::{HarnessProc, children_of, harness_command, wait_until};
use buzz_conformance::real_agents_support::AgentWorld;
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const WAIT: Duration = Duration::from_secs(60);
/// What mention 1 asks the agent to keep: it must reach mention 2's request.
const WORD: &str = "zebra-7731";

/// Waits until the agent's latest presence says `content`.
async fn latest_presence(w: &AgentWorld, content: &str, h: &HarnessProc) {
    wait_until(WAIT, || {
        let all = w.obs.presence_of(&w.agent);
        all.last().filter(|s| s.event.content == content).map(|_| ())
    })
    .await
    .unwrap_or_else(|| panic!("presence {content}; stderr:\n{}", h.stderr()));
}

async fn a_dozing_agent_answers_in_its_old_conversation(agent: RealAgent) {
    let _g = SERIAL.lock().await;
    let script = Script::new()
        .turn(Turn::text("Noted."))
        .turn(Turn::text("You asked me to remember it."));
    let w = AgentWorld::new(script).await;
    let mut env = w.env(agent);
    env.insert("BUZZ_ACP_DOZE".into(), "3".into());
    env.insert("BUZZ_ACP_LAZY_POOL".into(), "true".into());
    env.insert("BUZZ_ACP_REAPER_CHECK_MS".into(), "200".into());
    let mut h = HarnessProc::spawn(harness_command(HARNESS, &env));
    latest_presence(&w, "online", &h).await;

    let m1 = w.mention("C", &format!("please remember the word {WORD}")).await;
    w.wait_reply(&m1, WAIT).await;
    assert!(!children_of(h.pid).is_empty(), "the agent runs after its turn");
    latest_presence(&w, "away", &h).await;
    wait_until(WAIT, || children_of(h.pid).is_empty().then_some(()))
        .await
        .unwrap_or_else(|| panic!("agent processes left while dozing: {:?}", children_of(h.pid)));

    let m2 = w
        .mention("C", "which word did I ask you to remember? (q-5521)")
        .await;
    w.wait_reply(&m2, WAIT).await;
    let asked: Vec<_> = w
        .fake
        .model_requests()
        .into_iter()
        .filter(|r| r.body.to_string().contains("q-5521"))
        .collect();
    assert!(!asked.is_empty(), "mention 2 reached the model API");
    assert!(
        asked.iter().all(|r| r.body.to_string().contains(WORD)),
        "mention 2's request carries mention 1's turn: {}",
        asked[0].body
    );
    let log = h.stderr();
    assert!(
        log.contains("agent ended for the doze")
            && log.contains("a mention ends the doze")
            && log.contains("conversation brought back")
            && log.contains("step=\"resume\""),
        "dozed, woke, and resumed: {log}"
    );
    assert!(h.child.try_wait().unwrap().is_none(), "the same harness answered");
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "{}", h.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_dozes_and_answers_the_next_mention_in_its_conversation() {
    a_dozing_agent_answers_in_its_old_conversation(RealAgent::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_dozes_and_answers_the_next_mention_in_its_conversation() {
    a_dozing_agent_answers_in_its_old_conversation(RealAgent::Codex).await;
}
