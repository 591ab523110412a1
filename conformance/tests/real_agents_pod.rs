//! A real coding agent in a pod on the real node (issue "real coding
//! agents"; spec §Launch data, §K8s Secrets, §Pod shape): the
//! `buzz-sprig-claude` image (`scripts/image-build.sh --agent claude`),
//! imported into containerd by digest, deployed by the real launcher and
//! provider with only the command *name* `claude-agent-acp` in the record;
//! the API key given the way `--env-file` gives it, which lands in the
//! per-attempt Secret and never in the pod spec. The fake model API listens
//! on the bridge address, reached from the pod the way the relay is.
//!
//! A mention makes claude write a file with its Bash tool, a second one
//! makes it read the file back: the tool result the model API receives
//! comes from inside the pod, from its workspace (`/home/agent`). The
//! observer is on: the owner's activity watch (the fold the page and
//! `status --watch` show) sees the shell tool running, then the turn end.
//!
//! The workspace is a claim (`workspace_size`, issue 32): the pod is then
//! deleted by other hands and a Start brings up a new one on the same
//! claim. A third mention is answered in the same conversation, resumed
//! from the receipt and claude's own transcript on the volume: its model
//! request carries the first mention's turn.
//!
//! codex (`buzz-sprig-codex`) takes the same way across a restart: it keeps
//! its sessions in `$HOME/.codex`, on the claim, and a new pod resumes the
//! conversation with `session/resume`; the file its shell wrote before the
//! restart is still in the workspace after it; its first turn, too, shows
//! live as its shell tool running, then the turn end. Then it sleeps by its
//! inactivity bound, and its owner's mention wakes it (issue 33) into the
//! same conversation, from a third pod on the claim. The mention is sent
//! the moment the run says it stopped, while its pod still reads as
//! running: the wake deploys again until the node reports the exit
//! (`restart::known_over`), or it would answer with the ended run.

use buzz_conformance::container::agent_images::build_agent;
use buzz_conformance::fake_model::agents::codex_flags;
use buzz_conformance::fake_model::{FakeModel, Script, Turn};
use buzz_conformance::harness_support::{post_raw, wait_until};
use buzz_conformance::launcher_support::chat_watched;
use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, secret_of};
use buzz_conformance::testenv::RealNode;
use desktop_launcher::activity::Doing;
use desktop_launcher::app;
use k8s_openapi::api::core::v1::Pod;
use std::path::Path;
use std::time::Instant;

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");
const KEY: &str = "sk-ant-pod-canary-5e21";
const OPENAI_KEY: &str = "sk-openai-pod-canary-7c44";
/// Long enough for a Start and a mention, short enough to wait out.
const INACTIVITY: u64 = 20;
/// One agent in a pod at a time: two Node agents starting side by side on
/// 2 cores time out their own first requests (claude: "Request timed out").
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
const LEAD: &str = "I'll create the file.";
const DONE: &str = "Done: proof.txt written.";

#[test]
fn claude_in_a_pod_runs_its_shell_tool_in_the_workspace_and_answers() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let img = build_agent("claude").unwrap_or_else(|e| panic!("buzz-sprig-claude: {e:#}"));
    let node = RealNode::shared();
    let image = node
        .import(&img.archive, "localhost/buzz-sprig-claude")
        .expect("imported into containerd");
    let fake = FakeModel::start_at(
        node.host_addr().into(),
        Script::new()
            .turn(Turn::say_then_shell(LEAD, "echo proof-ok-42 > proof.txt", DONE))
            .turn(Turn::shell("cat proof.txt; pwd", "It says proof-ok-42."))
            .turn(Turn::text("We wrote proof.txt before the restart.")),
    );
    let s = Scenario::new("claude", &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, config| {
        rec.agent_command = Some("claude-agent-acp".into());
        rec.agent_args.clear();
        rec.model = Some("haiku".into());
        rec.env
            .insert("ANTHROPIC_BASE_URL".into(), fake.anthropic_base_url());
        rec.env.insert("CLAUDE_CODE_MAX_RETRIES".into(), "0".into());
        // Node and the Claude Code CLI: a few hundred MB (real-agents.md).
        config.insert("memory_request".into(), "256Mi".into());
        config.insert("workspace_size".into(), "256Mi".into());
        rec.relay_observer = true;
    });
    let mut rec = s.store.agent(NAME).expect("the record");
    let changes = [("ANTHROPIC_API_KEY".to_string(), Some(KEY.to_string()))].into();
    s.store
        .set_secret_env(&mut rec, &changes)
        .expect("the key stored as a secret");
    s.store.save_agent(&rec).expect("saved");

    let (pod, _) = s.start();
    let spec = serde_json::to_string(&pod.spec).expect("the pod spec");
    assert!(!spec.contains(KEY), "the key is not in the pod spec");
    let secret =
        s.rt.block_on(s.secrets.get(&secret_of(&pod)))
            .expect("the per-attempt Secret");
    let data = secret.data.unwrap_or_default();
    assert_eq!(
        data.get("ANTHROPIC_API_KEY").map(|b| b.0.as_slice()),
        Some(KEY.as_bytes()),
        "the key is in the per-attempt Secret"
    );
    assert_eq!(
        data.get("BUZZ_ACP_AGENT_COMMAND").map(|b| b.0.as_slice()),
        Some("claude-agent-acp".as_bytes()),
        "a deploy carries the command name, never a path"
    );

    let (reply, doing) =
        s.rt.block_on(chat_watched(&s.store, NAME, "please write proof.txt", WAIT));
    let reply = reply.unwrap_or_else(|e| panic!("a reply: {e}; logs: {}", s.logs(&pod)));
    assert_eq!(reply, format!("{LEAD}\n\n{DONE}"));
    // What it did, live (issue 34): the owner's watch of its observer
    // frames saw claude's shell tool run in the pod, then the turn end.
    assert_ran_live("claude", &doing);
    let reply =
        s.rt.block_on(app::chat(&s.store, NAME, "what does it say?", WAIT))
            .unwrap_or_else(|e| panic!("a second reply: {e}; logs: {}", s.logs(&pod)));
    assert_eq!(reply, "It says proof-ok-42.");
    let results = fake.tool_results_seen();
    assert!(
        results
            .iter()
            .any(|r| r.contains("proof-ok-42") && r.contains("/home/agent")),
        "the file is in the pod's workspace: {results:?}"
    );
    let models = fake.models_seen();
    assert!(
        !models.is_empty() && models.iter().all(|m| m.starts_with("claude-haiku")),
        "set_model reached the API from the pod: {models:?}"
    );
    let logs = s.logs(&pod);
    assert!(!logs.contains(KEY), "the key is not in the pod's logs");

    // The pod goes; a new one on the same claim resumes the conversation.
    let pod2 = replace_pod(&s, &pod);
    let reply =
        s.rt.block_on(app::chat(&s.store, NAME, "what did we do before?", WAIT))
            .unwrap_or_else(|e| panic!("a reply after the restart: {e}; logs: {}", s.logs(&pod2)));
    assert_eq!(reply, "We wrote proof.txt before the restart.");
    assert_resumed(&s, &fake, &pod2, "what did we do before?", "messages");
    // Each turn's usage as the owner's `usage` reads it from the relay,
    // across the pod replacement (issue 34). The fake API reports distinct
    // counts per request (input 1000 + 100·n, output 10 + n for the n-th),
    // so any sum of its reports has input = 100 × output: figures that hold
    // it came from the API's reports, not from anywhere else. Which requests
    // claude counts in a turn (its side calls run beside the turn) is its own.
    let found =
        s.rt.block_on(app::usage::usage(&s.store, Some(NAME), 0))
            .expect("usage reads the relay");
    assert!(found.skipped.is_empty(), "{:?}", found.skipped);
    assert_eq!(
        found.turns.len(),
        3,
        "one usage event a turn, both pods: {:?}",
        found.turns
    );
    let reported: Vec<_> = fake.reported().into_iter().flatten().collect();
    let all_in: u64 = reported.iter().map(|r| r.input).sum();
    let mut counted = 0;
    for u in &found.turns {
        let t = u.metric.turn.clone().expect("the turn's figures");
        let (i, o) = (t.input_tokens.unwrap_or(0), t.output_tokens.unwrap_or(0));
        assert!(
            o > 0 && i == 100 * o,
            "{t:?}: not a sum of the API's reports {reported:?}"
        );
        counted += i;
    }
    // claude reports its session's cost so far in `usage_update`; a turn's
    // cost is the difference. On the new pod the harness does not know the
    // resumed session's cost before the turn (buzz-acp `metrics.rs`): that
    // turn's cost is null and not reliable, its session figure is claude's.
    let costs: Vec<Option<f64>> = found
        .turns
        .iter()
        .map(|u| u.metric.turn.as_ref().and_then(|t| t.cost_usd))
        .collect();
    println!("claude in a pod: costs per turn {costs:?}");
    assert!(
        costs[0].is_some_and(|c| c > 0.0) && costs[1].is_some_and(|c| c > 0.0),
        "{costs:?}"
    );
    let resumed = &found.turns[2].metric;
    assert_eq!(costs[2], None, "{resumed:?}");
    assert!(!resumed.delta_reliable, "{resumed:?}");
    assert!(
        resumed
            .cumulative
            .as_ref()
            .and_then(|c| c.cost_usd)
            .is_some_and(|c| c > 0.0),
        "{resumed:?}"
    );
    assert!(
        counted <= all_in,
        "more counted ({counted}) than the API reported ({all_in})"
    );
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
}

#[test]
fn codex_in_a_pod_resumes_its_conversation_and_its_workspace_on_a_new_pod() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let img = build_agent("codex").unwrap_or_else(|e| panic!("buzz-sprig-codex: {e:#}"));
    let node = RealNode::shared();
    let image = node
        .import(&img.archive, "localhost/buzz-sprig-codex")
        .expect("imported into containerd");
    let fake = FakeModel::start_at(
        node.host_addr().into(),
        Script::new()
            .turn(Turn::say_then_shell(
                LEAD,
                "echo codex-proof-77 > proof.txt",
                DONE,
            ))
            .turn(Turn::shell("cat proof.txt", "It still says codex-proof-77."))
            .turn(Turn::text("First I wrote proof.txt.")),
    );
    let s = Scenario::new("codex", &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, config| {
        rec.agent_command = Some("codex-acp".into());
        // The fake model API as codex's custom provider (real-agents.md).
        rec.agent_args = codex_flags(&fake.openai_base_url());
        // Its shell runs unsandboxed: the pod is the sandbox.
        rec.permission_mode = Some("full-access".into());
        config.insert("memory_request".into(), "256Mi".into());
        config.insert("workspace_size".into(), "256Mi".into());
        rec.relay_observer = true;
    });
    let mut rec = s.store.agent(NAME).expect("the record");
    let changes = [("OPENAI_API_KEY".to_string(), Some(OPENAI_KEY.to_string()))].into();
    s.store
        .set_secret_env(&mut rec, &changes)
        .expect("the key stored as a secret");
    s.store.save_agent(&rec).expect("saved");

    let (pod, _) = s.start();
    let (reply, doing) =
        s.rt.block_on(chat_watched(&s.store, NAME, "please write proof.txt", WAIT));
    let reply = reply.unwrap_or_else(|e| panic!("a reply: {e}; logs: {}", s.logs(&pod)));
    assert_eq!(reply, format!("{LEAD}\n\n{DONE}"));
    // What it did, live (issue 34): the owner's watch of its observer
    // frames saw codex's shell tool run in the pod, then the turn end.
    assert_ran_live("codex", &doing);
    assert!(
        !s.logs(&pod).contains(OPENAI_KEY),
        "the key is not in the pod's logs"
    );

    s.edit(|_, config| {
        config.insert("inactivity_seconds".into(), INACTIVITY.into());
    });
    let pod2 = replace_pod(&s, &pod);
    let lines = s.spawn_waker();
    let question = "what does proof.txt say now?";
    let reply =
        s.rt.block_on(app::chat(&s.store, NAME, question, WAIT))
            .unwrap_or_else(|e| panic!("a reply after the restart: {e}; logs: {}", s.logs(&pod2)));
    assert_eq!(reply, "It still says codex-proof-77.");
    let results = fake.tool_results_seen();
    assert!(
        results.iter().any(|r| r.contains("codex-proof-77")),
        "the file written before the restart is read after it: {results:?}"
    );
    // The Responses API carries the conversation as `input`.
    assert_resumed(&s, &fake, &pod2, question, "input");
    assert!(
        !s.logs(&pod2).contains(OPENAI_KEY),
        "the key is not in the pod's logs"
    );
    let asked = Instant::now();

    // It sleeps; the owner's mention wakes it into the same conversation.
    let slept = s.rt.block_on(wait_until(WAIT, || {
        s.obs
            .matching(|e| {
                e.pubkey == s.agent
                    && e.content == "offline"
                    && e.tags.iter().any(|t| t.as_slice() == ["stop", "idle"])
            })
            .into_iter()
            .find(|p| p.at >= asked)
    }));
    assert!(
        slept.is_some(),
        "it never slept by its inactivity bound; waker: {:?}; the pod's log: {}",
        lines.lock().unwrap(),
        s.logs(&pod2)
    );
    let (agent, owner) = (
        s.store.agent_keys(NAME).expect("keys"),
        s.store.owner().expect("owner"),
    );
    let woke_by = "and what did you write first?";
    // Where `chat` asked (the record names no channel): the same conversation.
    let to = vec![vec!["p".to_string(), agent.public_key().to_hex()]];
    s.rt.block_on(post_raw(&s.relay.url, &owner, woke_by, to, None));
    let pod3 = s.woken_pod(&lines, 1);
    assert_ne!(pod3.metadata.uid, pod2.metadata.uid, "a new pod was woken");
    s.wait_message("First I wrote proof.txt.", || {
        format!(
            "no answer from the woken pod; waker: {:?}; model requests with it: {:?}; its logs: {}; the agent said {:?}",
            lines.lock().unwrap(),
            fake.model_requests()
                .into_iter()
                .filter(|r| r.body.to_string().contains(woke_by))
                .map(|r| r.body["input"].to_string().chars().rev().take(1500).collect::<String>().chars().rev().collect::<String>())
                .collect::<Vec<_>>(),
            s.logs(&pod3),
            s.obs
                .matching(|e| e.kind == nostr_sdk::prelude::Kind::from(9) && e.pubkey == s.agent)
                .into_iter()
                .map(|m| m.event.content)
                .collect::<Vec<_>>()
        )
    });
    assert_resumed(&s, &fake, &pod3, woke_by, "input");
    assert!(
        !s.logs(&pod3).contains(OPENAI_KEY),
        "the key is not in the pod's logs"
    );
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
}

/// What `agent` did, as the owner's watch saw it, shows its shell tool
/// (the command writes proof.txt) running, and ends idle.
fn assert_ran_live(agent: &str, doing: &[Doing]) {
    println!("{agent} in a pod, live activity: {doing:?}");
    assert!(
        doing
            .iter()
            .any(|d| matches!(d, Doing::Running(label) if label.contains("proof.txt"))),
        "{agent}'s shell tool never showed as running: {doing:?}"
    );
    assert_eq!(
        doing.last(),
        Some(&Doing::Idle),
        "{agent}'s turn's end: {doing:?}"
    );
}

/// Deletes `pod` by other hands (what a drain does), waits until it is gone,
/// and Starts again: the new pod mounts the same claim.
fn replace_pod(s: &Scenario, pod: &Pod) -> Pod {
    let name = pod.metadata.name.clone().unwrap_or_default();
    s.rt.block_on(s.pods.delete(&name, &kube::api::DeleteParams::default()))
        .expect("the pod deleted");
    s.wait_gone("the deleted pod", || {
        s.rt.block_on(s.pods.get_opt(&name)).unwrap().is_some()
    });
    let (pod2, _) = s.start();
    assert_ne!(pod2.metadata.uid, pod.metadata.uid, "a new pod");
    pod2
}

/// Every model request for `question` carries the first mention's turn, and
/// the new pod says it resumed from the receipt on the claim. `conversation`
/// names the request's conversation field, shown on failure (the system
/// prompt and tools are ~100 KB).
fn assert_resumed(s: &Scenario, fake: &FakeModel, pod: &Pod, question: &str, conversation: &str) {
    let asked: Vec<_> = fake
        .model_requests()
        .into_iter()
        .filter(|r| r.body.to_string().contains(question))
        .collect();
    assert!(
        !asked.is_empty()
            && asked
                .iter()
                .all(|r| r.body.to_string().contains("please write proof.txt")),
        "the request after the restart carries the first mention's turn: {:?}; the pod's log: {}",
        asked
            .iter()
            .map(|r| {
                let t = r.body[conversation].to_string();
                t[t.len().saturating_sub(3000)..].to_string()
            })
            .collect::<Vec<_>>(),
        s.logs(pod)
    );
    let logs = s.logs(pod);
    assert!(
        logs.contains("conversation brought back") && logs.contains("step=\"resume\""),
        "resumed from the receipt on the claim: {logs}"
    );
}
