//! Validation and the split into rows (collector-design.md §10 "Validate";
//! runtime-agent-backend-contract.md §4 "Delivery semantics", §6; issue 19 "The
//! reference ingest stores each payload once per record").
//!
//! [`validate`] checks, in this order, and refuses with the first [`Reject`]:
//!
//! 1. the path names a registered kind ([`crate::kinds`], this ingest's own table);
//! 2. the decoded bytes are UTF-8 JSON, an object, with no member named twice;
//! 3. the body's `kind` is the path's, its `source` the kind's registered provenance;
//! 4. per shape: the usage window (a valid RFC 3339 `window_start`, a non-zero
//!    `window_seconds`, the same in every record); `captured_at` where the design has
//!    one; a `records` array that is not empty, of objects; usage records carry their
//!    `cpu` and `memory` objects; `process_peaks` records a valid digest
//!    ([`crate::checks::valid_digest`]); the natural-key fields present and typed;
//! 5. no two records share a natural key (one version of a key at a time).
//!
//! Unknown members are ignored (contract §6). Each row also carries the [`Agent`] its
//! record names (`namespace`, `pod`; not key fields, so they may be absent), which the
//! store keeps so the read API finds one agent's rows without reading the others
//! (review afa2bf1 finding 5).
//!
//! **Rows, not copies.** The result borrows from the payload: each [`Row`] holds its
//! own record's exact text, and a records payload has one [`Envelope`] — the payload
//! text before and after its records (`{…,"records":[` and `]…}`). The store keeps the
//! envelope once per request and each record once under its own key, so storage is
//! linear in what was sent, and a superseded record lives in no other row. A row reads
//! back as `prefix + record + suffix`: the payload as if it had carried only that
//! record, which for the collector's compact single-record payloads is the posted
//! bytes exactly. Kinds whose payload is the record (`collection_coverage`,
//! `oom_observed`) are stored whole, with no envelope.

use std::collections::HashSet;

use serde_json::json;
use serde_json::value::RawValue;

use crate::checks::{parse_rfc3339, valid_digest};
use crate::kinds::{Kind, Merge, Shape};
use crate::members::{Object, span};
use crate::reject::Reject;

/// The payload around its records, shared by every row of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// From the payload's start through the records array's `[`.
    pub prefix: &'a str,
    /// From the records array's `]` to the payload's end.
    pub suffix: &'a str,
}

/// One natural key's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<'a> {
    pub kind: Kind,
    /// The key space ([`Kind::group`]).
    pub group: &'static str,
    /// The natural key as canonical JSON (an array of its fields in a fixed order).
    pub natural_key: String,
    /// The pod the row belongs to (for read-back filters).
    pub pod_uid: String,
    /// The agent the row belongs to, as its record names it (the read API's key).
    pub agent: Agent,
    pub merge: Merge,
    /// The record's exact text (a records kind), or the whole payload.
    pub body: &'a str,
}

/// The agent a row belongs to: the pod name in its namespace, as the record (or, for
/// `oom_observed`, its event; for `collection_coverage`, the payload) names them.
/// Neither is a key field, so a record without them is stored all the same, with
/// `None`, and no read by agent finds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Agent {
    pub namespace: Option<String>,
    pub pod: Option<String>,
}

impl Agent {
    /// The agent `o` names (non-empty strings only).
    fn of(o: &Object<'_>) -> Self {
        Self {
            namespace: o.text("namespace").ok(),
            pod: o.text("pod").ok(),
        }
    }

    /// The agent of a stored row of `kind` whose text is `body` (the record, or the
    /// whole payload for the kinds without records); the default when it does not
    /// parse. For rows stored before the agent was kept ([`crate::store`]).
    pub fn of_stored(kind: &str, body: &str) -> Self {
        let Ok(o) = Object::parse(body, Reject::NotObject) else {
            return Self::default();
        };
        match Kind::parse(kind).map(Kind::shape) {
            Some(Shape::Event) => o
                .get("event")
                .and_then(|e| Object::of(e, Reject::EventMissing).ok())
                .map_or_else(Self::default, |e| Self::of(&e)),
            _ => Self::of(&o),
        }
    }
}

/// A valid payload, split into rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated<'a> {
    pub kind: Kind,
    /// `Some` for records kinds: the text around the records.
    pub envelope: Option<Envelope<'a>>,
    pub rows: Vec<Row<'a>>,
}

fn timestamp(o: &Object<'_>, field: &'static str) -> Result<String, Reject> {
    let text = o.text(field)?;
    parse_rfc3339(&text)
        .map(|_| text)
        .ok_or(Reject::Timestamp { field })
}

fn row<'a>(kind: Kind, key: serde_json::Value, pod_uid: String, agent: Agent, body: &'a str) -> Row<'a> {
    Row {
        kind,
        group: kind.group(),
        natural_key: key.to_string(),
        pod_uid,
        agent,
        merge: kind.merge(),
        body,
    }
}

/// The records array: its elements and the envelope around them.
fn records<'a>(text: &'a str, top: &Object<'a>) -> Result<(Vec<&'a RawValue>, Envelope<'a>), Reject> {
    let array = top
        .get("records")
        .filter(|v| v.get().starts_with('['))
        .ok_or(Reject::RecordsMissing)?;
    let items: Vec<&'a RawValue> = serde_json::from_str(array.get()).map_err(|_| Reject::RecordsMissing)?;
    if items.is_empty() {
        return Err(Reject::RecordsEmpty);
    }
    // The array text borrows from the payload; anything else is a parser change we
    // refuse to guess about.
    let range = span(text, array.get()).ok_or(Reject::NotJson)?;
    let prefix = text.get(..range.start + 1).ok_or(Reject::NotJson)?;
    let suffix = text.get(range.end - 1..).ok_or(Reject::NotJson)?;
    Ok((items, Envelope { prefix, suffix }))
}

fn usage_rows<'a>(kind: Kind, text: &'a str, top: &Object<'a>) -> Result<Validated<'a>, Reject> {
    let ws = top.text("window_start")?;
    let len = top.whole_number("window_seconds")?;
    if parse_rfc3339(&ws).is_none() || len == 0 {
        return Err(Reject::WindowInvalid);
    }
    let (items, envelope) = records(text, top)?;
    let mut rows = Vec::with_capacity(items.len());
    for item in items {
        let r = Object::of(item, Reject::RecordNotObject)?;
        if r.text("window_start")? != ws || r.whole_number("window_seconds")? != len {
            return Err(Reject::WindowMismatch);
        }
        for block in ["cpu", "memory"] {
            if !r.is_object(block) {
                return Err(Reject::BlockMissing { block });
            }
        }
        let pod_uid = r.text("pod_uid")?;
        let key = json!([pod_uid, r.text("container")?, ws, len]);
        rows.push(row(kind, key, pod_uid, Agent::of(&r), item.get()));
    }
    Ok(Validated {
        kind,
        envelope: Some(envelope),
        rows,
    })
}

fn peaks_rows<'a>(kind: Kind, text: &'a str, top: &Object<'a>) -> Result<Validated<'a>, Reject> {
    timestamp(top, "captured_at")?;
    let (items, envelope) = records(text, top)?;
    let mut rows = Vec::with_capacity(items.len());
    for item in items {
        let r = Object::of(item, Reject::RecordNotObject)?;
        let digest = r.text("image_digest").map_err(|_| Reject::Digest)?;
        if !valid_digest(&digest) {
            return Err(Reject::Digest);
        }
        let pod_uid = r.text("pod_uid")?;
        let key = json!([
            r.text("namespace")?,
            r.text("workload_kind")?,
            r.text("workload_name")?,
            r.text("container")?,
            pod_uid,
            digest,
        ]);
        rows.push(row(kind, key, pod_uid, Agent::of(&r), item.get()));
    }
    Ok(Validated {
        kind,
        envelope: Some(envelope),
        rows,
    })
}

/// Validate a decoded payload posted to `/v1/ingest/{path_kind}` and split it into
/// rows (see the module doc for the order of the checks).
pub fn validate<'a>(path_kind: &str, decoded: &'a [u8]) -> Result<Validated<'a>, Reject> {
    let kind = Kind::parse(path_kind).ok_or(Reject::UnknownKind)?;
    let text = std::str::from_utf8(decoded).map_err(|_| Reject::NotJson)?;
    let top = Object::parse(text, Reject::NotObject)?;
    // The rows are stored verbatim and read back as JSON values: a number out
    // of a double's range (`27e197376`) parses as raw JSON here but never
    // there, and one such row would fail every read of its pod. (Found by the
    // suite's replay of the ingest fuzz target, issue 47.)
    if serde_json::from_str::<serde_json::Value>(text).is_err() {
        return Err(Reject::NumberOutOfRange);
    }
    let body_kind = top
        .get("kind")
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok());
    if body_kind.as_deref() != Some(kind.as_str()) {
        return Err(Reject::KindMismatch);
    }
    let source = top
        .get("source")
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok());
    if source.as_deref() != Some(kind.source()) {
        return Err(Reject::UnregisteredSource {
            expected: kind.source(),
        });
    }
    let validated = match (kind.shape(), kind) {
        (Shape::Records, Kind::ProcessPeaks) => peaks_rows(kind, text, &top)?,
        (Shape::Records, _) => usage_rows(kind, text, &top)?,
        (Shape::Whole, _) => {
            timestamp(&top, "captured_at")?;
            let pod_uid = top.text("pod_uid")?;
            Validated {
                kind,
                envelope: None,
                rows: vec![row(kind, json!([pod_uid]), pod_uid, Agent::of(&top), text)],
            }
        }
        (Shape::Event, _) => {
            timestamp(&top, "captured_at")?;
            let event = top.get("event").ok_or(Reject::EventMissing)?;
            let e = Object::of(event, Reject::EventMissing)?;
            let pod_uid = e.text("pod_uid")?;
            let key = json!([
                pod_uid,
                e.text("container")?,
                timestamp(&e, "container_started_at")?,
                e.whole_number("oom_kill_total")?,
            ]);
            Validated {
                kind,
                envelope: None,
                rows: vec![row(kind, key, pod_uid, Agent::of(&e), text)],
            }
        }
    };
    let mut keys = HashSet::with_capacity(validated.rows.len());
    if !validated.rows.iter().all(|r| keys.insert(r.natural_key.as_str())) {
        return Err(Reject::DuplicateKey);
    }
    Ok(validated)
}

#[cfg(test)]
mod tests {
    use super::*;

    const COVERAGE: &str = r#"{"kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z","pod_uid":"u1","extra":1}"#;

    fn usage(records: &str) -> String {
        format!(
            r#"{{"kind":"usage_snapshot","source":"measured","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"observation":{{"polls_attempted":2}},"records":{records},"tail":true}}"#
        )
    }

    fn rec(container: &str) -> String {
        format!(
            r#"{{"pod_uid":"u1","container":"{container}","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"cpu":{{}},"memory":{{}}}}"#
        )
    }

    #[test]
    fn a_records_payload_splits_into_an_envelope_and_one_exact_record_per_row() {
        let text = usage(&format!("[{}, {}]", rec("a"), rec("b")));
        let v = validate("usage_snapshot", text.as_bytes()).unwrap();
        let env = v.envelope.unwrap();
        assert!(env.prefix.ends_with(r#""records":["#));
        assert_eq!(env.suffix, r#"],"tail":true}"#);
        assert_eq!(v.rows.len(), 2);
        assert_eq!(v.rows[0].body, rec("a"));
        assert_eq!(v.rows[1].body, rec("b"));
        assert_eq!(v.rows[1].natural_key, r#"["u1","b","2026-08-06T10:00:00Z",3600]"#);
        assert_eq!((v.rows[0].group, v.rows[0].merge), ("usage", Merge::Snapshot));
        // One record: prefix + record + suffix is the payload itself.
        let one = usage(&format!("[{}]", rec("a")));
        let v = validate("usage_snapshot", one.as_bytes()).unwrap();
        let env = v.envelope.unwrap();
        assert_eq!(format!("{}{}{}", env.prefix, v.rows[0].body, env.suffix), one);
    }

    #[test]
    fn whole_payload_kinds_are_one_row_without_an_envelope() {
        let v = validate("collection_coverage", COVERAGE.as_bytes()).unwrap();
        assert_eq!(v.envelope, None);
        assert_eq!(v.rows.len(), 1);
        assert_eq!(v.rows[0].body, COVERAGE);
        assert_eq!(v.rows[0].natural_key, r#"["u1"]"#);
        let oom = r#"{"kind":"oom_observed","source":"measured","captured_at":"2026-08-06T10:00:00Z","event":{"pod_uid":"u1","container":"agent","container_started_at":"2026-08-06T09:00:00Z","oom_kill_total":2}}"#;
        let v = validate("oom_observed", oom.as_bytes()).unwrap();
        assert_eq!(
            v.rows[0].natural_key,
            r#"["u1","agent","2026-08-06T09:00:00Z",2]"#
        );
        assert_eq!(v.rows[0].merge, Merge::Once);
    }

    #[test]
    fn each_row_carries_the_agent_its_record_names() {
        let agent = |ns: &str, pod: &str| Agent {
            namespace: Some(ns.into()),
            pod: Some(pod.into()),
        };
        let named = rec("a").replace(r#""pod_uid""#, r#""namespace":"ns","pod":"p","pod_uid""#);
        let text = usage(&format!("[{named}, {}]", rec("b")));
        let v = validate("usage_snapshot", text.as_bytes()).unwrap();
        assert_eq!(v.rows[0].agent, agent("ns", "p"));
        assert_eq!(
            v.rows[1].agent,
            Agent::default(),
            "not a key field: stored without"
        );
        assert_eq!(
            Agent::of_stored("usage_snapshot", v.rows[0].body),
            agent("ns", "p")
        );
        let coverage = COVERAGE.replace(r#""extra":1"#, r#""namespace":"ns","pod":"c""#);
        let v = validate("collection_coverage", coverage.as_bytes()).unwrap();
        assert_eq!(v.rows[0].agent, agent("ns", "c"));
        assert_eq!(
            Agent::of_stored("collection_coverage", &coverage),
            agent("ns", "c")
        );
        let oom = r#"{"kind":"oom_observed","source":"measured","captured_at":"2026-08-06T10:00:00Z","namespace":"top","event":{"namespace":"ns","pod":"o","pod_uid":"u1","container":"agent","container_started_at":"2026-08-06T09:00:00Z","oom_kill_total":2}}"#;
        let v = validate("oom_observed", oom.as_bytes()).unwrap();
        assert_eq!(
            v.rows[0].agent,
            agent("ns", "o"),
            "the event's, not the payload's"
        );
        assert_eq!(Agent::of_stored("oom_observed", oom), agent("ns", "o"));
        assert_eq!(Agent::of_stored("oom_observed", "not json"), Agent::default());
        let empty = named.replace(r#""pod":"p""#, r#""pod":"""#);
        let text = usage(&format!("[{empty}]"));
        let v = validate("usage_snapshot", text.as_bytes()).unwrap();
        assert_eq!(
            v.rows[0].agent,
            Agent {
                namespace: Some("ns".into()),
                pod: None
            }
        );
    }

    #[test]
    fn refusals_come_in_the_documented_order() {
        for (path, body, reject) in [
            ("nope", COVERAGE.to_owned(), Reject::UnknownKind),
            ("collection_coverage", "\u{ff}".to_owned(), Reject::NotJson),
            ("usage_snapshot", COVERAGE.to_owned(), Reject::KindMismatch),
            (
                "usage_snapshot",
                usage(&format!("[{},{}]", rec("a"), rec("a"))),
                Reject::DuplicateKey,
            ),
            (
                "usage_snapshot",
                usage(&format!(r#"[{}]"#, rec("a").replace(r#""container":"a","#, ""))),
                Reject::KeyField { field: "container" },
            ),
            (
                "usage_snapshot",
                usage(&format!("[{}]", rec("a").replace("3600", "60"))),
                Reject::WindowMismatch,
            ),
            (
                "usage_snapshot",
                usage("[]").replace(r#""window_seconds":3600"#, r#""window_seconds":0"#),
                Reject::WindowInvalid,
            ),
            (
                "usage_snapshot",
                usage(&format!("[{}]", rec("a"))).replace(r#""tail":true"#, r#""records":[]"#),
                Reject::DuplicateMember,
            ),
            (
                "collection_coverage",
                COVERAGE.replace(r#""extra":1"#, r#""extra":27e197376"#),
                Reject::NumberOutOfRange,
            ),
            (
                "usage_snapshot",
                usage(&format!("[{}]", rec("a").replace("{}", r#"{"max":-1e309}"#))),
                Reject::NumberOutOfRange,
            ),
        ] {
            assert_eq!(validate(path, body.as_bytes()), Err(reject.clone()), "{body}");
        }
    }
}
