//! What the real node changes outside its own run dir, and how every bit of
//! it is put back (`../shared/kubelet.md`, "Host paths written outside",
//! "Sysctls", "Teardown"). All of it is machine-wide, so one node runs per
//! machine at a time, under [`MachineLock`].
//!
//! - **The machine lock** is an `flock` on `/run/buzz-real-node/lock`, held
//!   for the node's lifetime; the kernel drops it when the holder dies, even
//!   by SIGKILL.
//! - **The state record** (`/run/buzz-real-node/state`) is written under the
//!   lock before anything is changed: the run dir, the original values of the
//!   three sysctls the kubelet changes at every start (there is no opt-out),
//!   and which hard-coded host paths did not exist before. A node whose
//!   owner died without teardown leaves it behind; the next holder of the
//!   lock reads it and runs the same [`teardown`] first, so a SIGKILLed test
//!   run is cleaned up by the next one (or by `local-cluster.sh down`).
//! - **Teardown** is one function for every path (drop, the exit hook, the
//!   stale sweep): kill what is left (every process in the `kubepods`
//!   cgroups, every process whose command line names the run dir, such as
//!   the shims), unmount everything under the run dir deepest first, delete
//!   the bridge, remove the `kubepods` cgroups, the hard-coded kubelet and
//!   CNI paths, restore the sysctls, and remove the run dir.

use super::config::{BRIDGE, HOST_ADDR, NETWORK, PREFIX_LEN};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The dir of the machine lock and the state record.
pub const HOST_DIR: &str = "/run/buzz-real-node";
/// The three kernel settings the kubelet sets at every start.
pub const SYSCTLS: [&str; 3] = ["kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"];
/// Host paths the kubelet hard-codes (not moved by `--root-dir` or
/// `podLogsDir`), and libcni's result cache.
const HOST_PATHS: [&str; 3] = ["/var/lib/kubelet", "/var/log/containers", "/var/lib/cni"];

/// Errors of the host side of the node.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("real node host I/O on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "another real node holds this machine (pid {holder}): one runs per machine at a time; \
         stop it with `scripts/local-cluster.sh down` (or end that test run) and retry"
    )]
    Busy { holder: String },
    #[error(
        "the kubepods cgroup {0} exists but no real node of this project owns it: another kubelet \
         runs on this machine, and this node would share its cgroups, ports and sysctls"
    )]
    ForeignKubelet(PathBuf),
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("the real node needs root (it creates a bridge, mounts and cgroups). fix: run as root (sudo)")]
    NotRoot,
}

type Result<T, E = HostError> = std::result::Result<T, E>;

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> HostError + '_ {
    move |source| HostError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The machine-wide lock, released when dropped or when the process dies.
pub struct MachineLock {
    file: fs::File,
}

impl MachineLock {
    /// Takes the lock, waiting up to `wait` for another holder to finish.
    pub fn take(wait: Duration) -> Result<MachineLock> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(HostError::NotRoot);
        }
        let dir = Path::new(HOST_DIR);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_at(dir))?;
        let path = dir.join("lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_at(&path))?;
        let end = Instant::now() + wait;
        loop {
            // SAFETY: flock on an fd we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                break;
            }
            if Instant::now() >= end {
                let holder = fs::read_to_string(&path).unwrap_or_default().trim().to_string();
                return Err(HostError::Busy {
                    holder: if holder.is_empty() {
                        "unknown".into()
                    } else {
                        holder
                    },
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut lock = MachineLock { file };
        lock.file.set_len(0).map_err(io_at(&path))?;
        let _ = write!(lock.file, "{}", std::process::id());
        Ok(lock)
    }

    /// Whether another process holds the lock now (for `status`).
    pub fn holder() -> Option<String> {
        let path = Path::new(HOST_DIR).join("lock");
        let file = fs::File::open(&path).ok()?;
        // SAFETY: flock on an fd we own; released at once when it succeeds.
        let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if free {
            return None;
        }
        Some(fs::read_to_string(&path).unwrap_or_default().trim().to_string())
    }
}

/// What one node changed on the host, recorded before the change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostState {
    /// The node's run dir.
    pub run: PathBuf,
    /// `(sysctl, original value)`.
    pub sysctls: Vec<(String, String)>,
    /// Hard-coded host paths that did not exist before the node.
    pub created: Vec<PathBuf>,
}

impl HostState {
    fn path() -> PathBuf {
        Path::new(HOST_DIR).join("state")
    }

    /// Reads the machine's current values (before this node changes them).
    pub fn capture(run: PathBuf) -> Result<HostState> {
        let mut sysctls = Vec::new();
        for s in SYSCTLS {
            let p = Path::new("/proc/sys").join(s);
            let v = fs::read_to_string(&p).map_err(io_at(&p))?;
            sysctls.push((s.to_string(), v.trim().to_string()));
        }
        let created = HOST_PATHS
            .iter()
            .map(PathBuf::from)
            .filter(|p| !p.exists())
            .collect();
        Ok(HostState {
            run,
            sysctls,
            created,
        })
    }

    /// The record's text: `key=value` lines.
    pub fn render(&self) -> String {
        let mut s = format!("run={}\n", self.run.display());
        for (k, v) in &self.sysctls {
            s.push_str(&format!("sysctl {k}={v}\n"));
        }
        for p in &self.created {
            s.push_str(&format!("created={}\n", p.display()));
        }
        s
    }

    /// Parses [`HostState::render`]'s text; `None` when it names no run dir.
    pub fn parse(text: &str) -> Option<HostState> {
        let mut run = None;
        let mut sysctls = Vec::new();
        let mut created = Vec::new();
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("run=") {
                run = Some(PathBuf::from(v));
            } else if let Some((k, v)) = line.strip_prefix("sysctl ").and_then(|r| r.split_once('=')) {
                // Only the settings this module knows are ever written back.
                if SYSCTLS.contains(&k) && v.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
                    sysctls.push((k.to_string(), v.to_string()));
                }
            } else if let Some(v) = line.strip_prefix("created=")
                && HOST_PATHS.contains(&v)
            {
                created.push(PathBuf::from(v));
            }
        }
        Some(HostState {
            run: run?,
            sysctls,
            created,
        })
    }

    /// Writes the record (under the machine lock).
    pub fn save(&self) -> Result<()> {
        let p = Self::path();
        let mut f = fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&p)
            .map_err(io_at(&p))?;
        f.write_all(self.render().as_bytes()).map_err(io_at(&p))?;
        f.sync_all().map_err(io_at(&p))
    }

    /// The record a node left behind, if any.
    pub fn load() -> Option<HostState> {
        HostState::parse(&fs::read_to_string(Self::path()).ok()?)
    }

    fn forget() {
        let _ = fs::remove_file(Self::path());
    }
}

/// Refuses to start beside a kubelet this project does not own.
pub fn check_no_foreign_kubelet() -> Result<()> {
    for dir in kubepods_roots() {
        if dir.exists() {
            return Err(HostError::ForeignKubelet(dir));
        }
    }
    Ok(())
}

fn kubepods_roots() -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir("/sys/fs/cgroup") else {
        return Vec::new();
    };
    entries.flatten().map(|e| e.path().join("kubepods")).collect()
}

/// Runs a host command; its failure is an error with its stderr.
pub fn run(cmd: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|source| HostError::Io {
            path: PathBuf::from(cmd),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(HostError::Command {
        command: format!("{cmd} {}", args.join(" ")),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Creates the bridge with the host's address (the CNI plugin then only
/// attaches veths: with `isGateway: false` it never enables forwarding).
pub fn create_bridge() -> Result<()> {
    let _ = run("ip", &["link", "del", BRIDGE]);
    run("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
    run(
        "ip",
        &["addr", "add", &format!("{HOST_ADDR}/{PREFIX_LEN}"), "dev", BRIDGE],
    )?;
    run("ip", &["link", "set", BRIDGE, "up"])
}

/// Undoes everything `state` records, whoever created it. Best effort: each
/// step runs even when an earlier one failed; the failures are returned.
pub fn teardown(state: &HostState) -> Vec<String> {
    let mut errors = Vec::new();
    kill_leftovers(&state.run);
    unmount_under(&state.run, &mut errors);
    if Path::new("/sys/class/net").join(BRIDGE).exists()
        && let Err(e) = run("ip", &["link", "del", BRIDGE])
    {
        errors.push(e.to_string());
    }
    remove_kubepods_cgroups(&mut errors);
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

/// Every pid in a `kubepods` cgroup, plus every process whose command line
/// names the run dir (containerd's shims outlive containerd).
fn leftover_pids(run: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    for root in kubepods_roots() {
        walk_dirs(&root, &mut |d| {
            if let Ok(text) = fs::read_to_string(d.join("cgroup.procs")) {
                pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        });
    }
    let needle = run.as_os_str().as_encoded_bytes();
    if let Ok(entries) = fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if let Ok(cmd) = fs::read(e.path().join("cmdline"))
                && cmd.windows(needle.len()).any(|w| w == needle)
            {
                pids.push(pid);
            }
        }
    }
    let me = std::process::id() as i32;
    pids.retain(|p| *p != me && *p > 1);
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn kill_leftovers(run: &Path) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = leftover_pids(run);
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

fn walk_dirs(dir: &Path, f: &mut dyn FnMut(&Path)) {
    if !dir.is_dir() {
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

fn remove_kubepods_cgroups(errors: &mut Vec<String>) {
    for root in kubepods_roots() {
        walk_dirs(&root, &mut |d| {
            // Deepest first (walk_dirs visits children before their parent).
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

/// The current values of the three sysctls (for tests and `status`).
pub fn sysctl_values() -> Vec<(String, String)> {
    SYSCTLS
        .iter()
        .map(|s| {
            let v = fs::read_to_string(Path::new("/proc/sys").join(s)).unwrap_or_default();
            (s.to_string(), v.trim().to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_record_round_trips_and_restores_only_known_settings() {
        let s = HostState {
            run: "/tmp/bn-7".into(),
            sysctls: vec![
                ("kernel/panic".into(), "1".into()),
                ("vm/overcommit_memory".into(), "0".into()),
            ],
            created: vec!["/var/lib/kubelet".into()],
        };
        assert_eq!(HostState::parse(&s.render()), Some(s));
        let hostile =
            "run=/tmp/bn-1\nsysctl kernel/modprobe=/tmp/x\nsysctl kernel/panic=1;rm\ncreated=/etc\n";
        let parsed = HostState::parse(hostile).unwrap();
        assert!(parsed.sysctls.is_empty(), "{parsed:?}");
        assert!(parsed.created.is_empty(), "{parsed:?}");
        assert_eq!(HostState::parse("sysctl kernel/panic=1\n"), None);
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount("/tmp/a\\040b"), PathBuf::from("/tmp/a b"));
        assert_eq!(unescape_mount("/tmp/plain"), PathBuf::from("/tmp/plain"));
    }
}
