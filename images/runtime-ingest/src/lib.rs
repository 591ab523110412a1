//! `runtime-ingest`: the reference ingest backend for `runtime-agent`
//! (collector-design.md §10; runtime-agent-backend-contract.md §3–§5).
//!
//! For tests and for operators without the commercial backend. The request path:
//!
//! 1. [`decode`]: the body must say `Content-Encoding: gzip` and
//!    `Content-Type: application/json` (else 400); the compressed body is capped and
//!    the *decoded* size is capped while inflating ([`DECODED_CAP`], 8 MiB, above the
//!    collector's 4 MiB ceiling) → 413; limits never come from `Content-Length`
//!    (contract §3); bad gzip → 400.
//! 2. [`validate`]: JSON; the path kind equals the body kind and is registered; the
//!    `source` is the kind's registered provenance; the natural-key fields are present
//!    and typed; digest-keyed kinds carry a `sha256:<64 lowercase hex>` digest
//!    (host-agent-digest-gate.md; 400 otherwise). Unknown fields are ignored
//!    (contract §6). The result is one [`Row`] per natural key in the payload.
//! 3. [`store::Store::upsert`]: one SQLite transaction per request, WAL with
//!    `synchronous=FULL`, keyed `(source_id, group, natural key)`; the source id comes
//!    from the listener's configuration, never from the payload (contract §3). A
//!    snapshot replaces unless the row is final; a closed window replaces and marks it
//!    final; peaks and coverage replace; OOM events are inserted once. Commit, then
//!    204; a storage error → 503 (contract §4 "Acknowledgment is a durability
//!    promise", §5).
//!
//! [`server`] wires this to HTTP/1.1 with a read-back API and fault injection
//! ([`faults`]); [`report`] draws the stored usage as an SVG chart.

pub mod faults;
pub mod report;
pub mod server;
pub mod store;

use std::io::Read;

use runtime_agent::gate::ImageDigest;
use runtime_agent::payload::Kind;
use serde_json::Value;

/// Decoded-size cap (design §10: 8 MiB, above the collector's 4 MiB).
pub const DECODED_CAP: usize = 8 * 1024 * 1024;
/// Compressed-size cap: gzip cannot be more than ~1000:1, but a body this large is
/// refused before inflating.
pub const COMPRESSED_CAP: usize = DECODED_CAP;

/// Why a request is refused before storage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// 400: the request or payload is malformed.
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// 413: the decoded payload (or the compressed body) is over its cap.
    #[error("too large")]
    TooLarge,
}

impl Reject {
    /// The HTTP status (contract §5: 400 and 413 are permanent for these bytes).
    pub fn status(&self) -> u16 {
        match self {
            Reject::Malformed(_) => 400,
            Reject::TooLarge => 413,
        }
    }
}

/// Inflate `body` with the decoded cap.
pub fn decode(body: &[u8], cap: usize) -> Result<Vec<u8>, Reject> {
    if body.len() > COMPRESSED_CAP.max(cap) {
        return Err(Reject::TooLarge);
    }
    let mut out = Vec::new();
    let mut decoder = flate2::read::GzDecoder::new(body).take(cap as u64 + 1);
    decoder
        .read_to_end(&mut out)
        .map_err(|_| Reject::Malformed("body is not valid gzip"))?;
    if out.len() > cap {
        return Err(Reject::TooLarge);
    }
    Ok(out)
}

/// How a row is merged with the stored one (contract §4 "Delivery semantics").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Replace unless the stored row is final (`usage_snapshot`).
    Snapshot,
    /// Replace and mark final (`usage_window`: closed beats open).
    Final,
    /// Replace (`process_peaks`, `collection_coverage`: supersede).
    Replace,
    /// Insert once (`oom_observed`: events accumulate, resends are ignored).
    Once,
}

/// One natural key's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub kind: Kind,
    /// The key space: `usage` for both usage kinds, else the kind.
    pub group: &'static str,
    /// The natural key as canonical JSON (an array of its fields in a fixed order).
    pub natural_key: String,
    /// The pod the row belongs to (for read-back filters).
    pub pod_uid: String,
    pub merge: Merge,
}

fn kind_of(name: &str) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| k.as_str() == name)
}

fn registered_source(kind: Kind) -> &'static str {
    match kind {
        Kind::CollectionCoverage => "agent",
        Kind::UsageSnapshot | Kind::UsageWindow | Kind::ProcessPeaks | Kind::OomObserved => "measured",
    }
}

fn text<'a>(v: &'a Value, field: &str) -> Result<&'a str, Reject> {
    v.get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(Reject::Malformed(
            "a natural-key field is missing or not a string",
        ))
}

fn number(v: &Value, field: &str) -> Result<u64, Reject> {
    v.get(field).and_then(Value::as_u64).ok_or(Reject::Malformed(
        "a natural-key field is missing or not a whole number",
    ))
}

fn key(parts: &[Value]) -> String {
    Value::Array(parts.to_vec()).to_string()
}

fn records(v: &Value) -> Result<&Vec<Value>, Reject> {
    let records = v
        .get("records")
        .and_then(Value::as_array)
        .ok_or(Reject::Malformed("records missing"))?;
    if records.is_empty() {
        return Err(Reject::Malformed("records empty"));
    }
    Ok(records)
}

/// Validate a decoded payload posted to `/v1/ingest/{path_kind}`.
pub fn validate(path_kind: &str, decoded: &[u8]) -> Result<Vec<Row>, Reject> {
    let kind = kind_of(path_kind).ok_or(Reject::Malformed("unknown kind"))?;
    let v: Value = serde_json::from_slice(decoded).map_err(|_| Reject::Malformed("body is not JSON"))?;
    if !v.is_object() {
        return Err(Reject::Malformed("body is not a JSON object"));
    }
    if v.get("kind").and_then(Value::as_str) != Some(kind.as_str()) {
        return Err(Reject::Malformed("body kind differs from the path kind"));
    }
    if v.get("source").and_then(Value::as_str) != Some(registered_source(kind)) {
        return Err(Reject::Malformed(
            "source is not the kind's registered provenance",
        ));
    }
    let mut rows = Vec::new();
    match kind {
        Kind::UsageSnapshot | Kind::UsageWindow => {
            let ws = text(&v, "window_start")?;
            let len = number(&v, "window_seconds")?;
            if runtime_agent::time::parse_rfc3339(ws).is_none() || len == 0 {
                return Err(Reject::Malformed("window_start or window_seconds invalid"));
            }
            for r in records(&v)? {
                if text(r, "window_start")? != ws || number(r, "window_seconds")? != len {
                    return Err(Reject::Malformed("a record's window differs from the payload's"));
                }
                if !r.get("cpu").is_some_and(Value::is_object)
                    || !r.get("memory").is_some_and(Value::is_object)
                {
                    return Err(Reject::Malformed("a record lacks its cpu or memory block"));
                }
                let pod_uid = text(r, "pod_uid")?;
                rows.push(Row {
                    kind,
                    group: "usage",
                    natural_key: key(&[
                        pod_uid.into(),
                        text(r, "container")?.into(),
                        ws.into(),
                        len.into(),
                    ]),
                    pod_uid: pod_uid.to_owned(),
                    merge: if kind == Kind::UsageWindow {
                        Merge::Final
                    } else {
                        Merge::Snapshot
                    },
                });
            }
        }
        Kind::ProcessPeaks => {
            text(&v, "captured_at")?;
            for r in records(&v)? {
                let digest = r.get("image_digest").and_then(Value::as_str).unwrap_or("");
                if ImageDigest::parse(digest).is_none() {
                    return Err(Reject::Malformed("evidence.digest.missing_or_malformed"));
                }
                let pod_uid = text(r, "pod_uid")?;
                rows.push(Row {
                    kind,
                    group: kind.as_str(),
                    natural_key: key(&[
                        text(r, "namespace")?.into(),
                        text(r, "workload_kind")?.into(),
                        text(r, "workload_name")?.into(),
                        text(r, "container")?.into(),
                        pod_uid.into(),
                        digest.into(),
                    ]),
                    pod_uid: pod_uid.to_owned(),
                    merge: Merge::Replace,
                });
            }
        }
        Kind::CollectionCoverage => {
            text(&v, "captured_at")?;
            let pod_uid = text(&v, "pod_uid")?;
            rows.push(Row {
                kind,
                group: kind.as_str(),
                natural_key: key(&[pod_uid.into()]),
                pod_uid: pod_uid.to_owned(),
                merge: Merge::Replace,
            });
        }
        Kind::OomObserved => {
            let e = v
                .get("event")
                .filter(|e| e.is_object())
                .ok_or(Reject::Malformed("event missing"))?;
            let pod_uid = text(e, "pod_uid")?;
            rows.push(Row {
                kind,
                group: kind.as_str(),
                natural_key: key(&[
                    pod_uid.into(),
                    text(e, "container")?.into(),
                    text(e, "container_started_at")?.into(),
                    number(e, "oom_kill_total")?.into(),
                ]),
                pod_uid: pod_uid.to_owned(),
                merge: Merge::Once,
            });
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn decode_caps_the_decoded_size_not_the_compressed_one() {
        let zeros = vec![0u8; 1024 * 1024];
        assert_eq!(decode(&gz(&zeros), 1024 * 1024).unwrap().len(), zeros.len());
        let bomb = gz(&vec![0u8; 2 * 1024 * 1024]);
        assert!(bomb.len() < 1024 * 1024 / 100);
        assert_eq!(decode(&bomb, 1024 * 1024), Err(Reject::TooLarge));
        assert_eq!(
            decode(b"not gzip", 1024),
            Err(Reject::Malformed("body is not valid gzip"))
        );
    }

    const COVERAGE: &str = r#"{"kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z","pod_uid":"u1","extra":1}"#;

    #[test]
    fn validation_refuses_with_the_reason() {
        assert_eq!(
            validate("collection_coverage", COVERAGE.as_bytes())
                .unwrap()
                .len(),
            1
        );
        for (path, body, reason) in [
            ("nope", COVERAGE, "unknown kind"),
            ("collection_coverage", "{", "body is not JSON"),
            ("collection_coverage", "[]", "body is not a JSON object"),
            ("usage_snapshot", COVERAGE, "body kind differs from the path kind"),
            (
                "collection_coverage",
                r#"{"kind":"collection_coverage","source":"measured","captured_at":"x","pod_uid":"u"}"#,
                "source is not the kind's registered provenance",
            ),
            (
                "collection_coverage",
                r#"{"kind":"collection_coverage","source":"agent","captured_at":"x"}"#,
                "a natural-key field is missing or not a string",
            ),
            (
                "process_peaks",
                r#"{"kind":"process_peaks","source":"measured","captured_at":"x","records":[{"image_digest":"sha256:ABC"}]}"#,
                "evidence.digest.missing_or_malformed",
            ),
        ] {
            assert_eq!(
                validate(path, body.as_bytes()),
                Err(Reject::Malformed(reason)),
                "{body}"
            );
        }
    }
}
