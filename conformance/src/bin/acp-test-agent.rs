//! A scripted ACP agent for the harness suite (DESIGN.md Decision 2: "real
//! ACP"), built on the agent side of `agent-client-protocol`.
//!
//! Behaviour: `ACP_TEST_AGENT_MODE` or the first argument, a comma-separated
//! set of
//! - `echo` (default): answers `echo: <prompt>`;
//! - `slow`: streams a chunk every `ACP_TEST_AGENT_STEP_MS` (100) for
//!   `ACP_TEST_AGENT_SLOW_MS` (2000), then echoes; a `[slow:MS]` prompt
//!   directive does the same for one prompt in any mode;
//! - `ignore-cancel`: `session/cancel` is ignored;
//! - `ignore-sigterm`: SIGTERM is ignored;
//! - `crash`: on a prompt, closes its stdout, lingers 300 ms (as a process
//!   that dumps core does) and exits with status 3;
//! - `permission`: asks `session/request_permission` (the tool call's title
//!   is the prompt) and answers with the chosen option ids (`permission:
//!   yes`); an `[asks:N]` directive asks N times in a row (`permission: no,
//!   yes`), and `[only-always]` offers `allow_always` and `reject_once` only;
//! - `hang`: never answers a prompt and sends nothing (until cancelled); a
//!   `[hang]` prompt directive does the same for one prompt in any mode;
//! - `stuck`: `hang` + `ignore-cancel` + `ignore-sigterm`;
//! - `orphan`: at start, leaves an orphaned `sleep 1` behind (its shell exits
//!   at once), for the PID 1 zombie-reaping test;
//! - `hang-init`: never answers `initialize`;
//! - `hang-new`: never answers `session/new`;
//! - `fail-prompt`: advertises a terminal `authMethods` entry and fails every
//!   prompt with ACP's `Authentication required` error, as an agent without
//!   credentials does;
//! - `sp-cap`: advertises `sessionCapabilities.systemPrompt`.
//!
//!
//! Directives in any mode: `[env:NAME]` is replaced by the value of env
//! `NAME` (as an agent that prints its environment would: the harness's
//! scrub tests); `[fail]` fails the prompt with an error whose message is the
//! prompt; `[write:NAME=TEXT]` writes TEXT to the file NAME in the agent's
//! working directory and `[read:NAME]` is replaced by that file's text (or
//! `(no NAME)`), as an agent at work in its workspace would (the workspace
//! survival tests; NAME is one plain file name); `[dial:HOST:PORT]` is
//! replaced by `open`, `refused` or `timeout`, what a TCP connect from the
//! agent's process got within 3 s, as an agent's shell tool that opens a
//! connection would (the NetworkPolicy tests);
//! `[tool:MS]` runs a tool for MS ms: a `tool_call` `in_progress`,
//! silence, then a `tool_call_update` `completed`, then the answer;
//! `[observed]` sends the prompt as a thought chunk, as a tool call's
//! title and as that tool's output (the sealed frames' canaries);
//! `[flood:BYTES]` runs a tool whose `tool_call_update` carries BYTES of
//! output (the observer's bounds); `[usage:IN,OUT,TOTAL,COST]` reports usage
//! as claude-agent-acp does: a `usage_update` (context used IN + OUT of
//! 200 000, the session's cost so far COST micro-dollars) and the
//! prompt response's `usage` {IN, OUT, TOTAL}.
//!
//! `ACP_TEST_AGENT_LOG` names a file that receives one JSON line per event
//! (`start`, `session_new`, `prompt`, `cancel`) with a unix-ms timestamp.
//!
//! **Tap mode**: with `ACP_TAP_EXEC` set, it is no agent but a transparent
//! tap in front of that real agent (all arguments passed on): every ACP
//! message in either direction is appended to `ACP_TAP_LOG` as
//! `{"dir": "to_agent" | "from_agent", "msg": …}`. Started through a symlink
//! named after the real agent, the harness sees that agent's name.

use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthMethod, AuthMethodTerminal, CancelNotification, ContentBlock, ContentChunk,
    InitializeRequest, InitializeResponse, NewSessionRequest, NewSessionResponse, PermissionOption,
    PermissionOptionKind, PromptRequest, PromptResponse, RequestPermissionOutcome, RequestPermissionRequest,
    SessionCapabilities, SessionId, SessionNotification, SessionSystemPromptCapabilities, SessionUpdate,
    StopReason, TextContent, ToolCall, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use agent_client_protocol::v1::schema::{Cost, Usage, UsageUpdate};
use agent_client_protocol::{Agent, ByteStreams};
use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

#[derive(Debug, Default, Clone)]
struct Modes {
    slow: bool,
    ignore_cancel: bool,
    crash: bool,
    permission: bool,
    hang: bool,
    hang_init: bool,
    hang_new: bool,
    fail_prompt: bool,
    sp_cap: bool,
}

fn modes() -> (Modes, bool) {
    let raw = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("ACP_TEST_AGENT_MODE").ok())
        .unwrap_or_default();
    let mut m = Modes::default();
    let mut ignore_sigterm = false;
    if raw.split(',').any(|p| p.trim() == "orphan") {
        let _ = std::process::Command::new("sh")
            .args(["-c", "sleep 1 & exit 0"])
            .status();
    }
    for part in raw.split(',').map(str::trim) {
        match part {
            "slow" => m.slow = true,
            "ignore-cancel" => m.ignore_cancel = true,
            "ignore-sigterm" => ignore_sigterm = true,
            "crash" => m.crash = true,
            "permission" => m.permission = true,
            "hang" => m.hang = true,
            "hang-init" => m.hang_init = true,
            "hang-new" => m.hang_new = true,
            "fail-prompt" => m.fail_prompt = true,
            "sp-cap" => m.sp_cap = true,
            "stuck" => {
                m.hang = true;
                m.ignore_cancel = true;
                ignore_sigterm = true;
            }
            _ => {}
        }
    }
    (m, ignore_sigterm)
}

fn env_ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn log(value: serde_json::Value) {
    if let Ok(path) = std::env::var("ACP_TEST_AGENT_LOG") {
        let mut v = value;
        v["t_ms"] = serde_json::json!(now_ms() as u64);
        v["pid"] = serde_json::json!(std::process::id());
        // One write(2) per line: agents of a pool share the file (O_APPEND).
        let line = format!("{v}\n");
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

fn slow_directive(text: &str) -> Option<Duration> {
    let start = text.find("[slow:")? + 6;
    let end = start + text[start..].find(']')?;
    text[start..end].parse().ok().map(Duration::from_millis)
}

/// The numbers of a `[name:A,B,…]` directive.
fn directive_list(text: &str, name: &str) -> Option<Vec<u64>> {
    let tag = format!("[{name}:");
    let start = text.find(&tag)? + tag.len();
    let end = start + text[start..].find(']')?;
    text[start..end]
        .split(',')
        .map(|n| n.trim().parse().ok())
        .collect()
}

fn directive_n(text: &str, name: &str) -> Option<u64> {
    let tag = format!("[{name}:");
    let start = text.find(&tag)? + tag.len();
    let end = start + text[start..].find(']')?;
    text[start..end].parse().ok()
}

/// Replaces every `[env:NAME]` with the value of env `NAME` (empty if unset).
fn expand_env(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("[env:") {
        let Some(j) = rest[i..].find(']') else { break };
        out.push_str(&rest[..i]);
        out.push_str(&std::env::var(&rest[i + 5..i + j]).unwrap_or_default());
        rest = &rest[i + j + 1..];
    }
    out.push_str(rest);
    out
}

/// Replaces every `[dial:HOST:PORT]` with what a TCP connect to it got.
fn expand_dials(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("[dial:") {
        let Some(j) = rest[i..].find(']') else { break };
        out.push_str(&rest[..i]);
        out.push_str(&dial(&rest[i + 6..i + j]));
        rest = &rest[i + j + 1..];
    }
    out.push_str(rest);
    out
}

fn dial(addr: &str) -> String {
    use std::net::{TcpStream, ToSocketAddrs};
    let Some(to) = addr.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return format!("(bad address {addr})");
    };
    match TcpStream::connect_timeout(&to, Duration::from_secs(3)) {
        Ok(_) => "open".into(),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => "timeout".into(),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => "refused".into(),
        Err(e) => format!("failed ({e})"),
    }
}

/// Runs every `[write:NAME=TEXT]` and `[read:NAME]` in the working
/// directory, each replaced by what it did.
fn expand_files(text: &str) -> String {
    let plain = |n: &str| !n.is_empty() && !n.contains('/') && n != "." && n != "..";
    let mut out = String::new();
    let mut rest = text;
    loop {
        let next = [("[write:", true), ("[read:", false)]
            .into_iter()
            .filter_map(|(tag, write)| rest.find(tag).map(|i| (i, tag, write)))
            .min();
        let Some((i, tag, write)) = next else { break };
        let Some(j) = rest[i..].find(']') else { break };
        let body = &rest[i + tag.len()..i + j];
        out.push_str(&rest[..i]);
        let done = match (write, body.split_once('=')) {
            (true, Some((name, content))) if plain(name) => match std::fs::write(name, content) {
                Ok(()) => format!("wrote {name}"),
                Err(e) => format!("cannot write {name}: {e}"),
            },
            (false, _) if plain(body) => {
                std::fs::read_to_string(body).unwrap_or_else(|_| format!("(no {body})"))
            }
            _ => format!("(bad {tag}{body}])"),
        };
        out.push_str(&done);
        rest = &rest[i + j + 1..];
    }
    out.push_str(rest);
    out
}

fn chunk(session: &SessionId, text: &str) -> SessionNotification {
    SessionNotification::new(
        session.clone(),
        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(text)))),
    )
}

fn tap_log(dir: &str, line: &str) {
    if let Ok(path) = std::env::var("ACP_TAP_LOG") {
        let msg = serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|_| serde_json::json!(line));
        let entry = format!("{}\n", serde_json::json!({"dir": dir, "msg": msg}));
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(entry.as_bytes());
        }
    }
}

/// Copies lines from `from` to `to`, logging each one.
async fn pipe_lines(
    from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
    dir: &'static str,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut lines = tokio::io::BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tap_log(dir, &line);
        if to.write_all(format!("{line}\n").as_bytes()).await.is_err() || to.flush().await.is_err() {
            return;
        }
    }
}

/// Tap mode: runs `exec` with our arguments and records the ACP traffic.
async fn tap(exec: String) -> std::io::Result<i32> {
    let mut child = tokio::process::Command::new(exec)
        .args(std::env::args().skip(1))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()?;
    let (Some(cin), Some(cout)) = (child.stdin.take(), child.stdout.take()) else {
        return Ok(1);
    };
    tokio::spawn(pipe_lines(tokio::io::stdin(), cin, "to_agent"));
    let out = tokio::spawn(pipe_lines(cout, tokio::io::stdout(), "from_agent"));
    let code = child.wait().await?.code().unwrap_or(1);
    // Everything the agent wrote reaches the harness before we exit.
    let _ = tokio::time::timeout(Duration::from_secs(2), out).await;
    Ok(code)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> agent_client_protocol::Result<()> {
    if let Ok(exec) = std::env::var("ACP_TAP_EXEC") {
        let code = tap(exec).await.unwrap_or(1);
        std::process::exit(code);
    }
    let (m, ignore_sigterm) = modes();
    if ignore_sigterm {
        // SAFETY: setting a signal disposition to SIG_IGN has no memory effects.
        unsafe {
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
        }
    }
    log(serde_json::json!({"event": "start"}));
    let cancelled: Arc<Mutex<HashSet<String>>> = Arc::default();
    let sessions = Arc::new(AtomicU64::new(0));
    let m2 = m.clone();
    let m_init = m.clone();
    let m_new = m.clone();
    let c_cancel = cancelled.clone();
    let transport = ByteStreams::new(tokio::io::stdout().compat_write(), tokio::io::stdin().compat());
    Agent
        .v1()
        .name("acp-test-agent")
        .on_receive_request(
            async move |req: InitializeRequest, responder, cx| {
                log(serde_json::json!({"event": "initialize"}));
                let mut caps = AgentCapabilities::new();
                if m_init.sp_cap {
                    caps = caps.session_capabilities(
                        SessionCapabilities::new().system_prompt(SessionSystemPromptCapabilities::new()),
                    );
                }
                let mut resp = InitializeResponse::new(req.protocol_version).agent_capabilities(caps);
                if m_init.fail_prompt {
                    resp = resp.auth_methods(vec![AuthMethod::Terminal(AuthMethodTerminal::new(
                        "login",
                        "Log in with `claude /login`",
                    ))]);
                }
                if m_init.hang_init {
                    // Hold the responder forever: the request is never answered.
                    return cx.spawn(async move {
                        std::future::pending::<()>().await;
                        responder.respond(resp)
                    });
                }
                responder.respond(resp)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder, cx| {
                let n = sessions.fetch_add(1, Ordering::SeqCst);
                let id = format!("s{}-{n}", std::process::id());
                let sp = req.system_prompt.as_ref().map(|p| {
                    p.content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text(t) => Some(t.text.clone()),
                            _ => None,
                        })
                        .collect::<String>()
                });
                log(
                    serde_json::json!({"event": "session_new", "session": id, "system_prompt": sp,
                    "mcp_servers": req.mcp_servers.len(), "meta": req.meta}),
                );
                if m_new.hang_new {
                    return cx.spawn(async move {
                        std::future::pending::<()>().await;
                        responder.respond(NewSessionResponse::new(id))
                    });
                }
                responder.respond(NewSessionResponse::new(id))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _cx| {
                log(serde_json::json!({"event": "cancel", "session": n.session_id.0.to_string()}));
                if !m2.ignore_cancel {
                    c_cancel
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(n.session_id.0.to_string());
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, cx| {
                let text = expand_dials(&expand_files(&expand_env(&buzz_acp::echo_agent::prompt_text(
                    &req.prompt,
                ))));
                let session = req.session_id.clone();
                log(serde_json::json!({"event": "prompt", "session": session.0.to_string(), "text": text}));
                if text.contains("[fail]") {
                    return responder.respond_with_error(agent_client_protocol::Error::new(
                        agent_client_protocol::ErrorCode::INTERNAL_ERROR,
                        text,
                    ));
                }
                if m.crash {
                    // The harness sees the transport close before the exit.
                    // SAFETY: fd 1 is ours; nothing writes to it after this.
                    unsafe { libc::close(1) };
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    std::process::exit(3);
                }
                if m.fail_prompt {
                    return responder.respond_with_error(agent_client_protocol::Error::auth_required());
                }
                let m = m.clone();
                let cancelled = cancelled.clone();
                cancelled
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&*session.0);
                let is_cancelled = move |s: &SessionId| {
                    cancelled
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .contains(&*s.0)
                };
                let task_cx = cx.clone();
                cx.spawn(async move {
                    let cx = task_cx;
                    if m.hang || text.contains("[hang]") {
                        loop {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            if is_cancelled(&session) {
                                return responder.respond(PromptResponse::new(StopReason::Cancelled));
                            }
                        }
                    }
                    let slow =
                        slow_directive(&text).or(m.slow.then(|| env_ms("ACP_TEST_AGENT_SLOW_MS", 2000)));
                    if let Some(total) = slow {
                        let step = env_ms("ACP_TEST_AGENT_STEP_MS", 100);
                        let end = Instant::now() + total;
                        while Instant::now() < end {
                            tokio::time::sleep(step).await;
                            if is_cancelled(&session) {
                                return responder.respond(PromptResponse::new(StopReason::Cancelled));
                            }
                            cx.send_notification(SessionNotification::new(
                                session.clone(),
                                SessionUpdate::AgentThoughtChunk(ContentChunk::new(ContentBlock::Text(
                                    TextContent::new("."),
                                ))),
                            ))?;
                        }
                    }
                    if let Some(ms) = directive_n(&text, "tool") {
                        let id = format!("tool-run-{}", now_ms());
                        cx.send_notification(SessionNotification::new(
                            session.clone(),
                            SessionUpdate::ToolCall(
                                ToolCall::new(id.clone(), "a quiet build").status(ToolCallStatus::InProgress),
                            ),
                        ))?;
                        log(serde_json::json!({"event": "tool_started", "ms": ms}));
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        cx.send_notification(SessionNotification::new(
                            session.clone(),
                            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                                id,
                                ToolCallUpdateFields::new().status(ToolCallStatus::Completed),
                            )),
                        ))?;
                        log(serde_json::json!({"event": "tool_finished"}));
                    }
                    if let Some(bytes) = directive_n(&text, "flood") {
                        let id = format!("tool-flood-{}", now_ms());
                        cx.send_notification(SessionNotification::new(
                            session.clone(),
                            SessionUpdate::ToolCall(
                                ToolCall::new(id.clone(), "a chatty build")
                                    .status(ToolCallStatus::InProgress),
                            ),
                        ))?;
                        let output = "x".repeat(bytes as usize);
                        cx.send_notification(SessionNotification::new(
                            session.clone(),
                            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                                id,
                                ToolCallUpdateFields::new()
                                    .status(ToolCallStatus::Completed)
                                    .content(vec![ContentBlock::Text(TextContent::new(output)).into()]),
                            )),
                        ))?;
                    }
                    if text.contains("[observed]") {
                        // The prompt (its `[env:]` values in) as a thought, a
                        // tool call's title and that tool's output: what the
                        // observer's frames carry (the sealed canaries test).
                        let id = format!("tool-observed-{}", now_ms());
                        let said = |t: &str| ContentBlock::Text(TextContent::new(t.to_string()));
                        cx.send_notification(SessionNotification::new(
                            session.clone(),
                            SessionUpdate::AgentThoughtChunk(ContentChunk::new(said(&text))),
                        ))?;
                        cx.send_notification(SessionNotification::new(
                            session.clone(),
                            SessionUpdate::ToolCall(
                                ToolCall::new(id.clone(), text.clone()).status(ToolCallStatus::InProgress),
                            ),
                        ))?;
                        cx.send_notification(SessionNotification::new(
                            session.clone(),
                            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                                id,
                                ToolCallUpdateFields::new()
                                    .status(ToolCallStatus::Completed)
                                    .content(vec![said(&text).into()]),
                            )),
                        ))?;
                    }
                    let usage = directive_list(&text, "usage").filter(|v| v.len() == 4);
                    if let Some(u) = &usage {
                        cx.send_notification(SessionNotification::new(
                            session.clone(),
                            SessionUpdate::UsageUpdate(
                                UsageUpdate::new(u[0] + u[1], 200_000)
                                    .cost(Cost::new(u[3] as f64 / 1e6, "USD")),
                            ),
                        ))?;
                    }
                    let mut answer = format!("echo: {text}");
                    if m.permission {
                        let mut chosen = Vec::new();
                        for n in 0..directive_n(&text, "asks").unwrap_or(1) {
                            let options = if text.contains("[only-always]") {
                                vec![
                                    PermissionOption::new(
                                        "always",
                                        "Always",
                                        PermissionOptionKind::AllowAlways,
                                    ),
                                    PermissionOption::new("no", "Reject", PermissionOptionKind::RejectOnce),
                                ]
                            } else {
                                vec![
                                    PermissionOption::new("no", "Reject", PermissionOptionKind::RejectOnce),
                                    PermissionOption::new(
                                        "yes",
                                        "Allow once",
                                        PermissionOptionKind::AllowOnce,
                                    ),
                                    PermissionOption::new(
                                        "always",
                                        "Always",
                                        PermissionOptionKind::AllowAlways,
                                    ),
                                ]
                            };
                            let req = RequestPermissionRequest::new(
                                session.clone(),
                                ToolCallUpdate::new(
                                    format!("tool-{n}"),
                                    ToolCallUpdateFields::new().title(text.clone()),
                                ),
                                options,
                            );
                            let r = cx.send_request(req).block_task().await?;
                            let pick = match r.outcome {
                                RequestPermissionOutcome::Selected(s) => s.option_id.0.to_string(),
                                _ => "cancelled".to_string(),
                            };
                            log(serde_json::json!({"event": "permission", "selected": pick}));
                            chosen.push(pick);
                        }
                        answer = format!("permission: {}", chosen.join(", "));
                    }
                    cx.send_notification(chunk(&session, &answer))?;
                    let done = PromptResponse::new(StopReason::EndTurn);
                    responder.respond(match usage {
                        Some(u) => done.usage(Usage::new(u[2], u[0], u[1])),
                        None => done,
                    })
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(transport)
        .await
}
