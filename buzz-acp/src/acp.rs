//! ACP agent slots (wire-facts §6; spec §Stop and Delete): each slot spawns
//! `BUZZ_ACP_AGENT_COMMAND` in its own process group (stdin/stdout piped,
//! stderr inherited) and drives it as an ACP client through the official
//! `agent-client-protocol` crate: `initialize`, one `session/new` per channel,
//! `session/prompt` per turn, `session/cancel` on idle timeout, hard cap or
//! owner `!cancel`. `session/update` resets the idle deadline; permission
//! requests are answered by the permission policy (`acp/handlers.rs`). After
//! `session/new` the record's model and permission mode are applied in the
//! form the agent advertises (`acp/setup.rs`). The command is a name
//! resolved on `PATH`; a known agent gets what it needs to run unattended
//! (`acp/launch.rs`), and a command that is not installed gives up at once
//! with the install hint. So does an agent whose first start in this run
//! exits before it answers `initialize` (`/bin/false`, a wrong command, a
//! CLI that is not an ACP agent): the reason names the command and its exit
//! status, and the askers hear it at once rather than after the respawn
//! backoff (issue 24 item 1). An agent that was ready once and then
//! crashes respawns with backoff; a slot that keeps dying gives up.
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
//!
//! **Whose turn it is** (issue 30 item 2; review-9b395e0 finding 2). A
//! turn carries its [`Asker`]. The owner's turns get the agent's permission
//! policy; anyone else's (an allowlisted author, anyone under `--respond-to
//! anyone`) get the others' policy, `reject` unless the record says
//! otherwise ([`AgentSpec::policy_for`]). A policy answers only the tools
//! that ask, and some read tools never ask (review afa2bf1 finding 1), so
//! the others' session is also narrowed by its mode and its tools
//! ([`AgentSpec::mode_for`], [`AgentSpec::tools_for`]):
//!
//! | whose turn, others' policy | mode | tools (where the agent takes a list) |
//! |---|---|---|
//! | the owner's, any | the record's | all |
//! | another author's, `allow` | the record's | all |
//! | another author's, `reject` | the preset's most restrictive | none |
//! | another author's, `ask-owner` | the agent's default (its questions reach the owner) | only those that ask |
//!
//! For the same reason the owner and the others never share an ACP
//! session: sessions are per channel *and* asker class, so nothing granted
//! in one (an "always" the owner gave, a mode) carries into the other. The
//! agents' and the harness's private state (transcripts, receipts) lie
//! under `HOME`, which a deployed session's working directory does not
//! contain (`docs/agents.md`, "What a stranger's turn can reach").
//!
//! This file is the slot (spawn, respawn, the connection, `initialize`);
//! `acp/session.rs` gets a turn its session (kept, brought back from its
//! receipt, or new; issue 32), `acp/turn.rs` runs one turn, `acp/forms.rs` holds the pure forms each
//! agent reads. A turn's streamed text is bounded at the reply bound as it
//! arrives ([`crate::events::TurnText`]; review b30b1a0 #15).

mod forms;
mod handlers;
pub mod launch;
pub mod permission;
mod session;
pub mod setup;
mod turn;

use crate::backoff::respawn_delay;
use crate::events::TurnText;
pub use crate::inbound::Asker;
use crate::procs::{ProcessTable, signal_group};
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    Implementation, InitializeRequest, RequestPermissionRequest, SessionId, SessionNotification,
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use buzz_contract::agents::PermissionPolicy;
pub use forms::{Adapter, AgentInfo, connection_lost, failure_text, new_session_request, prompt_blocks};
pub use handlers::PermissionAsk;

use session::{Fate, Sessions};
pub use session::{HISTORY_WAIT, HistorySource, MAX_SESSIONS, Memory};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use turn::run_turn;
pub use turn::{IDLE_TIMEOUT, MAX_TURN};

/// What every slot spawns and how it runs turns.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub command: String,
    pub adapter: Adapter,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub system_prompt: Option<String>,
    pub model: Option<String>,
    /// The session mode to apply (`session/set_mode`), if any.
    pub permission_mode: Option<String>,
    /// The preset's most restrictive mode: a non-owner's session's under
    /// the `reject` policy (`buzz_contract::agents::Preset::strictest_mode`).
    pub strictest_mode: Option<String>,
    /// The policy of the owner's turns.
    pub permission_policy: PermissionPolicy,
    /// The policy of anyone else's turns.
    pub permission_policy_others: PermissionPolicy,
    pub permission_timeout: Duration,
    /// Env set on the agent process ([`launch::extras`], settings paths).
    pub env: Vec<(String, String)>,
    pub session_title: Option<String>,
    pub mcp_command: Option<String>,
    pub idle_timeout: Duration,
    pub max_turn: Duration,
    pub cancel_grace: Duration,
    /// SIGTERM → SIGKILL of an agent ended for a doze (the stop's grace).
    pub kill_grace: Duration,
    pub respawn_backoff: Duration,
    pub max_failures: u32,
    /// Where conversations are remembered across restarts (issue 32);
    /// `None` keeps them in this process only.
    pub memory: Option<Memory>,
    /// Where the agent's pipes are mirrored (`BUZZ_ACP_RELAY_OBSERVER`;
    /// issue 34), if anywhere.
    pub observer: Option<crate::observer::Observer>,
}

impl AgentSpec {
    /// The bound on `initialize` and `session/new`: the idle timeout, capped
    /// by the hard turn cap.
    pub fn start_bound(&self) -> Duration {
        self.idle_timeout.min(self.max_turn)
    }

    /// The permission policy of a turn asked by `asker`.
    pub fn policy_for(&self, asker: &Asker) -> PermissionPolicy {
        match asker {
            Asker::Owner => self.permission_policy,
            Asker::Other { .. } => self.permission_policy_others,
        }
    }

    /// The permission mode a session of `asker` gets (one arm per row of
    /// the module doc's table): the owner's always; another author's only
    /// when the others' policy is `allow` (a mode may skip the questions the
    /// policy would answer); under `reject` the preset's most restrictive
    /// mode; under `ask-owner` the agent's default, whose questions reach
    /// the owner.
    pub fn mode_for(&self, asker: &Asker) -> Option<&str> {
        match (asker, self.permission_policy_others) {
            (Asker::Owner, _) | (Asker::Other { .. }, PermissionPolicy::Allow) => {
                self.permission_mode.as_deref()
            }
            (Asker::Other { .. }, PermissionPolicy::Reject) => self.strictest_mode.as_deref(),
            (Asker::Other { .. }, PermissionPolicy::AskOwner) => None,
        }
    }

    /// The tools a session of `asker` is offered, where the agent takes a
    /// list ([`Tools`]).
    pub fn tools_for(&self, asker: &Asker) -> Tools {
        match (asker, self.permission_policy_others) {
            (Asker::Owner, _) | (Asker::Other { .. }, PermissionPolicy::Allow) => Tools::All,
            (Asker::Other { .. }, PermissionPolicy::Reject) => Tools::None,
            (Asker::Other { .. }, PermissionPolicy::AskOwner) => Tools::Asking,
        }
    }
}

/// The tools a session is offered, for an agent that takes a list in
/// `session/new` (claude-agent-acp's `_meta.claudeCode.options.tools`).
/// Claude Code's read tools run without a question in every mode (measured
/// against 0.23.1: `default`, `plan` and `dontAsk` all read any path), so a
/// mode alone cannot keep a stranger's turn from reading the owner's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tools {
    /// The agent's own set.
    All,
    /// Only the tools that ask before they run: each use is the owner's
    /// to answer (`ask-owner`).
    Asking,
    /// None at all (`reject`): the model is offered no tool.
    None,
}

/// One dispatched turn.
#[derive(Debug, Clone)]
pub struct TurnJob {
    pub turn_id: u64,
    pub channel: String,
    pub text: String,
    /// Who asked: decides the permission policy and the session.
    pub asker: Asker,
}

/// Commands to a slot.
#[derive(Debug)]
pub enum SlotCmd {
    Prompt(TurnJob),
    Cancel,
    /// A graceful stop began: a running turn that has been silent for
    /// `quiet` (now or later) is cancelled at once and reported
    /// [`SlotEvent::Stalled`]; a progressing one may finish.
    Drain {
        quiet: Duration,
    },
    Shutdown,
    /// The harness dozes (issue 50): an idle slot ends its agent as a stop
    /// does (SIGTERM to its process group, SIGKILL after the kill grace),
    /// keeps its receipts, reports [`SlotEvent::Dozed`] and ends; the next
    /// turn spawns it again and brings its conversations back.
    Doze,
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
        /// What the turn reported of its usage (issue 34).
        report: Box<crate::metrics::TurnReport>,
    },
    Died {
        slot: usize,
        failures: u32,
    },
    /// The slot stopped trying; `reason` is what the askers may be told.
    GaveUp {
        slot: usize,
        reason: Option<String>,
    },
    /// Draining, the running turn made no progress for the quiet bound and
    /// was cancelled: the stop need not wait for it.
    Stalled {
        slot: usize,
    },
    /// The agent asks permission and the policy is `ask-owner`.
    Ask {
        slot: usize,
        ask: PermissionAsk,
    },
    /// The slot's agent was ended for a doze ([`SlotCmd::Doze`]); the slot
    /// task is gone.
    Dozed {
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
    /// Ended for a doze: the agent's process group is gone.
    Doze,
    Died {
        had_success: bool,
    },
    /// Nothing to respawn: the command is not installed, or its first
    /// start in this run exited before `initialize`.
    Missing(String),
    /// The agent exited before it answered `initialize` ([`launch::exit_words`]).
    ExitedBeforeInit(String),
}

/// How long a connection that broke before `initialize` was answered waits
/// for the agent's exit to be seen (its pipe breaks first).
const EXIT_SETTLE: Duration = Duration::from_millis(500);

async fn slot_main(
    slot: usize,
    spec: Arc<AgentSpec>,
    procs: ProcessTable,
    events: mpsc::UnboundedSender<SlotEvent>,
    mut cmds: mpsc::UnboundedReceiver<SlotCmd>,
) {
    let mut failures = 0u32;
    // Whether this slot's agent ever answered `initialize` in this run.
    let mut ever_ready = false;
    loop {
        if procs.is_closed() {
            return;
        }
        let once = match run_once(slot, &spec, &procs, &events, &mut cmds, &mut ever_ready).await {
            // A first start that exits is not a crash to retry: the same
            // command with the same args fails the same way (a wrong
            // command, a missing key, not an ACP agent). The askers are
            // told at once instead of after the respawn backoff.
            Once::ExitedBeforeInit(how) if !ever_ready => {
                Once::Missing(launch::exited_text(&spec.command, &how))
            }
            Once::ExitedBeforeInit(_) => Once::Died { had_success: false },
            o => o,
        };
        match once {
            Once::Shutdown => return,
            Once::Doze => {
                let _ = events.send(SlotEvent::Dozed { slot });
                return;
            }
            Once::Missing(reason) | Once::ExitedBeforeInit(reason) => {
                tracing::error!(slot, "{reason}");
                let _ = events.send(SlotEvent::GaveUp {
                    slot,
                    reason: Some(reason),
                });
                return;
            }
            Once::Died { had_success } => {
                failures = if had_success { 1 } else { failures + 1 };
                tracing::warn!(slot, failures, "agent died");
                let _ = events.send(SlotEvent::Died { slot, failures });
                if failures >= spec.max_failures {
                    tracing::error!(slot, "agent slot keeps dying; giving up");
                    let _ = events.send(SlotEvent::GaveUp { slot, reason: None });
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

/// The turn currently streaming on this connection. Its text is bounded at
/// the reply bound as it streams (review b30b1a0 #15).
#[derive(Default)]
struct Sink {
    session: Option<SessionId>,
    /// The running turn (where an `ask-owner` question goes, whose policy).
    turn: Option<TurnJob>,
    /// Tool calls started and not yet finished (`tool_call` without a final
    /// status): a turn running a tool is progressing (review-9b395e0 #7).
    open_tools: std::collections::HashSet<String>,
    text: TurnText,
    last_update: Option<Instant>,
    /// The message id of the last text chunk, when the agent sends ids.
    message_id: Option<String>,
    /// Open `ask-owner` questions: the idle clock stands still meanwhile.
    asking: u32,
    /// The turn's last `usage_update` (issue 34).
    context: Option<crate::metrics::Context>,
}

struct Shared {
    sink: Mutex<Sink>,
    updated: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Sink> {
        self.sink.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn run_once(
    slot: usize,
    spec: &AgentSpec,
    procs: &ProcessTable,
    events: &mpsc::UnboundedSender<SlotEvent>,
    cmds: &mut mpsc::UnboundedReceiver<SlotCmd>,
    ever_ready: &mut bool,
) -> Once {
    let (program, args) =
        crate::echo_agent::program_for(&spec.command, &spec.args, || std::env::current_exe().ok());
    let path = std::env::var("PATH").ok();
    let Some(program) = launch::resolve(&program.to_string_lossy(), path.as_deref()) else {
        return Once::Missing(launch::missing_text(&spec.command));
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(&args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
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
    let (mut child, pid, exited_tx) = match procs.spawn_registered(|| command.spawn()) {
        Ok(spawned) => spawned,
        Err(e) => {
            tracing::error!(slot, command = %spec.command, error = %e, "cannot spawn the agent");
            return Once::Died { had_success: false };
        }
    };
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
    let status: Arc<std::sync::OnceLock<std::process::ExitStatus>> = Arc::default();
    let status_w = status.clone();
    tokio::spawn(async move {
        if let Ok(s) = child.wait().await {
            let _ = status_w.set(s);
        }
        table.remove(pid);
        let _ = exited_tx.send(true);
    });
    let spawned = Instant::now();
    tracing::info!(slot, pid, "agent spawned");

    let shared = Arc::new(Shared {
        sink: Mutex::new(Sink::default()),
        updated: Notify::new(),
    });
    let on_update = shared.clone();
    let on_ask = shared.clone();
    let ask_events = events.clone();
    let mut had_success = false;
    let mut ready = false;
    let mut in_flight: Option<InFlight> = None;
    let seen = shared.clone();
    let ctx: crate::observer::CtxFn = Arc::new(move || {
        let sink = seen.lock();
        crate::observer::TurnCtx {
            channel: sink.turn.as_ref().map(|t| t.channel.clone()),
            turn_id: sink.turn.as_ref().map(|t| t.turn_id.to_string()),
        }
    });
    let obs = spec.observer.as_ref();
    let transport = ByteStreams::new(
        crate::observer::tee_write(obs, slot, stdin, &ctx).compat_write(),
        crate::observer::tee_read(obs, slot, stdout, &ctx).compat(),
    );
    let result = Client
        .v1()
        .name("buzz-acp")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                handlers::on_update(&on_update, &n);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: RequestPermissionRequest, responder, cx| {
                handlers::on_permission(slot, spec, &on_ask, &ask_events, req, responder, &cx)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async |cx: ConnectionTo<Agent>| {
            let mut st = SlotState {
                exited: &mut exited,
                had_success: &mut had_success,
                ready: &mut ready,
                in_flight: &mut in_flight,
                spawned,
            };
            serve(slot, spec, &cx, &shared, events, cmds, &mut st).await
        })
        .await;
    if let Some(f) = in_flight.take() {
        // The connection ended under a turn: report it so its channel frees up.
        let report = crate::metrics::TurnReport {
            turn_id: f.turn_id,
            channel: f.channel.clone(),
            session: None,
            fresh_session: false,
            started: f.started,
            ended: std::time::SystemTime::now(),
            tokens: None,
            context: None,
            end: crate::metrics::End::Failed,
        };
        let _ = events.send(SlotEvent::TurnDone {
            slot,
            turn_id: f.turn_id,
            channel: f.channel,
            outcome: TurnOutcome::Failed { error: None },
            report: Box::new(report),
        });
    }
    let broke = result.is_err();
    let mut once = match result {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(slot, error = %e, "agent connection ended");
            Once::Died { had_success }
        }
    };
    *ever_ready |= ready;
    // Before `initialize` was answered, a broken connection or an exit is
    // told apart from a hang (killed below) by the agent's exit status.
    if !ready && matches!(once, Once::Died { .. }) && (broke || *exited.borrow()) {
        let _ = tokio::time::timeout(EXIT_SETTLE, exited.wait_for(|e| *e)).await;
        if let Some(s) = status.get() {
            use std::os::unix::process::ExitStatusExt;
            tracing::warn!(slot, status = %s, "agent exited before answering initialize");
            once = Once::ExitedBeforeInit(launch::exit_words(s.code(), s.signal()));
        }
    }
    if matches!(once, Once::Died { .. } | Once::ExitedBeforeInit(_)) {
        signal_group(pid, libc::SIGKILL);
    }
    if matches!(once, Once::Doze) {
        end_for_doze(slot, pid, &mut exited, spec.kill_grace).await;
    }
    once
}

/// Ends a dozing slot's agent the way a stop does: SIGTERM to its process
/// group, then SIGKILL once `grace` passed without its exit.
async fn end_for_doze(slot: usize, pid: i32, exited: &mut watch::Receiver<bool>, grace: Duration) {
    signal_group(pid, libc::SIGTERM);
    if tokio::time::timeout(grace, exited.wait_for(|e| *e))
        .await
        .is_err()
    {
        tracing::warn!(slot, pid, "the agent outlived its kill grace at the doze; killed");
        signal_group(pid, libc::SIGKILL);
        let _ = exited.wait_for(|e| *e).await;
    }
    tracing::info!(slot, pid, "agent ended for the doze");
}

/// The turn a connection is running.
struct InFlight {
    turn_id: u64,
    channel: String,
    started: std::time::SystemTime,
}

/// Per-connection bookkeeping that outlives [`serve`].
struct SlotState<'a> {
    exited: &'a mut watch::Receiver<bool>,
    had_success: &'a mut bool,
    /// Set once the agent answered `initialize`.
    ready: &'a mut bool,
    in_flight: &'a mut Option<InFlight>,
    spawned: Instant,
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
        ready,
        in_flight,
        ..
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
            Some(SlotCmd::Doze) => return Ok(Once::Doze),
            // Nothing is dispatched before Ready.
            Some(_) => return Ok(Once::Died { had_success: false }),
        },
    };
    tracing::info!(
        slot,
        since_spawn_ms = st.spawned.elapsed().as_millis() as u64,
        "agent initialized"
    );
    **ready = true;
    let _ = events.send(SlotEvent::Ready { slot });
    let mut sessions = Sessions::default();
    loop {
        let cmd = tokio::select! {
            c = cmds.recv() => c,
            _ = exited.wait_for(|e| *e) => return Ok(Once::Died { had_success: **had_success }),
        };
        let job = match cmd {
            None | Some(SlotCmd::Shutdown) => return Ok(Once::Shutdown),
            Some(SlotCmd::Doze) => return Ok(Once::Doze),
            Some(SlotCmd::Cancel | SlotCmd::Drain { .. }) => continue,
            Some(SlotCmd::Prompt(job)) => job,
        };
        **in_flight = Some(InFlight {
            turn_id: job.turn_id,
            channel: job.channel.clone(),
            started: std::time::SystemTime::now(),
        });
        let stalled = || {
            let _ = events.send(SlotEvent::Stalled { slot });
        };
        let (outcome, fate, report) = run_turn(
            spec,
            &info,
            cx,
            shared,
            cmds,
            exited,
            &mut sessions,
            &job,
            &stalled,
        )
        .await;
        **in_flight = None;
        if matches!(outcome, TurnOutcome::Completed { .. }) {
            **had_success = true;
        }
        let _ = events.send(SlotEvent::TurnDone {
            slot,
            turn_id: job.turn_id,
            channel: job.channel.clone(),
            outcome,
            report: Box::new(report),
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
