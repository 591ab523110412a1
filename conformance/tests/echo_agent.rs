//! The built-in echo agent (`BUZZ_ACP_AGENT_COMMAND=builtin:echo`) is a real
//! ACP agent (wire-facts §6): checked once with a raw JSON-RPC client over
//! its stdio, and once through the harness's own ACP client (the agent slot
//! of `buzz_acp::acp`): initialize, session/new, prompt, cancel.

use buzz_acp::acp::{Adapter, AgentSpec, SlotCmd, SlotEvent, TurnJob, TurnOutcome, spawn_slot};
use buzz_acp::procs::ProcessTable;
use buzz_contract::env::BUILTIN_ECHO_ARG;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
const WAIT: Duration = Duration::from_secs(20);

struct Raw {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Raw {
    fn spawn() -> Raw {
        let mut child = tokio::process::Command::new(HARNESS)
            .arg(BUILTIN_ECHO_ARG)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawns");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Raw { child, stdin, lines }
    }

    async fn send(&mut self, v: Value) {
        self.stdin
            .write_all(format!("{v}\n").as_bytes())
            .await
            .expect("written");
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("an answer in time")
            .expect("readable")
            .expect("a line");
        serde_json::from_str(&line).expect("JSON-RPC line")
    }

    /// Sends request `id` and returns (notifications before it, its response).
    async fn call(&mut self, id: u64, method: &str, params: Value) -> (Vec<Value>, Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let mut notes = Vec::new();
        loop {
            let m = self.next().await;
            if m["id"] == id {
                return (notes, m);
            }
            notes.push(m);
        }
    }
}

#[tokio::test]
async fn the_echo_agent_speaks_acp_to_a_raw_client() {
    let mut a = Raw::spawn();
    let (_, init) = a
        .call(
            1,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    let (_, new) = a
        .call(2, "session/new", json!({"cwd": "/", "mcpServers": []}))
        .await;
    let session = new["result"]["sessionId"]
        .as_str()
        .expect("a session id")
        .to_string();
    let (notes, done) = a
        .call(
            3,
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]}),
        )
        .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let chunks: Vec<&Value> = notes.iter().filter(|n| n["method"] == "session/update").collect();
    assert_eq!(chunks.len(), 1, "{notes:?}");
    let update = &chunks[0]["params"]["update"];
    assert_eq!(update["sessionUpdate"], "agent_message_chunk");
    assert_eq!(update["content"]["text"], "hello\nworld");
    // A cancel with nothing in flight is accepted and does not poison the next prompt.
    a.send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
        .await;
    let (notes, done) = a
        .call(
            4,
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "again"}]}),
        )
        .await;
    assert_eq!(done["result"]["stopReason"], "end_turn");
    assert_eq!(notes[0]["params"]["update"]["content"]["text"], "again");
    // Closing stdin ends the agent cleanly.
    drop(a.stdin);
    let status = tokio::time::timeout(WAIT, a.child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
}

fn spec() -> AgentSpec {
    AgentSpec {
        command: HARNESS.to_string(),
        adapter: Adapter::Generic,
        args: vec![BUILTIN_ECHO_ARG.to_string()],
        cwd: std::env::temp_dir(),
        system_prompt: None,
        model: None,
        permission_mode: None,
        permission_policy: Default::default(),
        permission_policy_others: Default::default(),
        strictest_mode: None,
        permission_timeout: Duration::from_secs(10),
        env: vec![],
        session_title: None,
        mcp_command: None,
        idle_timeout: Duration::from_secs(10),
        max_turn: Duration::from_secs(20),
        cancel_grace: Duration::from_secs(2),
        kill_grace: Duration::from_secs(2),
        respawn_backoff: Duration::from_millis(100),
        max_failures: 1,
        memory: None,
        observer: None,
    }
}

async fn next_event(rx: &mut tokio::sync::mpsc::UnboundedReceiver<SlotEvent>) -> SlotEvent {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a slot event in time")
        .expect("the slot is alive")
}

async fn turn(
    tx: &tokio::sync::mpsc::UnboundedSender<SlotCmd>,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<SlotEvent>,
    id: u64,
    text: &str,
) -> TurnOutcome {
    tx.send(SlotCmd::Prompt(TurnJob {
        turn_id: id,
        channel: "c1".into(),
        text: text.into(),
        asker: buzz_acp::acp::Asker::Owner,
    }))
    .unwrap();
    loop {
        if let SlotEvent::TurnDone { turn_id, outcome, .. } = next_event(rx).await
            && turn_id == id
        {
            return outcome;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_echo_agent_passes_through_the_harness_acp_client() {
    let procs = ProcessTable::default();
    let (etx, mut erx) = tokio::sync::mpsc::unbounded_channel();
    let tx = spawn_slot(0, Arc::new(spec()), procs.clone(), etx);
    assert!(
        matches!(next_event(&mut erx).await, SlotEvent::Ready { slot: 0 }),
        "initialize and session set-up succeed"
    );
    let done = turn(&tx, &mut erx, 1, "say it back").await;
    assert_eq!(
        done,
        TurnOutcome::Completed {
            text: "say it back".into(),
            stop_reason: "EndTurn".into()
        }
    );
    // The harness's cancel path (session/cancel) leaves the agent usable.
    tx.send(SlotCmd::Cancel).unwrap();
    let done = turn(&tx, &mut erx, 2, "still here").await;
    assert!(
        matches!(&done, TurnOutcome::Completed { text, .. } if text == "still here"),
        "{done:?}"
    );
    tx.send(SlotCmd::Shutdown).unwrap();
    procs.close();
    let end = std::time::Instant::now() + WAIT;
    while !procs.pids().is_empty() && std::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(procs.pids().is_empty(), "the agent process ended");
}
