//! Helpers shared by the collector's suites: a usage payload as the
//! collector spools it, the spool's file names and mtimes, and the raw HTTP
//! reading the transport suites' local servers do.
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, Read};
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use runtime_agent::time::rfc3339;
use serde_json::json;

/// The pod UID of the spooled payloads.
pub const POD: &str = "0d9f6a52-1111-2222-3333-444455556666";
/// 2026-08-06T10:00:00Z.
pub const T10: u64 = 1_786_010_400;

/// The payload the transport suites post.
pub const PAYLOAD: &[u8] = br#"{"kind":"collection_coverage","source":"agent"}"#;

/// A usage payload (`kind` `usage_snapshot` or `usage_window`) of one
/// record of `pod_uid` for the hour from `start`, with `core_ns` of CPU.
pub fn usage(kind: &str, start: u64, pod_uid: &str, core_ns: u64) -> Vec<u8> {
    let ws = rfc3339(start);
    serde_json::to_vec(&json!({
        "kind": kind, "source": "measured", "window_start": ws, "window_seconds": 3600,
        "observation": {"poll_interval_seconds": 10, "polls_attempted": 2, "polls_failed": 0, "signals": ["cpu"]},
        "records": [{"namespace": "ns", "workload_kind": "Pod", "workload_name": "p", "container": "agent",
            "pod": "p", "pod_uid": pod_uid, "window_start": ws, "window_seconds": 3600,
            "cpu": {"core_nanoseconds": core_ns, "covered_nanoseconds": 10, "throttled_periods": 0, "total_periods": 0,
                "throttling_samples": 0, "psi_stall_nanoseconds": 0, "psi_samples": 0, "samples": 1,
                "min_milli": 1, "max_milli": 1, "hist_milli": {"1": 1}},
            "memory": {"samples": 0, "sum_bytes": 0, "psi_stall_nanoseconds": 0, "psi_samples": 0, "hist_bytes": {}}}]
    }))
    .unwrap()
}

/// The spool name of the snapshot of the hour from `start`.
pub fn snapshot_name(start: u64) -> String {
    format!("usage-{start}-3600.snapshot.json")
}

/// Sets `path`'s mtime to `secs` after the epoch.
pub fn set_mtime(path: &Path, secs: u64) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

/// The names of the regular files in `dir`, sorted.
pub fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A request head and body read from `r`.
pub fn read_request(r: &mut impl BufRead) -> (String, Vec<u8>) {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        head.push_str(&line);
    }
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    (head, body)
}

/// `bytes` gunzipped.
pub fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).unwrap();
    out
}
