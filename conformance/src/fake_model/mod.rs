//! A scripted fake model API for tests: one loopback HTTP server that speaks
//! the three wire formats the real ACP agents call (measured in
//! `/work/shared/real-agents.md`):
//!
//! - Anthropic Messages, `POST /v1/messages` (SSE; the query string is
//!   ignored) and `HEAD /` (200), for claude-agent-acp ([`anthropic`]);
//! - OpenAI Responses, `POST /v1/responses` (SSE), for codex-acp ([`openai`]);
//! - Gemini, `POST /v1beta/models/{m}:generateContent` (JSON) and
//!   `:streamGenerateContent?alt=sse` (one SSE `data:` line), for gemini-cli
//!   ([`gemini`]).
//!
//! A test scripts the model's side of the conversation as [`Turn`]s. A request
//! whose last user message carries no tool result starts the next turn; one
//! that carries a tool result (`tool_result`, `function_call_output`,
//! `functionResponse`) is the follow-up of the current turn. A
//! [`Turn::shell`] answers the first request with a call of the agent's own
//! shell tool (Anthropic `Bash` {command}, OpenAI function `exec_command`
//! {cmd}, Gemini `run_shell_command` {command}) and the follow-up with text.
//! **When the script runs out, its last turn repeats**; an empty script
//! answers every turn with [`EMPTY_SCRIPT_TEXT`]. Gemini's JSON-schema side
//! calls (`generationConfig.responseJsonSchema`, e.g. the model router) are
//! answered with a JSON object made from the schema and consume no turn.
//!
//! Every request is recorded ([`RecordedRequest`]). The server runs on its own
//! thread and runtime, so it works from sync and async tests alike; dropping
//! the [`FakeModel`] stops it and closes every connection, including ones a
//! [`Failure::Hang`] holds open. [`agents`] has the launch recipes of the
//! three real agents against it.

pub mod agents;
pub mod anthropic;
pub mod gemini;
pub mod openai;
mod script;
mod server;

pub use script::{EMPTY_SCRIPT_TEXT, Failure, Script, Turn};

use serde_json::Value;
use server::{State, lock};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The wire format a request was addressed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Anthropic,
    OpenAi,
    Gemini,
}

/// What the server answers, handed to the API modules.
#[derive(Clone, Copy, Debug)]
pub enum Answer<'a> {
    /// Text blocks, in order.
    Text(&'a [String]),
    /// A shell tool call with this command line, after a text block when
    /// `lead` is given (how a model announces what it is about to do).
    Shell { lead: Option<&'a str>, command: &'a str },
    /// A read of `path` with the agent's read tool; `shell` is the same read
    /// as a shell command, for an API whose agent here has no read tool.
    Read { path: &'a str, shell: &'a str },
}

impl<'a> Answer<'a> {
    /// The answer with a read as a shell command (codex's and gemini's
    /// recorded tool here is their shell).
    pub fn read_as_shell(self) -> Answer<'a> {
        match self {
            Answer::Read { shell, .. } => Answer::Shell {
                lead: None,
                command: shell,
            },
            other => other,
        }
    }
}

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// `POST`, `HEAD`, ...
    pub method: String,
    /// Path and query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// Header names lower-cased; repeated headers joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// The API it was addressed to, if it was a model request.
    pub api: Option<Api>,
    /// The index of the script turn that answered it (None for `HEAD`,
    /// side calls, unknown paths, whole-server failures and an empty script).
    pub turn: Option<usize>,
    /// A model answer went back (a turn's or a side call's), with the
    /// usage [`reported`] for its place in the log.
    pub answered: bool,
}

/// The token counts the fake reports in its answer to the `seq`-th request
/// (1-based, in the order received), in each API's own fields (Anthropic
/// `usage`, OpenAI `response.usage`, Gemini `usageMetadata`; no cached
/// tokens). Distinct per answer, so a test tells a turn's sum from its last
/// request's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    pub input: u64,
    pub output: u64,
}

/// The counts of the `seq`-th answer.
pub fn reported(seq: usize) -> Reported {
    Reported {
        input: 1000 + 100 * seq as u64,
        output: 10 + seq as u64,
    }
}

impl RecordedRequest {
    /// The model asked for: the body's `model`, or Gemini's path segment.
    pub fn model(&self) -> Option<String> {
        match self.api? {
            Api::Anthropic | Api::OpenAi => self.body["model"].as_str().map(str::to_string),
            Api::Gemini => gemini::route(self.path_only()).map(|(m, _)| m.to_string()),
        }
    }

    /// The tool results this request brings back (those after its last user
    /// message), as text; empty when it starts a turn.
    pub fn tool_results(&self) -> Vec<String> {
        match self.api {
            Some(Api::Anthropic) => anthropic::tool_results(&self.body),
            Some(Api::OpenAi) => openai::tool_results(&self.body),
            Some(Api::Gemini) => gemini::tool_results(&self.body),
            None => Vec::new(),
        }
    }

    /// A header by its (any-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    fn path_only(&self) -> &str {
        self.path.split('?').next().unwrap_or_default()
    }
}

/// A running fake model API. Dropping it stops the server.
pub struct FakeModel {
    addr: SocketAddr,
    state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeModel {
    /// Starts the server on 127.0.0.1, on a free port.
    pub fn start(script: Script) -> FakeModel {
        FakeModel::start_at(IpAddr::V4(Ipv4Addr::LOCALHOST), script)
    }

    /// Starts the server on `ip` (a free port), e.g. a bridge address a pod
    /// can reach. Panics if `ip` cannot be bound.
    pub fn start_at(ip: IpAddr, script: Script) -> FakeModel {
        let listener =
            std::net::TcpListener::bind((ip, 0)).unwrap_or_else(|e| panic!("fake model API: bind {ip}: {e}"));
        let addr = listener.local_addr().expect("fake model API: local address");
        listener
            .set_nonblocking(true)
            .expect("fake model API: nonblocking listener");
        let state = Arc::new(State {
            script: Mutex::new(script::ScriptState::new(script)),
            fail_all: Mutex::new(None),
            log: Mutex::new(Vec::new()),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let st = state.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fake-model-{}", addr.port()))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("fake model API: runtime");
                // Dropping the runtime at the end of this closure drops every
                // connection task, held ones included.
                rt.block_on(server::serve(listener, st, stopped));
            })
            .expect("fake model API: thread");
        FakeModel {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ip:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// For `ANTHROPIC_BASE_URL`: `http://ip:port`.
    pub fn anthropic_base_url(&self) -> String {
        self.url()
    }

    /// For codex's provider `base_url`: `http://ip:port/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.url())
    }

    /// For `GOOGLE_GEMINI_BASE_URL`: `http://ip:port`.
    pub fn gemini_base_url(&self) -> String {
        self.url()
    }

    /// Appends `turn` to the running script: a turn whose content is known
    /// only once an earlier one ran (a path the agent wrote).
    pub fn push_turn(&self, turn: Turn) {
        lock(&self.state.script).push(turn);
    }

    /// Fails every model request (side calls included) with `failure`, or
    /// stops doing so with `None`. While set, the script does not advance.
    pub fn fail_all(&self, failure: Option<Failure>) {
        *lock(&self.state.fail_all) = failure;
    }

    /// The token counts reported for each answered model request (side
    /// calls included, `None` for every other request), in order.
    pub fn reported(&self) -> Vec<Option<Reported>> {
        self.requests()
            .iter()
            .enumerate()
            .map(|(i, r)| r.answered.then(|| reported(i + 1)))
            .collect()
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.log).clone()
    }

    /// The requests addressed to a model API (no `HEAD`, no unknown paths).
    pub fn model_requests(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(|r| r.api.is_some()).collect()
    }

    /// The model of every model request, in order (side calls included).
    pub fn models_seen(&self) -> Vec<String> {
        self.requests().iter().filter_map(|r| r.model()).collect()
    }

    /// The tool results brought back, in the order they arrived (each once:
    /// only those after each request's last user message).
    pub fn tool_results_seen(&self) -> Vec<String> {
        self.requests().iter().flat_map(|r| r.tool_results()).collect()
    }

    /// Waits until `pred` holds for the requests so far; false after `timeout`.
    /// Blocks the calling thread (the server runs on its own).
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&[RecordedRequest]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(&lock(&self.state.log)) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A tool result's text as Anthropic (`tool_result` content) and OpenAI
/// (`function_call_output` output) carry it: a string, or items with text.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
