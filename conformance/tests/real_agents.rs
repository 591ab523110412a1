//! Real coding agents through the real harness (issue "real coding agents";
//! spec §Launch data, wire-facts §6): `buzz-acp` runs claude-agent-acp,
//! codex-acp and gemini-cli by their preset command names against a
//! scripted fake model API on loopback, and a mention on a real relay (NIP-42)
//! makes each one run its own shell tool in the workdir and answer.
//!
//! What the recorded requests prove: the record's model reached the model
//! API (`session/set_model` for claude and gemini, the `model` config option
//! for codex), and the permission policy and mode decided whether the tool
//! ran. Failures of the model API (500, 401, no answer) become error replies
//! within a bound, and the harness stays online.
//!
//! Tests run one at a time: each agent is a Node or native process of
//! 80–400 MB, and two cores are shared with the rest of the suite.

use buzz_conformance::fake_model::agents::RealAgent;
use buzz_conformance::fake_model::{Failure, Script, Turn};
use buzz_conformance::harness_support::{HarnessProc, harness_command};
use buzz_conformance::real_agents_support::{ANTHROPIC_KEY, AgentWorld, GEMINI_KEY, OPENAI_KEY};
use std::collections::HashMap;
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const WAIT: Duration = Duration::from_secs(60);
const PROOF: &str = "echo proof-ok-42 > proof.txt";
const LEAD: &str = "I'll create the file.";
const DONE: &str = "Done: proof.txt written.";

fn spawn(env: &HashMap<String, String>) -> HarnessProc {
    HarnessProc::spawn(harness_command(HARNESS, env))
}

/// Nothing the harness published carries one of the fake API keys.
fn assert_no_key_published(w: &AgentWorld) {
    for s in w.obs.messages_of(&w.agent) {
        for key in [ANTHROPIC_KEY, OPENAI_KEY, GEMINI_KEY] {
            assert!(!s.event.content.contains(key), "a key in {:?}", s.event.content);
        }
    }
}

/// A mention makes `agent` write a file with its own shell tool, in the
/// workdir, and the reply (two text blocks around the tool call, separated
/// by a blank line) reaches the asker; the model the record names is the one
/// the model API was asked for.
async fn writes_a_file_and_answers(agent: RealAgent, model: &str, model_sent: &str, mode: Option<&str>) {
    let _g = SERIAL.lock().await;
    let w = AgentWorld::new(Script::new().turn(Turn::say_then_shell(LEAD, PROOF, DONE))).await;
    let mut env = w.env(agent);
    env.insert("BUZZ_ACP_MODEL".into(), model.into());
    if let Some(m) = mode {
        env.insert("BUZZ_ACP_PERMISSION_MODE".into(), m.into());
    }
    let mut h = spawn(&env);
    w.wait_online(WAIT).await;
    let m = w.mention("c1", "please write proof.txt").await;
    let r = w.wait_reply(&m, WAIT).await;
    assert_eq!(r.content, format!("{LEAD}\n\n{DONE}"), "{}", h.stderr());
    assert_eq!(w.work_file("proof.txt").as_deref(), Some("proof-ok-42\n"));
    let models = w.fake.models_seen();
    assert!(
        !models.is_empty()
            && models
                .iter()
                .all(|m| m.contains(model_sent) || m.contains("flash-lite")),
        "every model request asked for {model_sent}: {models:?}"
    );
    assert!(
        w.fake.requests().iter().any(|r| !r.tool_results().is_empty()),
        "the tool's result went back to the model"
    );
    assert!(h.stderr().contains("session setup applied"), "{}", h.stderr());
    assert_no_key_published(&w);
    assert_usage_is_what_the_model_api_reported(&w, agent, &m).await;
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
}

/// The turn's usage event (issue 34) opens for the owner, and only the
/// owner, to what the agent reported of the tokens the fake model API
/// reported for the turn's requests: nothing invented where it said none.
async fn assert_usage_is_what_the_model_api_reported(
    w: &AgentWorld,
    agent: RealAgent,
    mention: &nostr_sdk::prelude::Event,
) {
    use buzz_contract::turn_metric::{self, TurnMetric};
    use nostr_sdk::prelude::{Kind, nip44};
    let open = |reader: &nostr_sdk::prelude::Keys, e: &nostr_sdk::prelude::Event| {
        nip44::decrypt(reader.secret_key(), &e.pubkey, &e.content)
            .ok()
            .and_then(|p| serde_json::from_str::<TurnMetric>(&p).ok())
    };
    let kind = Kind::from(turn_metric::KIND);
    let seen = w
        .obs
        .wait_for(WAIT, |e| e.pubkey == w.agent.public_key() && e.kind == kind)
        .await
        .expect("a usage event for the turn")
        .event;
    let metric = open(&w.owner, &seen).expect("the owner opens it");
    assert!(open(&nostr_sdk::prelude::Keys::generate(), &seen).is_none());
    assert_eq!(metric.triggering_event_ids, vec![mention.id.to_hex()]);
    let reported: Vec<_> = w.fake.reported().into_iter().flatten().collect();
    let turn = metric.turn.clone().expect("turn figures");
    println!(
        "{agent:?}: usage event {turn:?}, context {:?}/{:?}; the API reported {reported:?}",
        metric.context_used_tokens, metric.context_limit_tokens
    );
    let (input, output) = (
        reported.iter().map(|r| r.input).sum::<u64>(),
        reported.iter().map(|r| r.output).sum::<u64>(),
    );
    let last = reported.last().expect("the API answered");
    // What each pinned agent reports (docs/agents.md "Usage"): claude its
    // turn's tokens (the sum of the turn's requests) and cost; codex only
    // its context fill (the last request's tokens); gemini nothing.
    match agent {
        RealAgent::Claude => {
            assert_eq!(
                (turn.input_tokens, turn.output_tokens),
                (Some(input), Some(output))
            );
            assert!(turn.cost_usd.is_some_and(|c| c > 0.0), "{turn:?}");
        }
        RealAgent::Codex => {
            assert!(turn.is_unknown(), "{turn:?}");
            assert_eq!(metric.context_used_tokens, Some(last.input + last.output));
        }
        RealAgent::Gemini => {
            assert!(turn.is_unknown(), "{turn:?}");
            assert_eq!(metric.context_used_tokens, None);
        }
    }
}

/// claude: default mode, so Bash asks permission (its first agent→client
/// request has id 0) and the `allow` policy grants it; `set_model haiku`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claude_runs_its_shell_tool_and_answers() {
    writes_a_file_and_answers(RealAgent::Claude, "haiku", "claude-haiku", None).await;
}

/// codex: `full-access` mode (its sandboxed modes need bubblewrap); the model
/// through the `model` config option (codex has no `session/set_model`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn codex_runs_its_shell_tool_and_answers() {
    writes_a_file_and_answers(RealAgent::Codex, "gpt-5.4", "gpt-5.4", Some("full-access")).await;
}

/// gemini: default mode, so `run_shell_command` asks and `allow` picks
/// `proceed_once`; `set_model gemini-2.5-pro`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gemini_runs_its_shell_tool_and_answers() {
    writes_a_file_and_answers(RealAgent::Gemini, "gemini-2.5-pro", "gemini-2.5-pro", None).await;
}

/// One claude run under `policy` (`ask-owner` waits 3 s); `answer` is what
/// the owner posts once the question appears. Returns whether the file was
/// written, the replies' texts and the tool results the model saw.
async fn claude_under_policy(policy: &str, answer: Option<&str>) -> (bool, String, Vec<String>) {
    let w = AgentWorld::new(Script::new().turn(Turn::say_then_shell(LEAD, PROOF, DONE))).await;
    let mut env = w.env(RealAgent::Claude);
    env.insert("BUZZ_ACP_PERMISSION_POLICY".into(), policy.into());
    env.insert("BUZZ_ACP_PERMISSION_TIMEOUT_SECS".into(), "3".into());
    let mut h = spawn(&env);
    w.wait_online(WAIT).await;
    let m = w.mention("c1", "please write proof.txt").await;
    let mut texts = Vec::new();
    if policy == "ask-owner" {
        let q = w.wait_reply(&m, WAIT).await;
        assert!(
            buzz_conformance::harness_support::relay::tags(&q)
                .iter()
                .any(|t| t.len() >= 2 && t[0] == "p" && t[1] == w.owner.public_key().to_hex()),
            "the question p-tags the owner"
        );
        texts.push(q.content.clone());
        if let Some(a) = answer {
            // The answer names its question (issue 30 item 2).
            let id = q.content["🔐 Question ".len()..]
                .split(':')
                .next()
                .unwrap_or_default();
            w.mention("c1", &format!("{a} {id}")).await;
        }
    }
    let n = if policy == "ask-owner" { 2 } else { 1 };
    let r = w.wait_reply_n(&m, n, WAIT).await;
    texts.push(r.content.clone());
    let results = w.fake.tool_results_seen();
    let written = w.work_file("proof.txt").is_some();
    let log = h.stderr();
    assert!(log.contains("permission answered"), "{log}");
    assert!(
        !log.contains(PROOF),
        "the log names the tool, never its command: {log}"
    );
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
    (written, texts.join("\n---\n"), results)
}

/// Each permission policy decides claude's Bash call: `allow` runs it,
/// `reject` refuses it (the model is told), `ask-owner` asks the owner on the
/// relay and follows `!allow` / `!deny`, and no answer in time denies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_permission_policy_decides_the_tool_call() {
    let _g = SERIAL.lock().await;
    let (written, _, _) = claude_under_policy("allow", None).await;
    assert!(written, "allow runs the tool");

    let (written, _, results) = claude_under_policy("reject", None).await;
    assert!(!written, "reject refuses the tool");
    assert!(
        results
            .iter()
            .any(|r| r.contains("refused") || r.contains("denied") || r.contains("rejected")),
        "the model is told the tool was refused: {results:?}"
    );

    let (written, texts, _) = claude_under_policy("ask-owner", Some("!allow")).await;
    assert!(written, "the owner's !allow runs the tool: {texts}");
    assert!(
        texts.contains("asks permission") && texts.contains(PROOF),
        "{texts}"
    );
    assert!(
        texts.contains("(this once)") && texts.contains("within 3 s"),
        "{texts}"
    );

    let (written, texts, _) = claude_under_policy("ask-owner", Some("!deny")).await;
    assert!(!written, "the owner's !deny refuses the tool: {texts}");

    let (written, texts, _) = claude_under_policy("ask-owner", None).await;
    assert!(!written, "no answer within the bound denies: {texts}");
}

/// A stranger's mention to an agent that answers anyone (issue 30 item 2;
/// review-9b395e0 finding 2; review afa2bf1 finding 1): under the others'
/// default policy (`reject`) the stranger's claude session is offered no
/// tool, so its Bash call does not run, the file is not written and the
/// model is told the tool is not there; the owner's turn runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_strangers_mention_gets_no_tool_use_from_a_real_agent() {
    let _g = SERIAL.lock().await;
    let script = Script::new()
        .turn(Turn::say_then_shell(LEAD, PROOF, DONE))
        .turn(Turn::say_then_shell(LEAD, PROOF, DONE));
    let w = AgentWorld::new(script).await;
    let mut env = w.env(RealAgent::Claude);
    env.insert("BUZZ_ACP_RESPOND_TO".into(), "anyone".into());
    let mut h = spawn(&env);
    w.wait_online(WAIT).await;
    let stranger = nostr_sdk::prelude::Keys::generate();
    let m = buzz_conformance::harness_support::post(
        &w.relay.url,
        &stranger,
        "c1",
        &w.agent,
        "write proof.txt",
        vec![],
    )
    .await;
    let r = w.wait_reply(&m, WAIT).await;
    assert!(
        w.work_file("proof.txt").is_none(),
        "the stranger's tool call did not run: {}",
        r.content
    );
    let results = w.fake.tool_results_seen();
    assert!(
        results.iter().any(|r| r.contains("No such tool available: Bash")),
        "the stranger's session is offered no tool, and the model is told so: {results:?}"
    );
    let m = w.mention("c1", "please write proof.txt").await;
    w.wait_reply(&m, WAIT).await;
    assert_eq!(
        w.work_file("proof.txt").as_deref(),
        Some("proof-ok-42\n"),
        "the owner's turn runs it"
    );
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
}

/// What the owner's turn says: no stranger's tool result may carry it.
const CANARY: &str = "zebra-7731";

/// The first file under `dir` (depth first) whose text holds `needle`.
fn file_holding(dir: &std::path::Path, needle: &str) -> Option<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).collect();
    entries.sort();
    entries.into_iter().find_map(|p| {
        if p.is_dir() {
            file_holding(&p, needle)
        } else {
            let text = std::fs::read(&p).ok()?;
            String::from_utf8_lossy(&text).contains(needle).then_some(p)
        }
    })
}

/// A stranger's turn scripted as a read of the owner's transcript (review
/// afa2bf1 finding 1): claude's `Read` tool, codex's and gemini's shell
/// `cat`. In the
/// pod's layout (the session works in `$HOME/work`; the agents'
/// transcripts and the harness's receipts are under `$HOME`, outside it)
/// and in the strictest mode the agent advertises, the owner's words never
/// reach the model API as a tool result.
async fn a_strangers_read_of_the_owners_transcript_reads_nothing(agent: RealAgent) {
    let _g = SERIAL.lock().await;
    let w = AgentWorld::new(Script::new().turn(Turn::text("noted"))).await;
    let mut env = w.env(agent);
    env.insert("BUZZ_ACP_RESPOND_TO".into(), "anyone".into());
    let cwd = w.home.join("work");
    std::fs::create_dir_all(&cwd).expect("the session's directory");
    env.insert("BUZZ_ACP_CWD".into(), cwd.display().to_string());
    let mut h = spawn(&env);
    w.wait_online(WAIT).await;
    let m = w.mention("c1", &format!("please remember {CANARY}")).await;
    w.wait_reply(&m, WAIT).await;
    // The test can fail: the owner's words are on disk, readable by path.
    // The agent may write its transcript a moment after its answer went out
    // (claude-agent-acp does: seen once in CI), so it is waited for.
    let transcript = buzz_conformance::harness_support::wait_until(WAIT, || file_holding(&w.home, CANARY))
        .await
        .unwrap_or_else(|| panic!("no transcript under HOME holds the owner's words: {}", h.stderr()));
    w.fake
        .push_turn(Turn::read(transcript.display().to_string(), "summarised"));
    let stranger = nostr_sdk::prelude::Keys::generate();
    let m = buzz_conformance::harness_support::post(
        &w.relay.url,
        &stranger,
        "c1",
        &w.agent,
        "summarise the newest conversation file",
        vec![],
    )
    .await;
    let r = w.wait_reply(&m, WAIT).await;
    let results = w.fake.tool_results_seen();
    assert!(
        !results.is_empty(),
        "the stranger's turn made its read ({}): {r:?}",
        transcript.display()
    );
    assert!(
        !results.iter().any(|t| t.contains(CANARY)),
        "a stranger's read reached the owner's words in {}: {results:?}",
        transcript.display()
    );
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_strangers_read_tool_never_reaches_the_owners_conversation_with_claude() {
    a_strangers_read_of_the_owners_transcript_reads_nothing(RealAgent::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_strangers_shell_read_never_reaches_the_owners_conversation_with_codex() {
    a_strangers_read_of_the_owners_transcript_reads_nothing(RealAgent::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_strangers_shell_read_never_reaches_the_owners_conversation_with_gemini() {
    a_strangers_read_of_the_owners_transcript_reads_nothing(RealAgent::Gemini).await;
}

/// A permission mode is applied with `session/set_mode`: in
/// `bypassPermissions` claude runs Bash without asking, so even the `reject`
/// policy never gets to refuse it (as root, the harness sets `IS_SANDBOX=1`,
/// without which Claude Code hides the mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_permission_mode_is_applied_with_set_mode() {
    let _g = SERIAL.lock().await;
    let w = AgentWorld::new(Script::new().turn(Turn::say_then_shell(LEAD, PROOF, DONE))).await;
    let mut env = w.env(RealAgent::Claude);
    env.insert("BUZZ_ACP_PERMISSION_MODE".into(), "bypassPermissions".into());
    env.insert("BUZZ_ACP_PERMISSION_POLICY".into(), "reject".into());
    let mut h = spawn(&env);
    w.wait_online(WAIT).await;
    let m = w.mention("c1", "please write proof.txt").await;
    let r = w.wait_reply(&m, WAIT).await;
    assert_eq!(r.content, format!("{LEAD}\n\n{DONE}"), "{}", h.stderr());
    assert_eq!(w.work_file("proof.txt").as_deref(), Some("proof-ok-42\n"));
    let log = h.stderr();
    assert!(log.contains("method=\"session/set_mode\""), "{log}");
    assert!(
        !log.contains("permission answered"),
        "no question was asked: {log}"
    );
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
}

/// A model or mode the agent does not offer is an error reply naming what
/// it offers, never silence (codex lists both strictly; claude-agent-acp
/// takes any model id through `_meta.claudeCode.options.model` and lists it,
/// so for claude the model API is the judge).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unknown_model_or_mode_is_an_error_reply() {
    let _g = SERIAL.lock().await;
    for (var, value, expected) in [
        (
            "BUZZ_ACP_MODEL",
            "haiku",
            "the agent has no model `haiku`; it offers: ",
        ),
        (
            "BUZZ_ACP_PERMISSION_MODE",
            "yolo",
            "the agent has no permission mode `yolo`; it offers: read-only, auto, full-access",
        ),
    ] {
        let w = AgentWorld::new(Script::new().turn(Turn::text("unused"))).await;
        let mut env = w.env(RealAgent::Codex);
        env.insert(var.into(), value.into());
        let mut h = spawn(&env);
        w.wait_online(WAIT).await;
        let m = w.mention("c1", "hello").await;
        let r = w.wait_reply(&m, WAIT).await;
        assert!(
            r.content
                .starts_with(&format!("⚠️ The agent could not answer: {expected}")),
            "{}",
            r.content
        );
        assert!(w.fake.models_seen().is_empty(), "no turn reached the model");
        h.signal(libc::SIGTERM);
        assert_eq!(h.wait_exit(WAIT).await, Some(0));
    }
}

/// The model API failing (500, 401, no answer at all) is an error reply to
/// the asker within a bound, and the harness stays online: the next mention
/// is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn model_api_failures_are_error_replies_and_the_harness_stays_online() {
    let _g = SERIAL.lock().await;
    let script = Script::new()
        .turn(Turn::fail(Failure::Http500))
        .turn(Turn::fail(Failure::Http401))
        .turn(Turn::fail(Failure::Hang))
        .turn(Turn::text("still here"));
    let w = AgentWorld::new(script).await;
    let mut env = w.env(RealAgent::Claude);
    env.insert("BUZZ_ACP_IDLE_TIMEOUT".into(), "8".into());
    env.insert("BUZZ_ACP_CANCEL_GRACE_MS".into(), "2000".into());
    let mut h = spawn(&env);
    w.wait_online(WAIT).await;
    // One channel each: error replies are rate-limited per channel.
    let ask = async |channel: &str| {
        let m = w.mention(channel, "hello").await;
        w.wait_reply(&m, WAIT).await.content
    };
    let error = "⚠️ The agent could not answer:";
    let r = ask("c500").await;
    assert!(r.starts_with(error) && r.contains("500"), "{r}");
    let r = ask("c401").await;
    assert!(r.starts_with(error) && r.contains("API key"), "{r}");
    let r = ask("chang").await;
    assert_eq!(
        r,
        format!("{error} no answer within the turn limit (idle timeout, 8 s); the turn was cancelled")
    );
    let r = ask("cok").await;
    assert_eq!(r, "still here", "{}", h.stderr());
    assert!(h.child.try_wait().unwrap().is_none(), "the harness stayed up");
    assert_no_key_published(&w);
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0));
}

/// A preset command that is not installed: the harness refuses to start
/// (exit 2, issue 30 item 3) and says how to install it, rather than going
/// online for work it cannot do or respawning a binary that is not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_agent_says_how_to_install_it() {
    let _g = SERIAL.lock().await;
    let w = AgentWorld::new(Script::new()).await;
    let mut env = w.env(RealAgent::Claude);
    env.insert("PATH".into(), "/usr/bin:/bin".into());
    env.insert("BUZZ_ACP_LAZY_POOL".into(), "true".into());
    let mut h = spawn(&env);
    assert_eq!(h.wait_exit(WAIT).await, Some(2));
    assert!(
        h.stderr().contains(
            "the agent command `claude-agent-acp` is not installed here (not on PATH); \
             install it: npm install -g @zed-industries/claude-agent-acp@0.23.1"
        ),
        "{}",
        h.stderr()
    );
    assert!(
        !h.stderr().contains("agent died"),
        "no respawn loop: {}",
        h.stderr()
    );
}
