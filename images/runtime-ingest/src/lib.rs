//! `runtime-ingest`: the reference ingest backend for `runtime-agent`
//! (collector-design.md §10; runtime-agent-backend-contract.md §3–§5).
//!
//! For tests and for operators without the commercial backend. It shares no code with
//! the collector (review b30b1a0 finding 15): its kinds, digest and timestamp checks
//! are its own, so a collector bug is not mirrored here. The request path:
//!
//! 1. [`decode`]: the compressed body is capped ([`limits::compressed_cap`]) and the
//!    *decoded* size is capped while inflating ([`DECODED_CAP`], 8 MiB, above the
//!    collector's 4 MiB ceiling) → 413; limits never come from `Content-Length`
//!    (contract §3); bad gzip → 400. The server checks `Content-Encoding: gzip` and
//!    `Content-Type: application/json` first (400).
//! 2. [`validate()`]: JSON, kind, provenance, window, digest and natural-key checks
//!    ([`validate`](mod@validate) lists them and their order); the payload is split
//!    into one [`Row`] per natural key, each holding only its own record.
//! 3. [`store::Store::upsert`]: one SQLite transaction per request, WAL with
//!    `synchronous=FULL`, keyed `(source_id, group, natural key)`; the source id comes
//!    from the listener's configuration, never from the payload (contract §3). Each
//!    record is stored once under its key, the text around the records once per
//!    request, so storage is linear in what was sent. Commit, then 204; a storage
//!    error → 503 (contract §4 "Acknowledgment is a durability promise", §5).
//!
//! Every refusal is a [`Reject`] with a reason code, answered as
//! `{"error":"<code>","detail":"…"}` and logged ([`reject`]). [`server`] wires this to
//! HTTP/1.1 within the bounds of [`limits`], with an admin-only read-back API and fault
//! injection ([`faults`]), and the launcher's read API ([`read`]) for the bearer of
//! the read token only ([`auth`]); [`report`] draws the stored usage as an SVG chart.

pub mod auth;
pub mod checks;
pub mod faults;
pub mod kinds;
pub mod limits;
pub mod members;
pub mod read;
pub mod received;
pub mod reject;
pub mod report;
pub mod server;
pub mod store;
pub mod validate;

use std::io::Read;

pub use kinds::{Kind, Merge};
pub use limits::DECODED_CAP;
pub use reject::Reject;
pub use validate::{Envelope, Row, Validated, validate};

/// Inflate `body` with the decoded cap (and refuse, before inflating, a body larger
/// than any that could decode under it).
pub fn decode(body: &[u8], cap: usize) -> Result<Vec<u8>, Reject> {
    let compressed = limits::compressed_cap(cap);
    if body.len() > compressed {
        return Err(Reject::BodyTooLarge { cap: compressed });
    }
    let mut out = Vec::new();
    let mut decoder = flate2::read::GzDecoder::new(body).take(cap as u64 + 1);
    decoder.read_to_end(&mut out).map_err(|_| Reject::BadGzip)?;
    if out.len() > cap {
        return Err(Reject::DecodedTooLarge { cap });
    }
    Ok(out)
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
        assert_eq!(
            decode(&bomb, 1024 * 1024),
            Err(Reject::DecodedTooLarge { cap: 1024 * 1024 })
        );
        assert_eq!(decode(b"not gzip", 1024), Err(Reject::BadGzip));
    }

    #[test]
    fn an_incompressible_payload_at_the_cap_fits_the_compressed_cap() {
        let cap = 256 * 1024;
        let noise: Vec<u8> = (0..cap as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
        e.write_all(&noise).unwrap();
        let stored = e.finish().unwrap();
        assert!(stored.len() > cap);
        assert_eq!(decode(&stored, cap).unwrap(), noise);
        let over = vec![0u8; limits::compressed_cap(cap) + 1];
        assert_eq!(
            decode(&over, cap),
            Err(Reject::BodyTooLarge {
                cap: limits::compressed_cap(cap)
            })
        );
    }
}
