//! The `collector` benchmark (issue 9 figures; collector-design.md §11): the
//! release-built `runtime-agent` binary shipping to the reference ingest
//! (`runtime_ingest`, in process on loopback), printed, never asserted.
//!
//! Keys:
//! - `collector_cpu_pct`: the collector's utime + stime over wall time, at the
//!   default 10 s poll and 30 s shipping rounds, over `run_secs` (goal ≤ 0.2 % of
//!   one core);
//! - `collector_rss_mb`: its `VmHWM` at the end of that run (goal ≤ 8);
//! - `bytes_shipped_per_hour`: gzip bytes on the wire (`shipping.transmitted_bytes`
//!   of its last coverage) scaled from the run to an hour, and
//!   `payload_bytes_per_hour` (decoded) beside it;
//! - `ingest_records_per_s`: sequential gzip POSTs of distinct `usage_snapshot`
//!   keys through the collector's own HTTP transport, each a durable SQLite commit
//!   (WAL, `synchronous=FULL`) before its 204. With `RUNTIME_INGEST_BIN` set, that
//!   binary (`runtime-ingest serve`, e.g. a release build) is the ingest measured;
//!   otherwise the in-process one.
//!
//! With `BENCH_COLLECTOR_PIDNS=1` (root) the collector runs as PID 1 of its own PID
//! namespace with its own `/proc` (`unshare --pid --fork --mount-proc`), so it scans
//! only itself, as in a container; otherwise it scans every process of the host,
//! which costs more per poll.
//!
//! `RUNTIME_AGENT_BIN` names the collector binary to run (e.g. the static release
//! build the image ships); otherwise it is built beside this binary.

use anyhow::{Context, anyhow};
use runtime_agent::http::HttpTransport;
use runtime_agent::payload::Kind;
use runtime_agent::ship::{Outcome, Transport};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the collector runs at its default cadence.
const RUN_SECS: u64 = 180;
/// Ingest requests timed for `ingest_records_per_s`.
const INGEST_REQUESTS: u64 = 400;

fn collector_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("RUNTIME_AGENT_BIN") {
        return Ok(PathBuf::from(p));
    }
    let dir = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| anyhow!("no exe dir"))?;
    let release = dir.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = std::process::Command::new(cargo);
    c.args([
        "build",
        "--quiet",
        "-p",
        "runtime-agent",
        "--bin",
        "runtime-agent",
    ]);
    if release {
        c.arg("--release");
    }
    let status = c.status().context("building runtime-agent")?;
    anyhow::ensure!(status.success(), "building runtime-agent failed");
    Ok(dir.join("runtime-agent"))
}

fn state(dir: &Path) -> anyhow::Result<Arc<runtime_ingest::server::State>> {
    Ok(Arc::new(runtime_ingest::server::State::new(
        runtime_ingest::store::Store::open(&dir.join("ingest.db"))?,
        runtime_ingest::server::Options {
            source_id: "bench".into(),
            ..Default::default()
        },
    )))
}

/// utime + stime of `pid` in clock ticks, and its VmHWM in bytes.
fn usage(pid: u32) -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let (_, rest) = stat.rsplit_once(')').ok_or_else(|| anyhow!("stat"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let hwm_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    Ok((ticks, hwm_kb * 1024))
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn snapshot(i: u64) -> Vec<u8> {
    let start = 1_786_010_400 + i * 3600;
    let ws = runtime_agent::time::rfc3339(start);
    serde_json::to_vec(&json!({
        "kind": "usage_snapshot", "source": "measured", "window_start": ws, "window_seconds": 3600,
        "observation": {"poll_interval_seconds": 10, "polls_attempted": 360, "polls_failed": 0, "signals": ["cpu", "memory"]},
        "records": [{"namespace": "bench", "workload_kind": "Pod", "workload_name": "p", "container": "agent",
            "pod": "p", "pod_uid": "bench-pod", "window_start": ws, "window_seconds": 3600,
            "cpu": {"core_nanoseconds": 12_500_000_000u64, "covered_nanoseconds": 3_600_000_000_000u64,
                "throttled_periods": 12, "total_periods": 36000, "throttling_samples": 360,
                "psi_stall_nanoseconds": 4_000_000, "psi_samples": 360, "samples": 360,
                "min_milli": 250, "max_milli": 1000, "hist_milli": {"234": 200, "939": 160}},
            "memory": {"samples": 360, "min_bytes": 67_108_864, "max_bytes": 104_857_600,
                "sum_bytes": 30_000_000_000u64, "psi_stall_nanoseconds": 0, "psi_samples": 0,
                "hist_bytes": {"67108864": 100, "94906265": 160, "103496016": 100}}}]
    }))
    .unwrap_or_default()
}

/// Runs the benchmark.
pub fn run() -> anyhow::Result<Value> {
    let bin = collector_bin()?;
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let st = state(dir.path())?;
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let url = format!("http://{}", listener.local_addr()?);
    let server = rt.spawn(runtime_ingest::server::serve(listener, Arc::clone(&st)));

    // 1. The collector at its defaults.
    let pidns = std::env::var_os("BENCH_COLLECTOR_PIDNS").is_some_and(|v| v == "1");
    let mut cmd = if pidns {
        let mut c = std::process::Command::new("unshare");
        c.args(["--pid", "--fork", "--mount-proc"]).arg(&bin);
        c
    } else {
        std::process::Command::new(&bin)
    };
    let mut child = cmd
        .env_clear()
        .env("RUNTIME_AGENT_INGEST_URL", &url)
        .env("RUNTIME_AGENT_SPOOL_DIR", dir.path().join("spool"))
        .env("POD_NAME", "bench")
        .env("POD_NAMESPACE", "bench")
        .env("POD_UID", "bench-pod")
        .env("CONTAINER_NAME", "agent")
        .stdin(std::process::Stdio::null())
        .spawn()
        .context("starting runtime-agent")?;
    let pid = if pidns {
        // The collector is unshare's forked child (PID 1 inside).
        let children = format!("/proc/{0}/task/{0}/children", child.id());
        let waited = Instant::now();
        loop {
            let text = std::fs::read_to_string(&children).unwrap_or_default();
            if let Some(p) = text.split_whitespace().next().and_then(|p| p.parse::<u32>().ok()) {
                break p;
            }
            anyhow::ensure!(
                waited.elapsed() < Duration::from_secs(10),
                "unshare started no child"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    } else {
        child.id()
    };
    let (t0, _) = usage(pid)?;
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(RUN_SECS));
    let (t1, hwm) = usage(pid)?;
    let wall = start.elapsed().as_secs_f64();
    // SAFETY: signalling the child we spawned.
    unsafe { libc::kill(i32::try_from(pid)?, libc::SIGTERM) };
    let _ = child.wait();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let cpu_pct = (t1.saturating_sub(t0)) as f64 / hz / wall * 100.0;
    let coverage: Value = st
        .store
        .lock()
        .map_err(|_| anyhow!("store lock"))?
        .records(Some("collection_coverage"), Some("bench-pod"))?
        .first()
        .map(|r| serde_json::from_str(&r.payload))
        .transpose()?
        .ok_or_else(|| anyhow!("no coverage arrived"))?;
    let per_hour = |v: &Value| v.as_f64().unwrap_or(0.0) * 3600.0 / wall;
    let transmitted = per_hour(&coverage["shipping"]["transmitted_bytes"]);
    let payload = per_hour(&coverage["shipping"]["payload_bytes"]);

    // 2. Ingest throughput with durable commits, one request in flight.
    let mut external = None;
    let ingest_url = match std::env::var_os("RUNTIME_INGEST_BIN") {
        None => url.clone(),
        Some(bin) => {
            let mut c = std::process::Command::new(bin)
                .args(["serve", "--listen", "127.0.0.1:0", "--db"])
                .arg(dir.path().join("external.db"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .context("starting runtime-ingest")?;
            let mut line = String::new();
            let stdout = c.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
            external = Some(c);
            line.trim()
                .strip_prefix("listening on ")
                .ok_or_else(|| anyhow!("unexpected ingest output {line:?}"))?
                .to_owned()
        }
    };
    let mut transport = HttpTransport::new(&ingest_url, "runtime-agent/bench")?;
    let bodies: Vec<Vec<u8>> = (0..INGEST_REQUESTS).map(snapshot).collect();
    let t = Instant::now();
    for body in &bodies {
        let r = transport.post(Kind::UsageSnapshot, body, Duration::from_secs(30));
        anyhow::ensure!(r.outcome == Outcome::Delivered, "ingest answered {:?}", r.outcome);
    }
    let records_per_s = INGEST_REQUESTS as f64 / t.elapsed().as_secs_f64();
    server.abort();
    if let Some(mut c) = external {
        let _ = c.kill();
        let _ = c.wait();
    }

    Ok(json!({
        "run_secs": RUN_SECS,
        "poll_interval_secs": 10,
        "collector_cpu_pct": round2(cpu_pct * 100.0) / 100.0,
        "collector_rss_mb": round2(hwm as f64 / 1_048_576.0),
        "bytes_shipped_per_hour": transmitted.round(),
        "payload_bytes_per_hour": payload.round(),
        "ingest_records_per_s": round2(records_per_s),
        "ingest_requests": INGEST_REQUESTS,
        "collector_proc_scope": if pidns { "own PID namespace" } else { "every host process" },
        "ingest": if std::env::var_os("RUNTIME_INGEST_BIN").is_some() { "external binary" } else { "in process" },
    }))
}
