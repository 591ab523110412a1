//! The ingest request path before storage on arbitrary bytes: `decode` (the
//! gzip body, decoded-size cap) and `validate` (JSON, kind, provenance,
//! natural keys). Neither may panic; `decode` never hands back more than its
//! cap, and `validate` accepts only rows of the path's kind, with a
//! natural key that is a JSON array and a non-empty pod uid, each of which
//! reads back (envelope + record) as a JSON payload of that kind.
//!
//! Input layout: byte 0 picks the path kind (the five registered kinds and
//! one unknown name), byte 1's low bit says whether the rest is gzip-wrapped
//! here first (so the JSON validator sees structured input, not only
//! whatever random bytes happen to inflate), and the rest is the body.
#![cfg_attr(fuzzing, no_main)]

use std::io::Write;

use runtime_ingest::{Kind, Reject, decode, validate};

/// A small cap so the too-large path is reachable with small inputs.
const CAP: usize = 4096;

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    let [pick, mode, body @ ..] = data else {
        return;
    };
    let path_kind = Kind::ALL
        .get(usize::from(*pick) % (Kind::ALL.len() + 1))
        .map_or("no_such_kind", |k| k.as_str());
    let wire = if mode & 1 == 1 {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(body).expect("in-memory gzip");
        gz.finish().expect("in-memory gzip")
    } else {
        body.to_vec()
    };
    let decoded = match decode(&wire, CAP) {
        Ok(d) => d,
        Err(Reject::DecodedTooLarge { .. } | Reject::BodyTooLarge { .. }) => {
            // Only a body that inflates past the cap (or is itself over the
            // compressed cap) is too large.
            assert!(
                mode & 1 == 0 || body.len() > CAP,
                "a {}-byte body refused as too large",
                body.len()
            );
            return;
        }
        Err(other) => {
            assert_eq!(other, Reject::BadGzip, "decode refuses only size and gzip");
            assert!(mode & 1 == 0, "our own gzip refused as malformed");
            return;
        }
    };
    assert!(
        decoded.len() <= CAP,
        "decode returned {} bytes over a {CAP} cap",
        decoded.len()
    );
    if mode & 1 == 1 {
        assert_eq!(decoded, body, "gzip round trip");
    }
    match validate(path_kind, &decoded) {
        Ok(v) => {
            assert!(!v.rows.is_empty(), "an accepted payload has rows");
            let text = std::str::from_utf8(&decoded).expect("accepted payloads are UTF-8");
            for row in &v.rows {
                assert_eq!(row.kind.as_str(), path_kind);
                assert!(!row.pod_uid.is_empty());
                let key: serde_json::Value =
                    serde_json::from_str(&row.natural_key).expect("a JSON natural key");
                assert!(key.is_array(), "natural key {key}");
                // Each row reads back as valid JSON of its kind.
                let whole = match v.envelope {
                    Some(e) => format!("{}{}{}", e.prefix, row.body, e.suffix),
                    None => row.body.to_owned(),
                };
                let back: serde_json::Value = serde_json::from_str(&whole).expect("a row reads back as JSON");
                assert_eq!(back["kind"], path_kind);
            }
            if v.envelope.is_none() {
                assert_eq!(v.rows[0].body, text);
            }
        }
        Err(reject) => assert!(matches!(reject.status(), 400 | 413), "{reject:?}"),
    }
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
