//! Helpers shared by the ingest's binary-level test families: start the real
//! `runtime-ingest serve`, speak raw HTTP/1.1 to it, gzip bodies, read its RSS.

#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `runtime-ingest serve`.
pub struct Ingest {
    pub child: Child,
    pub url: String,
    pub addr: String,
    /// Where its stderr goes (when asked for).
    pub stderr: Option<PathBuf>,
}

/// The real collector binary, next to this crate's binaries
/// (`target/<profile>/runtime-agent`).
pub fn agent_bin() -> PathBuf {
    let ingest = PathBuf::from(env!("CARGO_BIN_EXE_runtime-ingest"));
    let path = ingest.with_file_name("runtime-agent");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p runtime-agent` (or test both crates together)",
        path.display()
    );
    path
}

/// One raw HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

impl Ingest {
    /// `serve --listen <listen> --db <db>` plus `extra`; stderr to `stderr` if given.
    pub fn start_with(db: &Path, listen: &str, extra: &[&str], stderr: Option<&Path>) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_runtime-ingest"));
        cmd.args(["serve", "--listen", listen, "--db"])
            .arg(db)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        match stderr {
            Some(path) => cmd.stderr(fs::File::create(path).unwrap()),
            None => cmd.stderr(Stdio::null()),
        };
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        let addr = url.trim_start_matches("http://").to_owned();
        Self {
            child,
            url,
            addr,
            stderr: stderr.map(Path::to_owned),
        }
    }

    /// With `--admin` (the debug and fault routes).
    pub fn start(db: &Path, listen: &str) -> Self {
        Self::start_with(db, listen, &["--admin"], None)
    }

    pub fn try_request(&self, method: &str, path: &str, body: &str) -> Option<(u16, Vec<u8>)> {
        let a = raw(&self.addr, method, path, "", body.as_bytes()).ok()?;
        Some((a.status, a.body))
    }

    pub fn request(&self, method: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
        self.try_request(method, path, body).expect("the ingest answers")
    }

    pub fn faults(&self, script: &str) {
        assert_eq!(self.request("POST", "/admin/faults", script).0, 204);
    }

    pub fn records(&self) -> Vec<Value> {
        let (status, body) = self.request("GET", "/debug/records", "");
        assert_eq!(status, 200);
        serde_json::from_slice(&body).unwrap()
    }

    pub fn received(&self) -> Vec<Value> {
        let (status, body) = self.request("GET", "/debug/received", "");
        assert_eq!(status, 200);
        serde_json::from_slice(&body).unwrap()
    }

    pub fn stats(&self) -> Value {
        let (status, body) = self.request("GET", "/debug/stats", "");
        assert_eq!(status, 200);
        serde_json::from_slice(&body).unwrap()
    }

    /// POST a gzip JSON body to `/v1/ingest/{kind}`.
    pub fn post(&self, kind: &str, decoded: &[u8]) -> Answer {
        self.post_wire(kind, &gz(decoded))
    }

    /// POST an already gzipped body.
    pub fn post_wire(&self, kind: &str, wire: &[u8]) -> Answer {
        raw(
            &self.addr,
            "POST",
            &format!("/v1/ingest/{kind}"),
            "content-type: application/json\r\ncontent-encoding: gzip\r\n",
            wire,
        )
        .expect("the ingest answers")
    }

    /// VmRSS of the ingest process, bytes.
    pub fn rss(&self) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
            * 1024
    }

    /// Everything the ingest wrote to stderr so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.stderr.as_ref().expect("started with a stderr file")).unwrap()
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request on a fresh connection (`connection: close`), read to the end.
pub fn raw(addr: &str, method: &str, path: &str, headers: &str, body: &[u8]) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{headers}content-length: {}\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    parse_answer(&out)
}

/// Split a raw response (content-length bodies only, as this ingest answers).
pub fn parse_answer(out: &[u8]) -> std::io::Result<Answer> {
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "no HTTP response");
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(bad)?;
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    Ok(Answer {
        status,
        head,
        body: out[split + 4..].to_vec(),
    })
}

pub fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

pub fn wait_until(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Bytes of the database and its WAL (and shared-memory index) on disk.
pub fn db_bytes(db: &Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| {
            let mut p = db.as_os_str().to_owned();
            p.push(suffix);
            fs::metadata(PathBuf::from(p)).map_or(0, |m| m.len())
        })
        .sum()
}
