//! PID-1 duties inside a container (spec §Entrypoint and launch ABI, [L3]
//! item 3, §Stop and Delete "reap"; Known Defect 7).
//!
//! The image's entrypoint starts its sidecars (the collector agent) and then
//! `exec`s `buzz-acp`, so the harness is the container's PID 1. The kernel
//! delivers the pod's SIGTERM to PID 1 alone, and nothing else in the
//! container reaps or signals: the stop reaches the sidecars, and orphans
//! re-parented to PID 1 are reaped, only if the harness does it. So, when it
//! runs as PID 1, the graceful stop also:
//!
//! 1. sends SIGTERM at once to every other process of the container that is
//!    not in an agent's process group (agents have their own drain-then-reap
//!    path, [`crate::procs::ProcessTable::reap_all`]);
//! 2. sends SIGKILL to the survivors at the plan's kill point;
//! 3. reaps them, and stops waiting at the end of child cleanup, so the 7 s
//!    finalization slice (presence `offline`, relay close) stays intact.
//!
//! Outside PID 1 (a laptop, a VPS) none of this runs: the harness must never
//! signal processes it did not start.
//!
//! **Sealing** (review b30b1a0 #13). PID 1's environment holds the agent's
//! key, its auth tag and every user env value, and every process of the
//! container runs as the same uid: while PID 1 is dumpable, each of them
//! passes the kernel's same-uid `PTRACE_MODE_READ` check on
//! `/proc/1/environ` (and `mem`, `maps`, …). As its first act, the harness
//! as PID 1 makes itself non-dumpable ([`seal`], `prctl(PR_SET_DUMPABLE, 0)`):
//! its `/proc` files then belong to root and a same-uid read gets `EACCES`.
//! Every agent is spawned after that, and `execve` gives each child its own
//! dumpable state, so agents and their tools are unaffected. What remains:
//! the entrypoint starts the image's sidecars (image code, under `env -i`) a
//! moment before `exec buzz-acp`, so only they exist during that moment. The
//! trade-off, chosen over a separate sidecar uid (which the image and the pod
//! security context would both have to carry): the collector can no longer
//! read PID 1's own `smaps_rollup` or `fd/` (it records those as absent; its
//! `status` and the cgroup totals still count PID 1), and PID 1 writes no
//! core dump. Outside PID 1 nothing is sealed: on a laptop or a VPS the
//! harness keeps the platform's defaults (debuggers, core dumps).

use crate::procs::{self, ProcessTable};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How often the stop loop re-scans the container's processes.
const SCAN_PERIOD: Duration = Duration::from_millis(50);

/// The fields of `/proc/<pid>/stat` this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// One-letter state (`R`, `S`, `Z`, …).
    pub state: char,
    /// Parent pid.
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
}

/// Parses the text of `/proc/<pid>/stat`. The command name is in parentheses
/// and may itself contain `)` and spaces, so the fields are read after the
/// last `)`.
pub fn parse_stat(stat: &str) -> Option<ProcStat> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some(ProcStat { state, ppid, pgrp })
}

/// Which of the `procs` (pid, stat) must hear the stop: everything but
/// ourselves, zombies (nothing to signal; they are reaped instead) and the
/// members of an agent process group.
pub fn stop_targets(me: i32, agent_groups: &HashSet<i32>, procs: &[(i32, ProcStat)]) -> Vec<i32> {
    procs
        .iter()
        .filter(|(pid, st)| *pid != me && st.state != 'Z' && !agent_groups.contains(&st.pgrp))
        .map(|(pid, _)| *pid)
        .collect()
}

/// Every process visible in `/proc` with its stat.
fn scan() -> Vec<(i32, ProcStat)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter_map(|pid| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, parse_stat(&text)?))
        })
        .collect()
}

fn signal(pid: i32, sig: i32) {
    if pid > 1 {
        // SAFETY: kill(2) on one pid; no memory is touched.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// True when this process is PID 1 of its PID namespace.
pub fn is_pid1() -> bool {
    std::process::id() == 1
}

/// As PID 1, makes this process non-dumpable so that no other process of
/// the container can read its environment or memory. Returns whether the
/// process is now sealed (`false` outside PID 1, where nothing changes).
pub fn seal() -> bool {
    is_pid1() && make_non_dumpable()
}

/// Makes this process non-dumpable whatever its pid: for a short-lived
/// process started with the container's environment, the `postStart` hook
/// ([`crate::probe::hook_main`]).
pub fn seal_self() -> bool {
    make_non_dumpable()
}

/// `prctl(PR_SET_DUMPABLE, 0)`; true when the kernel reports it took.
fn make_non_dumpable() -> bool {
    // SAFETY: prctl with PR_SET_DUMPABLE/PR_GET_DUMPABLE takes plain integers
    // and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
            && libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
    }
}

/// Forwards the stop to the container's other processes and reaps them:
/// SIGTERM now, SIGKILL at `kill_at`, give up at `give_up`. Processes that
/// appear while it runs get the same treatment. Returns how many were still
/// alive at `give_up`.
pub async fn stop_others(table: ProcessTable, kill_at: Instant, give_up: Instant) -> usize {
    let me = std::process::id() as i32;
    let mut termed: HashSet<i32> = HashSet::new();
    let mut killed = false;
    loop {
        procs::reap_orphans(&table);
        let groups: HashSet<i32> = table.pids().into_iter().collect();
        let targets = stop_targets(me, &groups, &scan());
        let now = Instant::now();
        if targets.is_empty() {
            return 0;
        }
        if now >= give_up {
            tracing::error!(
                left = targets.len(),
                "container processes still alive at the child-cleanup deadline"
            );
            return targets.len();
        }
        if now >= kill_at {
            if !killed {
                tracing::warn!(
                    count = targets.len(),
                    "container processes ignored SIGTERM; sent SIGKILL"
                );
                killed = true;
            }
            for pid in &targets {
                signal(*pid, libc::SIGKILL);
            }
        } else {
            for pid in targets {
                if termed.insert(pid) {
                    tracing::info!(pid, "forwarding the stop to a container process");
                    signal(pid, libc::SIGTERM);
                }
            }
        }
        tokio::time::sleep(SCAN_PERIOD).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_last_parenthesis() {
        let s = "42 (a) b) (c) S 1 42 42 0 -1 4194560 0 0 0";
        assert_eq!(
            parse_stat(s),
            Some(ProcStat {
                state: 'S',
                ppid: 1,
                pgrp: 42
            })
        );
        assert_eq!(parse_stat("42 (x) Z 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn sealing_is_a_no_op_outside_pid1() {
        // The test runner is never PID 1: nothing changes, the process stays dumpable.
        assert!(!seal());
        // SAFETY: PR_GET_DUMPABLE reads a flag.
        assert_eq!(unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) }, 1);
    }

    #[test]
    fn targets_exclude_self_zombies_and_agent_groups() {
        let st = |state, ppid, pgrp| ProcStat { state, ppid, pgrp };
        let procs = vec![
            (1, st('S', 0, 1)),    // the harness
            (7, st('S', 1, 7)),    // a sidecar
            (9, st('S', 7, 7)),    // the sidecar's child
            (20, st('S', 1, 20)),  // an agent (group leader)
            (21, st('S', 20, 20)), // the agent's tool
            (30, st('Z', 1, 30)),  // a zombie: reaped, not signalled
            (40, st('S', 21, 40)), // left the agent's group: a stray
        ];
        let groups = HashSet::from([20]);
        assert_eq!(stop_targets(1, &groups, &procs), vec![7, 9, 40]);
    }
}
