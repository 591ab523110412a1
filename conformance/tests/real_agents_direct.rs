//! The three real ACP agents (claude-agent-acp, codex-acp, gemini `--acp`),
//! pinned in buzz-contract, driven directly over newline-delimited JSON-RPC
//! on stdio against the fake model API, without the harness: each runs its
//! own shell tool in the session cwd, the tool result comes back to the fake,
//! and the turn ends with `end_turn` (real-agents.md).
//!
//! The agents come from `$BUZZ_AGENTS_BIN` (default
//! `~/.cache/buzz-agents/node_modules/.bin`, where scripts/test.sh installs
//! them); when they are missing, these tests fail with the install command.

use buzz_conformance::fake_model::agents::{AgentLaunch, RealAgent, agents_bin_dir, check_bin_dir};
use buzz_conformance::fake_model::{FakeModel, Script, Turn};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// A bound on each JSON-RPC call, so a wedged agent fails the test instead of
/// hanging it (gemini's cold start under load took up to 4 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(180);

const COMMAND: &str = "echo proof-ok-42 > proof.txt && cat proof.txt";
const FINAL_TEXT: &str = "Done: proof.txt written.";

/// An agent process spoken to over ACP stdio.
struct Acp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
    updates: Vec<Value>,
    permissions: Vec<Value>,
    stderr: PathBuf,
    started: Instant,
}

impl Acp {
    fn spawn(launch: &AgentLaunch, stderr: PathBuf) -> Acp {
        let mut cmd = Command::new(&launch.program);
        cmd.args(&launch.args)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&launch.home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            // Its own process group, so the agent's children go with it.
            .process_group(0);
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", launch.program.display()));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Acp {
            stdin: child.stdin.take(),
            child,
            lines,
            next_id: 1,
            updates: Vec::new(),
            permissions: Vec::new(),
            stderr,
            started,
        }
    }

    fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("write to the agent: {e}\n{}", self.stderr_tail()));
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        format!("agent stderr (tail):\n{}", &text[start..])
    }

    /// Calls `method`; Ok(result) or Err(error). Answers the agent's own
    /// requests meanwhile and keeps its `session/update`s.
    fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{method}: no answer in {CALL_TIMEOUT:?}\n{}", self.stderr_tail())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("{method}: the agent closed stdout\n{}", self.stderr_tail())
                }
            };
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue; // not JSON-RPC (a stray log line)
            };
            // claude-agent-acp's first request has id 0: test for presence.
            match (msg.get("id"), msg.get("method").and_then(Value::as_str)) {
                (Some(req_id), Some(m)) => {
                    let reply = self.answer(m, &msg["params"]);
                    let mut out = json!({"jsonrpc": "2.0", "id": req_id});
                    match reply {
                        Ok(v) => out["result"] = v,
                        Err(e) => out["error"] = e,
                    }
                    self.send(&out);
                }
                (None, Some("session/update")) => self.updates.push(msg["params"].clone()),
                (None, Some(_)) => {}
                (Some(got), None) if got == &json!(id) => {
                    return match msg.get("error") {
                        Some(e) => Err(e.clone()),
                        None => Ok(msg["result"].clone()),
                    };
                }
                _ => {}
            }
        }
    }

    /// An agent→client request: permissions are allowed once (else always);
    /// anything else is "method not found".
    fn answer(&mut self, method: &str, params: &Value) -> Result<Value, Value> {
        if method != "session/request_permission" {
            return Err(json!({"code": -32601, "message": format!("{method} not supported")}));
        }
        self.permissions.push(params.clone());
        let options = params["options"].as_array().cloned().unwrap_or_default();
        let pick = ["allow_once", "allow_always"]
            .iter()
            .find_map(|kind| options.iter().find(|o| o["kind"] == *kind))
            .ok_or_else(|| json!({"code": -32602, "message": "no allow option"}))?;
        Ok(json!({"outcome": {"outcome": "selected", "optionId": pick["optionId"]}}))
    }

    /// The text of every `agent_message_chunk`, concatenated.
    fn agent_text(&self) -> String {
        self.updates
            .iter()
            .filter(|u| u["update"]["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|u| u["update"]["content"]["text"].as_str())
            .collect()
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        drop(self.stdin.take());
        // The group this test created for the agent (its pid is the pgid).
        let pgid = self.child.id() as i32;
        // SAFETY: kill(2) on our own child's process group; no memory involved.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// The agents' bin dir, or a failure that says how to install them.
fn bin_dir() -> PathBuf {
    agents_bin_dir().unwrap_or_else(|e| panic!("{e}"))
}

fn since(t: Instant) -> String {
    format!("{:.2}s", t.elapsed().as_secs_f64())
}

/// Runs one agent through initialize, session/new, `mode` (if any) and a
/// prompt whose scripted answer is a shell tool call writing proof.txt.
fn write_the_file(agent: RealAgent, mode: Option<&str>) {
    let bin = bin_dir();
    let fake = FakeModel::start(Script::new().turn(Turn::shell(COMMAND, FINAL_TEXT)));
    let scratch = tempfile::Builder::new()
        .prefix(&format!("buzz-real-{}-", agent.preset_name()))
        .tempdir()
        .expect("tempdir");
    let cwd = scratch.path().join("work");
    std::fs::create_dir_all(&cwd).expect("cwd");
    let launch = agent.launch(&bin, scratch.path(), &fake).expect("launch recipe");
    let mut acp = Acp::spawn(&launch, scratch.path().join("stderr.log"));
    let name = agent.preset_name();

    let init = acp
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {
                "fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}}),
        )
        .unwrap_or_else(|e| panic!("{name} initialize: {e}\n{}", acp.stderr_tail()));
    assert_eq!(init["protocolVersion"], 1, "{name}: {init}");
    eprintln!("{name}: initialize after {}", since(acp.started));

    let t = Instant::now();
    let session = acp
        .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
        .unwrap_or_else(|e| panic!("{name} session/new: {e}\n{}", acp.stderr_tail()));
    let sid = session["sessionId"].as_str().expect("sessionId").to_string();
    eprintln!("{name}: session/new in {}", since(t));

    if let Some(mode) = mode {
        acp.call("session/set_mode", json!({"sessionId": sid, "modeId": mode}))
            .unwrap_or_else(|e| panic!("{name} session/set_mode {mode}: {e}\n{}", acp.stderr_tail()));
    }

    let t = Instant::now();
    let result = acp
        .call(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "write the file"}]}),
        )
        .unwrap_or_else(|e| panic!("{name} session/prompt: {e}\n{}", acp.stderr_tail()));
    eprintln!(
        "{name}: prompt in {}, {} model requests, {} permission prompts, whole run {}",
        since(t),
        fake.model_requests().len(),
        acp.permissions.len(),
        since(acp.started)
    );
    let context = || {
        let paths: Vec<String> = fake
            .requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        format!(
            "requests: {paths:?}\nagent text: {:?}\n{}",
            acp.agent_text(),
            acp.stderr_tail()
        )
    };
    assert_eq!(
        result["stopReason"],
        "end_turn",
        "{name}: {result}\n{}",
        context()
    );
    let proof = std::fs::read_to_string(cwd.join("proof.txt"))
        .unwrap_or_else(|e| panic!("{name}: proof.txt in the cwd: {e}\n{}", context()));
    assert_eq!(proof.trim(), "proof-ok-42", "{name}");
    let results = fake.tool_results_seen();
    assert!(
        results.iter().any(|r| r.contains("proof-ok-42")),
        "{name}: the fake saw the tool result: {results:?}\n{}",
        context()
    );
    assert!(
        acp.agent_text().contains(FINAL_TEXT),
        "{name}: the final text streamed back\n{}",
        context()
    );
    assert_eq!(
        fake.model_requests().iter().filter(|r| r.turn.is_some()).count(),
        2,
        "{name}: one tool request and one follow-up\n{}",
        context()
    );
}

#[test]
fn claude_agent_acp_runs_bash_against_the_fake() {
    // Default mode; the Bash permission prompt is answered allow_once.
    write_the_file(RealAgent::Claude, None);
}

#[test]
fn codex_acp_runs_exec_command_against_the_fake() {
    // Sandboxed modes need bwrap (absent here); full-access neither sandboxes nor asks.
    write_the_file(RealAgent::Codex, Some("full-access"));
}

#[test]
fn gemini_acp_runs_run_shell_command_against_the_fake() {
    // Default mode; the permission prompt is answered proceed_once (allow_once).
    write_the_file(RealAgent::Gemini, None);
}

#[test]
fn missing_agents_dir_says_how_to_install() {
    // The message the tests above fail with when the agents are missing.
    let err = check_bin_dir(Path::new("/nonexistent/buzz-agents-bin")).expect_err("no agents there");
    for want in [
        "claude-agent-acp, codex-acp, gemini missing",
        "npm install --prefix",
        "@zed-industries/claude-agent-acp@0.23.1",
        "@zed-industries/codex-acp@0.16.0",
        "@google/gemini-cli@0.61.0",
        "BUZZ_AGENTS_BIN",
    ] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
}
