//! What the real node changes outside its own run dir, and how every bit of
//! it is put back (`../shared/kubelet.md`, "Host paths written outside",
//! "Sysctls", "Teardown"). All of it is machine-wide, so one node runs per
//! machine at a time, under [`MachineLock`].
//!
//! - **The host dir** `/run/buzz-real-node` holds the lock, the state record
//!   and every run dir. It is root's: made `0700` without following a
//!   symlink, and refused when it is a symlink, not a dir, another uid's, or
//!   writable by group or others ([`DirFault`]), so no other user can plant
//!   or swap anything root later reads or runs.
//! - **The run dir** `/run/buzz-real-node/n-<pid>` ([`create_run_dir`]) is
//!   made with one non-recursive `mkdir` at `0700`, and an existing one
//!   (whatever it is: a dir, a symlink) fails the start (review `9b395e0`,
//!   finding 3: the old `/tmp/bn-<pid>` was predictable and re-created with
//!   no check of its owner). The security-relevant files under it (the
//!   configs, the PKI) are written with [`write_new`]: `O_CREAT|O_EXCL`,
//!   `O_NOFOLLOW`, `0600`. Decision: the run dir lives in `/run` beside the
//!   state record, so the two share a lifetime (a reboot clears both); where
//!   `/run` is a tmpfs, the node's images (containerd's content and
//!   snapshots, the local registry) are held in memory while it runs. The
//!   path is short enough for containerd's 42-byte shim `socket_dir`
//!   (`config::tests::the_shim_socket_dir_fits_containerds_bound`).
//! - **The machine lock** is an `flock` on `/run/buzz-real-node/lock`, held
//!   for the node's lifetime; the kernel drops it when the holder dies, even
//!   by SIGKILL.
//! - **The state record** (`/run/buzz-real-node/state`) is written under the
//!   lock before anything is changed: the run dir, the original values of the
//!   three sysctls the kubelet changes at every start, and which hard-coded
//!   host paths did not exist before. A node whose owner died without
//!   teardown leaves it behind; the next holder of the lock reads it and runs
//!   the same [`teardown`] first, so a SIGKILLed test run is cleaned up by the
//!   next one (or by `local-cluster.sh down`).
//! - **The sysctls.** While the node runs, the kubelet holds
//!   `kernel.panic_on_oops=1` and `kernel.panic=10` (any kernel oops, a GPU
//!   driver's say, reboots the machine 10 s later instead of being logged)
//!   and `vm.overcommit_memory=1`; teardown restores the recorded values, and
//!   `local-cluster.sh up` says so. Decision (review finding 4): the node
//!   does not pre-set them and run the kubelet with `protectKernelDefaults:
//!   true`. That setting only turns a differing value into a kubelet start
//!   failure, so the machine would hold exactly the same values for exactly
//!   as long; it would add a second copy of the kubelet's wanted values here
//!   (a kubelet that wants one more breaks the start) and remove nothing of
//!   the hazard. What limits it is the record, the restore on every path and
//!   saying so.
//! - **Teardown** ([`teardown`], in `host/teardown.rs` with its rules: what
//!   is killed and which cgroups, in both cgroup layouts): kill what is
//!   left, unmount everything under the run dir deepest first, delete the
//!   bridge, remove the `kubepods` cgroups, the hard-coded kubelet and CNI
//!   paths, restore the sysctls, and remove the run dir.

mod teardown;

pub use teardown::{
    NODE_PROGRAMS, is_node_process, kubelet_cgroup_in, kubepods_roots_in, leftover_pids_in, mounts_under,
    names_dir, teardown,
};

use super::config::{BRIDGE, HOST_ADDR, NETWORK, PREFIX_LEN};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The dir of the machine lock, the state record and the run dirs.
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
        "the kubelet cgroup {0} exists but no real node of this project owns it: another kubelet \
         runs on this machine, and this node would share its cgroups, ports and sysctls"
    )]
    ForeignKubelet(PathBuf),
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("the real node needs root (it creates a bridge, mounts and cgroups). fix: run as root (sudo)")]
    NotRoot,
    #[error(
        "{path} is not safe for root's real node: {fault}. fix: check who made it, remove it \
         (`rm -r {path}`, not following links) and retry"
    )]
    UnsafeDir { path: PathBuf, fault: DirFault },
    #[error(
        "the run dir {0} exists already: a node's run dir is always new. fix: \
         `scripts/local-cluster.sh down` sweeps what a dead node left; otherwise check who made it and remove it"
    )]
    RunDirExists(PathBuf),
}

/// Why a dir root relies on is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DirFault {
    #[error("it is a symlink")]
    Symlink,
    #[error("it is not a directory")]
    NotDir,
    #[error("it belongs to uid {found}, not {wanted}")]
    Owner { found: u32, wanted: u32 },
    #[error("its mode {mode:04o} lets group or others write to it")]
    Writable { mode: u32 },
}

type Result<T, E = HostError> = std::result::Result<T, E>;

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> HostError + '_ {
    move |source| HostError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// What is wrong with `path` as a private dir of `owner`, read without
/// following a symlink; `None` when it is a real dir of `owner` that only
/// `owner` may write.
pub fn dir_fault(path: &Path, owner: u32) -> io::Result<Option<DirFault>> {
    let m = fs::symlink_metadata(path)?;
    Ok(if m.file_type().is_symlink() {
        Some(DirFault::Symlink)
    } else if !m.is_dir() {
        Some(DirFault::NotDir)
    } else if m.uid() != owner {
        Some(DirFault::Owner {
            found: m.uid(),
            wanted: owner,
        })
    } else if m.mode() & 0o022 != 0 {
        Some(DirFault::Writable {
            mode: m.mode() & 0o7777,
        })
    } else {
        None
    })
}

fn refuse_unless_private(path: &Path, owner: u32) -> Result<()> {
    match dir_fault(path, owner).map_err(io_at(path))? {
        None => Ok(()),
        Some(fault) => Err(HostError::UnsafeDir {
            path: path.to_path_buf(),
            fault,
        }),
    }
}

/// Makes `path` (its parent must exist) a private dir of `owner` at `0700`,
/// or checks the one that is there.
pub fn ensure_private_dir(path: &Path, owner: u32) -> Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_at(path)(e)),
    }
    refuse_unless_private(path, owner)
}

/// The run dir of the node of process `pid` under `parent`.
pub fn run_dir_in(parent: &Path, pid: u32) -> PathBuf {
    parent.join(format!("n-{pid}"))
}

/// Makes a new run dir for process `pid` under `parent`, which must be a
/// private dir of `owner`: one `mkdir` at `0700`; anything already at that
/// path is [`HostError::RunDirExists`].
pub fn create_run_dir_in(parent: &Path, pid: u32, owner: u32) -> Result<PathBuf> {
    refuse_unless_private(parent, owner)?;
    let run = run_dir_in(parent, pid);
    match fs::DirBuilder::new().mode(0o700).create(&run) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(HostError::RunDirExists(run)),
        Err(e) => return Err(io_at(&run)(e)),
    }
    refuse_unless_private(&run, owner)?;
    Ok(run)
}

/// This process's new run dir, `/run/buzz-real-node/n-<pid>` (under the
/// machine lock, which made and checked the host dir).
pub fn create_run_dir() -> Result<PathBuf> {
    create_run_dir_in(Path::new(HOST_DIR), std::process::id(), euid())
}

/// Writes a new file (its dirs made `0700` as needed): `O_CREAT|O_EXCL` and
/// `O_NOFOLLOW`, so neither a planted file nor a symlink is ever written
/// through.
pub fn write_new(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    if let Some(d) = path.parent() {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(d)?;
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

/// Refuses to start beside a kubelet this project does not own (in either
/// cgroup layout; called after the stale sweep removed ours).
pub fn check_no_foreign_kubelet() -> Result<()> {
    match kubelet_cgroup_in(Path::new(teardown::CGROUP_ROOT)) {
        Some(dir) => Err(HostError::ForeignKubelet(dir)),
        None => Ok(()),
    }
}

/// The machine-wide lock, released when dropped or when the process dies.
pub struct MachineLock {
    file: fs::File,
}

impl MachineLock {
    /// Takes the lock, waiting up to `wait` for another holder to finish.
    pub fn take(wait: Duration) -> Result<MachineLock> {
        if euid() != 0 {
            return Err(HostError::NotRoot);
        }
        let dir = Path::new(HOST_DIR);
        ensure_private_dir(dir, 0)?;
        let path = dir.join("lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
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
            .custom_flags(libc::O_NOFOLLOW)
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
            run: "/run/buzz-real-node/n-7".into(),
            sysctls: vec![
                ("kernel/panic".into(), "1".into()),
                ("vm/overcommit_memory".into(), "0".into()),
            ],
            created: vec!["/var/lib/kubelet".into()],
        };
        assert_eq!(HostState::parse(&s.render()), Some(s));
        let hostile = "run=/run/buzz-real-node/n-1\nsysctl kernel/modprobe=/tmp/x\nsysctl kernel/panic=1;rm\ncreated=/etc\n";
        let parsed = HostState::parse(hostile).unwrap();
        assert!(parsed.sysctls.is_empty(), "{parsed:?}");
        assert!(parsed.created.is_empty(), "{parsed:?}");
        assert_eq!(HostState::parse("sysctl kernel/panic=1\n"), None);
    }

    /// A private parent as [`HOST_DIR`] is, owned by this test's uid.
    fn parent() -> (tempfile::TempDir, u32) {
        let d = tempfile::tempdir().unwrap();
        let me = fs::metadata(d.path()).unwrap().uid();
        fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        (d, me)
    }

    #[test]
    fn a_new_run_dir_is_made_private_once() {
        let (d, me) = parent();
        let run = create_run_dir_in(d.path(), 7, me).unwrap();
        assert_eq!(run, d.path().join("n-7"));
        let m = fs::symlink_metadata(&run).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o777, 0o700);
        assert!(matches!(
            create_run_dir_in(d.path(), 7, me),
            Err(HostError::RunDirExists(p)) if p == run
        ));
    }

    #[test]
    fn a_run_dir_that_is_already_there_fails_the_start() {
        let (d, me) = parent();
        // Another user's dir (chowned when this runs as root, as the node does).
        let planted = d.path().join("n-8");
        fs::create_dir(&planted).unwrap();
        if me == 0 {
            std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
        }
        assert!(matches!(
            create_run_dir_in(d.path(), 8, me),
            Err(HostError::RunDirExists(_))
        ));
        // A symlink to a dir its planter controls.
        let target = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(target.path(), d.path().join("n-9")).unwrap();
        assert!(matches!(
            create_run_dir_in(d.path(), 9, me),
            Err(HostError::RunDirExists(_))
        ));
        assert_eq!(
            fs::read_dir(target.path()).unwrap().count(),
            0,
            "nothing written through the link"
        );
    }

    #[test]
    fn the_host_dir_must_be_a_real_dir_only_its_owner_writes() {
        let (d, me) = parent();
        assert_eq!(dir_fault(d.path(), me).unwrap(), None);
        assert_eq!(
            dir_fault(d.path(), me + 1).unwrap(),
            Some(DirFault::Owner {
                found: me,
                wanted: me + 1
            })
        );
        assert!(matches!(
            create_run_dir_in(d.path(), 1, me + 1),
            Err(HostError::UnsafeDir {
                fault: DirFault::Owner { .. },
                ..
            })
        ));
        for mode in [0o720, 0o702, 0o777] {
            fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
            assert_eq!(
                dir_fault(d.path(), me).unwrap(),
                Some(DirFault::Writable { mode }),
                "{mode:o}"
            );
            assert!(create_run_dir_in(d.path(), 2, me).is_err(), "{mode:o}");
        }
        fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert_eq!(dir_fault(d.path(), me).unwrap(), None, "readable is not writable");

        let (other, _) = parent();
        let link = other.path().join("buzz-real-node");
        std::os::unix::fs::symlink(d.path(), &link).unwrap();
        assert!(matches!(
            ensure_private_dir(&link, me),
            Err(HostError::UnsafeDir {
                fault: DirFault::Symlink,
                ..
            })
        ));
        let file = other.path().join("file");
        fs::write(&file, "").unwrap();
        assert!(matches!(
            ensure_private_dir(&file, me),
            Err(HostError::UnsafeDir {
                fault: DirFault::NotDir,
                ..
            })
        ));
        let fresh = other.path().join("fresh");
        ensure_private_dir(&fresh, me).unwrap();
        assert_eq!(fs::metadata(&fresh).unwrap().mode() & 0o777, 0o700);
        ensure_private_dir(&fresh, me).unwrap();
    }

    #[test]
    fn security_relevant_files_are_only_ever_new() {
        let (d, _) = parent();
        let conf = d.path().join("etc/kubelet.yaml");
        write_new(&conf, b"a", 0o600).unwrap();
        assert_eq!(fs::read(&conf).unwrap(), b"a");
        assert_eq!(fs::metadata(&conf).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            fs::metadata(conf.parent().unwrap()).unwrap().mode() & 0o777,
            0o700
        );
        assert_eq!(
            write_new(&conf, b"b", 0o600).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        let elsewhere = d.path().join("elsewhere");
        let link = d.path().join("etc/ca.crt");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        assert!(write_new(&link, b"c", 0o600).is_err());
        assert!(!elsewhere.exists(), "nothing written through the link");
    }
}
