//! The digest gate and deterministic event ids (host-agent-digest-gate.md
//! "Digest-Gated Evidence Publication", "Agent.Core Contracts" deterministic support;
//! collector-design.md §7).
//!
//! - Image evidence is keyed by an immutable digest: the whole configured value must be
//!   `sha256:` followed by exactly 64 lowercase hex digits. Uppercase is rejected, not
//!   normalized (design §7; OCI forbids `[A-F]`). Tags, `repo@sha256:…` references,
//!   container ids, 63/65 digits and surrounding whitespace are blocked. The digest is
//!   never inferred from the image reference.
//! - While blocked, digest-keyed kinds (`process_peaks`) are not produced; every
//!   suppressed payload is counted, and coverage carries
//!   [`REASON_DIGEST_MISSING_OR_MALFORMED`] (the gate doc's reason code; `stale` and
//!   `ambiguous` cannot occur for one container with a fixed digest).
//! - Event ids are `"rtevt:" + hex(SHA-256(canonical JSON of the natural key))`, where
//!   canonical JSON sorts object keys recursively (by UTF-8 bytes), has no whitespace,
//!   omits null members and is UTF-8 ([`canonical_json`], [`event_id`]).

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The gate doc's reason code for a missing, tag-only or malformed digest.
pub const REASON_DIGEST_MISSING_OR_MALFORMED: &str = "runtime_status.digest_missing_or_malformed";
/// Event id prefix (gate doc, `RuntimeEvidenceIds.CreateEventId`).
pub const EVENT_ID_PREFIX: &str = "rtevt:";

/// A digest that passed the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageDigest(String);

impl ImageDigest {
    /// Accept exactly `sha256:<64 lowercase hex>`.
    pub fn parse(value: &str) -> Option<Self> {
        let hex = value.strip_prefix("sha256:")?;
        let ok = hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Self(value.to_owned()))
    }

    /// The digest text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The gate's state for this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestGate {
    digest: Option<ImageDigest>,
    blocked: u64,
}

impl DigestGate {
    /// Classify the configured digest (`IMAGE_DIGEST`; unset = `None`).
    pub fn new(configured: Option<&str>) -> Self {
        Self {
            digest: configured.and_then(ImageDigest::parse),
            blocked: 0,
        }
    }

    /// The digest when the gate passed.
    pub fn digest(&self) -> Option<&ImageDigest> {
        self.digest.as_ref()
    }

    /// Ask to produce one digest-keyed payload: the digest when the gate passed,
    /// otherwise `None` and the suppression is counted.
    pub fn admit(&mut self) -> Option<&ImageDigest> {
        if self.digest.is_none() {
            self.blocked = self.blocked.saturating_add(1);
        }
        self.digest.as_ref()
    }

    /// The coverage block `agent.digest_gate`.
    pub fn coverage(&self) -> GateCoverage {
        match self.digest {
            Some(_) => GateCoverage {
                state: GateState::Passed,
                reason: None,
                blocked: self.blocked,
            },
            None => GateCoverage {
                state: GateState::Blocked,
                reason: Some(REASON_DIGEST_MISSING_OR_MALFORMED.to_owned()),
                blocked: self.blocked,
            },
        }
    }
}

/// `passed` or `blocked`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateState {
    Passed,
    Blocked,
}

/// `collection_coverage.agent.digest_gate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct GateCoverage {
    pub state: GateState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub blocked: u64,
}

/// Canonical JSON: keys sorted recursively, no whitespace, null members omitted.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().filter(|(_, v)| !v.is_null()).collect();
            members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// `rtevt:` + hex SHA-256 of the canonical JSON of `natural_key`.
pub fn event_id(natural_key: &Value) -> String {
    let digest = Sha256::digest(canonical_json(natural_key).as_bytes());
    format!("{EVENT_ID_PREFIX}{}", hex::encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GOOD: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn only_a_whole_lowercase_sha256_digest_passes() {
        assert_eq!(
            ImageDigest::parse(GOOD).map(|d| d.as_str().to_owned()),
            Some(GOOD.to_owned())
        );
        let upper = GOOD.replace("abcdef", "ABCDEF");
        let cases = [
            "".to_owned(),
            "sha256:".to_owned(),
            upper,
            GOOD[..GOOD.len() - 1].to_owned(),
            format!("{GOOD}0"),
            format!(" {GOOD}"),
            format!("{GOOD}\n"),
            format!("ghcr.io/acme/sprig@{GOOD}"),
            "ghcr.io/acme/sprig:v1".to_owned(),
            "latest".to_owned(),
            GOOD["sha256:".len()..].to_owned(),
            format!("containerd://{}", &GOOD["sha256:".len()..]),
            GOOD.replace("sha256", "sha512"),
            GOOD.replacen('0', "g", 1),
        ];
        for case in cases {
            assert_eq!(ImageDigest::parse(&case), None, "{case:?} must be blocked");
        }
    }

    #[test]
    fn blocked_gate_counts_suppressions_and_states_the_reason() {
        let mut gate = DigestGate::new(Some("ghcr.io/acme/sprig:v1"));
        assert_eq!(gate.admit(), None);
        assert_eq!(gate.admit(), None);
        assert_eq!(
            serde_json::to_string(&gate.coverage()).unwrap(),
            r#"{"state":"blocked","reason":"runtime_status.digest_missing_or_malformed","blocked":2}"#
        );
        let mut unset = DigestGate::new(None);
        assert_eq!(unset.admit(), None);
        assert_eq!(unset.coverage().state, GateState::Blocked);
    }

    #[test]
    fn passed_gate_admits_without_counting() {
        let mut gate = DigestGate::new(Some(GOOD));
        assert_eq!(gate.admit().map(ImageDigest::as_str), Some(GOOD));
        assert_eq!(
            serde_json::to_string(&gate.coverage()).unwrap(),
            r#"{"state":"passed","blocked":0}"#
        );
    }

    #[test]
    fn canonical_json_sorts_recursively_and_drops_nulls() {
        let v = json!({"b": 1, "a": {"z": null, "y": [3, {"d": "é", "c": true}]}, "n": null});
        assert_eq!(canonical_json(&v), r#"{"a":{"y":[3,{"c":true,"d":"é"}]},"b":1}"#);
    }

    #[test]
    fn event_ids_are_deterministic_and_key_order_free() {
        let a = json!({"pod_uid": "u", "container": "agent", "oom_kill_total": 1});
        let b = json!({"oom_kill_total": 1, "container": "agent", "pod_uid": "u", "extra": null});
        assert_eq!(event_id(&a), event_id(&b));
        // Pinned: sha256 of {"container":"agent","oom_kill_total":1,"pod_uid":"u"}.
        let expected = hex::encode(Sha256::digest(
            br#"{"container":"agent","oom_kill_total":1,"pod_uid":"u"}"#,
        ));
        assert_eq!(event_id(&a), format!("rtevt:{expected}"));
        assert_ne!(
            event_id(&a),
            event_id(&json!({"pod_uid": "u", "container": "agent", "oom_kill_total": 2}))
        );
        let id = event_id(&a);
        assert_eq!(id.len(), "rtevt:".len() + 64);
        assert!(
            id["rtevt:".len()..]
                .bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }
}
