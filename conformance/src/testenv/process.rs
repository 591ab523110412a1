//! Child-process ownership for the test control plane.
//!
//! Teardown must hold even when a test panics or the test binary is killed:
//! - every child runs in its own process group, so a kill reaches anything it forks;
//! - every child is spawned from one long-lived thread with `PR_SET_PDEATHSIG`
//!   = SIGKILL, so the kernel kills it if the test process dies (the death signal
//!   follows the *spawning thread*, hence the dedicated thread);
//! - a process-exit hook (`atexit`) kills every registered group and removes every
//!   registered temp dir, because a `TestEnv` shared through a `static` is never dropped;
//! - temp dirs carry the owning PID in their name, so a later run sweeps dirs whose
//!   owner died by SIGKILL (where no hook can run).

use std::collections::BTreeMap;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, Once, OnceLock};

/// Prefix of every temp dir a `TestEnv` creates.
pub const TEMP_PREFIX: &str = "buzz-testenv-";

#[derive(Default)]
struct Registry {
    groups: BTreeMap<i32, ()>,
    dirs: BTreeMap<PathBuf, ()>,
}

fn registry() -> &'static Mutex<Registry> {
    static REG: OnceLock<Mutex<Registry>> = OnceLock::new();
    REG.get_or_init(|| {
        install_exit_hook();
        Mutex::new(Registry::default())
    })
}

fn lock() -> std::sync::MutexGuard<'static, Registry> {
    registry().lock().unwrap_or_else(|p| p.into_inner())
}

extern "C" fn on_exit() {
    let reg = lock();
    for pgid in reg.groups.keys() {
        // SAFETY: killpg has no memory-safety preconditions.
        unsafe {
            libc::killpg(*pgid, libc::SIGKILL);
        }
    }
    for dir in reg.dirs.keys() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn install_exit_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a plain extern "C" fn with atexit is sound.
        unsafe {
            libc::atexit(on_exit);
        }
    });
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static TX: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The channel sender lives in a static, so this thread outlives every
                // test; its exit means the process is exiting.
                loop {
                    std::thread::park();
                }
            })
            .expect("spawn the testenv spawner thread");
        Mutex::new(tx)
    })
}

/// Spawns `cmd` in a new process group, tied to this process's lifetime, and
/// registers the group for the exit hook.
pub fn spawn_owned(mut cmd: Command) -> io::Result<Child> {
    // SAFETY: the closure only calls async-signal-safe functions.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    spawner()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, tx))
        .map_err(|_| io::Error::other("testenv spawner thread is gone"))?;
    let child = rx
        .recv()
        .map_err(|_| io::Error::other("testenv spawner thread dropped the request"))??;
    lock().groups.insert(child.id() as i32, ());
    Ok(child)
}

/// Kills the process group led by `child` and reaps the child.
pub fn kill_owned(child: &mut Child) {
    let pgid = child.id() as i32;
    // SAFETY: killpg has no memory-safety preconditions.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
    let _ = child.wait();
    lock().groups.remove(&pgid);
}

/// Creates a private (0700) temp dir named after this process and registers
/// it for removal at exit. Stale dirs of dead owners are swept first.
pub fn owned_temp_dir() -> io::Result<PathBuf> {
    sweep_stale(&std::env::temp_dir());
    let dir = tempfile::Builder::new()
        .prefix(&format!("{TEMP_PREFIX}{}-", std::process::id()))
        .tempdir()?
        .keep();
    lock().dirs.insert(dir.clone(), ());
    Ok(dir)
}

/// Removes a dir made by [`owned_temp_dir`] and forgets it.
pub fn remove_owned_dir(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    lock().dirs.remove(dir);
}

fn sweep_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if !pid_alive(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// True when a process with this PID exists (zombies included).
pub fn pid_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only probes.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}
