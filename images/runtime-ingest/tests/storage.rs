//! Storage is linear in what was sent (issue 19, "The reference ingest stores each
//! payload once per record"): each record is stored once under its own natural key,
//! and a record superseded by a newer snapshot is gone from every row — through the
//! real binary, measured on the database files.

mod common;

use common::{Ingest, db_bytes};
use serde_json::{Value, json};

const WS: &str = "2026-08-06T10:00:00Z";

fn record(container: &str, core_ns: u64) -> Value {
    json!({"namespace": "ns", "workload_kind": "Pod", "workload_name": "p", "container": container,
        "pod": "p", "pod_uid": "u1", "window_start": WS, "window_seconds": 3600,
        "cpu": {"core_nanoseconds": core_ns, "covered_nanoseconds": 10_000_000_000u64, "throttled_periods": 0,
            "total_periods": 0, "throttling_samples": 0, "psi_stall_nanoseconds": 0, "psi_samples": 0,
            "samples": 1, "min_milli": 1, "max_milli": 1, "hist_milli": {"1": 1}},
        "memory": {"samples": 1, "min_bytes": 1_048_576, "max_bytes": 1_048_576, "sum_bytes": 1_048_576,
            "psi_stall_nanoseconds": 0, "psi_samples": 0, "hist_bytes": {"1048576": 1}}})
}

fn snapshot(records: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "kind": "usage_snapshot", "source": "measured", "window_start": WS, "window_seconds": 3600,
        "observation": {"poll_interval_seconds": 10, "polls_attempted": 2, "polls_failed": 0, "signals": ["cpu"]},
        "records": records,
    }))
    .unwrap()
}

#[test]
fn four_hundred_records_in_one_request_grow_the_database_linearly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ingest.db");
    let ingest = Ingest::start(&db, "127.0.0.1:0");
    // The schema and the WAL exist before the baseline is taken.
    let warm = snapshot(vec![record("warm", 1)]);
    assert_eq!(ingest.post("usage_snapshot", &warm).status, 204);
    let before = db_bytes(&db);
    let body = snapshot((0..400).map(|i| record(&format!("c{i:03}"), i)).collect());
    let answer = ingest.post("usage_snapshot", &body);
    assert_eq!(answer.status, 204);
    let grown = db_bytes(&db).saturating_sub(before);
    assert!(
        grown <= 20 * body.len() as u64,
        "400 records of {} decoded bytes grew the database by {grown} bytes",
        body.len()
    );
    let rows = ingest.records();
    assert_eq!(rows.len(), 401);
    // Each row holds its own record only.
    for row in &rows {
        let payload: Value = serde_json::from_str(row["payload"].as_str().unwrap()).unwrap();
        assert_eq!(payload["records"].as_array().unwrap().len(), 1, "{row}");
        let key: Value = serde_json::from_str(row["natural_key"].as_str().unwrap()).unwrap();
        assert_eq!(payload["records"][0]["container"], key[1]);
        assert_eq!(
            payload["observation"]["polls_attempted"], 2,
            "the envelope is kept"
        );
    }
}

#[test]
fn a_superseded_record_is_gone_from_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start(&dir.path().join("ingest.db"), "127.0.0.1:0");
    // 777000777 marks the first version of container a; b rides in the same request.
    let first = snapshot(vec![record("a", 777_000_777), record("b", 5)]);
    assert_eq!(ingest.post("usage_snapshot", &first).status, 204);
    let newer = snapshot(vec![record("a", 888_000_888)]);
    assert_eq!(ingest.post("usage_snapshot", &newer).status, 204);
    let rows = ingest.records();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert!(
            !row["payload"].as_str().unwrap().contains("777000777"),
            "the superseded version survives in {row}"
        );
    }
    let a = rows
        .iter()
        .find(|r| r["natural_key"].as_str().unwrap().contains("\"a\""))
        .unwrap();
    assert!(a["payload"].as_str().unwrap().contains("888000888"));
    assert_eq!(a["writes"], 2);
    let b = rows
        .iter()
        .find(|r| r["natural_key"].as_str().unwrap().contains("\"b\""))
        .unwrap();
    assert_eq!(b["writes"], 1);
}

#[test]
fn a_single_record_payload_reads_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start(&dir.path().join("ingest.db"), "127.0.0.1:0");
    let body = snapshot(vec![record("agent", 42)]);
    assert_eq!(ingest.post("usage_snapshot", &body).status, 204);
    let rows = ingest.records();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["payload"].as_str().unwrap().as_bytes(), &body[..]);
}
