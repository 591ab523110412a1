//! The one error type of the launcher's operations: single actionable
//! sentences, no secret inside. Each front end (the CLI, the Start page,
//! `demo`) formats it its own way.

use crate::discovery::DiscoveryError;
use crate::gate::GateError;
use crate::local::Running;
use crate::lock::LockError;
use crate::payload::ConfigError;
use crate::relay::RelayError;
use crate::resolve::ResolveError;
use crate::restart;
use crate::store::StoreError;
use std::path::PathBuf;
use std::time::Duration;

/// A command failure. Single actionable sentences; no secret inside.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Two desktops' edits of one agent (issue 52 item 4): why a look or a
    /// pick failed.
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error("{0}")]
    Gate(String),
    /// A Start found the run the last stop saw go offline still reported
    /// running after [`restart::SETTLE`].
    #[error("{}", restart::still_reported(.name, .generation))]
    StoppedRunStillReported { name: String, generation: String },
    #[error(transparent)]
    GateRefused(#[from] GateError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(
        "agent `{}` has a live local harness (pid {}); deleting it would orphan the running agent — stop it first, or pass --force-remote-delete",
        .0.name, .0.pid
    )]
    LiveLocal(Running),
    #[error("a start of agent `{0}` is in progress; wait for it to end")]
    Busy(String),
    #[error("the wake of agent `{0}` did not finish: {1}")]
    WakeTask(String, String),
    #[error(transparent)]
    Relay(#[from] RelayError),
    #[error(transparent)]
    Local(#[from] crate::local::LocalError),
    #[error(transparent)]
    MissingAgent(#[from] crate::presets::MissingBinary),
    #[error("agent `{0}` uses the local backend; `start` spawns the harness instead of deploying")]
    NotProvider(String),
    #[error("agent `{0}` uses a provider backend; it cannot be started as a local process")]
    NotLocal(String),
    #[error(
        "agent `{0}` is deployed (agent_id {1}); deleting it would orphan the remote agent — stop it first, or pass --force-remote-delete"
    )]
    Deployed(String, String),
    #[error(
        "agent `{name}` is deployed (agent_id {agent_id}) and {reason}; deleting its record would orphan the remote agent — pass --force-remote-delete to delete it anyway"
    )]
    NoUndeploy {
        name: String,
        agent_id: String,
        reason: String,
    },
    #[error("agent `{0}` uses the local backend; there is nothing to undeploy (`stop` ends its harness)")]
    UndeployLocal(String),
    #[error(
        "agent `{name}` did not report presence offline within {wait:?}; it may not be running or its relay may be unreachable"
    )]
    NotOffline { name: String, wait: Duration },
    /// Known not to run, before any wait (the sentence says why and what to do).
    #[error("{0}")]
    NotRunning(String),
    /// Asleep with no waker to wake it: the message was sent all the same.
    #[error(
        "agent `{0}` is asleep and no waker runs, so nothing wakes it now; your message is on its relay, and a waker started within the hour wakes the agent for it: run `buzz-launcher serve` (or keep `buzz-launcher ui` open), or start it with `buzz-launcher start {0}`"
    )]
    AsleepNoWaker(String),
    #[error(
        "nothing to send: the message for `{0}` is empty; give its text, e.g. `buzz-launcher chat {0} \"hello\"`"
    )]
    EmptyChat(String),
    #[error("the harness of `{name}` {how}; its log: {}", .log.display())]
    HarnessExited { name: String, how: String, log: PathBuf },
    #[error(
        "{name} did not report presence online within {}s; its harness (pid {pid}) still runs{lines}; its log: {}",
        .wait.as_secs(), .log.display()
    )]
    NotOnline {
        name: String,
        wait: Duration,
        pid: u32,
        lines: String,
        log: PathBuf,
    },
    #[error(
        "agent command `{command}` {what}; install it, or give its full path with `buzz-launcher agent edit {name} --command /path/to/{command}`"
    )]
    CommandMissing {
        name: String,
        command: String,
        what: &'static str,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(String),
}
