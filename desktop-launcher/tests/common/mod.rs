//! Helpers shared by the `buzz-launcher` binary suites: the binary and the
//! harness, a command runner on a state dir, the relay's cleanup, the
//! processes that belong to one state dir (found through `/proc`, as the
//! "exactly one harness" and "exactly one relay" assertions need), and the
//! Start page of a state dir.
#![allow(dead_code)]

use std::io::{BufRead, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_buzz-launcher");

/// The harness binary beside the launcher, built (or refreshed) first: a
/// `cargo test -p desktop-launcher` does not build other packages' binaries.
pub fn harness() -> PathBuf {
    if let Some(p) = std::env::var_os("BUZZ_ACP_BIN") {
        return PathBuf::from(p);
    }
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "buzz-acp", "--bin", "buzz-acp"])
        .current_dir(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building buzz-acp");
    let p = Path::new(BIN).with_file_name("buzz-acp");
    assert!(p.is_file(), "{} after the build", p.display());
    p
}

pub fn run(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("BUZZ_LAUNCHER_HOME", home)
        .envs(env.iter().copied())
        .output()
        .expect("run buzz-launcher")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes `text` to `path` as an executable (mode 755) script.
pub fn executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Installs the provider `buzz-backend-ID`, the script `text`, in `dir`
/// (created if need be); its path.
pub fn provider(dir: &Path, id: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(format!("buzz-backend-{id}"));
    executable(&p, text);
    p
}

/// Ends the background relay of a state dir when a test ends, even on a failed assertion.
pub struct StopRelay<'a>(pub &'a Path);

impl Drop for StopRelay<'_> {
    fn drop(&mut self) {
        let _ = run(self.0, &["relay", "stop"], &[]);
    }
}

/// Live (non-zombie) processes running `exe` whose environment has
/// `BUZZ_LAUNCHER_HOME=home`: the harnesses or relays of one state dir (a
/// harness's built-in echo agent, the same exe, is not counted).
pub fn processes_of(home: &Path, exe: &Path) -> Vec<u32> {
    let exe = exe.canonicalize().unwrap_or_else(|_| exe.to_path_buf());
    let marker = format!("BUZZ_LAUNCHER_HOME={}", home.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let dir = e.path();
        let Ok(link) = std::fs::read_link(dir.join("exe")) else {
            continue;
        };
        let link = PathBuf::from(link.to_string_lossy().trim_end_matches(" (deleted)"));
        if link != exe {
            continue;
        }
        let zombie = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().starts_with('Z')))
            .unwrap_or(true);
        let env = std::fs::read(dir.join("environ")).unwrap_or_default();
        // The harness runs its built-in echo agent as its own exe with a hidden argument.
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let echo_agent = cmdline
            .split(|b| *b == 0)
            .any(|a| a == buzz_contract::env::BUILTIN_ECHO_ARG.as_bytes());
        if !zombie && !echo_agent && env.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// Waits up to `limit` for `cond`; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGKILLs every process of `pids` (test cleanup of processes the test started).
pub fn kill_all(pids: &[u32]) {
    for p in pids {
        if let Ok(p) = i32::try_from(*p) {
            // SAFETY: kill(2) on processes this test's state dir started; no memory is involved.
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
        }
    }
}

/// The relay processes of one state dir (`buzz-launcher relay …`, not a
/// `relay stop` or `relay status` command).
pub fn relays_of(home: &Path) -> Vec<u32> {
    processes_of(home, Path::new(BIN))
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.get(1) == Some(&&b"relay"[..]) && !matches!(args.get(2), Some(&b"stop") | Some(&b"status"))
        })
        .collect()
}

/// `relay.json` of a state dir.
pub fn relay_state(home: &Path) -> serde_json::Value {
    std::fs::read(home.join("relay.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// A state dir with an owner and one echo agent on its embedded relay.
pub fn home_with_agent(dir: &Path, agent: &str) -> PathBuf {
    let home = dir.to_path_buf();
    let o = run(&home, &["init"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&home, &["agent", "create", agent, "--agent", "echo"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    home
}

/// The Start page of a state dir, served by `buzz-launcher ui` until dropped.
pub struct Page {
    child: Child,
    /// `HOST:PORT` of the printed URL.
    pub host: String,
    token: String,
}

impl Page {
    /// Runs `ui --listen 127.0.0.1:0` on `home` with `env` and reads the
    /// printed URL.
    pub fn open(home: &Path, env: &[(&str, &str)]) -> Page {
        Page::listen(home, "127.0.0.1:0", env)
    }

    /// As [`Page::open`], listening on `listen`.
    pub fn listen(home: &Path, listen: &str, env: &[(&str, &str)]) -> Page {
        let mut child = Command::new(BIN)
            .args(["ui", "--listen", listen])
            .env("BUZZ_LAUNCHER_HOME", home)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("Start page: http://")
            .expect("the page's URL")
            .to_string();
        let (host, token) = url.split_once("/#token=").unwrap();
        Page {
            host: host.to_string(),
            token: token.to_string(),
            child,
        }
    }

    /// `GET path` with the page's token: the whole response, which must be a 200.
    pub fn get(&self, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(&self.host).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            self.host, self.token
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        text
    }

    /// The body of [`Page::get`].
    pub fn get_body(&self, path: &str) -> String {
        let text = self.get(path);
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default()
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
