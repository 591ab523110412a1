//! "Is this process ours": the one rule for every pid the launcher signals
//! or trusts (review b30b1a0 finding 5 and its code-quality note "three
//! policies for one question"): the embedded relay in `relay.json`, a local
//! harness in `deploy/<name>.json`, and the demo's cleanup.
//!
//! A pid alone names nothing: it is reused, and a record survives a reboot.
//! A [`ProcessId`] records what pins one process instance: the pid, its
//! start time (`/proc/<pid>/stat` field 22, clock ticks since boot), the
//! boot it started in (`/proc/sys/kernel/random/boot_id`) and its
//! executable (`/proc/<pid>/exe`). The same pid with another start time or
//! boot is another process; the same instance with another executable has
//! exec'd something else. A record without these fields (an older
//! launcher's bare pid) can never be verified and is never signalled.
//!
//! [`ProcessId::signal`] closes the check-then-kill race: it opens a pidfd
//! first (`pidfd_open`), verifies the identity while the pidfd pins the
//! process, and signals through the pidfd (`pidfd_send_signal`): if the pid
//! was reused before the open, the verification fails; if the process ends
//! after it, the signal reaches nothing. On a kernel without pidfds (before
//! 5.3) it falls back to verify-then-`kill`.
//!
//! The rules over the observed facts ([`judge`], [`parse_stat`]) are pure.

use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

/// The identity of one process instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    /// `/proc/<pid>/stat` field 22: start time in clock ticks since boot.
    pub start_ticks: u64,
    /// The kernel's boot id when the record was taken.
    pub boot_id: String,
    /// `/proc/<pid>/exe` (without a trailing ` (deleted)`: a rebuilt binary
    /// leaves the running instance what it was).
    pub exe: PathBuf,
}

/// What `/proc` says about a pid now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub start_ticks: u64,
    /// The one-letter state of field 3 (`Z` is a zombie: it has ended).
    pub state: char,
    /// `None` when the link cannot be read (a zombie, or another user's process).
    pub exe: Option<PathBuf>,
    pub boot_id: String,
}

/// The verdict on a recorded identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The recorded process is alive.
    Ours,
    /// No such process (or a zombie): it has ended.
    Gone,
    /// The pid now belongs to another process (reuse, another boot, another program).
    Foreign,
}

/// A signalling failure.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error("pid {pid} is no longer the recorded process; nothing was signalled")]
    NotOurs { pid: u32 },
    #[error("cannot signal pid {pid}: {source}")]
    Io { pid: u32, source: std::io::Error },
}

/// Field 3 (state) and field 22 (start time) of a `/proc/<pid>/stat` line.
/// The command name (field 2) is parenthesised and may hold spaces and
/// parentheses, so fields are counted after its last `)`.
pub fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3: field n is fields[n - 3].
    let state = fields.first()?.chars().next()?;
    let start = fields.get(22 - 3)?.parse().ok()?;
    Some((state, start))
}

/// Strips the ` (deleted)` the kernel appends to the exe link of a binary
/// that was replaced on disk.
fn live_path(p: PathBuf) -> PathBuf {
    match p.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(s) => PathBuf::from(s),
        None => p,
    }
}

/// The rule: the recorded identity against what `/proc` shows now.
pub fn judge(recorded: &ProcessId, observed: Option<&Observed>) -> Verdict {
    let Some(o) = observed else {
        return Verdict::Gone;
    };
    if o.boot_id != recorded.boot_id || o.start_ticks != recorded.start_ticks {
        return Verdict::Foreign;
    }
    if o.state == 'Z' || o.state == 'X' {
        return Verdict::Gone;
    }
    match &o.exe {
        Some(exe) if *exe == recorded.exe => Verdict::Ours,
        _ => Verdict::Foreign,
    }
}

fn boot_id() -> std::io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_string())
}

/// Reads `/proc/<pid>` (`None` when there is no such process).
pub fn observe(pid: u32) -> Option<Observed> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (state, start_ticks) = parse_stat(&stat)?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok().map(live_path);
    Some(Observed {
        start_ticks,
        state,
        exe,
        boot_id: boot_id().ok()?,
    })
}

impl ProcessId {
    /// The identity of the live process `pid` (a child just spawned: it has
    /// exec'd once `Command::spawn` returns, and as an unreaped child its pid
    /// cannot be reused meanwhile).
    pub fn of(pid: u32) -> std::io::Result<ProcessId> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let (_, start_ticks) = parse_stat(&stat).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "unreadable /proc/<pid>/stat")
        })?;
        let exe = live_path(std::fs::read_link(format!("/proc/{pid}/exe"))?);
        Ok(ProcessId {
            pid,
            start_ticks,
            boot_id: boot_id()?,
            exe,
        })
    }

    /// This process.
    pub fn current() -> std::io::Result<ProcessId> {
        ProcessId::of(std::process::id())
    }

    /// The verdict now.
    pub fn verify(&self) -> Verdict {
        judge(self, observe(self.pid).as_ref())
    }

    /// True when the recorded process is alive.
    pub fn is_alive(&self) -> bool {
        self.verify() == Verdict::Ours
    }

    /// Sends `sig` to the recorded process only (never its group), after
    /// verifying it through a pidfd that pins it (see the module doc).
    pub fn signal(&self, sig: i32) -> Result<(), SignalError> {
        let pid = self.pid;
        let not_ours = || SignalError::NotOurs { pid };
        let raw_pid = i32::try_from(pid).map_err(|_| not_ours())?;
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw_pid, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ESRCH) => Err(not_ours()),
                Some(libc::ENOSYS) => {
                    if !self.is_alive() {
                        return Err(not_ours());
                    }
                    // SAFETY: kill(2) has no memory effects; the identity was just verified.
                    if unsafe { libc::kill(raw_pid, sig) } != 0 {
                        return Err(SignalError::Io {
                            pid,
                            source: std::io::Error::last_os_error(),
                        });
                    }
                    Ok(())
                }
                _ => Err(SignalError::Io { pid, source: e }),
            };
        }
        let fd = i32::try_from(fd).map_err(|_| not_ours())?;
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if !self.is_alive() {
            return Err(not_ours());
        }
        // SAFETY: pidfd_send_signal(2) on a pidfd we own, no siginfo, no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ESRCH) {
                return Err(not_ours());
            }
            return Err(SignalError::Io { pid, source: e });
        }
        Ok(())
    }

    /// SIGTERM, then SIGKILL once `grace` passed; returns once the process
    /// is gone or `grace` twice over. Never signals anything but this process.
    pub fn terminate(&self, grace: std::time::Duration) -> Result<(), SignalError> {
        self.signal(libc::SIGTERM)?;
        let step = std::time::Duration::from_millis(20);
        let end = std::time::Instant::now() + grace;
        while self.is_alive() && std::time::Instant::now() < end {
            std::thread::sleep(step);
        }
        if self.is_alive() {
            match self.signal(libc::SIGKILL) {
                Ok(()) | Err(SignalError::NotOurs { .. }) => {}
                Err(e) => return Err(e),
            }
            let end = std::time::Instant::now() + grace;
            while self.is_alive() && std::time::Instant::now() < end {
                std::thread::sleep(step);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    fn id(pid: u32, ticks: u64) -> ProcessId {
        ProcessId {
            pid,
            start_ticks: ticks,
            boot_id: "b1".into(),
            exe: "/bin/relay".into(),
        }
    }

    fn seen(ticks: u64, state: char, exe: Option<&str>, boot: &str) -> Observed {
        Observed {
            start_ticks: ticks,
            state,
            exe: exe.map(PathBuf::from),
            boot_id: boot.into(),
        }
    }

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let line = "4711 (we) ird (name) S 1 4711 4711 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_stat(line), Some(('S', 98765)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn only_the_same_instance_on_the_same_boot_with_the_same_exe_is_ours() {
        let r = id(10, 500);
        assert_eq!(judge(&r, None), Verdict::Gone);
        assert_eq!(
            judge(&r, Some(&seen(500, 'S', Some("/bin/relay"), "b1"))),
            Verdict::Ours
        );
        // pid reuse: another start time.
        assert_eq!(
            judge(&r, Some(&seen(501, 'S', Some("/bin/relay"), "b1"))),
            Verdict::Foreign
        );
        // another boot with a coincidental start time.
        assert_eq!(
            judge(&r, Some(&seen(500, 'S', Some("/bin/relay"), "b2"))),
            Verdict::Foreign
        );
        // the same instance exec'd another program, or its exe is unreadable.
        assert_eq!(
            judge(&r, Some(&seen(500, 'S', Some("/bin/sh"), "b1"))),
            Verdict::Foreign
        );
        assert_eq!(judge(&r, Some(&seen(500, 'S', None, "b1"))), Verdict::Foreign);
        // a zombie has ended.
        assert_eq!(judge(&r, Some(&seen(500, 'Z', None, "b1"))), Verdict::Gone);
    }

    #[test]
    fn a_rebuilt_binary_is_still_the_running_instance() {
        assert_eq!(live_path("/x/relay (deleted)".into()), PathBuf::from("/x/relay"));
        assert_eq!(live_path("/x/relay".into()), PathBuf::from("/x/relay"));
    }

    #[test]
    fn a_live_child_is_ours_and_a_reaped_one_is_not_signalled() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let me = ProcessId::of(child.id()).unwrap();
        assert_eq!(me.verify(), Verdict::Ours);
        // The same pid with another start time is refused before any signal.
        let forged = ProcessId {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert!(matches!(
            forged.signal(libc::SIGTERM),
            Err(SignalError::NotOurs { .. })
        ));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the forged identity reached the child"
        );
        me.signal(libc::SIGTERM).unwrap();
        child.wait().unwrap();
        assert_ne!(me.verify(), Verdict::Ours);
        assert!(matches!(
            me.signal(libc::SIGTERM),
            Err(SignalError::NotOurs { .. })
        ));
    }

    /// True when `a` names the same file as `b` (a path may be a symlink).
    fn same_file(a: &Path, b: &Path) -> bool {
        match (a.canonicalize(), b.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => a == b,
        }
    }

    #[test]
    fn this_process_is_ours() {
        let me = ProcessId::current().unwrap();
        assert!(me.is_alive());
        assert!(same_file(&me.exe, &std::env::current_exe().unwrap()));
    }
}
