//! ACP agent slots (wire-facts §6; spec §Stop and Delete): each slot spawns
//! `BUZZ_ACP_AGENT_COMMAND` in its own process group (stdin/stdout piped,
//! stderr inherited) and drives it as an ACP client through the official
//! `agent-client-protocol` crate: `initialize`, one `session/new` per channel,
//! `session/prompt` per turn, `session/cancel` on idle timeout, hard cap or
//! owner `!cancel`. `session/update` resets the idle deadline; permission
//! requests are answered `allow_once` (else `reject_once`). A crashed agent
//! respawns with backoff; a slot that keeps dying gives up.
//!
//! `initialize` and `session/new` are bounded by the turn timeouts (the idle
//! timeout, capped by the hard cap; I5): an agent that hangs there is killed
//! and its slot counts a failed start. The system prompt and the model go in
//! the forms each known agent reads ([`Adapter`]); for any other agent the
//! system prompt rides `session/new` only when `initialize` advertised
//! `sessionCapabilities.systemPrompt` (ACP), else it leads the first prompt
//! of each session. A failed
//! `session/new` or `session/prompt` carries the agent's error message, and
//! the hint of any `authMethods` it advertised, back to the pool.

use crate::backoff::respawn_delay;
use crate::procs::{ProcessTable, signal_group};
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AuthMethod, CancelNotification, ContentBlock, Implementation, InitializeRequest, InitializeResponse,
    McpServer, McpServerStdio, NewSessionRequest, PermissionOptionKind, PromptRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionId, SessionNotification, SessionUpdate, StopReason, SystemPrompt, TextContent,
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// How a known agent takes the system prompt and the model, in the forms
/// it documents and reads (ACP's own fields are not read by all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    /// `claude-code-acp` / `claude-agent-acp`: `session/new`
    /// `_meta.systemPrompt = {"append": …}` (kept on top of Claude Code's own
    /// preset) and `_meta.claudeCode.options.model`; both fields of its source.
    ClaudeCode,
    /// `goose acp`: the model as the `GOOSE_MODEL` environment variable of
    /// the agent process (as the launcher's runtime table names it).
    Goose,
    /// Any other agent (including `codex-acp`): ACP `systemPrompt` when
    /// advertised, else the first prompt's leading text; `_meta.model`.
    Generic,
}

impl Adapter {
    /// The adapter of an agent command, by its file name.
    pub fn for_command(command: &str) -> Adapter {
        let base = std::path::Path::new(command)
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or(command);
        match base {
            "claude-code-acp" | "claude-agent-acp" => Adapter::ClaudeCode,
            "goose" => Adapter::Goose,
            _ => Adapter::Generic,
        }
    }

    /// True when `session/new` carries the system prompt for this agent.
    pub fn system_prompt_on_new_session(self, info: &AgentInfo) -> bool {
        self == Adapter::ClaudeCode || info.system_prompt
    }
}

/// What every slot spawns and how it runs turns.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub command: String,
    pub adapter: Adapter,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub system_prompt: Option<String>,
    pub model: Option<String>,
    pub session_title: Option<String>,
    pub mcp_command: Option<String>,
    pub idle_timeout: Duration,
    pub max_turn: Duration,
    pub cancel_grace: Duration,
    pub respawn_backoff: Duration,
    pub max_failures: u32,
}

impl AgentSpec {
    /// The bound on `initialize` and `session/new`: the idle timeout, capped
    /// by the hard turn cap.
    pub fn start_bound(&self) -> Duration {
        self.idle_timeout.min(self.max_turn)
    }
}

/// One dispatched turn.
#[derive(Debug, Clone)]
pub struct TurnJob {
    pub turn_id: u64,
    pub channel: String,
    pub text: String,
}

/// Commands to a slot.
#[derive(Debug)]
pub enum SlotCmd {
    Prompt(TurnJob),
    Cancel,
    Shutdown,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The agent answered; `text` is its final message.
    Completed { text: String, stop_reason: String },
    /// Cancelled (owner `!cancel`, idle timeout, hard cap, shutdown).
    Cancelled { why: &'static str },
    /// The agent failed or died; `error` is what the user may be told.
    Failed { error: Option<String> },
}

/// Slot reports to the pool.
#[derive(Debug)]
pub enum SlotEvent {
    Ready {
        slot: usize,
    },
    TurnDone {
        slot: usize,
        turn_id: u64,
        channel: String,
        outcome: TurnOutcome,
    },
    Died {
        slot: usize,
        failures: u32,
    },
    GaveUp {
        slot: usize,
    },
}

/// Spawns slot `slot`; returns its command sender.
pub fn spawn_slot(
    slot: usize,
    spec: Arc<AgentSpec>,
    procs: ProcessTable,
    events: mpsc::UnboundedSender<SlotEvent>,
) -> mpsc::UnboundedSender<SlotCmd> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(slot_main(slot, spec, procs, events, rx));
    tx
}

enum Once {
    Shutdown,
    Died { had_success: bool },
}

async fn slot_main(
    slot: usize,
    spec: Arc<AgentSpec>,
    procs: ProcessTable,
    events: mpsc::UnboundedSender<SlotEvent>,
    mut cmds: mpsc::UnboundedReceiver<SlotCmd>,
) {
    let mut failures = 0u32;
    loop {
        if procs.is_closed() {
            return;
        }
        match run_once(slot, &spec, &procs, &events, &mut cmds).await {
            Once::Shutdown => return,
            Once::Died { had_success } => {
                failures = if had_success { 1 } else { failures + 1 };
                tracing::warn!(slot, failures, "agent died");
                let _ = events.send(SlotEvent::Died { slot, failures });
                if failures >= spec.max_failures {
                    tracing::error!(slot, "agent slot keeps dying; giving up");
                    let _ = events.send(SlotEvent::GaveUp { slot });
                    return;
                }
                let wake = tokio::time::sleep(respawn_delay(spec.respawn_backoff, failures));
                tokio::pin!(wake);
                loop {
                    tokio::select! {
                        () = &mut wake => break,
                        c = cmds.recv() => match c {
                            None | Some(SlotCmd::Shutdown) => return,
                            Some(_) => {}
                        },
                    }
                }
            }
        }
    }
}

/// The turn currently streaming on this connection.
#[derive(Default)]
struct Sink {
    session: Option<SessionId>,
    text: String,
    last_update: Option<Instant>,
}

struct Shared {
    sink: Mutex<Sink>,
    updated: Notify,
}

fn choose_permission(req: &RequestPermissionRequest) -> RequestPermissionOutcome {
    [PermissionOptionKind::AllowOnce, PermissionOptionKind::RejectOnce]
        .iter()
        .find_map(|k| req.options.iter().find(|o| o.kind == *k))
        .map(|o| RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o.option_id.clone())))
        .unwrap_or(RequestPermissionOutcome::Cancelled)
}

async fn run_once(
    slot: usize,
    spec: &AgentSpec,
    procs: &ProcessTable,
    events: &mpsc::UnboundedSender<SlotEvent>,
    cmds: &mut mpsc::UnboundedReceiver<SlotCmd>,
) -> Once {
    let (program, args) =
        crate::echo_agent::program_for(&spec.command, &spec.args, || std::env::current_exe().ok());
    let mut command = tokio::process::Command::new(program);
    command
        .args(&args)
        .current_dir(&spec.cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .process_group(0)
        .kill_on_drop(false);
    // The agent and its tools never see the harness's own identity secrets
    // (the git helpers read NOSTR_PRIVATE_KEY, spec §Entrypoint mapping).
    for name in buzz_contract::env::HARNESS_ONLY_SECRETS {
        command.env_remove(name);
    }
    if let (Adapter::Goose, Some(m)) = (spec.adapter, &spec.model) {
        command.env("GOOSE_MODEL", m);
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(slot, command = %spec.command, error = %e, "cannot spawn the agent");
            return Once::Died { had_success: false };
        }
    };
    let Some(pid) = child.id().map(|p| p as i32) else {
        return Once::Died { had_success: false };
    };
    let exited_tx = procs.register(pid);
    if procs.is_closed() {
        // Shutdown began while spawning: this agent never gets work.
        signal_group(pid, libc::SIGKILL);
    }
    let mut exited = exited_tx.subscribe();
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        signal_group(pid, libc::SIGKILL);
        return Once::Died { had_success: false };
    };
    let table = procs.clone();
    tokio::spawn(async move {
        let _ = child.wait().await;
        table.remove(pid);
        let _ = exited_tx.send(true);
    });
    tracing::info!(slot, pid, "agent spawned");

    let shared = Arc::new(Shared {
        sink: Mutex::new(Sink::default()),
        updated: Notify::new(),
    });
    let on_update = shared.clone();
    let mut had_success = false;
    let mut in_flight: Option<(u64, String)> = None;
    let transport = ByteStreams::new(stdin.compat_write(), stdout.compat());
    let result = Client
        .v1()
        .name("buzz-acp")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                let mut sink = on_update.sink.lock().unwrap_or_else(|p| p.into_inner());
                if sink.session.as_ref() == Some(&n.session_id) {
                    sink.last_update = Some(Instant::now());
                    if let SessionUpdate::AgentMessageChunk(chunk) = &n.update
                        && let ContentBlock::Text(t) = &chunk.content
                    {
                        sink.text.push_str(&t.text);
                    }
                    drop(sink);
                    on_update.updated.notify_waiters();
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: RequestPermissionRequest, responder, _cx| {
                responder.respond(RequestPermissionResponse::new(choose_permission(&req)))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async |cx: ConnectionTo<Agent>| {
            let mut st = SlotState {
                exited: &mut exited,
                had_success: &mut had_success,
                in_flight: &mut in_flight,
            };
            serve(slot, spec, &cx, &shared, events, cmds, &mut st).await
        })
        .await;
    if let Some((turn_id, channel)) = in_flight.take() {
        // The connection ended under a turn: report it so its channel frees up.
        let _ = events.send(SlotEvent::TurnDone {
            slot,
            turn_id,
            channel,
            outcome: TurnOutcome::Failed { error: None },
        });
    }
    let once = match result {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(slot, error = %e, "agent connection ended");
            Once::Died { had_success }
        }
    };
    if matches!(once, Once::Died { .. }) {
        signal_group(pid, libc::SIGKILL);
    }
    once
}

/// What `initialize` told us about the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentInfo {
    /// `sessionCapabilities.systemPrompt` was advertised.
    pub system_prompt: bool,
    /// A short hint naming the advertised `authMethods`, if any.
    pub auth_hint: Option<String>,
}

impl AgentInfo {
    /// Reads the `initialize` response.
    pub fn from_initialize(r: &InitializeResponse) -> AgentInfo {
        let hints: Vec<String> = r
            .auth_methods
            .iter()
            .map(|m| match m {
                AuthMethod::Terminal(t) => {
                    let args = t.args.join(" ");
                    let run = if args.is_empty() {
                        t.name.clone()
                    } else {
                        format!("{} ({args})", t.name)
                    };
                    t.description
                        .clone()
                        .map_or(run.clone(), |d| format!("{run}: {d}"))
                }
                AuthMethod::Agent(a) => a
                    .description
                    .clone()
                    .map_or(a.name.clone(), |d| format!("{}: {d}", a.name)),
                _ => String::new(),
            })
            .filter(|h| !h.trim().is_empty())
            .collect();
        AgentInfo {
            system_prompt: r.agent_capabilities.session_capabilities.system_prompt.is_some(),
            auth_hint: (!hints.is_empty())
                .then(|| format!("the agent needs authentication: {}", hints.join("; "))),
        }
    }
}

/// Whether a request failed because the connection to the agent ended (its
/// stdout closed or the connection was torn down), as opposed to an error the
/// live agent answered with.
pub fn connection_lost(error: &agent_client_protocol::Error) -> bool {
    agent_client_protocol::is_incoming_transport_closed(error)
        || agent_client_protocol::is_connection_terminated(error)
}

/// The error text of a failed request, with the authentication hint.
pub fn failure_text(error: &agent_client_protocol::Error, info: &AgentInfo) -> String {
    let msg = error.message.trim();
    let msg = if msg.is_empty() { "the agent failed" } else { msg };
    match &info.auth_hint {
        Some(h) => format!("{msg} ({h})"),
        None => msg.to_string(),
    }
}

/// The first prompt of a session, led by the system prompt when the agent
/// could not take it on `session/new`.
pub fn prompt_blocks(lead: Option<&str>, text: &str) -> Vec<ContentBlock> {
    let mut v = Vec::new();
    if let Some(l) = lead {
        v.push(ContentBlock::Text(TextContent::new(l.to_string())));
    }
    v.push(ContentBlock::Text(TextContent::new(text.to_string())));
    v
}

/// The `session/new` request. The system prompt goes on it only when the
/// agent advertised `sessionCapabilities.systemPrompt`.
pub fn new_session_request(spec: &AgentSpec, info: &AgentInfo) -> NewSessionRequest {
    let mut req = NewSessionRequest::new(spec.cwd.clone());
    if let Some(cmd) = &spec.mcp_command {
        req = req.mcp_servers(vec![McpServer::Stdio(McpServerStdio::new("buzz", cmd.clone()))]);
    }
    let mut meta = serde_json::Map::new();
    match spec.adapter {
        Adapter::ClaudeCode => {
            if let Some(p) = &spec.system_prompt {
                meta.insert("systemPrompt".into(), serde_json::json!({ "append": p }));
            }
            if let Some(m) = &spec.model {
                meta.insert(
                    "claudeCode".into(),
                    serde_json::json!({ "options": { "model": m } }),
                );
            }
        }
        Adapter::Goose | Adapter::Generic => {
            if let Some(p) = spec.system_prompt.as_ref().filter(|_| info.system_prompt) {
                req = req.system_prompt(SystemPrompt::new(vec![ContentBlock::Text(TextContent::new(
                    p.clone(),
                ))]));
            }
        }
    }
    if let Some(m) = &spec.model {
        meta.insert("model".into(), serde_json::Value::String(m.clone()));
    }
    if let Some(t) = &spec.session_title {
        meta.insert("title".into(), serde_json::Value::String(t.clone()));
    }
    if !meta.is_empty() {
        req = req.meta(meta);
    }
    req
}

/// Per-connection bookkeeping that outlives [`serve`].
struct SlotState<'a> {
    exited: &'a mut watch::Receiver<bool>,
    had_success: &'a mut bool,
    in_flight: &'a mut Option<(u64, String)>,
}

async fn serve(
    slot: usize,
    spec: &AgentSpec,
    cx: &ConnectionTo<Agent>,
    shared: &Shared,
    events: &mpsc::UnboundedSender<SlotEvent>,
    cmds: &mut mpsc::UnboundedReceiver<SlotCmd>,
    st: &mut SlotState<'_>,
) -> Result<Once, agent_client_protocol::Error> {
    let SlotState {
        exited,
        had_success,
        in_flight,
    } = st;
    let init = InitializeRequest::new(ProtocolVersion::V1)
        .client_info(Implementation::new("buzz-acp", env!("CARGO_PKG_VERSION")));
    let start_bound = spec.start_bound();
    let info = tokio::select! {
        r = tokio::time::timeout(start_bound, cx.send_request(init).block_task()) => match r {
            Ok(r) => AgentInfo::from_initialize(&r?),
            Err(_) => {
                tracing::warn!(slot, bound_secs = start_bound.as_secs(), "agent did not answer initialize in time; killing it");
                return Ok(Once::Died { had_success: false });
            }
        },
        _ = exited.wait_for(|e| *e) => return Ok(Once::Died { had_success: false }),
        c = cmds.recv() => match c {
            None | Some(SlotCmd::Shutdown) => return Ok(Once::Shutdown),
            // Nothing is dispatched before Ready.
            Some(_) => return Ok(Once::Died { had_success: false }),
        },
    };
    let _ = events.send(SlotEvent::Ready { slot });
    let mut sessions: HashMap<String, SessionId> = HashMap::new();
    loop {
        let cmd = tokio::select! {
            c = cmds.recv() => c,
            _ = exited.wait_for(|e| *e) => return Ok(Once::Died { had_success: **had_success }),
        };
        let job = match cmd {
            None | Some(SlotCmd::Shutdown) => return Ok(Once::Shutdown),
            Some(SlotCmd::Cancel) => continue,
            Some(SlotCmd::Prompt(job)) => job,
        };
        **in_flight = Some((job.turn_id, job.channel.clone()));
        let (outcome, fate) = run_turn(spec, &info, cx, shared, cmds, exited, &mut sessions, &job).await;
        **in_flight = None;
        if matches!(outcome, TurnOutcome::Completed { .. }) {
            **had_success = true;
        }
        let _ = events.send(SlotEvent::TurnDone {
            slot,
            turn_id: job.turn_id,
            channel: job.channel.clone(),
            outcome,
        });
        match fate {
            Fate::Continue => {}
            Fate::Shutdown => return Ok(Once::Shutdown),
            Fate::Dead => {
                return Ok(Once::Died {
                    had_success: **had_success,
                });
            }
        }
    }
}

enum Fate {
    Continue,
    Shutdown,
    Dead,
}

#[allow(clippy::too_many_arguments)]
async fn run_turn(
    spec: &AgentSpec,
    info: &AgentInfo,
    cx: &ConnectionTo<Agent>,
    shared: &Shared,
    cmds: &mut mpsc::UnboundedReceiver<SlotCmd>,
    exited: &mut watch::Receiver<bool>,
    sessions: &mut HashMap<String, SessionId>,
    job: &TurnJob,
) -> (TurnOutcome, Fate) {
    let mut lead = None;
    let session = match sessions.get(&job.channel) {
        Some(s) => s.clone(),
        None => {
            let bound = spec.start_bound();
            // A hung session/new must not hold the slot: bounded, and the
            // owner's !cancel (or a shutdown) ends the wait too.
            let created = tokio::select! {
                r = tokio::time::timeout(bound, cx.send_request(new_session_request(spec, info)).block_task()) => match r {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::warn!(bound_secs = bound.as_secs(), "agent did not answer session/new in time; killing it");
                        return (TurnOutcome::Failed { error: Some("the agent did not start a session in time".into()) }, Fate::Dead);
                    }
                },
                _ = exited.wait_for(|e| *e) => return (TurnOutcome::Failed { error: None }, Fate::Dead),
                c = cmds.recv() => {
                    let why = match c {
                        Some(SlotCmd::Cancel) => "cancel",
                        _ => "shutdown",
                    };
                    tracing::info!(reason = why, "session/new abandoned; stopping the agent");
                    let fate = if why == "cancel" { Fate::Dead } else { Fate::Shutdown };
                    return (TurnOutcome::Cancelled { why }, fate);
                }
            };
            match created {
                Ok(r) => {
                    sessions.insert(job.channel.clone(), r.session_id.clone());
                    if !spec.adapter.system_prompt_on_new_session(info) {
                        lead = spec.system_prompt.as_deref();
                    }
                    r.session_id
                }
                Err(e) if connection_lost(&e) => {
                    tracing::warn!(error = %e, "session/new failed: the agent is gone");
                    return (TurnOutcome::Failed { error: None }, Fate::Dead);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "session/new failed");
                    return (
                        TurnOutcome::Failed {
                            error: Some(failure_text(&e, info)),
                        },
                        Fate::Continue,
                    );
                }
            }
        }
    };
    let started = Instant::now();
    {
        let mut sink = shared.sink.lock().unwrap_or_else(|p| p.into_inner());
        *sink = Sink {
            session: Some(session.clone()),
            text: String::new(),
            last_update: Some(started),
        };
    }
    let prompt = PromptRequest::new(session.clone(), prompt_blocks(lead, &job.text));
    let response = cx.send_request(prompt).block_task();
    tokio::pin!(response);
    let hard_deadline = started + spec.max_turn;
    let mut cancelled: Option<(&'static str, Instant)> = None;
    let mut shutdown_requested = false;
    let result = loop {
        let last = shared
            .sink
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_update
            .unwrap_or(started);
        let next_deadline = match cancelled {
            Some((_, grace_end)) => grace_end,
            None => (last + spec.idle_timeout).min(hard_deadline),
        };
        let mut cancel_now: Option<&'static str> = None;
        tokio::select! {
            r = &mut response => break Some(r),
            _ = exited.wait_for(|e| *e) => break None,
            () = shared.updated.notified() => continue,
            _ = tokio::time::sleep_until(next_deadline.into()) => {
                if cancelled.is_some() {
                    tracing::warn!("agent ignored session/cancel; killing it");
                    break None;
                }
                // Re-read the last update: a wake-up may have been missed.
                let now = Instant::now();
                let last = shared.sink.lock().unwrap_or_else(|p| p.into_inner()).last_update.unwrap_or(started);
                if now >= hard_deadline {
                    cancel_now = Some("max turn duration");
                } else if now >= last + spec.idle_timeout {
                    cancel_now = Some("idle timeout");
                }
            }
            c = cmds.recv() => match c {
                Some(SlotCmd::Cancel) => cancel_now = Some("cancel"),
                None | Some(SlotCmd::Shutdown) => {
                    shutdown_requested = true;
                    cancel_now = Some("shutdown");
                }
                Some(SlotCmd::Prompt(_)) => tracing::error!("prompt dispatched to a busy slot; dropped"),
            },
        }
        if let Some(why) = cancel_now
            && cancelled.is_none()
        {
            tracing::info!(reason = why, "cancelling turn");
            let _ = cx.send_notification(CancelNotification::new(session.clone()));
            cancelled = Some((why, Instant::now() + spec.cancel_grace));
        }
    };
    let text = {
        let mut sink = shared.sink.lock().unwrap_or_else(|p| p.into_inner());
        let text = std::mem::take(&mut sink.text);
        *sink = Sink::default();
        text
    };
    let fate_after = |alive: bool| match (alive, shutdown_requested) {
        (false, _) => Fate::Dead,
        (true, true) => Fate::Shutdown,
        (true, false) => Fate::Continue,
    };
    match result {
        None => (
            cancelled.map_or(TurnOutcome::Failed { error: None }, |(why, _)| {
                TurnOutcome::Cancelled { why }
            }),
            if shutdown_requested {
                Fate::Shutdown
            } else {
                Fate::Dead
            },
        ),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "session/prompt failed");
            // A closed transport is the agent's death even before its exit is
            // reaped: a crash is not an answer the asker should be shown.
            let alive = !*exited.borrow() && !connection_lost(&e);
            let error = (cancelled.is_none() && alive).then(|| failure_text(&e, info));
            (TurnOutcome::Failed { error }, fate_after(alive))
        }
        Some(Ok(r)) => {
            let outcome = if cancelled.is_some() || r.stop_reason == StopReason::Cancelled {
                TurnOutcome::Cancelled {
                    why: cancelled.map_or("agent", |(w, _)| w),
                }
            } else {
                TurnOutcome::Completed {
                    text,
                    stop_reason: format!("{:?}", r.stop_reason),
                }
            };
            (outcome, fate_after(true))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{PermissionOption, ToolCallUpdate, ToolCallUpdateFields};

    fn req(kinds: &[(&str, PermissionOptionKind)]) -> RequestPermissionRequest {
        let options = kinds
            .iter()
            .map(|(id, k)| PermissionOption::new(id.to_string(), *id, *k))
            .collect();
        RequestPermissionRequest::new(
            "s",
            ToolCallUpdate::new("t", ToolCallUpdateFields::new()),
            options,
        )
    }

    fn selected(o: RequestPermissionOutcome) -> Option<String> {
        match o {
            RequestPermissionOutcome::Selected(s) => Some(s.option_id.0.to_string()),
            _ => None,
        }
    }

    fn spec(command: &str) -> AgentSpec {
        AgentSpec {
            command: command.into(),
            adapter: Adapter::for_command(command),
            args: vec![],
            cwd: PathBuf::from("/w"),
            system_prompt: Some("be brief".into()),
            model: Some("m1".into()),
            session_title: None,
            mcp_command: None,
            idle_timeout: Duration::from_secs(1),
            max_turn: Duration::from_secs(2),
            cancel_grace: Duration::from_secs(1),
            respawn_backoff: Duration::from_secs(1),
            max_failures: 1,
        }
    }

    #[test]
    fn adapters_by_command_name() {
        assert_eq!(
            Adapter::for_command("/opt/bin/claude-code-acp"),
            Adapter::ClaudeCode
        );
        assert_eq!(Adapter::for_command("claude-agent-acp"), Adapter::ClaudeCode);
        assert_eq!(Adapter::for_command("goose"), Adapter::Goose);
        assert_eq!(Adapter::for_command("codex-acp"), Adapter::Generic);
        assert_eq!(Adapter::for_command("my-agent"), Adapter::Generic);
    }

    #[test]
    fn session_new_carries_each_agents_forms() {
        let plain = AgentInfo::default();
        let advertised = AgentInfo {
            system_prompt: true,
            auth_hint: None,
        };
        let claude = serde_json::to_value(new_session_request(&spec("claude-code-acp"), &plain)).unwrap();
        assert_eq!(
            claude["_meta"]["systemPrompt"],
            serde_json::json!({"append": "be brief"})
        );
        assert_eq!(claude["_meta"]["claudeCode"]["options"]["model"], "m1");
        assert!(claude.get("systemPrompt").is_none());
        let generic = serde_json::to_value(new_session_request(&spec("x"), &plain)).unwrap();
        assert!(generic.get("systemPrompt").is_none(), "not advertised: not sent");
        assert_eq!(generic["_meta"]["model"], "m1");
        let generic = serde_json::to_value(new_session_request(&spec("x"), &advertised)).unwrap();
        assert!(generic.get("systemPrompt").is_some(), "advertised: sent");
        assert!(Adapter::ClaudeCode.system_prompt_on_new_session(&plain));
        assert!(!Adapter::Generic.system_prompt_on_new_session(&plain));
    }

    #[test]
    fn failure_text_carries_the_auth_hint() {
        let info = AgentInfo {
            system_prompt: false,
            auth_hint: Some("the agent needs authentication: run `claude /login`".into()),
        };
        let e = agent_client_protocol::Error::auth_required();
        assert_eq!(
            failure_text(&e, &info),
            format!(
                "{} (the agent needs authentication: run `claude /login`)",
                e.message
            )
        );
        assert_eq!(failure_text(&e, &AgentInfo::default()), e.message);
    }

    #[test]
    fn permission_prefers_allow_once_then_reject_once() {
        use PermissionOptionKind::*;
        let r = req(&[("a", AllowAlways), ("r", RejectOnce), ("o", AllowOnce)]);
        assert_eq!(selected(choose_permission(&r)), Some("o".into()));
        let r = req(&[("a", AllowAlways), ("r", RejectOnce)]);
        assert_eq!(
            selected(choose_permission(&r)),
            Some("r".into()),
            "never allow_always"
        );
        let r = req(&[("a", AllowAlways)]);
        assert_eq!(selected(choose_permission(&r)), None);
    }
}
