//! The embedded default relay as launcher state (issue "First run on
//! embedded defaults", item 2): one relay per state directory, on a
//! loopback port chosen once and kept in `relay.json` with the pid of the
//! process serving it, like a locally started harness.
//!
//! `agent create` without `--relay` records [`url`]; `start`, `chat`,
//! `stop` and `status` call [`ensure_running`] for agents on that URL,
//! which starts `buzz-launcher relay` in the background when no live
//! process serves it. A recorded pid that is gone, or that now belongs to
//! another program (pid reuse), is stale and replaced.

use crate::store::{Store, StoreError, write_private};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The state file's name in the state dir.
pub const STATE_FILE: &str = "relay.json";
/// How long a background start may take to accept connections.
pub const START_WAIT: Duration = Duration::from_secs(15);
/// The argument that marks the relay process (used to recognise our pid).
pub const RELAY_SUBCOMMAND: &str = "relay";

/// `relay.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayState {
    /// The loopback port, fixed for this state dir once chosen.
    #[serde(default)]
    pub port: Option<u16>,
    /// The pid of the process serving it, when one was started.
    #[serde(default)]
    pub pid: Option<u32>,
}

/// An embedded-relay state failure.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot pick a free loopback port for the embedded relay: {0}")]
    NoPort(std::io::Error),
    #[error("cannot start the embedded relay ({program}): {source}")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("the embedded relay did not accept connections on port {port} within {wait:?}; see {log}")]
    NotUp { port: u16, wait: Duration, log: PathBuf },
}

fn state_path(store: &Store) -> PathBuf {
    store.root().join(STATE_FILE)
}

/// Reads `relay.json` (default when absent).
pub fn load(store: &Store) -> Result<RelayState, StoreError> {
    let path = state_path(store);
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| StoreError::Corrupt {
            path,
            message: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RelayState::default()),
        Err(e) => Err(StoreError::Corrupt {
            path,
            message: e.to_string(),
        }),
    }
}

/// Writes `relay.json`.
pub fn save(store: &Store, st: &RelayState) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(st).unwrap_or_default();
    write_private(&state_path(store), &bytes, 0o600)
}

/// The relay's data directory.
pub fn data_dir(store: &Store) -> PathBuf {
    store.root().join("relay")
}

/// The relay's log file (background starts).
pub fn log_path(store: &Store) -> PathBuf {
    store.root().join("logs").join("relay.log")
}

/// The embedded relay's URL for `port`.
pub fn url_for(port: u16) -> String {
    format!("ws://127.0.0.1:{port}")
}

/// The port of this state dir's embedded relay, chosen (a free loopback
/// port) and recorded on first use.
pub fn port(store: &Store) -> Result<u16, EmbeddedError> {
    let mut st = load(store)?;
    if let Some(p) = st.port {
        return Ok(p);
    }
    let p = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(EmbeddedError::NoPort)?
        .port();
    st.port = Some(p);
    save(store, &st)?;
    Ok(p)
}

/// The embedded relay's URL (choosing its port on first use).
pub fn url(store: &Store) -> Result<String, EmbeddedError> {
    Ok(url_for(port(store)?))
}

/// True when `relay_url` is this state dir's embedded relay.
pub fn is_embedded(store: &Store, relay_url: &str) -> Result<bool, StoreError> {
    Ok(load(store)?
        .port
        .is_some_and(|p| relay_url.trim_end_matches('/') == url_for(p)))
}

/// True when `pid` is alive and runs `buzz-launcher relay` (its command
/// line names the relay subcommand); a dead pid or a reused one is stale.
pub fn pid_is_relay(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let is_zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false);
    !is_zombie && args.get(1).is_some_and(|a| *a == RELAY_SUBCOMMAND.as_bytes())
}

fn accepting(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        Duration::from_millis(300),
    )
    .is_ok()
}

/// What [`ensure_running`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// A live relay already served the port.
    Running { pid: u32 },
    /// A relay was started in the background; `replaced` names a stale pid.
    Started { pid: u32, replaced: Option<u32> },
}

/// Makes sure this state dir's relay runs: a recorded live relay process is
/// kept; otherwise `program relay --listen 127.0.0.1:<port> --data <dir>` is
/// started in its own process group with `BUZZ_LAUNCHER_HOME` set to the
/// state dir, its output in [`log_path`], and waited for until it accepts.
pub fn ensure_running(store: &Store, program: &Path) -> Result<Ensured, EmbeddedError> {
    let port = port(store)?;
    let mut st = load(store)?;
    let stale = match st.pid {
        Some(pid) if pid_is_relay(pid) => {
            if wait_accepting(port, START_WAIT) {
                return Ok(Ensured::Running { pid });
            }
            // Alive but not serving: treat as stale, end it first.
            // SAFETY: kill(2) has no memory effects; the pid was checked to run our relay.
            unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            }
            Some(pid)
        }
        other => other,
    };
    let log = log_path(store);
    let log_err = |source| EmbeddedError::Spawn {
        program: program.to_path_buf(),
        source,
    };
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(log_err)?;
    let err = out.try_clone().map_err(log_err)?;
    let child = Command::new(program)
        .arg(RELAY_SUBCOMMAND)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data")
        .arg(data_dir(store))
        .env("BUZZ_LAUNCHER_HOME", store.root())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(log_err)?;
    let pid = child.id();
    // Not waited for: the relay outlives this command. Reaped by init.
    drop(child);
    st.pid = Some(pid);
    save(store, &st)?;
    if !wait_accepting(port, START_WAIT) {
        return Err(EmbeddedError::NotUp {
            port,
            wait: START_WAIT,
            log,
        });
    }
    Ok(Ensured::Started { pid, replaced: stale })
}

fn wait_accepting(port: u16, wait: Duration) -> bool {
    let end = Instant::now() + wait;
    loop {
        if accepting(port) {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What [`stop`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The recorded relay was sent SIGTERM and is gone.
    Stopped { pid: u32 },
    /// No live relay was recorded (a stale pid is cleared).
    NotRunning,
}

/// `buzz-launcher relay stop`: SIGTERM to the recorded relay, waiting up to
/// 5 s for it to end (then SIGKILL); clears the pid.
pub fn stop(store: &Store) -> Result<Stopped, StoreError> {
    let mut st = load(store)?;
    let out = match st.pid {
        Some(pid) if pid_is_relay(pid) => {
            // SAFETY: kill(2) has no memory effects; the pid runs our relay.
            unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            }
            let end = Instant::now() + Duration::from_secs(5);
            while pid_is_relay(pid) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(50));
            }
            if pid_is_relay(pid) {
                // SAFETY: as above.
                unsafe {
                    libc::kill(pid as i32, libc::SIGKILL);
                }
            }
            Stopped::Stopped { pid }
        }
        _ => Stopped::NotRunning,
    };
    st.pid = None;
    save(store, &st)?;
    Ok(out)
}

/// Records `pid` as the relay serving this state dir (a foreground relay).
pub fn record_pid(store: &Store, pid: u32) -> Result<(), StoreError> {
    let mut st = load(store)?;
    st.pid = Some(pid);
    save(store, &st)
}

/// Clears the recorded pid if it is still `pid` (a foreground relay ending).
pub fn clear_pid(store: &Store, pid: u32) -> Result<(), StoreError> {
    let mut st = load(store)?;
    if st.pid == Some(pid) {
        st.pid = None;
        save(store, &st)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_chosen_once_and_the_url_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(!is_embedded(&store, "ws://127.0.0.1:1").unwrap());
        let p = port(&store).unwrap();
        assert_eq!(port(&store).unwrap(), p);
        assert!(is_embedded(&store, &url_for(p)).unwrap());
        assert!(is_embedded(&store, &format!("{}/", url_for(p))).unwrap());
        assert!(!is_embedded(&store, "wss://relay.example.com").unwrap());
    }

    #[test]
    fn a_dead_or_foreign_pid_is_not_our_relay() {
        // Our own test process is alive but is not `… relay`.
        assert!(!pid_is_relay(std::process::id()));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_is_relay(pid));
    }

    #[test]
    fn stop_clears_a_stale_pid() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        save(
            &store,
            &RelayState {
                port: Some(1),
                pid: Some(std::process::id()),
            },
        )
        .unwrap();
        assert_eq!(stop(&store).unwrap(), Stopped::NotRunning);
        assert_eq!(load(&store).unwrap().pid, None);
        assert_eq!(load(&store).unwrap().port, Some(1));
    }
}
