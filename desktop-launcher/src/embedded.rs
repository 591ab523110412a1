//! The embedded default relay as launcher state (issue "First run on
//! embedded defaults", item 2): one relay per state directory, on a
//! loopback port chosen once and kept in `relay.json` with the identity of
//! the process serving it, like a locally started harness.
//!
//! `agent create` without `--relay` records [`url`]; `start`, `chat`,
//! `stop` and `status` on the CLI and Start, Stop and chat on the Start
//! page call [`ensure_for`] (the one start-on-demand path), which starts
//! `buzz-launcher relay` in the background when no live relay of this state
//! dir serves it.
//!
//! Serialised and identified (review b30b1a0 findings 1 and 5):
//! - [`ensure_running`] and [`stop`] hold `locks/relay.lock` across the
//!   whole check, spawn and wait, and re-read `relay.json` under it: two
//!   launcher processes (or two Start page requests) never both spawn.
//! - Only the process that bound the port records itself ([`record_self`],
//!   called by `buzz-launcher relay` once it serves): a spawned relay that
//!   lost the port (or failed in any way) never becomes the recorded one.
//!   [`ensure_running`] waits for its own child's record, not for "the port
//!   accepts", which another process could satisfy.
//! - The record is a [`ProcessId`] (pid, start time, boot, executable) plus
//!   the canonical data directory. A record is this state dir's relay only
//!   when the identity verifies *and* the data dir is this state dir's
//!   `relay/`; anything else (a dead pid, a reused one, a bare pid from an
//!   older launcher, another state dir's relay) is stale: it is replaced,
//!   and never signalled. Signals go through [`ProcessId::signal`] (pidfd).
//!
//! The review suggests identifying the relay by a `flock` on its data dir;
//! the relay server takes that lock itself (`buzz_relay::data_lock`), so this module does
//! not depend on it and checks the recorded identity instead.

use crate::lock;
use crate::procid::{ProcessId, SignalError, Verdict};
use crate::record::AgentRecord;
use crate::store::{Store, StoreError, write_private};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The state file's name in the state dir.
pub const STATE_FILE: &str = "relay.json";
/// How long a background start may take to serve.
pub const START_WAIT: Duration = Duration::from_secs(15);
/// How long a relay may take to end after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// The subcommand that runs the relay.
pub const RELAY_SUBCOMMAND: &str = "relay";

/// The process serving the relay, as it recorded itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayProcess {
    #[serde(flatten)]
    pub id: ProcessId,
    /// Its data directory, canonical.
    pub data: PathBuf,
}

/// `relay.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayState {
    /// The loopback port, fixed for this state dir once chosen.
    #[serde(default)]
    pub port: Option<u16>,
    /// The pid of the recorded process (for people reading the file; the
    /// identity is [`RelayState::process`]).
    #[serde(default)]
    pub pid: Option<u32>,
    /// The identity of the process serving it, recorded by that process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<RelayProcess>,
}

/// An embedded-relay state failure.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error("cannot locate the buzz-launcher executable to start the embedded relay: {0}")]
    OwnExe(std::io::Error),
    #[error("cannot pick a free loopback port for the embedded relay: {0}")]
    NoPort(std::io::Error),
    #[error("cannot start the embedded relay ({program}): {source}")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("the embedded relay exited ({status}) before it served port {port}; see {log}")]
    Exited {
        port: u16,
        status: std::process::ExitStatus,
        log: PathBuf,
    },
    #[error("the embedded relay did not serve port {port} within {wait:?}; see {log}")]
    NotUp { port: u16, wait: Duration, log: PathBuf },
    #[error("cannot stop the embedded relay: {0}")]
    Signal(#[from] SignalError),
    #[error(
        "{HOST_ENV}={value:?} is not an IPv4 address of this machine; set it to the address the relay \
         must bind (e.g. 10.213.0.1, the local cluster's pod bridge) or unset it for 127.0.0.1"
    )]
    BadHost { value: String },
}

/// Binds the embedded relay to this address instead of 127.0.0.1, and makes
/// it the host of the relay URL agents get: for a bridge address pods reach
/// (`scripts/local-cluster.sh` exports it). The relay is loopback-only
/// unless told otherwise; this is the telling, so the relay starts with
/// `--allow-public` for a non-loopback value.
pub const HOST_ENV: &str = "BUZZ_EMBEDDED_RELAY_HOST";

/// The address the embedded relay binds and agents dial ([`HOST_ENV`]).
pub fn host() -> Result<Ipv4Addr, EmbeddedError> {
    parse_host(std::env::var(HOST_ENV).ok().as_deref())
}

/// The rule of [`host`]: unset or blank is loopback; anything else must be
/// an IPv4 address.
pub fn parse_host(value: Option<&str>) -> Result<Ipv4Addr, EmbeddedError> {
    match value.map(str::trim) {
        Some(v) if !v.is_empty() => v
            .parse()
            .map_err(|_| EmbeddedError::BadHost { value: v.to_string() }),
        _ => Ok(Ipv4Addr::LOCALHOST),
    }
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

/// Writes `relay.json` (a whole replacement: prefer [`update`]).
pub fn save(store: &Store, st: &RelayState) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(st).unwrap_or_default();
    write_private(&state_path(store), &bytes, 0o600)
}

/// Read-modify-write of `relay.json` under `locks/relay-state.lock` (never
/// held long: a relay records itself under it while [`ensure_running`]
/// holds the start lock and waits for that record).
pub fn update(store: &Store, change: impl FnOnce(&mut RelayState)) -> Result<RelayState, StoreError> {
    let _held = lock::lock(&store.lock_path("relay-state"))?;
    let mut st = load(store)?;
    change(&mut st);
    save(store, &st)?;
    Ok(st)
}

/// The relay's data directory.
pub fn data_dir(store: &Store) -> PathBuf {
    store.root().join("relay")
}

/// The relay's log file (background starts).
pub fn log_path(store: &Store) -> PathBuf {
    store.root().join("logs").join("relay.log")
}

/// The embedded relay's URL for `port`, on [`host`] (a bad [`HOST_ENV`]
/// value is reported by [`url`] and [`ensure_running`]; here it reads as
/// loopback).
pub fn url_for(port: u16) -> String {
    format!("ws://{}:{port}", host().unwrap_or(Ipv4Addr::LOCALHOST))
}

/// The port of this state dir's embedded relay, chosen (a free loopback
/// port) and recorded on first use.
pub fn port(store: &Store) -> Result<u16, EmbeddedError> {
    if let Some(p) = load(store)?.port {
        return Ok(p);
    }
    let fresh = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(EmbeddedError::NoPort)?
        .port();
    // Under the state lock: two first uses at once agree on one port.
    let st = update(store, |st| {
        st.port.get_or_insert(fresh);
    })?;
    Ok(st.port.unwrap_or(fresh))
}

/// The embedded relay's URL (choosing its port on first use).
pub fn url(store: &Store) -> Result<String, EmbeddedError> {
    host()?;
    Ok(url_for(port(store)?))
}

/// True when `relay_url` is this state dir's embedded relay.
pub fn is_embedded(store: &Store, relay_url: &str) -> Result<bool, StoreError> {
    Ok(load(store)?
        .port
        .is_some_and(|p| relay_url.trim_end_matches('/') == url_for(p)))
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The rule: the recorded relay is this state dir's when its identity
/// verifies and it serves this state dir's data directory.
pub fn ours(store: &Store, st: &RelayState) -> Option<ProcessId> {
    let p = st.process.as_ref()?;
    (same_dir(&p.data, &data_dir(store)) && p.id.verify() == Verdict::Ours).then(|| p.id.clone())
}

/// The pid of this state dir's running relay, if one is recorded and verified.
pub fn running(store: &Store) -> Result<Option<u32>, StoreError> {
    Ok(ours(store, &load(store)?).map(|id| id.pid))
}

fn accepting(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from((host().unwrap_or(Ipv4Addr::LOCALHOST), port)),
        Duration::from_millis(300),
    )
    .is_ok()
}

/// A recorded relay that was not serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    pub pid: u32,
    /// True when it was this state dir's relay (alive, not serving) and was
    /// ended; false when the record named another process, which was left alone.
    pub ended: bool,
}

/// What [`ensure_running`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// A live relay of this state dir already served the port.
    Running { pid: u32 },
    /// A relay was started in the background; `replaced` names a stale record.
    Started { pid: u32, replaced: Option<Stale> },
}

/// The one start-on-demand path: when one of `agents` uses this state
/// dir's embedded relay, makes sure it runs ([`ensure_running`] with this
/// executable). `None` when no agent uses it.
pub fn ensure_for(store: &Store, agents: &[AgentRecord]) -> Result<Option<Ensured>, EmbeddedError> {
    let mut uses = false;
    for a in agents {
        uses |= is_embedded(store, &a.relay_url)?;
    }
    if !uses {
        return Ok(None);
    }
    let exe = std::env::current_exe().map_err(EmbeddedError::OwnExe)?;
    ensure_running(store, &exe).map(Some)
}

/// Makes sure this state dir's relay runs (see the module doc): a recorded
/// live relay of this state dir that serves the port is kept; otherwise
/// `program relay --listen 127.0.0.1:<port> --data <dir>` is started in its
/// own process group with `BUZZ_LAUNCHER_HOME` set to the state dir, its
/// output in [`log_path`], and waited for until it has recorded itself and
/// serves. Blocks (up to [`START_WAIT`] and more while another start holds
/// the lock): call it off an async runtime.
pub fn ensure_running(store: &Store, program: &Path) -> Result<Ensured, EmbeddedError> {
    let _start = lock::lock(&store.lock_path("relay"))?;
    let port = port(store)?;
    let st = load(store)?;
    let replaced = match ours(store, &st) {
        Some(id) => {
            if wait_accepting(port, START_WAIT) {
                return Ok(Ensured::Running { pid: id.pid });
            }
            // Ours, alive, but not serving: end it before starting another.
            match id.terminate(STOP_GRACE) {
                Ok(()) | Err(SignalError::NotOurs { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            Some(Stale {
                pid: id.pid,
                ended: true,
            })
        }
        None => st.pid.map(|pid| Stale { pid, ended: false }),
    };
    update(store, |st| {
        st.pid = None;
        st.process = None;
    })?;
    let log = log_path(store);
    let log_err = |source| EmbeddedError::Spawn {
        program: program.to_path_buf(),
        source,
    };
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(log_err)?;
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(log_err)?;
    let err = out.try_clone().map_err(log_err)?;
    let bind = host()?;
    let mut cmd = Command::new(program);
    cmd.arg(RELAY_SUBCOMMAND);
    if !bind.is_loopback() {
        cmd.arg("--allow-public");
    }
    let mut child = cmd
        .arg("--listen")
        .arg(format!("{bind}:{port}"))
        .arg("--data")
        .arg(data_dir(store))
        .env(crate::limits::HOME_ENV, store.root())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(log_err)?;
    let pid = child.id();
    let end = Instant::now() + START_WAIT;
    loop {
        let st = load(store)?;
        if ours(store, &st).is_some_and(|id| id.pid == pid) && accepting(port) {
            // Not waited for here: the relay outlives this command. A
            // thread reaps it if it ends while this process lives.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            return Ok(Ensured::Started { pid, replaced });
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Another relay of this state dir may have won the port (a
            // foreground `buzz-launcher relay`): then that one serves.
            if let Some(id) = ours(store, &st).filter(|_| accepting(port)) {
                return Ok(Ensured::Running { pid: id.pid });
            }
            return Err(EmbeddedError::Exited { port, status, log });
        }
        if Instant::now() >= end {
            // Our own unreaped child: its pid cannot have been reused.
            let _ = child.kill();
            let _ = child.wait();
            return Err(EmbeddedError::NotUp {
                port,
                wait: START_WAIT,
                log,
            });
        }
        std::thread::sleep(Duration::from_millis(25));
    }
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
    /// No live relay of this state dir was recorded (a stale record is cleared).
    NotRunning,
}

/// `buzz-launcher relay stop`: SIGTERM to this state dir's verified relay,
/// SIGKILL after [`STOP_GRACE`]; clears the record. A record that does not
/// verify is cleared and nothing is signalled.
pub fn stop(store: &Store) -> Result<Stopped, EmbeddedError> {
    let _start = lock::lock(&store.lock_path("relay"))?;
    let out = match ours(store, &load(store)?) {
        Some(id) => match id.terminate(STOP_GRACE) {
            Ok(()) => Stopped::Stopped { pid: id.pid },
            Err(SignalError::NotOurs { .. }) => Stopped::NotRunning,
            Err(e) => return Err(e.into()),
        },
        None => Stopped::NotRunning,
    };
    update(store, |st| {
        st.pid = None;
        st.process = None;
    })?;
    Ok(out)
}

/// Records this process as the relay serving this state dir, once it has
/// bound the port (`buzz-launcher relay`, background or foreground).
pub fn record_self(store: &Store, data: &Path) -> Result<(), StoreError> {
    let id = ProcessId::current().map_err(|e| StoreError::Io {
        action: "read the identity of",
        path: PathBuf::from("/proc/self"),
        source: e,
    })?;
    let data = data.canonicalize().unwrap_or_else(|_| data.to_path_buf());
    update(store, |st| {
        st.pid = Some(id.pid);
        st.process = Some(RelayProcess { id, data });
    })?;
    Ok(())
}

/// Clears the record if it is still this process (a relay ending).
pub fn clear_self(store: &Store) -> Result<(), StoreError> {
    let me = std::process::id();
    update(store, |st| {
        if st.process.as_ref().is_some_and(|p| p.id.pid == me) || st.pid == Some(me) {
            st.pid = None;
            st.process = None;
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_host_is_loopback_unless_an_ipv4_address_is_given() {
        assert_eq!(parse_host(None).unwrap(), Ipv4Addr::LOCALHOST);
        assert_eq!(parse_host(Some("  ")).unwrap(), Ipv4Addr::LOCALHOST);
        assert_eq!(
            parse_host(Some("10.213.0.1")).unwrap(),
            Ipv4Addr::new(10, 213, 0, 1)
        );
        let err = parse_host(Some("relay.example.com")).unwrap_err().to_string();
        assert!(
            err.contains("BUZZ_EMBEDDED_RELAY_HOST") && err.contains("not an IPv4 address"),
            "{err}"
        );
    }

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
    fn a_record_is_ours_only_with_a_verified_identity_and_this_state_dirs_data() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        std::fs::create_dir_all(data_dir(&store)).unwrap();
        let me = ProcessId::current().unwrap();
        let rec = |id: ProcessId, data: PathBuf| RelayState {
            port: Some(1),
            pid: Some(id.pid),
            process: Some(RelayProcess { id, data }),
        };
        assert_eq!(ours(&store, &rec(me.clone(), data_dir(&store))), Some(me.clone()));
        // Another state dir's relay (its identity verifies) is not ours.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(ours(&store, &rec(me.clone(), other.path().to_path_buf())), None);
        // A reused pid (another start time) is not ours.
        let reused = ProcessId {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert_eq!(ours(&store, &rec(reused, data_dir(&store))), None);
        // A bare pid (an older launcher's record) is never ours.
        let bare = RelayState {
            port: Some(1),
            pid: Some(me.pid),
            process: None,
        };
        assert_eq!(ours(&store, &bare), None);
    }

    #[test]
    fn stop_clears_a_stale_record_and_signals_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut bystander = Command::new("sleep").arg("30").spawn().unwrap();
        save(
            &store,
            &RelayState {
                port: Some(1),
                pid: Some(bystander.id()),
                process: None,
            },
        )
        .unwrap();
        assert_eq!(stop(&store).unwrap(), Stopped::NotRunning);
        assert!(
            bystander.try_wait().unwrap().is_none(),
            "a bare pid was signalled"
        );
        let _ = bystander.kill();
        let _ = bystander.wait();
        assert_eq!(load(&store).unwrap().pid, None);
        assert_eq!(load(&store).unwrap().port, Some(1));
    }
}
