//! The shipping seam (collector-design.md §6; runtime-agent-backend-contract.md §3
//! "Transport", §5 "Error semantics").
//!
//! **Shipping is not built.** This crate has no HTTP client: the binary collects and
//! spools only. What a shipper will plug into is fixed here so it can be added without
//! touching the core:
//!
//! - [`Transport`]: POST one gzip-encoded payload to `{INGEST_URL}/v1/ingest/{kind}` and
//!   report the [`Outcome`] — the implementation owns gzip, `Content-Type:
//!   application/json`, `Content-Encoding: gzip`, [`user_agent`], HTTP/1.1 and the 30 s
//!   timeout.
//! - [`classify`]: the contract's status classes — 2xx delivered; 400 and 413 held
//!   (permanent for those bytes); 401 and 403 halt shipping for the process lifetime;
//!   429, 5xx and anything else deferred.
//! - The spool side exists: [`crate::spool::Spool::entries`] (oldest first),
//!   [`crate::spool::Spool::load`] (damaged files quarantined, never returned) and
//!   [`crate::spool::Spool::acknowledge`] (delete only the version sent).
//! - [`MAX_PAYLOAD_BYTES`]: payloads over 4 MiB decoded are never offered.

use crate::payload::Kind;

/// Agent-side ceiling on a decoded payload (design §6).
pub const MAX_PAYLOAD_BYTES: u64 = 4 * 1024 * 1024;

/// What one request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx: delete if unchanged.
    Delivered,
    /// 400: held, never re-offered by this process.
    Malformed,
    /// 413: held likewise.
    TooLarge,
    /// 401/403: halt shipping, keep collecting and spooling.
    Unauthorized,
    /// 429, 5xx, other codes, network errors, timeouts: keep the file, back off.
    Deferred,
}

/// Map an HTTP status to its class (contract §5).
pub fn classify(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        400 => Outcome::Malformed,
        413 => Outcome::TooLarge,
        401 | 403 => Outcome::Unauthorized,
        _ => Outcome::Deferred,
    }
}

/// `runtime-agent/<version>`, or bare `runtime-agent` when the version is not at most
/// 64 characters of `[A-Za-z0-9.+_-]` (contract §3).
pub fn user_agent(version: &str) -> String {
    let ok = !version.is_empty()
        && version.len() <= 64
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'_' | b'-'));
    if ok {
        format!("runtime-agent/{version}")
    } else {
        "runtime-agent".to_owned()
    }
}

/// The seam a shipper implements: send one payload of `kind` (its decoded bytes).
pub trait Transport {
    fn post(&mut self, kind: Kind, payload: &[u8]) -> Outcome;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes() {
        for (status, outcome) in [
            (200, Outcome::Delivered),
            (204, Outcome::Delivered),
            (400, Outcome::Malformed),
            (413, Outcome::TooLarge),
            (401, Outcome::Unauthorized),
            (403, Outcome::Unauthorized),
            (429, Outcome::Deferred),
            (500, Outcome::Deferred),
            (503, Outcome::Deferred),
            (301, Outcome::Deferred),
            (404, Outcome::Deferred),
            (418, Outcome::Deferred),
        ] {
            assert_eq!(classify(status), outcome, "{status}");
        }
    }

    #[test]
    fn user_agent_versions() {
        assert_eq!(user_agent("0.3.1"), "runtime-agent/0.3.1");
        assert_eq!(user_agent("1.0.0+build_7-rc"), "runtime-agent/1.0.0+build_7-rc");
        assert_eq!(
            user_agent(&"9".repeat(64)),
            format!("runtime-agent/{}", "9".repeat(64))
        );
        assert_eq!(user_agent(&"9".repeat(65)), "runtime-agent");
        assert_eq!(user_agent("1.0 beta"), "runtime-agent");
        assert_eq!(user_agent(""), "runtime-agent");
    }
}
