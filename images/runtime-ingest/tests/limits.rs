//! The ingest's resource bounds and its debug surface (review b30b1a0 finding 14;
//! issue 19): `/debug/*` only with `--admin`; rejected requests leave nothing behind;
//! the `received` log is bounded by bytes; a body that does not arrive in time is
//! answered 408; connections are limited. Through the real binary.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Ingest, gz, parse_answer, wait_until};

const COVERAGE: &[u8] =
    br#"{"kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z","pod_uid":"u1"}"#;

#[test]
fn without_admin_every_debug_and_admin_route_is_404() {
    let dir = tempfile::tempdir().unwrap();
    let plain = Ingest::start_with(&dir.path().join("a.db"), "127.0.0.1:0", &[], None);
    assert_eq!(plain.post("collection_coverage", COVERAGE).status, 204);
    for (method, path) in [
        ("GET", "/debug/received"),
        ("GET", "/debug/records"),
        ("GET", "/debug/records?kind=collection_coverage"),
        ("GET", "/debug/stats"),
        ("POST", "/admin/faults"),
    ] {
        assert_eq!(plain.request(method, path, "[]").0, 404, "{method} {path}");
    }
    // Positive control: the same routes answer with --admin.
    let admin = Ingest::start(&dir.path().join("b.db"), "127.0.0.1:0");
    assert_eq!(admin.post("collection_coverage", COVERAGE).status, 204);
    for path in ["/debug/received", "/debug/records", "/debug/stats"] {
        assert_eq!(admin.request("GET", path, "").0, 200, "{path}");
    }
    assert_eq!(admin.request("POST", "/admin/faults", "[]").0, 204);
}

/// A payload that decodes to `size` bytes and is refused by validation (no pod uid).
fn rejected_decoding_to(size: usize) -> Vec<u8> {
    let head =
        br#"{"kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z","pad":""#;
    let mut body = head.to_vec();
    body.resize(size - 2, b'x');
    body.extend_from_slice(br#""}"#);
    body
}

#[test]
fn rejected_requests_that_decode_large_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start(&dir.path().join("ingest.db"), "127.0.0.1:0");
    let wire = gz(&rejected_decoding_to(7 * 1024 * 1024));
    assert!(wire.len() < 16 * 1024, "{} bytes on the wire", wire.len());
    // Warm up the allocator with one, then measure over thirty more.
    assert_eq!(ingest.post_wire("collection_coverage", &wire).status, 400);
    let before = ingest.rss();
    for _ in 0..30 {
        assert_eq!(ingest.post_wire("collection_coverage", &wire).status, 400);
    }
    let grown = ingest.rss().saturating_sub(before);
    assert!(
        grown < 64 * 1024 * 1024,
        "30 rejected requests of {} bytes grew the ingest's RSS by {grown} bytes",
        wire.len()
    );
    // Exactly: the log keeps the requests, not their bodies.
    let stats = ingest.stats();
    assert_eq!(stats["received"]["entries"], 31);
    assert!(
        stats["received"]["bytes"].as_u64().unwrap() < 31 * 1024,
        "{stats}"
    );
    assert_eq!(stats["rejected"]["payload.key.missing_or_mistyped"], 31);
    let received = ingest.received();
    assert!(received.iter().all(|r| r["body"] == "" && r["status"] == 400));
    assert!(received.iter().all(|r| r["body_bytes"] == 7 * 1024 * 1024));
}

#[test]
fn the_received_log_is_bounded_by_bytes_and_keeps_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 2 * 1024 * 1024;
    let ingest = Ingest::start_with(
        &dir.path().join("ingest.db"),
        "127.0.0.1:0",
        &["--admin", "--received-budget", &budget.to_string()],
        None,
    );
    for i in 0..8 {
        // Accepted (unknown fields are ignored), 600 KiB decoded each.
        let body = format!(
            r#"{{"kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z","pod_uid":"u{i}","pad":"{}"}}"#,
            "y".repeat(600 * 1024)
        );
        assert_eq!(ingest.post("collection_coverage", body.as_bytes()).status, 204);
    }
    let stats = ingest.stats();
    let bytes = stats["received"]["bytes"].as_u64().unwrap();
    assert!(bytes <= budget, "{bytes} retained over a {budget}-byte budget");
    assert_eq!(stats["received"]["entries"], 3);
    let received = ingest.received();
    assert_eq!(received.len(), 3);
    assert!(
        received[2]["body"]
            .as_str()
            .unwrap()
            .contains(r#""pod_uid":"u7""#)
    );
    assert!(
        received[0]["body"]
            .as_str()
            .unwrap()
            .contains(r#""pod_uid":"u5""#)
    );
}

#[test]
fn a_body_that_does_not_arrive_in_time_is_answered_408() {
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start_with(
        &dir.path().join("ingest.db"),
        "127.0.0.1:0",
        &["--admin", "--body-timeout-ms", "300"],
        None,
    );
    let mut s = TcpStream::connect(&ingest.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /v1/ingest/collection_coverage HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ncontent-length: 1000\r\n\r\n"
    )
    .unwrap();
    s.write_all(&[0x1f, 0x8b]).unwrap();
    // The rest never comes; the answer does.
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let answer = parse_answer(&out).unwrap();
    assert_eq!(answer.status, 408);
    assert_eq!(answer.json()["error"], "request.body.timeout");
    assert!(ingest.records().is_empty());
}

#[test]
fn connections_past_the_limit_wait_until_one_closes() {
    let dir = tempfile::tempdir().unwrap();
    let ingest = Ingest::start_with(
        &dir.path().join("ingest.db"),
        "127.0.0.1:0",
        &["--admin", "--max-connections", "2"],
        None,
    );
    // Two idle connections take both slots (each is served: a request on it works).
    let idle: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(&ingest.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            write!(s, "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
            let mut buf = [0u8; 256];
            let n = s.read(&mut buf).unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 204"));
            s
        })
        .collect();
    // A third is not served while they stay open.
    let mut third = TcpStream::connect(&ingest.addr).unwrap();
    write!(
        third,
        "GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    third.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut buf = [0u8; 256];
    assert!(
        third.read(&mut buf).is_err(),
        "a third connection was served past a limit of two"
    );
    // One closes: the third is served.
    drop(idle);
    third.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    wait_until("the third connection's answer", Duration::from_secs(30), || {
        let _ = third.read_to_end(&mut out);
        !out.is_empty()
    });
    assert_eq!(parse_answer(&out).unwrap().status, 204);
}
