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
//! comes from inside the pod, from its workspace (`/home/agent`).
//!
//! The workspace is a claim (`workspace_size`, issue 32): the pod is then
//! deleted by other hands and a Start brings up a new one on the same
//! claim. A third mention is answered in the same conversation, resumed
//! from the receipt and claude's own transcript on the volume: its model
//! request carries the first mention's turn.

use buzz_conformance::container::agent_images::build_agent;
use buzz_conformance::fake_model::{FakeModel, Script, Turn};
use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, secret_of};
use buzz_conformance::testenv::RealNode;
use desktop_launcher::app;
use std::path::Path;

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");
const KEY: &str = "sk-ant-pod-canary-5e21";
const LEAD: &str = "I'll create the file.";
const DONE: &str = "Done: proof.txt written.";

#[test]
fn claude_in_a_pod_runs_its_shell_tool_in_the_workspace_and_answers() {
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

    let reply =
        s.rt.block_on(app::chat(&s.store, NAME, "please write proof.txt", WAIT))
            .unwrap_or_else(|e| panic!("a reply: {e}; logs: {}", s.logs(&pod)));
    assert_eq!(reply, format!("{LEAD}\n\n{DONE}"));
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
    let name = pod.metadata.name.clone().unwrap_or_default();
    s.rt.block_on(s.pods.delete(&name, &kube::api::DeleteParams::default()))
        .expect("the pod deleted");
    s.wait_gone("the deleted pod", || {
        s.rt.block_on(s.pods.get_opt(&name)).unwrap().is_some()
    });
    let (pod2, _) = s.start();
    let reply =
        s.rt.block_on(app::chat(&s.store, NAME, "what did we do before?", WAIT))
            .unwrap_or_else(|e| panic!("a reply after the restart: {e}; logs: {}", s.logs(&pod2)));
    assert_eq!(reply, "We wrote proof.txt before the restart.");
    let asked: Vec<_> = fake
        .model_requests()
        .into_iter()
        .filter(|r| r.body.to_string().contains("what did we do before?"))
        .collect();
    assert!(
        !asked.is_empty()
            && asked
                .iter()
                .all(|r| r.body.to_string().contains("please write proof.txt")),
        "the request after the restart carries the first mention's turn: {:?}",
        // The conversation only: the system prompt and tools are ~100 KB.
        asked
            .iter()
            .map(|r| r.body["messages"].to_string())
            .collect::<Vec<_>>()
    );
    let logs = s.logs(&pod2);
    assert!(
        logs.contains("conversation brought back") && logs.contains("step=\"resume\""),
        "resumed from the receipt on the claim: {logs}"
    );
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
}
