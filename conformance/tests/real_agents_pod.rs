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
use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, phase, secret_of, status};
use buzz_conformance::testenv::RealNode;
use desktop_launcher::activity::Doing;
use desktop_launcher::app;
use desktop_launcher::record::AgentRecord;
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
    let (s, fake) = in_a_pod(
        ("claude", "claude"),
        Script::new()
            .turn(Turn::say_then_shell(LEAD, "echo proof-ok-42 > proof.txt", DONE))
            .turn(Turn::shell("cat proof.txt; pwd", "It says proof-ok-42."))
            .turn(Turn::text("We wrote proof.txt before the restart.")),
        ("ANTHROPIC_API_KEY", KEY),
        |fake, rec, config| {
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
        },
    );
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
    let (s, fake) = in_a_pod(
        ("codex", "codex"),
        Script::new()
            .turn(Turn::say_then_shell(
                LEAD,
                "echo codex-proof-77 > proof.txt",
                DONE,
            ))
            .turn(Turn::shell("cat proof.txt", "It still says codex-proof-77."))
            .turn(Turn::text("First I wrote proof.txt.")),
        ("OPENAI_API_KEY", OPENAI_KEY),
        |fake, rec, config| {
            rec.agent_command = Some("codex-acp".into());
            // The fake model API as codex's custom provider (real-agents.md).
            rec.agent_args = codex_flags(&fake.openai_base_url());
            // Its shell runs unsandboxed: the pod is the sandbox.
            rec.permission_mode = Some("full-access".into());
            config.insert("memory_request".into(), "256Mi".into());
            config.insert("workspace_size".into(), "256Mi".into());
            rec.relay_observer = true;
        },
    );

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

/// Issue 50, Tests "Real node": codex in a pod dozes after its turn (no
/// agent process left in the pod's cgroup, presence `away`), and the next
/// mention is answered by the same pod, with no waker running, in the same
/// conversation; the pod runs throughout and is never replaced. Prints
/// the pod's processes and their resident memory awake and dozing (the
/// figures in docs/benchmarks.md).
#[test]
fn codex_in_a_pod_dozes_and_the_same_pod_answers_the_next_mention() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (s, fake) = in_a_pod(
        ("codex", "doze"),
        Script::new()
            .turn(Turn::text("Noted."))
            .turn(Turn::text("You asked me to remember it.")),
        ("OPENAI_API_KEY", OPENAI_KEY),
        |fake, rec, config| {
            rec.agent_command = Some("codex-acp".into());
            rec.agent_args = codex_flags(&fake.openai_base_url());
            config.insert("memory_request".into(), "64Mi".into());
            config.insert("memory_limit".into(), "512Mi".into());
            config.insert("doze_seconds".into(), 3.into());
        },
    );

    let (pod, _) = s.start();
    let uid = pod.metadata.uid.clone().expect("a uid");
    let reply =
        s.rt.block_on(app::chat(
            &s.store,
            NAME,
            "please remember the word zebra-7731",
            WAIT,
        ))
        .unwrap_or_else(|e| panic!("a reply: {e}; logs: {}", s.logs(&pod)));
    assert_eq!(reply, "Noted.");
    let awake = pod_processes(&uid);
    println!("the pod awake: {awake:?}");
    assert!(
        awake.iter().any(|(comm, _)| comm.starts_with("codex")),
        "codex runs after its turn: {awake:?}"
    );
    let answered = Instant::now();
    s.wait_presence_or("away", answered, |_| true, || s.logs(&pod));
    let dozing =
        s.rt.block_on(wait_until(WAIT, || {
            let p = pod_processes(&uid);
            (!p.iter().any(|(comm, _)| comm.starts_with("codex"))).then_some(p)
        }))
        .unwrap_or_else(|| panic!("codex left in the dozing pod: {:?}", pod_processes(&uid)));
    println!(
        "the pod dozing: {dozing:?}; resident {} KiB (awake {} KiB)",
        dozing.iter().map(|(_, kb)| kb).sum::<u64>(),
        awake.iter().map(|(_, kb)| kb).sum::<u64>()
    );

    let reply =
        s.rt.block_on(app::chat(
            &s.store,
            NAME,
            "which word did I ask you to remember?",
            WAIT,
        ))
        .unwrap_or_else(|e| panic!("a reply from the dozing pod: {e}; logs: {}", s.logs(&pod)));
    assert_eq!(reply, "You asked me to remember it.");
    let asked: Vec<_> = fake
        .model_requests()
        .into_iter()
        .filter(|r| r.body.to_string().contains("which word did I ask"))
        .collect();
    assert!(
        !asked.is_empty() && asked.iter().all(|r| r.body.to_string().contains("zebra-7731")),
        "the woken codex answers in its conversation; logs: {}",
        s.logs(&pod)
    );
    let now =
        s.rt.block_on(s.pods.get(pod.metadata.name.as_deref().unwrap()))
            .expect("the pod");
    assert_eq!(now.metadata.uid, pod.metadata.uid, "the same pod answered");
    assert_eq!(phase(&now), "Running");
    assert_eq!(
        status(&now).map(|c| c.restart_count),
        Some(0),
        "the container never restarted"
    );
    let pods = s.rt.block_on(s.pods.list(&Default::default())).expect("the pods");
    assert_eq!(pods.items.len(), 1, "no other pod was made");
    let logs = s.logs(&pod);
    assert!(
        logs.contains("agent ended for the doze") && logs.contains("a mention ends the doze"),
        "dozed and woke in the pod: {logs}"
    );
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
}

/// The processes of the pod whose uid is `uid` (found by their cgroup, on
/// the node, which is this machine), each with its command name and
/// resident memory in KiB.
fn pod_processes(uid: &str) -> Vec<(String, u64)> {
    let mark = format!("pod{uid}");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let p = entry.path();
        let in_pod = std::fs::read_to_string(p.join("cgroup")).is_ok_and(|c| c.contains(&mark));
        if !in_pod {
            continue;
        }
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let rss = std::fs::read_to_string(p.join("status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok());
        if let Some(kb) = rss {
            out.push((comm.trim().to_string(), kb));
        }
    }
    out
}

/// An agent in a pod: the `buzz-sprig-<agent>` image imported into the
/// node, the fake model API answering `script` on the bridge, and a
/// scenario (namespace prefix `prefix`) whose record `edit` shapes, with
/// `key` (its env name and value) stored as a secret.
fn in_a_pod(
    (agent, prefix): (&str, &str),
    script: Script,
    key: (&str, &str),
    edit: impl FnOnce(&FakeModel, &mut AgentRecord, &mut serde_json::Map<String, serde_json::Value>),
) -> (Scenario, FakeModel) {
    let img = build_agent(agent).unwrap_or_else(|e| panic!("buzz-sprig-{agent}: {e:#}"));
    let node = RealNode::shared();
    let image = node
        .import(&img.archive, &format!("localhost/buzz-sprig-{agent}"))
        .expect("imported into containerd");
    let fake = FakeModel::start_at(node.host_addr().into(), script);
    let s = Scenario::new(prefix, &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, config| edit(&fake, rec, config));
    let mut rec = s.store.agent(NAME).expect("the record");
    let changes = [(key.0.to_string(), Some(key.1.to_string()))].into();
    s.store
        .set_secret_env(&mut rec, &changes)
        .expect("the key stored as a secret");
    s.store.save_agent(&rec).expect("saved");
    (s, fake)
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
