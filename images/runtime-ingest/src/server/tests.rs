//! The read API's cost (review afa2bf1 finding 5): a read of one agent touches that
//! agent's rows only, however many other pods the store holds.

use super::*;
use crate::validate;

const NS: &str = "agents";
const WS: &str = "2026-08-06T10:00:00Z";

fn record(pod: &str, core_ns: u64) -> String {
    format!(
        r#"{{"namespace":"{NS}","workload_kind":"Pod","workload_name":"{pod}","container":"agent","pod":"{pod}","pod_uid":"{pod}-uid","window_start":"{WS}","window_seconds":3600,"cpu":{{"core_nanoseconds":{core_ns},"covered_nanoseconds":3600000000000}},"memory":{{"max_bytes":1048576}}}}"#
    )
}

fn snapshot(records: &[String]) -> Vec<u8> {
    format!(
        r#"{{"kind":"usage_snapshot","source":"measured","window_start":"{WS}","window_seconds":3600,"records":[{}]}}"#,
        records.join(",")
    )
    .into_bytes()
}

/// A store of `others` usage rows of other pods (one request) and one of `pod`.
fn crowded_store(dir: &std::path::Path, others: usize, pod: &str) -> Store {
    let mut store = Store::open(&dir.join("db")).unwrap();
    let crowd: Vec<String> = (0..others).map(|i| record(&format!("other-{i}"), 1)).collect();
    let bytes = snapshot(&crowd);
    store
        .upsert("default", &validate("usage_snapshot", &bytes).unwrap())
        .unwrap();
    let mine = snapshot(&[record(pod, 1_800_000_000_000)]);
    store
        .upsert("default", &validate("usage_snapshot", &mine).unwrap())
        .unwrap();
    store
}

#[test]
fn a_read_of_one_pod_touches_that_pod_s_rows_only() {
    let dir = tempfile::tempdir().unwrap();
    let others = 10_000;
    let store = crowded_store(dir.path(), others, "pod-p");
    let state = State::new(
        store,
        Options {
            read_api: true,
            ..Options::default()
        },
    );
    let before = lock(&state.store).read_counts();
    let answer = read_usage(&state, Some(&format!("namespace={NS}&pod=pod-p")));
    let after = lock(&state.store).read_counts();
    assert_eq!(answer.status(), 200);
    let (rows, scanned) = (
        after.rows - before.rows,
        after.fullscan_steps - before.fullscan_steps,
    );
    println!(
        "a read of pod-p among {} stored rows touched {rows} row(s); SQLite full-scan steps: {scanned}",
        others + 1
    );
    assert_eq!(rows, 1, "the read touched rows of other pods");
    assert_eq!(scanned, 0, "the read scanned the whole table");
    let usage = body(answer);
    assert_eq!(usage["windows"].as_array().map(Vec::len), Some(1), "{usage}");
    assert_eq!(usage["windows"][0]["cores"], 0.5, "{usage}");
}

fn body(r: Response<Full<Bytes>>) -> serde_json::Value {
    let bytes = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(r.into_body().collect())
        .unwrap()
        .to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}
