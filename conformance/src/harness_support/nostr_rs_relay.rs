//! nostr-rs-relay (issue 35 item 1): a production relay nobody here wrote,
//! as its operators run it — its SQLite store, NIP-42 on, its own limits
//! left at their defaults — as a child process on loopback or a bridge
//! address. `scripts/relay-build.sh` installs the pinned release; the
//! binary is `BUZZ_NOSTR_RS_RELAY`, else that script's cache.
//!
//! What it does that the suite's own relays do not (docs/relays.md):
//! it sends its AUTH challenge on connect but requires authentication for
//! nothing (`nip42_dms` gates only kind 4), answers a good AUTH with no
//! `OK` at all, compares only the host of the AUTH's `relay` tag, and keeps
//! no ephemeral event (presence, observer frames) — it forwards them to the
//! subscriptions live at the time.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The pinned version (`scripts/relay-build.sh`).
pub const VERSION: &str = "0.8.12";

/// The relay binary: `BUZZ_NOSTR_RS_RELAY`, else `scripts/relay-build.sh`'s
/// cache. Panics with the fix when neither is there.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("BUZZ_NOSTR_RS_RELAY") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("BUZZ_RELAYS_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("buzz-relays")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/buzz-relays")))
        .expect("BUZZ_NOSTR_RS_RELAY, BUZZ_RELAYS_CACHE, XDG_CACHE_HOME or HOME must be set");
    let bin = cache.join(format!("nostr-rs-relay-{VERSION}/bin/nostr-rs-relay"));
    assert!(
        bin.is_file(),
        "nostr-rs-relay {VERSION} is not at {}: run scripts/relay-build.sh (scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// A running nostr-rs-relay; stopped (SIGKILL) when dropped.
pub struct NostrRsRelay {
    pub url: String,
    child: Child,
    dir: tempfile::TempDir,
}

impl NostrRsRelay {
    /// Starts one on `ip` at a free port, with a fresh store; returns once
    /// it accepts connections.
    pub fn start(ip: IpAddr) -> NostrRsRelay {
        let port = std::net::TcpListener::bind((ip, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = tempfile::tempdir().expect("the relay's dir");
        let url = format!("ws://{ip}:{port}");
        let config = format!(
            "[info]\nrelay_url = \"{url}/\"\nname = \"buzz suite\"\n\n\
             [database]\ndata_directory = \"{data}\"\n\n\
             [network]\naddress = \"{ip}\"\nport = {port}\n\n\
             [options]\nreject_future_seconds = 1800\n\n\
             [authorization]\nnip42_auth = true\nnip42_dms = true\n",
            data = dir.path().display()
        );
        let config_path = dir.path().join("config.toml");
        std::fs::write(&config_path, config).expect("the relay's config");
        let log = std::fs::File::create(dir.path().join("relay.log")).expect("the relay's log");
        let child = Command::new(binary())
            .arg("--config")
            .arg(&config_path)
            .arg("--db")
            .arg(dir.path())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("nostr-rs-relay starts");
        let mut relay = NostrRsRelay { url, child, dir };
        let end = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect((ip, port)).is_err() {
            if let Ok(Some(st)) = relay.child.try_wait() {
                panic!("nostr-rs-relay exited ({st}): {}", relay.log());
            }
            assert!(
                Instant::now() < end,
                "nostr-rs-relay never listened: {}",
                relay.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        relay
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("relay.log")).unwrap_or_default()
    }

    /// Its process id (for benchmarks' CPU and memory figures).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident memory now, in kB (`/proc`), if it still runs.
    pub fn rss_kb(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    }
}

impl Drop for NostrRsRelay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The relay a test world's agent uses: the suite's own test relay, or
/// nostr-rs-relay. Only its URL is read; it runs while this lives.
pub struct AnyRelay {
    pub url: String,
    _own: Option<super::TestRelay>,
    _production: Option<NostrRsRelay>,
}

impl AnyRelay {
    /// The suite's own relay on `ip` (NIP-42 required).
    pub async fn own(ip: IpAddr) -> AnyRelay {
        let r = super::TestRelay::start_at(ip).await;
        AnyRelay {
            url: r.url.clone(),
            _own: Some(r),
            _production: None,
        }
    }

    /// The suite's own relay, to stop and restart it (`None` for nostr-rs-relay).
    pub fn own_mut(&mut self) -> Option<&mut super::TestRelay> {
        self._own.as_mut()
    }

    /// nostr-rs-relay on `ip`.
    pub fn production(ip: IpAddr) -> AnyRelay {
        let r = NostrRsRelay::start(ip);
        AnyRelay {
            url: r.url.clone(),
            _own: None,
            _production: Some(r),
        }
    }
}
