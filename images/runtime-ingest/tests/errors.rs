//! Every refusal names its reason (issue 19, "Ingest errors have empty bodies";
//! collector-design.md §10): the answer's body is `{"error":"<code>","detail":"…"}`,
//! the status is the contract §5 class (400/413 permanent for those bytes, 408/503
//! transient), and one log line names the code. Through the real binary.

mod common;

use common::{Ingest, gz, raw};

const GZIP_JSON: &str = "content-type: application/json\r\ncontent-encoding: gzip\r\n";
const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const WS: &str = "2026-08-06T10:00:00Z";

fn usage_record(ws: &str, extra: &str) -> String {
    format!(r#"{{"pod_uid":"u1","container":"agent","window_start":"{ws}","window_seconds":3600{extra}}}"#)
}

fn usage(records: &str) -> String {
    format!(
        r#"{{"kind":"usage_snapshot","source":"measured","window_start":"{WS}","window_seconds":3600,"records":{records}}}"#
    )
}

fn peaks(digest: &str) -> String {
    format!(
        r#"{{"kind":"process_peaks","source":"measured","captured_at":"{WS}","records":[{{"namespace":"ns","workload_kind":"Pod","workload_name":"p","container":"agent","pod_uid":"u1","image_digest":"{digest}"}}]}}"#
    )
}

/// (path kind, decoded body, status, code) for every refusal of the payload itself.
fn payload_cases() -> Vec<(&'static str, String, u16, &'static str)> {
    let blocks = r#","cpu":{},"memory":{}"#;
    vec![
        ("collection_coverage", "{".into(), 400, "payload.json.invalid"),
        ("collection_coverage", "[1]".into(), 400, "payload.json.not_object"),
        (
            "collection_coverage",
            r#"{"kind":"collection_coverage","kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z","pod_uid":"u1"}"#.into(),
            400,
            "payload.json.duplicate_member",
        ),
        ("no_such_kind", r#"{"kind":"no_such_kind"}"#.into(), 400, "payload.kind.unknown"),
        (
            "usage_snapshot",
            r#"{"kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z","pod_uid":"u1"}"#.into(),
            400,
            "payload.kind.mismatch",
        ),
        (
            "collection_coverage",
            r#"{"kind":"collection_coverage","source":"measured","captured_at":"2026-08-06T10:00:00Z","pod_uid":"u1"}"#.into(),
            400,
            "payload.source.unregistered",
        ),
        (
            "collection_coverage",
            r#"{"kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z"}"#.into(),
            400,
            "payload.key.missing_or_mistyped",
        ),
        (
            "collection_coverage",
            r#"{"kind":"collection_coverage","source":"agent","captured_at":"yesterday","pod_uid":"u1"}"#.into(),
            400,
            "payload.timestamp.invalid",
        ),
        (
            "usage_snapshot",
            r#"{"kind":"usage_snapshot","source":"measured","window_start":"2026-08-06T10:00:00Z","window_seconds":3600}"#.into(),
            400,
            "payload.records.missing",
        ),
        ("usage_snapshot", usage("[]"), 400, "payload.records.empty"),
        ("usage_snapshot", usage("[7]"), 400, "payload.record.not_object"),
        (
            "usage_snapshot",
            usage(&format!("[{}]", usage_record("2026-08-06T11:00:00Z", blocks))),
            400,
            "payload.window.mismatch",
        ),
        (
            "usage_snapshot",
            r#"{"kind":"usage_snapshot","source":"measured","window_start":"2026-13-06T10:00:00Z","window_seconds":3600,"records":[]}"#.into(),
            400,
            "payload.window.invalid",
        ),
        (
            "usage_snapshot",
            usage(&format!("[{}]", usage_record(WS, r#","cpu":{}"#))),
            400,
            "payload.record.block_missing",
        ),
        (
            "usage_snapshot",
            usage(&format!(
                "[{},{}]",
                usage_record(WS, blocks),
                usage_record(WS, blocks)
            )),
            400,
            "payload.key.duplicate",
        ),
        (
            "oom_observed",
            r#"{"kind":"oom_observed","source":"measured","captured_at":"2026-08-06T10:00:00Z"}"#.into(),
            400,
            "payload.event.missing",
        ),
        ("process_peaks", peaks(&DIGEST.to_uppercase().replace("SHA256", "sha256")), 400, "evidence.digest.missing_or_malformed"),
        ("process_peaks", peaks("ghcr.io/acme/sprig:v1"), 400, "evidence.digest.missing_or_malformed"),
        ("process_peaks", peaks(&DIGEST[..DIGEST.len() - 1]), 400, "evidence.digest.missing_or_malformed"),
    ]
}

fn assert_refusal(ingest: &Ingest, status: u16, code: &str, answer: &common::Answer, what: &str) {
    assert_eq!(answer.status, status, "{what}");
    assert_eq!(
        answer.header("content-type").as_deref(),
        Some("application/json"),
        "{what}"
    );
    let body = answer.json();
    assert_eq!(body["error"], code, "{what}");
    assert!(
        body["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{what}: {body}"
    );
    assert!(
        ingest
            .log()
            .lines()
            .any(|l| l.contains(code) && l.contains(&status.to_string())),
        "{what}: no log line names {code}:\n{}",
        ingest.log()
    );
}

#[test]
fn every_refusal_carries_its_reason_code_in_the_body_and_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let ingest = Ingest::start_with(
        &dir.path().join("ingest.db"),
        "127.0.0.1:0",
        &["--admin", "--decoded-cap", "65536"],
        Some(&log),
    );
    // Positive control: a good payload of each shape is accepted, with no body.
    let ok = ingest.post("process_peaks", peaks(DIGEST).as_bytes());
    assert_eq!((ok.status, ok.body.len()), (204, 0));
    let ok = ingest.post(
        "usage_snapshot",
        usage(&format!("[{}]", usage_record(WS, r#","cpu":{},"memory":{}"#))).as_bytes(),
    );
    assert_eq!(ok.status, 204);

    for (kind, body, status, code) in payload_cases() {
        let answer = ingest.post(kind, body.as_bytes());
        assert_refusal(&ingest, status, code, &answer, &body);
    }

    let path = "/v1/ingest/collection_coverage";
    let good = br#"{"kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z","pod_uid":"u1"}"#;
    for (headers, body, status, code) in [
        (
            "content-type: application/json\r\n",
            good.to_vec(),
            400,
            "request.encoding.not_gzip",
        ),
        (
            "content-encoding: gzip\r\n",
            gz(good),
            400,
            "request.content_type.not_json",
        ),
        (GZIP_JSON, b"\x1f\x8bjunk".to_vec(), 400, "payload.gzip.invalid"),
        // Small on the wire, over the decoded cap once inflated.
        (GZIP_JSON, gz(&vec![b' '; 65537]), 413, "payload.too_large"),
        // Over the compressed cap before inflating (incompressible bytes).
        (
            GZIP_JSON,
            (0..200_000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
            413,
            "request.body.too_large",
        ),
    ] {
        let answer = raw(&ingest.addr, "POST", path, headers, &body).unwrap();
        assert_refusal(&ingest, status, code, &answer, code);
    }

    ingest.faults(r#"[{"fault":"storage_error"}]"#);
    let answer = ingest.post("collection_coverage", good);
    assert_refusal(&ingest, 503, "storage.unavailable", &answer, "storage");
    // No refused request left a row behind.
    assert_eq!(ingest.records().len(), 2);
    // The detail never echoes payload content.
    assert!(!ingest.log().contains("ghcr.io/acme"));
}
