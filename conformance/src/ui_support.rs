//! Helpers for the Start page suites (`tests/ui.rs`, `tests/ui_browser.rs`;
//! issue 11): the real `buzz-launcher ui` process on a temp state dir, a raw
//! HTTP/1.1 client that can send any `Host`/`Origin` (what a browser under a
//! DNS-rebinding or CSRF attack would send), and an event-stream reader.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `buzz-launcher <args>` (the binary `bin`; the suites pass
/// `env!("CARGO_BIN_EXE_buzz-launcher-under-test")`, built from the
/// launcher's own source) with `BUZZ_LAUNCHER_HOME=home`.
pub fn launcher(bin: &Path, home: &Path, args: &[&str], envs: &[(String, String)]) -> std::process::Output {
    Command::new(bin)
        .args(args)
        .env("BUZZ_LAUNCHER_HOME", home)
        .envs(envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .output()
        .expect("run buzz-launcher")
}

/// Runs `buzz-launcher init` as [`launcher`] does; it must succeed.
pub fn init(bin: &Path, home: &Path, envs: &[(String, String)]) {
    let out = launcher(bin, home, &["init"], envs);
    assert!(
        out.status.success(),
        "init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// A header value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Status line, headers and body, for canary scans.
    pub fn all_text(&self) -> String {
        let mut s = format!("{}\n", self.status);
        for (k, v) in &self.headers {
            s.push_str(&format!("{k}: {v}\n"));
        }
        s.push_str(&self.body);
        s
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            out.extend_from_slice(raw);
            return out;
        };
        let size = std::str::from_utf8(&raw[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok());
        let Some(size) = size else {
            out.extend_from_slice(raw);
            return out;
        };
        raw = &raw[eol + 2..];
        if size == 0 {
            return out;
        }
        let n = size.min(raw.len());
        out.extend_from_slice(&raw[..n]);
        raw = &raw[n..];
        if raw.starts_with(b"\r\n") {
            raw = &raw[2..];
        }
    }
}

fn parse_response(raw: &[u8]) -> Resp {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let body_raw = raw.get(split + 4..).unwrap_or(&[]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(body_raw)
    } else {
        body_raw.to_vec()
    };
    Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    }
}

/// One HTTP/1.1 request to `addr` with exactly the given headers (no
/// `Host` is added: pass it). Reads until the server closes or `limit`.
pub fn raw_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    limit: Duration,
) -> Resp {
    let mut s = connect(addr, "connect to the Start page");
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body.unwrap_or(""));
    s.write_all(req.as_bytes()).expect("write request");
    parse_response(&read_for(&mut s, limit, |_| false))
}

/// A connection to `addr` whose reads give up after 200 ms, so that a
/// reader can check its deadline ([`read_for`]).
fn connect(addr: &str, what: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect(what);
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    s
}

/// Reads `s` until the peer closes it, a read fails, `limit` passes or
/// `done` holds for what was read so far; what was read.
fn read_for(s: &mut TcpStream, limit: Duration, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let end = Instant::now() + limit;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
        if done(&raw) {
            break;
        }
    }
    raw
}

/// A running `buzz-launcher ui`.
pub struct UiProc {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The page token from the printed URL.
    pub token: String,
    /// The URL as printed.
    pub url: String,
    /// The process's stderr file.
    pub stderr: PathBuf,
}

impl UiProc {
    /// Starts `bin ui --listen 127.0.0.1:0` on `home` with extra env.
    pub fn start(bin: &Path, home: &Path, envs: &[(String, String)]) -> UiProc {
        UiProc::start_with(bin, home, &[], envs)
    }

    /// As [`UiProc::start`], with extra `ui` arguments.
    pub fn start_with(bin: &Path, home: &Path, args: &[&str], envs: &[(String, String)]) -> UiProc {
        let stderr = home.with_extension("ui-stderr.log");
        let err = std::fs::File::create(&stderr).expect("stderr file");
        let mut child = Command::new(bin)
            .args(["ui", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("BUZZ_LAUNCHER_HOME", home)
            .envs(envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .expect("spawn buzz-launcher ui");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let url = line
            .trim()
            .strip_prefix("Start page: ")
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!(
                    "buzz-launcher ui printed no URL ({line:?}); stderr:\n{}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            })
            .to_string();
        let rest = url.strip_prefix("http://").expect("http URL");
        let (addr, frag) = rest.split_once("/#token=").expect("URL with #token=");
        UiProc {
            child,
            addr: addr.to_string(),
            token: frag.to_string(),
            url,
            stderr,
        }
    }

    /// A request with the right `Host` and the token.
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> Resp {
        let auth = format!("Bearer {}", self.token);
        raw_request(
            &self.addr,
            method,
            path,
            &[("Host", &self.addr), ("Authorization", &auth)],
            body,
            Duration::from_secs(120),
        )
    }

    /// Reads the event stream for up to `limit`, stopping once `until`
    /// holds for the text read so far. Returns the decoded stream text.
    pub fn events(&self, limit: Duration, until: impl Fn(&str) -> bool) -> String {
        let auth = format!("Bearer {}", self.token);
        let mut s = connect(&self.addr, "connect");
        let req = format!(
            "GET /api/events HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth}\r\n\r\n",
            self.addr
        );
        s.write_all(req.as_bytes()).expect("write");
        let raw = read_for(&mut s, limit, |raw| until(&parse_response(raw).body));
        parse_response(&raw).all_text()
    }

    /// The process's stderr so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for UiProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Live (non-zombie) processes running `exe` whose environment has
/// `BUZZ_LAUNCHER_HOME=home`: the local harnesses of one state dir (a
/// harness's built-in echo agent, the same exe with a hidden first
/// argument, is not counted). What "exactly one harness" is checked against.
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
        if exe != Path::new(link.to_string_lossy().trim_end_matches(" (deleted)")) {
            continue;
        }
        let zombie = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().starts_with('Z')))
            .unwrap_or(true);
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let echo_agent = cmdline
            .split(|b| *b == 0)
            .any(|a| a == buzz_contract::env::BUILTIN_ECHO_ARG.as_bytes());
        let env = std::fs::read(dir.join("environ")).unwrap_or_default();
        if !zombie && !echo_agent && env.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// Waits up to `limit` for `cond`, polling every 100 ms; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SIGKILLs the process groups led by `pids` (cleanup of harnesses a test started).
pub fn kill_groups(pids: &[u32]) {
    for p in pids {
        if let Ok(p) = i32::try_from(*p) {
            // SAFETY: kill(2) on process groups this test's state dir started; no memory is involved.
            unsafe {
                libc::kill(-p, libc::SIGKILL);
                libc::kill(p, libc::SIGKILL);
            }
        }
    }
}
