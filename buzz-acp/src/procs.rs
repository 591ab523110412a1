//! Agent process groups and child reaping (spec §Stop and Delete "reap agent
//! process groups", §Auto-Stop "the harness as the signal-receiving
//! process"; wire-facts §6 "in its own process group").
//!
//! Every agent runs as the leader of its own process group, so one signal
//! reaches the agent and anything it spawned. The table lets the shutdown
//! path signal all groups at once and wait for all of them concurrently.
//! As PID 1 the harness also reaps orphaned zombies that are not its own
//! tracked children (those are awaited by their tokio `Child`).
//!
//! Spawning and the orphan sweep are serialised on the table's lock
//! ([`ProcessTable::spawn_registered`], [`reap_orphans`]; review b30b1a0
//! #15): an agent that exits at once is already tracked when the sweep can
//! next look, so the sweep never reaps it in place of its tokio `Child`
//! (whose `wait` would then fail with `ECHILD` and lose the exit).
//!
//! A group is signalled by its leader's pid. Linux does not hand out a pid
//! while a live process still uses it as its process group id, so a group
//! with members left can only be the agent's; a SIGKILL to the group of a
//! leader that was reaped and left no member reaches nobody unless the pid
//! was reused in between, which needs a full pid wrap-around within the
//! moments between the reap and the sweep. That remaining window is not
//! closed here: closing it means keeping each leader a zombie until its
//! group is swept (`waitid(WNOWAIT)` instead of tokio's reaping wait).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::watch;

/// One running agent process (leader of its group).
#[derive(Debug, Clone)]
struct Entry {
    exited: watch::Receiver<bool>,
}

/// The live agent process groups, keyed by leader pid (= pgid).
#[derive(Debug, Clone, Default)]
pub struct ProcessTable {
    inner: Arc<Mutex<HashMap<i32, Entry>>>,
    closed: Arc<std::sync::atomic::AtomicBool>,
}

/// Sends `sig` to the process group `pgid`.
pub fn signal_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

impl ProcessTable {
    /// Shutdown has begun: no slot may spawn (or respawn) an agent any more.
    pub fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// True once [`ProcessTable::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Spawns a leader with `spawn` and registers its pid under the table's
    /// lock, which the orphan sweep also holds: the sweep sees the child
    /// either not at all or as tracked. Returns the child, its pid and the
    /// sender to set when it exits.
    pub fn spawn_registered(
        &self,
        spawn: impl FnOnce() -> std::io::Result<tokio::process::Child>,
    ) -> std::io::Result<(tokio::process::Child, i32, watch::Sender<bool>)> {
        let mut table = self.lock();
        let child = spawn()?;
        let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
            return Err(std::io::Error::other("the spawned agent has no pid"));
        };
        let (tx, rx) = watch::channel(false);
        table.insert(pid, Entry { exited: rx });
        Ok((child, pid, tx))
    }

    /// Forgets an exited leader.
    pub fn remove(&self, pid: i32) {
        self.lock().remove(&pid);
    }

    /// Tracked pids.
    pub fn pids(&self) -> Vec<i32> {
        self.lock().keys().copied().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Entry>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reaps every group concurrently: SIGTERM to all now, SIGKILL to the
    /// survivors at `kill_at`, stop waiting at `give_up` (child cleanup
    /// degrades first, spec §Stop). Returns the number still alive at `give_up`.
    pub async fn reap_all(&self, kill_at: Instant, give_up: Instant) -> usize {
        let entries: Vec<(i32, watch::Receiver<bool>)> =
            self.lock().iter().map(|(p, e)| (*p, e.exited.clone())).collect();
        for (pid, _) in &entries {
            signal_group(*pid, libc::SIGTERM);
        }
        let wait_all = |deadline: Instant, entries: Vec<(i32, watch::Receiver<bool>)>| async move {
            let waits = entries.into_iter().map(|(pid, mut rx)| async move {
                let done = tokio::time::timeout_at(deadline.into(), rx.wait_for(|e| *e)).await;
                (pid, matches!(done, Ok(Ok(_))))
            });
            futures::future::join_all(waits).await
        };
        let first = wait_all(kill_at, entries.clone()).await;
        let survivors: Vec<(i32, watch::Receiver<bool>)> = entries
            .into_iter()
            .filter(|(pid, _)| first.iter().any(|(p, done)| p == pid && !done))
            .collect();
        // Leaders that exited may leave group members behind: sweep every group.
        for (pid, _) in first.iter() {
            signal_group(*pid, libc::SIGKILL);
        }
        if survivors.is_empty() {
            return 0;
        }
        tracing::warn!(
            count = survivors.len(),
            "agent process groups ignored SIGTERM; sent SIGKILL"
        );
        let second = wait_all(give_up, survivors).await;
        second.iter().filter(|(_, done)| !done).count()
    }
}

/// Reaps zombie children of this process that the table does not track
/// (orphans re-parented to PID 1). Linux `/proc` scan; a no-op elsewhere.
/// Holds the table's lock throughout, so no agent is spawned mid-sweep.
pub fn reap_orphans(table: &ProcessTable) -> usize {
    let me = std::process::id() as i32;
    let guard = table.lock();
    let tracked: Vec<i32> = guard.keys().copied().collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut reaped = 0;
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if tracked.contains(&pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the last ')' : state ppid ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let (Some(state), Some(ppid)) = (f.next(), f.next().and_then(|p| p.parse::<i32>().ok())) else {
            continue;
        };
        if state == "Z" && ppid == me {
            let mut status = 0;
            // SAFETY: waitpid on a specific zombie child pid with WNOHANG.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                reaped += 1;
            }
        }
    }
    drop(guard);
    reaped
}
