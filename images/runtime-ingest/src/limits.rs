//! Every limit and timeout of the reference ingest, each with the rule that fixes it
//! (DESIGN.md "Constants"; collector-design.md §10; review b30b1a0 finding 14).
//!
//! Memory is bounded by construction: at most [`MAX_CONNECTIONS`] connections, at
//! most [`BODIES_IN_FLIGHT`] request bodies buffered at once (each at most
//! [`compressed_cap`] on the wire and the decoded cap once inflated), and the
//! `received` debug log at most [`RECEIVED_BUDGET`] bytes.

use std::time::Duration;

/// Decoded-size cap (design §10: 8 MiB, above the collector's 4 MiB ceiling).
pub const DECODED_CAP: usize = 8 * 1024 * 1024;

/// The cap on the compressed body for a decoded cap: gzip stores incompressible
/// input in blocks of at most 65 535 bytes with a 5-byte header each, plus an 18-byte
/// frame, so no body whose payload fits the decoded cap is larger than this. Limits
/// still apply to the decoded bytes (contract §3); this only refuses, before
/// inflating, a body that cannot decode under the cap.
pub fn compressed_cap(decoded_cap: usize) -> usize {
    decoded_cap
        .saturating_add(decoded_cap / 8192)
        .saturating_add(1024)
}

/// How long a request body may take to arrive once its headers have (408 after).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once; the next waits in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;
/// Request bodies buffered and decoded at once; further requests wait for a slot
/// before their body is read.
pub const BODIES_IN_FLIGHT: usize = 4;
/// Bytes of an over-cap body read and thrown away before answering 413, so the
/// client reads the answer instead of a reset; past this the connection is closed.
pub const DISCARD_LIMIT: usize = 16 * 1024 * 1024;
/// Bytes the `received` debug log keeps (bodies, paths and headers), oldest evicted
/// first.
pub const RECEIVED_BUDGET: usize = 32 * 1024 * 1024;
/// The fault script's body cap (`POST /admin/faults`).
pub const FAULTS_BODY_CAP: usize = 64 * 1024;
/// How many characters of a request path a log line or a `received` entry keeps.
pub const PATH_KEPT: usize = 200;
/// How many characters of a header value a `received` entry keeps.
pub const HEADER_KEPT: usize = 200;
