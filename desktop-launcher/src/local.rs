//! The local backend: the harness `buzz-acp` as a child process, with its
//! environment from the same resolver the deploy path uses (spec §Launch
//! data "The governing invariant"; §Launchers layer 1).
//!
//! At most one live local harness per agent key (spec I4, local scope):
//! [`running`] is the rule `start` and `delete` consult. A harness runs when
//! the identity recorded at its spawn (`deploy/<name>.json`
//! `local_process`, see [`crate::procid`]) still verifies: a bare pid, a
//! dead one or a reused one is not a running harness. The Start page also
//! counts fresh presence from the recorded run (it holds a presence
//! tracker; the CLI does not wait a republish interval to find out).

use crate::limits::HARNESS_BIN_ENV;
use buzz_contract::env as names;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A local spawn failure.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    // The OS error is named `cause`, not `source`: it is in the sentence
    // already, and a source would be printed a second time after it.
    #[error("cannot open the harness log {path}: {cause}")]
    Log { path: PathBuf, cause: std::io::Error },
    #[error("cannot start the harness {program}: {cause}; install buzz-acp on PATH or set BUZZ_ACP_BIN")]
    Spawn { program: PathBuf, cause: std::io::Error },
}

/// A live local harness of one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    pub name: String,
    pub pid: u32,
    /// The launch generation it was given.
    pub run: Option<String>,
}

impl std::fmt::Display for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.run {
            Some(r) => write!(f, "{} is already running (pid {}, run {r})", self.name, self.pid),
            None => write!(f, "{} is already running (pid {})", self.name, self.pid),
        }
    }
}

/// The rule over recorded bookkeeping: the harness of `name` runs when its
/// recorded identity verifies now.
pub fn running_from(name: &str, st: &crate::record::DeployState) -> Option<Running> {
    let id = st.local_process.as_ref().filter(|id| id.is_alive())?;
    Some(Running {
        name: name.to_string(),
        pid: id.pid,
        run: st.generation.clone(),
    })
}

/// The live local harness of `name`, if any.
pub fn running(store: &crate::store::Store, name: &str) -> Result<Option<Running>, crate::store::StoreError> {
    Ok(running_from(name, &store.deploy_state(name)?))
}

pub use crate::discovery::{find_harness, on_path};

/// The harness program: `$BUZZ_ACP_BIN`, else `buzz-acp` next to this
/// executable, else on PATH — the lookup `demo` uses
/// ([`find_harness`]; issue 24 item 5), else the bare name
/// (the spawn error then says to install it).
pub fn harness_program() -> PathBuf {
    if let Some(p) = std::env::var_os(HARNESS_BIN_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| find_harness(&exe))
        .unwrap_or_else(|| PathBuf::from("buzz-acp"))
}

/// A fresh launch generation: 32 lowercase hex (wire-facts §3 `run`).
pub fn new_nonce() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// Spawns the harness in its own process group with `env` layered over the
/// launcher's environment, minus every reserved and launcher-managed key
/// inherited from it (so an ambient `BUZZ_ACP_NO_PRESENCE` cannot leak in).
/// Output goes to `log`, which starts afresh for the run `run` (the
/// previous run's log is kept beside it: [`crate::child_watch::open_run_log`]).
/// The caller decides whether to wait.
pub fn spawn(
    program: &Path,
    env: &BTreeMap<String, String>,
    workdir: &Path,
    log: &Path,
    run: &str,
) -> Result<Child, LocalError> {
    let log_err = |e| LocalError::Log {
        path: log.to_path_buf(),
        cause: e,
    };
    let out = crate::child_watch::open_run_log(log, run).map_err(log_err)?;
    let err = out.try_clone().map_err(log_err)?;
    let mut cmd = Command::new(program);
    for k in names::RESERVED_ENV_KEYS {
        cmd.env_remove(k);
    }
    for k in [names::START_NONCE, names::MANAGED_AGENT, names::SETUP_PAYLOAD] {
        cmd.env_remove(k);
    }
    cmd.envs(env)
        .current_dir(workdir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    cmd.spawn().map_err(|cause| LocalError::Spawn {
        program: program.to_path_buf(),
        cause,
    })
}
