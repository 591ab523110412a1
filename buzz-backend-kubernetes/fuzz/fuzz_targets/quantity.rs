//! Kubernetes quantity parsing on arbitrary text: no panic; an accepted
//! quantity is finite and non-negative, and surrounding whitespace is ignored.
#![cfg_attr(fuzzing, no_main)]

use buzz_backend_kubernetes::quantity::Quantity;

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(q) = Quantity::parse(s) {
        let v = q.value();
        assert!(v.is_finite() && v >= 0.0, "{s:?} -> {v}");
        assert_eq!(Quantity::parse(&format!(" {s} ")), Some(q));
    }
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
