//! The end-to-end matrix (collector-design.md §10): the real `runtime-agent` binary
//! shipping to the real `runtime-ingest` binary under injected faults — 5xx storms,
//! 429, 413, 401 halts, kill -9 of the collector mid-send, an ingest crash and
//! restart, a commit whose reply is lost, and a full spool disk. In each: nothing
//! acknowledged is lost, nothing is duplicated after the upsert, the bounds hold, and
//! no environment canary reaches a spool file or any byte the ingest received.
//!
//! The collector binary is looked up next to this crate's binaries
//! (`target/<profile>/runtime-agent`): build it with `cargo test -p runtime-agent -p
//! runtime-ingest` (or `cargo build -p runtime-agent`) first. The spool's disk-full
//! case uses a file-size rlimit (writes fail with `EFBIG`, `SIGXFSZ` ignored) rather
//! than a tmpfs, so it needs no privilege.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Ingest, agent_bin, gz, raw, wait_until};
use serde_json::{Value, json};

const POD_UID: &str = "0d9f6a52-1111-2222-3333-444455556666";
const CANARY: &str = "c4n4ry-e2e-5b1d";

struct Agent {
    child: Child,
}

fn agent_command(spool: &Path, url: Option<&str>) -> Command {
    let mut cmd = Command::new(agent_bin());
    cmd.env_clear()
        .env("RUNTIME_AGENT_SPOOL_DIR", spool)
        .env("RUNTIME_AGENT_INTERVAL_SECS", "1")
        .env("RUNTIME_AGENT_SHIP_INTERVAL_SECS", "1")
        .env("POD_NAME", "agent-7f3c")
        .env("POD_NAMESPACE", "agents-x7k2qp")
        .env("POD_UID", POD_UID)
        .env("CONTAINER_NAME", "agent")
        .env("BUZZ_PRIVATE_KEY", format!("nsec1{CANARY}"))
        .env("BUZZ_AUTH_TAG", format!("tag-{CANARY}"))
        .env("OPENAI_API_KEY", format!("sk-{CANARY}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(url) = url {
        cmd.env("RUNTIME_AGENT_INGEST_URL", url);
    }
    cmd
}

impl Agent {
    fn start(spool: &Path, url: Option<&str>) -> Self {
        Self {
            child: agent_command(spool, url).spawn().unwrap(),
        }
    }

    /// SIGTERM; the exit (final flush ≤ 1 s + final round ≤ 4 s) must come within a
    /// generous bound, with code 0.
    fn stop(mut self) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: signalling the child we spawned.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert_eq!(status.code(), Some(0));
                break;
            }
            // A hang bound: the agent bounds its shutdown by its own clock
            // (main.rs, ship.rs); the wall clock of a debug build on busy
            // cores needs margin.
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "runtime-agent did not exit within 1 s + 4 s (+ margin) of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn shippable(spool: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(spool)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".tmp"))
        .collect();
    v.sort();
    v
}

fn statuses(received: &[Value]) -> Vec<u64> {
    received.iter().map(|r| r["status"].as_u64().unwrap()).collect()
}

fn kind_of(r: &Value) -> String {
    r["path"].as_str().unwrap().rsplit('/').next().unwrap().to_owned()
}

fn all_files(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            all_files(&e.path(), out);
        } else {
            out.push((e.path(), fs::read(e.path()).unwrap()));
        }
    }
}

/// The natural keys a payload carries, derived here from the design's table
/// (collector-design.md §4) and not by the ingest's validator, so a validator bug
/// cannot hide itself: (key space, key as a JSON array).
fn expected_keys(kind: &str, body: &str) -> Vec<(String, Value)> {
    let v: Value = serde_json::from_str(body).unwrap();
    let records = || v["records"].as_array().unwrap().iter();
    match kind {
        "usage_snapshot" | "usage_window" => records()
            .map(|r| {
                let key = json!([
                    r["pod_uid"],
                    r["container"],
                    r["window_start"],
                    r["window_seconds"]
                ]);
                ("usage".to_owned(), key)
            })
            .collect(),
        "process_peaks" => records()
            .map(|r| {
                let key = json!([
                    r["namespace"],
                    r["workload_kind"],
                    r["workload_name"],
                    r["container"],
                    r["pod_uid"],
                    r["image_digest"]
                ]);
                (kind.to_owned(), key)
            })
            .collect(),
        "collection_coverage" => vec![(kind.to_owned(), json!([v["pod_uid"]]))],
        "oom_observed" => {
            let e = &v["event"];
            let key = json!([
                e["pod_uid"],
                e["container"],
                e["container_started_at"],
                e["oom_kill_total"]
            ]);
            vec![(kind.to_owned(), key)]
        }
        other => panic!("the collector sent an unregistered kind {other}"),
    }
}

/// A stored row's (key space, key).
fn stored_key(row: &Value) -> (String, Value) {
    let kind = row["kind"].as_str().unwrap();
    let group = if kind.starts_with("usage_") { "usage" } else { kind };
    let key = serde_json::from_str(row["natural_key"].as_str().unwrap()).unwrap();
    (group.to_owned(), key)
}

/// The invariants every scenario ends with.
fn check(spool: &Path, ingest: &Ingest, acknowledged_before: &[Value]) {
    let received = ingest.received();
    let stored = ingest.records();
    // Canaries: in no spool file, in no byte (body or header) the ingest received.
    let mut files = Vec::new();
    all_files(spool, &mut files);
    for (path, bytes) in &files {
        assert!(
            !String::from_utf8_lossy(bytes).contains(CANARY),
            "canary in {}",
            path.display()
        );
    }
    for r in received.iter().chain(acknowledged_before) {
        assert!(!r.to_string().contains(CANARY), "canary received by the ingest");
        assert_eq!(r["content_encoding"], "gzip");
        assert_eq!(r["content_type"], "application/json");
        assert!(
            r["user_agent"]
                .as_str()
                .is_some_and(|ua| ua.starts_with("runtime-agent/"))
        );
        assert_eq!(
            r["error"],
            Value::Null,
            "the ingest refused a collector payload: {r}"
        );
    }
    // Nothing acknowledged is lost: every 2xx'd payload's natural key is stored, and
    // the stored row is the last acknowledged version of it (or the final window).
    let mut last_acked: BTreeMap<(String, String), (String, String)> = BTreeMap::new();
    for r in acknowledged_before.iter().chain(&received) {
        if r["status"] != 204 {
            continue;
        }
        let kind = kind_of(r);
        let body = r["body"].as_str().unwrap();
        for (group, key) in expected_keys(&kind, body) {
            let slot = last_acked.entry((group, key.to_string())).or_default();
            // A snapshot after the final window changes nothing.
            if slot.0 == "usage_window" && kind == "usage_snapshot" {
                continue;
            }
            *slot = (kind.clone(), body.to_owned());
        }
    }
    let mut stored_keys = BTreeSet::new();
    for row in &stored {
        let (group, key) = stored_key(row);
        assert!(
            stored_keys.insert((group, key.to_string())),
            "a natural key is stored twice"
        );
        assert!(!row["payload"].as_str().unwrap().contains(CANARY));
    }
    for ((group, key), (kind, body)) in &last_acked {
        let row = stored
            .iter()
            .find(|r| {
                let (g, k) = stored_key(r);
                &g == group && &k.to_string() == key
            })
            .unwrap_or_else(|| panic!("acknowledged {kind} {key} is not stored"));
        assert_eq!(row["payload"].as_str().unwrap(), body, "{kind} {key}");
    }
    // Bounds: the spool stays within its file bound and holds no stray temp files.
    let names = shippable(spool);
    assert!(names.len() <= 2000);
    assert!(
        !fs::read_dir(spool)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".tmp")),
        "a temp file was left behind"
    );
}

fn coverage(spool: &Path) -> Value {
    serde_json::from_slice(&fs::read(spool.join("coverage.json")).unwrap()).unwrap()
}

fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let db = dir.path().join("ingest.db");
    (dir, spool, db)
}

#[test]
fn happy_path_drains_the_spool_and_the_final_round_ships_the_last_flush() {
    let (_dir, spool, db) = setup();
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    let agent = Agent::start(&spool, Some(&ingest.url));
    wait_until("two deliveries", Duration::from_secs(30), || {
        statuses(&ingest.received()).iter().filter(|s| **s == 204).count() >= 2
    });
    agent.stop();
    // The final flush rewrote coverage and the snapshot; the final round shipped them.
    assert_eq!(shippable(&spool), Vec::<String>::new());
    let stored = ingest.records();
    assert!(stored.iter().any(|r| r["kind"] == "collection_coverage"));
    assert!(stored.iter().any(|r| r["kind"] == "usage_snapshot"));
    assert!(spool.join("state/clean").exists());
    check(&spool, &ingest, &[]);
}

#[test]
fn a_5xx_storm_defers_then_everything_arrives_once() {
    let (_dir, spool, db) = setup();
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    ingest.faults(r#"[{"fault":"status","status":503,"times":4},{"fault":"status","status":500}]"#);
    let agent = Agent::start(&spool, Some(&ingest.url));
    wait_until("deliveries after the storm", Duration::from_secs(60), || {
        statuses(&ingest.received()).contains(&204)
    });
    let received = ingest.received();
    let st = statuses(&received);
    assert_eq!(&st[..5], &[503, 503, 503, 503, 500]);
    // One request in flight, oldest first: the storm hit the oldest file and the one
    // probe after each of its deferrals, nothing else.
    let hit: BTreeSet<&str> = received[..5]
        .iter()
        .map(|r| r["body"].as_str().unwrap())
        .collect();
    assert!(hit.len() <= 2, "the storm reached {} payloads", hit.len());
    assert!(hit.contains(received[0]["body"].as_str().unwrap()));
    agent.stop();
    assert_eq!(shippable(&spool), Vec::<String>::new());
    assert!(coverage_from_ingest(&ingest)["shipping"]["deferred"].as_u64() >= Some(5));
    check(&spool, &ingest, &[]);
}

fn coverage_from_ingest(ingest: &Ingest) -> Value {
    let row = ingest
        .records()
        .into_iter()
        .find(|r| r["kind"] == "collection_coverage")
        .unwrap();
    serde_json::from_str(row["payload"].as_str().unwrap()).unwrap()
}

#[test]
fn a_429_with_retry_after_defers_and_nothing_is_lost() {
    let (_dir, spool, db) = setup();
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    ingest.faults(r#"[{"fault":"status","status":429,"retry_after":2,"times":2}]"#);
    let agent = Agent::start(&spool, Some(&ingest.url));
    wait_until("a delivery after 429s", Duration::from_secs(60), || {
        statuses(&ingest.received()).contains(&204)
    });
    assert_eq!(&statuses(&ingest.received())[..3], &[429, 429, 204]);
    agent.stop();
    assert_eq!(shippable(&spool), Vec::<String>::new());
    check(&spool, &ingest, &[]);
}

#[test]
fn a_413_holds_those_bytes_for_good_and_the_rest_ships() {
    let (_dir, spool, db) = setup();
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    ingest.faults(r#"[{"fault":"status","status":413}]"#);
    let agent = Agent::start(&spool, Some(&ingest.url));
    wait_until("a delivery after a 413", Duration::from_secs(30), || {
        statuses(&ingest.received()).contains(&204)
    });
    agent.stop();
    let received = ingest.received();
    assert_eq!(received[0]["status"], 413);
    let refused = received[0]["body"].as_str().unwrap();
    assert!(
        !received[1..].iter().any(|r| r["body"] == refused),
        "the refused bytes were offered again"
    );
    // The final flush's coverage (a new version of the key) was offered and shipped.
    assert_eq!(
        coverage_from_ingest(&ingest)["shipping"]["rejected"]["too_large"],
        1
    );
    check(&spool, &ingest, &[]);
}

#[test]
fn a_401_halts_shipping_for_the_process_while_collecting_goes_on() {
    let (_dir, spool, db) = setup();
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    ingest.faults(r#"[{"fault":"status","status":401}]"#);
    let agent = Agent::start(&spool, Some(&ingest.url));
    wait_until("the 401", Duration::from_secs(30), || {
        !ingest.received().is_empty()
    });
    agent.stop();
    assert_eq!(
        statuses(&ingest.received()),
        vec![401],
        "nothing after the halt, not even a final round"
    );
    // Spooling went on after the halt: the final flush wrote a coverage that says so.
    let cov = coverage(&spool);
    assert_eq!(cov["shipping"]["halted"], true);
    assert_eq!(cov["shipping"]["rejected"]["unauthorized"], 1);
    assert!(!shippable(&spool).is_empty());
    check(&spool, &ingest, &[]);
}

#[test]
fn kill_9_of_the_collector_mid_send_loses_nothing_and_duplicates_nothing() {
    let (_dir, spool, db) = setup();
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    ingest.faults(r#"[{"fault":"status","status":503},{"fault":"hang","ms":20000}]"#);
    let agent = Agent::start(&spool, Some(&ingest.url));
    wait_until("a request in flight", Duration::from_secs(30), || {
        ingest.received().len() >= 2
    });
    agent.kill9();
    let restarted = Agent::start(&spool, Some(&ingest.url));
    wait_until("deliveries after the restart", Duration::from_secs(30), || {
        statuses(&ingest.received()).iter().filter(|s| **s == 204).count() >= 2
    });
    restarted.stop();
    assert_eq!(shippable(&spool), Vec::<String>::new());
    assert_eq!(coverage_from_ingest(&ingest)["agent"]["previous_run"], "unclean");
    check(&spool, &ingest, &[]);
}

#[test]
fn an_ingest_crash_and_restart_keeps_every_acknowledged_row() {
    let (_dir, spool, db) = setup();
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    // The second request kills the ingest before it stores anything.
    ingest.faults(r#"[{"fault":"pass"},{"fault":"kill"}]"#);
    let addr = ingest.addr.clone();
    let agent = Agent::start(&spool, Some(&ingest.url));
    let mut before = Vec::new();
    wait_until("the ingest to die", Duration::from_secs(30), || {
        match ingest.try_request("GET", "/debug/received", "") {
            Some((200, body)) => {
                before = serde_json::from_slice(&body).unwrap();
                false
            }
            _ => true,
        }
    });
    ingest.kill();
    let ingest = Ingest::start(&db, &addr);
    wait_until(
        "deliveries to the restarted ingest",
        Duration::from_secs(60),
        || statuses(&ingest.received()).contains(&204),
    );
    agent.stop();
    assert_eq!(shippable(&spool), Vec::<String>::new());
    check(&spool, &ingest, &before);
}

#[test]
fn a_commit_whose_reply_is_lost_is_resent_harmlessly() {
    let (_dir, spool, db) = setup();
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    ingest.faults(r#"[{"fault":"drop_after_commit"}]"#);
    let agent = Agent::start(&spool, Some(&ingest.url));
    // The dropped request is resent (after a probe of the next file, which the
    // ingest answers, so the round goes on) with the same version.
    let resent = |r: &[Value]| {
        r.iter()
            .skip(1)
            .position(|x| x["path"] == r[0]["path"] && x["status"] == 204)
            .map(|i| i + 1)
    };
    wait_until("the resend's answer", Duration::from_secs(30), || {
        resent(&ingest.received()).is_some()
    });
    // Read the rows now, before the key's next version (a minute away, or the final
    // flush) replaces the one that was committed twice.
    let stored = ingest.records();
    let received = ingest.received();
    assert_eq!(received[0]["status"], 0, "dropped without a reply");
    let again = resent(&received).unwrap();
    assert_eq!(
        received[again]["body"], received[0]["body"],
        "the same version resent"
    );
    let body = received[0]["body"].as_str().unwrap();
    let keys = expected_keys(&kind_of(&received[0]), body);
    assert_eq!(keys.len(), 1);
    let same_key: Vec<&Value> = stored.iter().filter(|r| stored_key(r) == keys[0]).collect();
    assert_eq!(same_key.len(), 1, "one row for the key");
    assert_eq!(same_key[0]["payload"], body, "the row holds the resent version");
    assert_eq!(
        same_key[0]["writes"], 1,
        "the resend of a committed version changed nothing"
    );
    agent.stop();
    check(&spool, &ingest, &[]);
}

#[test]
fn a_full_spool_disk_costs_new_writes_only_and_shipping_goes_on() {
    let (_dir, spool, db) = setup();
    // Fill the spool without a backend.
    let agent = Agent::start(&spool, None);
    wait_until("spooled files", Duration::from_secs(30), || {
        spool.join("coverage.json").exists()
    });
    agent.stop();
    let spooled: BTreeMap<String, Vec<u8>> = shippable(&spool)
        .into_iter()
        .map(|n| {
            let b = fs::read(spool.join(&n)).unwrap();
            (n, b)
        })
        .collect();
    assert!(!spooled.is_empty());
    // The disk is full: every write past 64 bytes fails with EFBIG.
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    let mut cmd = agent_command(&spool, Some(&ingest.url));
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let full = Agent {
        child: cmd.spawn().unwrap(),
    };
    wait_until("the spooled files to ship", Duration::from_secs(30), || {
        ingest.records().len() >= spooled.len()
    });
    full.stop();
    // What was on disk arrived byte for byte; nothing new could be written.
    let stored = ingest.records();
    for bytes in spooled.values() {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            stored.iter().any(|r| r["payload"] == text.as_ref()),
            "a spooled payload did not arrive intact"
        );
    }
    assert_eq!(shippable(&spool), Vec::<String>::new());
    check(&spool, &ingest, &[]);
}

fn post_raw(addr: &str, path: &str, headers: &str, body: &[u8]) -> u16 {
    raw(addr, "POST", path, headers, body).map_or(0, |a| a.status)
}

#[test]
fn the_ingest_refuses_bad_requests_with_400_413_and_fails_storage_with_503() {
    let (_dir, _spool, db) = setup();
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    let good = br#"{"kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z","pod_uid":"u1"}"#;
    let json_gzip = "content-type: application/json\r\ncontent-encoding: gzip\r\n";
    let path = "/v1/ingest/collection_coverage";
    assert_eq!(post_raw(&ingest.addr, path, json_gzip, &gz(good)), 204);
    // The alias route (upstream parity).
    assert_eq!(
        post_raw(
            &ingest.addr,
            "/v1/kubernetes/collection_coverage",
            json_gzip,
            &gz(good)
        ),
        204
    );
    assert_eq!(
        post_raw(&ingest.addr, path, "content-type: application/json\r\n", good),
        400,
        "not gzip"
    );
    assert_eq!(
        post_raw(&ingest.addr, path, "content-encoding: gzip\r\n", &gz(good)),
        400,
        "not JSON"
    );
    assert_eq!(post_raw(&ingest.addr, path, json_gzip, b"\x1f\x8bjunk"), 400);
    assert_eq!(
        post_raw(&ingest.addr, "/v1/ingest/usage_snapshot", json_gzip, &gz(good)),
        400,
        "path kind differs"
    );
    // Over the decoded cap while the request itself is small: 413.
    let bomb = gz(&vec![b' '; runtime_ingest::DECODED_CAP + 1]);
    assert!(bomb.len() < 64 * 1024);
    assert_eq!(post_raw(&ingest.addr, path, json_gzip, &bomb), 413);
    ingest.faults(r#"[{"fault":"storage_error"}]"#);
    assert_eq!(post_raw(&ingest.addr, path, json_gzip, &gz(good)), 503);
    assert_eq!(ingest.records().len(), 1);
    assert_eq!(ingest.records()[0]["writes"], 1, "the resend changed nothing");
}
