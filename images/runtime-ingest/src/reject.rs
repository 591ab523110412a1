//! Why a request is refused, as a reason code a client and an operator can read
//! (issue 19 "Ingest errors have empty bodies"; collector-design.md §7, §10;
//! runtime-agent-backend-contract.md §5 "Error semantics").
//!
//! Each refusal is one [`Reject`] variant with a stable dotted [`Reject::code`] and
//! the HTTP status of its contract §5 class: 400 and 413 are permanent for those
//! bytes, 408 is transient (the collector retries it like any other code, contract
//! §5 "any other status is treated as transient"). The answer's body is
//! `{"error":"<code>","detail":"<Display>"}` ([`Reject::body`]): an error is a
//! protocol outcome, which contract §1 allows a response to carry, and the collector
//! ignores it by design. A detail names fields of the contract, never a value from
//! the payload, so nothing a client sent is echoed or logged.
//!
//! The digest code `evidence.digest.missing_or_malformed` is the gate document's
//! (host-agent-digest-gate.md, `AgentCoreValidation`); the others are this ingest's
//! own, in the same `area.subject.problem` shape.

use serde::Serialize;

/// A refused request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// The request does not say `Content-Encoding: gzip` (contract §3).
    #[error("Content-Encoding must be gzip")]
    NotGzipEncoded,
    /// The request does not say `Content-Type: application/json` (contract §3).
    #[error("Content-Type must be application/json")]
    NotJsonContentType,
    /// The compressed body is larger than any body that could decode under the cap.
    #[error("the request body is over its {cap}-byte cap")]
    BodyTooLarge { cap: usize },
    /// The body did not arrive within the body timeout.
    #[error("the request body did not arrive within {ms} ms")]
    BodyTimeout { ms: u64 },
    /// The body could not be read (the connection failed mid-body).
    #[error("the request body could not be read")]
    BodyUnreadable,
    /// The body is not a gzip stream.
    #[error("the body is not valid gzip")]
    BadGzip,
    /// The decoded payload is over the decoded cap (contract §3: limits apply after
    /// decoding).
    #[error("the decoded payload is over its {cap}-byte cap")]
    DecodedTooLarge { cap: usize },
    /// The decoded payload is not UTF-8 JSON.
    #[error("the payload is not JSON")]
    NotJson,
    /// A number of the payload is JSON by its grammar but out of a double's
    /// range (`1e400`): no reader of the stored row could parse it back.
    #[error("a number in the payload is out of range")]
    NumberOutOfRange,
    /// The payload is JSON but not an object.
    #[error("the payload is not a JSON object")]
    NotObject,
    /// An object of the payload names one member twice.
    #[error("an object in the payload has a duplicate member")]
    DuplicateMember,
    /// The path names no registered kind.
    #[error("the path names no registered kind")]
    UnknownKind,
    /// The body's `kind` differs from the path's.
    #[error("the payload's kind differs from the path's")]
    KindMismatch,
    /// The `source` is not the kind's registered provenance (contract §4).
    #[error("source must be {expected:?} for this kind")]
    UnregisteredSource { expected: &'static str },
    /// A natural-key field is missing or has the wrong type.
    #[error("the natural-key field {field} is missing, empty or mistyped")]
    KeyField { field: &'static str },
    /// Two records of one request share a natural key (contract §4: one version of
    /// a key at a time).
    #[error("two records of the payload share one natural key")]
    DuplicateKey,
    /// A timestamp is not an RFC 3339 date-time.
    #[error("{field} is not an RFC 3339 date-time")]
    Timestamp { field: &'static str },
    /// The payload has no `records` array.
    #[error("the payload has no records array")]
    RecordsMissing,
    /// The `records` array is empty.
    #[error("the records array is empty")]
    RecordsEmpty,
    /// A record is not an object.
    #[error("a record is not a JSON object")]
    RecordNotObject,
    /// The payload's window is invalid (a bad start or a zero length).
    #[error("window_start or window_seconds is invalid")]
    WindowInvalid,
    /// A record's window differs from the payload's.
    #[error("a record's window differs from the payload's")]
    WindowMismatch,
    /// A usage record lacks its `cpu` or `memory` object.
    #[error("a record lacks its {block} object")]
    BlockMissing { block: &'static str },
    /// An `oom_observed` payload has no `event` object.
    #[error("the payload has no event object")]
    EventMissing,
    /// A digest-keyed record has no `sha256:<64 lowercase hex>` digest
    /// (host-agent-digest-gate.md).
    #[error("image_digest must be sha256: followed by 64 lowercase hex digits")]
    Digest,
}

/// The JSON body of a refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    pub error: &'static str,
    pub detail: String,
}

impl Reject {
    /// The stable reason code.
    pub fn code(&self) -> &'static str {
        match self {
            Reject::NotGzipEncoded => "request.encoding.not_gzip",
            Reject::NotJsonContentType => "request.content_type.not_json",
            Reject::BodyTooLarge { .. } => "request.body.too_large",
            Reject::BodyTimeout { .. } => "request.body.timeout",
            Reject::BodyUnreadable => "request.body.unreadable",
            Reject::BadGzip => "payload.gzip.invalid",
            Reject::DecodedTooLarge { .. } => "payload.too_large",
            Reject::NotJson => "payload.json.invalid",
            Reject::NumberOutOfRange => "payload.json.number_out_of_range",
            Reject::NotObject => "payload.json.not_object",
            Reject::DuplicateMember => "payload.json.duplicate_member",
            Reject::UnknownKind => "payload.kind.unknown",
            Reject::KindMismatch => "payload.kind.mismatch",
            Reject::UnregisteredSource { .. } => "payload.source.unregistered",
            Reject::KeyField { .. } => "payload.key.missing_or_mistyped",
            Reject::DuplicateKey => "payload.key.duplicate",
            Reject::Timestamp { .. } => "payload.timestamp.invalid",
            Reject::RecordsMissing => "payload.records.missing",
            Reject::RecordsEmpty => "payload.records.empty",
            Reject::RecordNotObject => "payload.record.not_object",
            Reject::WindowInvalid => "payload.window.invalid",
            Reject::WindowMismatch => "payload.window.mismatch",
            Reject::BlockMissing { .. } => "payload.record.block_missing",
            Reject::EventMissing => "payload.event.missing",
            Reject::Digest => "evidence.digest.missing_or_malformed",
        }
    }

    /// The HTTP status (contract §5: 400 and 413 are permanent for these bytes, 408
    /// is retried).
    pub fn status(&self) -> u16 {
        match self {
            Reject::BodyTooLarge { .. } | Reject::DecodedTooLarge { .. } => 413,
            Reject::BodyTimeout { .. } => 408,
            _ => 400,
        }
    }

    /// The answer's body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.code(),
            detail: self.to_string(),
        }
    }
}

/// The code and body of a storage failure (503, transient).
pub const STORAGE_UNAVAILABLE: &str = "storage.unavailable";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_statuses_follow_the_contract_classes() {
        let all = [
            Reject::NotGzipEncoded,
            Reject::NotJsonContentType,
            Reject::BodyTooLarge { cap: 1 },
            Reject::BodyTimeout { ms: 1 },
            Reject::BodyUnreadable,
            Reject::BadGzip,
            Reject::DecodedTooLarge { cap: 1 },
            Reject::NotJson,
            Reject::NumberOutOfRange,
            Reject::NotObject,
            Reject::DuplicateMember,
            Reject::UnknownKind,
            Reject::KindMismatch,
            Reject::UnregisteredSource { expected: "agent" },
            Reject::KeyField { field: "pod_uid" },
            Reject::DuplicateKey,
            Reject::Timestamp { field: "captured_at" },
            Reject::RecordsMissing,
            Reject::RecordsEmpty,
            Reject::RecordNotObject,
            Reject::WindowInvalid,
            Reject::WindowMismatch,
            Reject::BlockMissing { block: "cpu" },
            Reject::EventMissing,
            Reject::Digest,
        ];
        let codes: std::collections::BTreeSet<&str> = all.iter().map(Reject::code).collect();
        assert_eq!(codes.len(), all.len());
        assert!(!codes.contains(STORAGE_UNAVAILABLE));
        for r in &all {
            let expected = match r {
                Reject::BodyTooLarge { .. } | Reject::DecodedTooLarge { .. } => 413,
                Reject::BodyTimeout { .. } => 408,
                _ => 400,
            };
            assert_eq!(r.status(), expected, "{r:?}");
            assert_eq!(
                serde_json::to_value(r.body()).unwrap(),
                serde_json::json!({"error": r.code(), "detail": r.to_string()})
            );
        }
        assert_eq!(Reject::Digest.code(), "evidence.digest.missing_or_malformed");
    }
}
