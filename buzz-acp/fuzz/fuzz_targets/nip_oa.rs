//! NIP-OA tag parsing and verification (wire-facts §1): arbitrary
//! `BUZZ_AUTH_TAG` text parsed, verified against a fixed agent, its
//! conditions evaluated; a parsed tag round-trips through its JSON form.
//! Nothing may panic.
#![cfg_attr(fuzzing, no_main)]

use buzz_contract::nip_oa::{AuthTag, evaluate_conditions, parse_conditions};

const AGENT: &str = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(tag) = AuthTag::parse(text) {
        let again = AuthTag::parse(&tag.to_json()).expect("a parsed tag re-parses");
        assert_eq!(again, tag);
        let _ = tag.verify(AGENT);
        let _ = tag.covers(22242, 1_800_000_000);
    }
    // The conditions grammar on its own, with the clock and kind from the input.
    let (k, t) = data.iter().fold((0u64, 0u64), |(k, t), b| {
        (
            k.wrapping_mul(31).wrapping_add(u64::from(*b)),
            t.rotate_left(7) ^ u64::from(*b),
        )
    });
    let parsed = parse_conditions(text);
    let evaluated = evaluate_conditions(text, k % 65_536, t);
    assert_eq!(
        parsed.is_err(),
        evaluated == Err(buzz_contract::nip_oa::ConditionError::Malformed)
    );
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
