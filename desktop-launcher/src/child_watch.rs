//! A local harness's run, watched (issue 24 item 2 "`start` watches its
//! child"; item 1 "the Start page shows the reason"). The shell around
//! [`crate::harness_exit`]:
//!
//! - [`open_run_log`]: each spawn starts the agent's log afresh with the
//!   run's header; the previous run's log is kept beside it as
//!   `<name>.log.1` (one run back, so the logs stay bounded).
//! - [`ChildWatch`]: a thread that reaps the harness and keeps its exit
//!   status, so a `start` waiting for presence `online` ends the moment
//!   the harness exits, and a harness that fails later is recorded
//!   ([`record_exit`]: the deploy state's `last_error`, which the Start
//!   page shows) by whoever spawned it while that process lives.
//! - [`last_run`]: how the recorded run of a harness that no longer runs
//!   ended, read from its log (the only record once the launcher that
//!   spawned it is gone).

use crate::harness_exit;
use crate::record::DeployState;
use crate::store::Store;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::{Arc, OnceLock};

/// The most of a log's tail that is read to find a run's lines.
pub const LOG_TAIL_BYTES: u64 = 256 * 1024;

/// Where the previous run's log is kept.
pub fn previous_log(log: &Path) -> PathBuf {
    let mut name = log.file_name().unwrap_or_default().to_os_string();
    name.push(".1");
    log.with_file_name(name)
}

/// Opens the log of run `run` at `log`: the previous run's log moves to
/// [`previous_log`], the new one starts with [`harness_exit::run_header`].
pub fn open_run_log(log: &Path, run: &str) -> std::io::Result<File> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::rename(log, previous_log(log)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(log)?;
    writeln!(f, "{}", harness_exit::run_header(run, crate::relay::unix_now()))?;
    Ok(f)
}

/// The last [`LOG_TAIL_BYTES`] of `path` (lossy UTF-8), `None` when unreadable.
pub fn read_tail(path: &Path) -> Option<String> {
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES))).ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The log lines of run `run` of agent `name` (`None` when its log holds no such run).
pub fn run_lines(store: &Store, name: &str, run: &str) -> Option<Vec<String>> {
    let text = read_tail(&store.log_path(name))?;
    let lines = harness_exit::this_run(&text, run)?;
    Some(lines.into_iter().map(str::to_string).collect())
}

/// How the recorded run of `name`'s harness ended, for a harness that no
/// longer runs: `None` without a recorded run or its log lines.
pub fn last_run(store: &Store, name: &str, st: &DeployState) -> Option<String> {
    let run = st.generation.as_deref()?;
    // The exit its spawner saw ([`record_exit`]) says more than a log
    // that ends without the harness's own exit line.
    if let Some(seen) = st
        .last_error
        .as_deref()
        .and_then(|e| e.strip_prefix(&format!("the harness (run {run}) ")))
    {
        return Some(seen.to_string());
    }
    let lines = run_lines(store, name, run)?;
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    Some(harness_exit::ended(&refs))
}

/// How the recorded run of `name`'s local harness ended (issue 33): on
/// purpose and why, dated by its log's last write, or failed. `None`
/// without a recorded run or its log lines; a harness that still runs has
/// no end yet (the caller asks first).
pub fn local_end(store: &Store, name: &str, st: &DeployState) -> Option<crate::wake::Ended> {
    use crate::wake::Ended;
    let run = st.generation.as_deref()?;
    let lines = run_lines(store, name, run)?;
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    match (harness_exit::logged_exit(&refs), harness_exit::logged_stop(&refs)) {
        (Some(0), Some(reason)) => {
            let at = std::fs::metadata(store.log_path(name))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            Some(Ended::Stopped(reason, at))
        }
        // An exit 0 that does not say why: a harness older than the tag.
        (Some(0), None) => None,
        _ => Some(Ended::Failed),
    }
}

/// How the recorded run of `name`'s harness failed, for a harness that no
/// longer runs and did not stop intentionally (its log shows no exit 0):
/// what the Start page shows when no failure was recorded.
pub fn failed_run(store: &Store, name: &str, st: &DeployState) -> Option<String> {
    let run = st.generation.as_deref()?;
    let lines = run_lines(store, name, run)?;
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    if harness_exit::logged_exit(&refs) == Some(0) {
        return None;
    }
    Some(format!("the harness (run {run}) {}", harness_exit::ended(&refs)))
}

/// Why the run `run` of `name` ended with `status`: how, and its last log lines.
pub fn exit_report(store: &Store, name: &str, run: &str, status: &ExitStatus) -> String {
    let lines = run_lines(store, name, run).unwrap_or_default();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    format!(
        "{}{}",
        harness_exit::describe_status(status),
        harness_exit::quote(&harness_exit::last_errors(&refs))
    )
}

/// Records in `name`'s deploy state that its run `run` ended with
/// `status`: a failure becomes its `last_error` (an intentional stop,
/// exit 0, is none), unless a newer run was started meanwhile.
pub fn record_exit(store: &Store, name: &str, run: &str, status: &ExitStatus) {
    if status.success() {
        return;
    }
    let report = format!(
        "the harness (run {run}) {}",
        exit_report(store, name, run, status)
    );
    let _ = store.update_deploy_state(name, |st| {
        if st.generation.as_deref() == Some(run) {
            st.last_error = Some(report.clone());
        }
    });
}

/// A spawned harness, reaped by a thread of its own.
#[derive(Debug, Clone)]
pub struct ChildWatch {
    pid: u32,
    status: Arc<OnceLock<ExitStatus>>,
}

impl ChildWatch {
    /// Watches `child` (run `run` of `name`): once it exits, its status is
    /// kept and [`record_exit`] runs.
    pub fn spawn(child: Child, store: &Store, name: &str, run: &str) -> ChildWatch {
        ChildWatch::spawn_then(child, store, name, run, || {})
    }

    /// [`ChildWatch::spawn`], then `then` once the exit was recorded (the
    /// Start page refreshes the agent: its reason shows at once).
    pub fn spawn_then(
        child: Child,
        store: &Store,
        name: &str,
        run: &str,
        then: impl FnOnce() + Send + 'static,
    ) -> ChildWatch {
        let status: Arc<OnceLock<ExitStatus>> = Arc::default();
        let pid = child.id();
        let (cell, store, name, run) = (status.clone(), store.clone(), name.to_string(), run.to_string());
        std::thread::spawn(move || {
            let mut child = child;
            if let Ok(s) = child.wait() {
                record_exit(&store, &name, &run, &s);
                let _ = cell.set(s);
                then();
            }
        });
        ChildWatch { pid, status }
    }

    /// The harness's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its exit status, once it exited (and its exit was recorded).
    pub fn exited(&self) -> Option<ExitStatus> {
        self.status.get().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_run_starts_its_own_log_and_keeps_one_run_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/a.log");
        let mut f = open_run_log(&log, "r1").unwrap();
        writeln!(f, "first run line").unwrap();
        drop(f);
        let mut f = open_run_log(&log, "r2").unwrap();
        writeln!(f, "second run line").unwrap();
        drop(f);
        let now = std::fs::read_to_string(&log).unwrap();
        assert!(now.starts_with("==== buzz-launcher: run r2 started"), "{now}");
        assert!(!now.contains("first run line"));
        let prev = std::fs::read_to_string(previous_log(&log)).unwrap();
        assert!(prev.contains("first run line"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&log).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn how_a_run_ended_prefers_the_exit_its_spawner_saw_then_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.init_owner(None).unwrap();
        store.create_agent("a", "ws://127.0.0.1:1").unwrap();
        let mut f = open_run_log(&store.log_path("a"), "r1").unwrap();
        writeln!(
            f,
            "2026-12-01T14:41:26.376433Z  INFO buzz_acp::run: harness exiting code=6"
        )
        .unwrap();
        let mut st = DeployState {
            generation: Some("r1".into()),
            ..DeployState::default()
        };
        assert!(
            last_run(&store, "a", &st)
                .unwrap()
                .starts_with("exited with code 6 (relay lost")
        );
        assert!(
            failed_run(&store, "a", &st)
                .unwrap()
                .starts_with("the harness (run r1) exited with code 6")
        );
        st.last_error = Some("the harness (run r1) exited with code 3 (x)".into());
        assert_eq!(
            last_run(&store, "a", &st).as_deref(),
            Some("exited with code 3 (x)")
        );
        st.last_error = Some("the harness (run r0) exited with code 3 (x)".into());
        assert!(
            last_run(&store, "a", &st)
                .unwrap()
                .starts_with("exited with code 6"),
            "another run's"
        );
        st.generation = Some("r9".into());
        assert_eq!(last_run(&store, "a", &st), None, "no log of that run");
    }

    #[test]
    fn a_watched_child_keeps_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let child = std::process::Command::new("sh")
            .args(["-c", "exit 4"])
            .spawn()
            .unwrap();
        let w = ChildWatch::spawn(child, &store, "nobody", "r1");
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while w.exited().is_none() && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(w.exited().and_then(|s| s.code()), Some(4));
    }
}
