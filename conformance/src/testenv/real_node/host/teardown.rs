//! [`teardown`]: one function for every path (drop, the exit hook, the
//! stale sweep), and the rules of what it may touch (review `9b395e0`,
//! finding 4).
//!
//! - **What is killed.** A process is the node's when it sits in one of
//!   the node's `kubepods` cgroups (the pods' processes and the pause
//!   sandboxes), or when it is one of the node's own programs
//!   ([`NODE_PROGRAMS`]: the containerd shims outlive containerd) and one of
//!   its arguments names the run dir as a whole path component (the dir
//!   itself or something under it: `…/n-1` never matches `…/n-12`). Nothing
//!   else dies, even when it names the run dir: a `tail -f <run>/kubelet.log`
//!   or an editor in the run dir is a user's, not the node's
//!   ([`is_node_process`]).
//! - **Which cgroups.** Both layouts ([`kubepods_roots_in`]): cgroup v1 (and
//!   the v1 side of a hybrid host) has one `kubepods` tree per controller,
//!   `/sys/fs/cgroup/<controller>/kubepods`; the unified (v2) hierarchy has
//!   one, `/sys/fs/cgroup/kubepods`, the cgroupfs driver's root. A hybrid
//!   host's `unified/kubepods` is the first rule's.
//!
//! The rules are pure over a cgroup root and a `/proc`-shaped dir, so unit
//! tests run them on a temp dir standing in for each; the I/O here is
//! reading those and the signals.

use super::{BRIDGE, HostState, NETWORK, run};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The cgroup root of this machine.
pub(super) const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The node's own programs (by the file name of `argv[0]`): what may be
/// killed for naming the run dir.
pub const NODE_PROGRAMS: [&str; 9] = [
    "containerd",
    "containerd-shim-runc-v2",
    "runc",
    "kubelet",
    "kube-scheduler",
    "kube-controller-manager",
    "ctr",
    "docker-registry",
    "kube-router",
];
/// The cgroupfs driver's root cgroup name (this node's kubelet uses it).
const KUBEPODS: &str = "kubepods";

/// Undoes everything `state` records, whoever created it. Best effort: each
/// step runs even when an earlier one failed; the failures are returned.
pub fn teardown(state: &HostState) -> Vec<String> {
    let mut errors = Vec::new();
    kill_leftovers(&state.run);
    // The NetworkPolicy enforcer's chains and ipsets, when one ran.
    if let Some(e) = crate::testenv::real_node::enforcer::cleanup_after(&state.run) {
        errors.push(format!("kube-router --cleanup-config: {e}"));
    }
    unmount_under(&state.run, &mut errors);
    if Path::new("/sys/class/net").join(BRIDGE).exists()
        && let Err(e) = run("ip", &["link", "del", BRIDGE])
    {
        errors.push(e.to_string());
    }
    remove_kubepods_cgroups(Path::new(CGROUP_ROOT), &mut errors);
    remove_host_paths(state, &mut errors);
    for (k, v) in &state.sysctls {
        let p = Path::new("/proc/sys").join(k);
        if let Err(e) = fs::write(&p, v) {
            errors.push(format!("restore {k}={v}: {e}"));
        }
    }
    if state.run.exists()
        && let Err(e) = fs::remove_dir_all(&state.run)
    {
        errors.push(format!("remove {}: {e}", state.run.display()));
    }
    if errors.is_empty() {
        HostState::forget();
    }
    errors
}

/// The `kubepods` trees under a cgroup root that exist, in both layouts:
/// `<root>/kubepods` (unified) and `<root>/<controller>/kubepods` (v1, and
/// a hybrid host's `unified/`).
pub fn kubepods_roots_in(cgroup_root: &Path) -> Vec<PathBuf> {
    named_under(cgroup_root, KUBEPODS)
}

/// The first cgroup under `cgroup_root` a kubelet made, whatever its driver
/// (`kubepods`, or the systemd driver's `kubepods.slice`), in either layout.
pub fn kubelet_cgroup_in(cgroup_root: &Path) -> Option<PathBuf> {
    [KUBEPODS, "kubepods.slice"]
        .iter()
        .flat_map(|name| named_under(cgroup_root, name))
        .next()
}

fn named_under(root: &Path, name: &str) -> Vec<PathBuf> {
    let mut candidates = vec![root.join(name)];
    if let Ok(entries) = fs::read_dir(root) {
        let mut children: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path().join(name))
            .collect();
        children.sort();
        candidates.extend(children);
    }
    candidates.retain(|p| p.symlink_metadata().is_ok_and(|m| m.is_dir()));
    candidates
}

/// Whether the NUL-separated command line `cmdline` is one of the node's
/// own programs at work for `run` (the module doc's rule).
pub fn is_node_process(cmdline: &[u8], run: &Path) -> bool {
    let mut args = cmdline.split(|b| *b == 0);
    let Some(argv0) = args.next() else {
        return false;
    };
    let program = argv0.rsplit(|b| *b == b'/').next().unwrap_or(argv0);
    if !NODE_PROGRAMS.iter().any(|p| p.as_bytes() == program) {
        return false;
    }
    let dir = run.as_os_str().as_encoded_bytes();
    std::iter::once(argv0).chain(args).any(|a| names_dir(a, dir))
}

/// Whether `arg` names `dir` or a path under it: `dir` followed by `/` or
/// the argument's end (`--root-dir=<dir>/kubelet` does, `<dir>2` does not).
pub fn names_dir(arg: &[u8], dir: &[u8]) -> bool {
    if dir.is_empty() || arg.len() < dir.len() {
        return false;
    }
    (0..=arg.len() - dir.len())
        .filter(|&i| arg[i..].starts_with(dir))
        .any(|i| matches!(arg.get(i + dir.len()), None | Some(b'/')))
}

/// The node's leftover processes, read from a cgroup root and a
/// `/proc`-shaped dir: every pid in a `kubepods` cgroup, and every
/// [`is_node_process`] of `run`; never `me` or pid 1.
pub fn leftover_pids_in(cgroup_root: &Path, proc_root: &Path, run: &Path, me: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    for root in kubepods_roots_in(cgroup_root) {
        walk_dirs(&root, &mut |d| {
            if let Ok(text) = fs::read_to_string(d.join("cgroup.procs")) {
                pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        });
    }
    if let Ok(entries) = fs::read_dir(proc_root) {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if fs::read(e.path().join("cmdline")).is_ok_and(|cmd| is_node_process(&cmd, run)) {
                pids.push(pid);
            }
        }
    }
    pids.retain(|p| *p != me && *p > 1);
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn kill_leftovers(run: &Path) {
    let me = std::process::id() as i32;
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = leftover_pids_in(Path::new(CGROUP_ROOT), Path::new("/proc"), run, me);
        if pids.is_empty() || Instant::now() > end {
            return;
        }
        for p in pids {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Visits `dir` and every dir under it, children before their parent (no
/// symlinks followed).
fn walk_dirs(dir: &Path, f: &mut dyn FnMut(&Path)) {
    if !dir.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        return;
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk_dirs(&e.path(), f);
            }
        }
    }
    f(dir);
}

/// Mount points under `dir`, deepest first (from this process's mountinfo).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mount)
        .filter(|p| p.starts_with(dir))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out.dedup();
    out
}

fn unescape_mount(s: &str) -> PathBuf {
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from(
        String::from_utf8_lossy(&out).into_owned(),
    ))
}

fn unmount_under(dir: &Path, errors: &mut Vec<String>) {
    for _ in 0..3 {
        let mounts = mounts_under(dir);
        if mounts.is_empty() {
            return;
        }
        for m in mounts {
            let Ok(c) = std::ffi::CString::new(m.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            // SAFETY: a NUL-terminated path; MNT_DETACH never blocks on busy mounts.
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
    let left = mounts_under(dir);
    if !left.is_empty() {
        errors.push(format!("mounts left under {}: {left:?}", dir.display()));
    }
}

/// Removes every `kubepods` tree under `cgroup_root`, deepest first.
pub fn remove_kubepods_cgroups(cgroup_root: &Path, errors: &mut Vec<String>) {
    for root in kubepods_roots_in(cgroup_root) {
        walk_dirs(&root, &mut |d| {
            if let Err(e) = fs::remove_dir(d) {
                errors.push(format!("rmdir {}: {e}", d.display()));
            }
        });
    }
}

fn remove_host_paths(state: &HostState, errors: &mut Vec<String>) {
    let sock = Path::new("/var/lib/kubelet/device-plugins/kubelet.sock");
    if sock.exists()
        && let Err(e) = fs::remove_file(sock)
    {
        errors.push(format!("remove {}: {e}", sock.display()));
    }
    // The kubelet's log symlinks point into the run dir's podLogsDir.
    if let Ok(entries) = fs::read_dir("/var/log/containers") {
        for e in entries.flatten() {
            if fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&state.run)) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    if let Ok(entries) = fs::read_dir("/var/lib/cni/results") {
        for e in entries.flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{NETWORK}-"))
            {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    for p in &state.created {
        if p.exists()
            && let Err(e) = fs::remove_dir_all(p)
        {
            errors.push(format!("remove {}: {e}", p.display()));
        }
    }
}

#[cfg(test)]
#[path = "teardown_tests.rs"]
mod tests;
