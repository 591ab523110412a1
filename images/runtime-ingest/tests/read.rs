//! `GET /v1/read/usage` over what the real collector shipped (issue 34: the
//! launcher's usage panel reads CPU, memory and OOM kills from here).
//!
//! The collector runs in a memory cgroup of its own, made for the test under
//! the test's own cgroup (v1 `memory` or v2, whichever this machine mounts),
//! with a 64 MiB limit; a process beside it grows until the kernel's OOM
//! killer ends it. The kill is real, and so are the readings.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Ingest, agent_bin, wait_until};
use serde_json::Value;

const NAMESPACE: &str = "agents-r3ad";
const POD: &str = "buzz-agent-5e1f";
const LIMIT: u64 = 64 << 20;

/// A memory cgroup made for one test, removed on drop.
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// A child of this process's own memory cgroup, limited to [`LIMIT`].
    fn make() -> Cgroup {
        let own = fs::read_to_string("/proc/self/cgroup").expect("/proc/self/cgroup");
        let (base, path) = if let Some(p) = own.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_string())
        }) {
            ("/sys/fs/cgroup/memory", p)
        } else {
            let p = own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .expect("a cgroup path");
            ("/sys/fs/cgroup", p.to_string())
        };
        let dir = Path::new(base)
            .join(path.trim_start_matches('/'))
            .join(format!("read-test-{}", std::process::id()));
        fs::create_dir(&dir).unwrap_or_else(|e| {
            panic!(
                "cannot make the test's memory cgroup {}: {e} (this test needs root)",
                dir.display()
            )
        });
        let cg = Cgroup { dir };
        if cg.dir.join("memory.limit_in_bytes").exists() {
            cg.write("memory.limit_in_bytes", &LIMIT.to_string());
            // With swap accounting, swap must not absorb the growth.
            if cg.dir.join("memory.memsw.limit_in_bytes").exists() {
                cg.write("memory.memsw.limit_in_bytes", &LIMIT.to_string());
            }
        } else {
            cg.write("memory.max", &LIMIT.to_string());
            cg.write("memory.swap.max", "0");
        }
        cg
    }

    fn write(&self, file: &str, value: &str) {
        fs::write(self.dir.join(file), value)
            .unwrap_or_else(|e| panic!("{}/{file}: {e}", self.dir.display()));
    }

    /// `program args…` started inside this cgroup (it joins before its exec).
    fn spawn(&self, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Child {
        let procs = self.dir.join("cgroup.procs");
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(r#"echo $$ > "$0" && exec "$@""#)
            .arg(&procs)
            .arg(program)
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.spawn().expect("spawn in the cgroup")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Whatever is left in it is ended first, then the directory goes.
        if let Ok(pids) = fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in pids.lines().filter_map(|p| p.parse::<i32>().ok()) {
                // SAFETY: only processes this test put into its own cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        for _ in 0..100 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The read token these tests start the ingest with.
const TOKEN: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a6978";

/// A file (mode 0600) holding [`TOKEN`].
fn token_file(dir: &Path) -> PathBuf {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("read-token");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    writeln!(f, "{TOKEN}").unwrap();
    path
}

/// `GET /v1/read/usage?query` bearing [`TOKEN`].
fn read(ingest: &Ingest, query: &str) -> (u16, Vec<u8>) {
    let a = common::raw(
        &ingest.addr,
        "GET",
        &format!("/v1/read/usage?{query}"),
        &format!("authorization: Bearer {TOKEN}\r\n"),
        b"",
    )
    .expect("the ingest answers");
    (a.status, a.body)
}

#[test]
fn one_agent_s_cpu_memory_and_a_real_oom_kill_are_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let token = token_file(dir.path());
    let ingest = Ingest::start_with(
        &dir.path().join("ingest.db"),
        "127.0.0.1:0",
        &["--read-api", "--read-token-file", token.to_str().unwrap()],
        None,
    );
    let cg = Cgroup::make();
    let mut collector = cg.spawn(
        &agent_bin(),
        &[],
        &[
            ("RUNTIME_AGENT_SPOOL_DIR", spool.to_str().unwrap()),
            ("RUNTIME_AGENT_INGEST_URL", &ingest.url),
            ("RUNTIME_AGENT_INTERVAL_SECS", "1"),
            ("RUNTIME_AGENT_SHIP_INTERVAL_SECS", "1"),
            ("POD_NAME", POD),
            ("POD_NAMESPACE", NAMESPACE),
            ("POD_UID", "5e1f0000-1111-2222-3333-444455556666"),
            ("CONTAINER_NAME", "agent"),
        ],
    );
    let query = format!("namespace={NAMESPACE}&pod={POD}");
    let usage = || -> Value { serde_json::from_slice(&read(&ingest, &query).1).unwrap() };
    wait_until("a usage window with memory", Duration::from_secs(30), || {
        usage()["windows"]
            .as_array()
            .is_some_and(|w| w.iter().any(|p| p["max_mib"].as_f64().is_some_and(|m| m > 0.0)))
    });
    // `tail` keeps a line that never ends: /dev/zero grows it to the limit.
    let mut hog = cg.spawn(Path::new("/usr/bin/tail"), &["/dev/zero"], &[]);
    let ended = hog.wait().expect("the hog ends");
    assert!(!ended.success(), "the hog was killed: {ended:?}");
    wait_until("the OOM kill read back", Duration::from_secs(30), || {
        usage()["oom_kills"].as_array().is_some_and(|k| !k.is_empty())
    });
    let got = usage();
    let kill = &got["oom_kills"][0];
    assert_eq!(kill["container"], "agent");
    assert_eq!(kill["memory_limit_bytes"].as_u64(), Some(LIMIT), "{got}");
    assert!(kill["oom_kill_total"].as_u64() >= Some(1), "{got}");
    assert!(
        collector.try_wait().unwrap().is_none(),
        "the collector outlived the kill"
    );
    let window = &got["windows"][0];
    assert!(window["window_start"].as_u64().is_some(), "{got}");
    assert!(window["max_mib"].as_f64().unwrap() <= 64.0, "{got}");

    // Another agent's pod reads as nothing; a malformed name is refused.
    let other: Value =
        serde_json::from_slice(&read(&ingest, &format!("namespace={NAMESPACE}&pod=other")).1).unwrap();
    assert_eq!(other["windows"], serde_json::json!([]));
    assert_eq!(other["oom_kills"], serde_json::json!([]));
    for bad in [
        format!("namespace={NAMESPACE}"),
        format!("namespace=A&pod={POD}"),
        "pod=x&namespace=%2e%2e".into(),
    ] {
        let (status, body) = read(&ingest, &bad);
        assert_eq!(status, 400, "{bad}: {}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("read.parameters"));
    }
    let _ = collector.kill();
    let _ = collector.wait();
}

#[test]
fn without_read_api_the_route_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start_with(&dir.path().join("ingest.db"), "127.0.0.1:0", &[], None);
    assert_eq!(read(&ingest, &format!("namespace={NAMESPACE}&pod={POD}")).0, 404);
}
