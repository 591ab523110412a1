//! Image-reference validation on arbitrary text: no panic; an accepted
//! reference is never `:latest` or untagged, keeps the input verbatim, and a
//! digest-required reference carries a sha256 digest.
#![cfg_attr(fuzzing, no_main)]

use buzz_backend_kubernetes::image::validate_image;

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(r) = validate_image(s, false) {
        assert_eq!(r.reference, s);
        assert!(!r.from_default);
        let name_tag = s.split('@').next().unwrap_or(s);
        let last = name_tag.rsplit('/').next().unwrap_or(name_tag);
        assert!(s.contains('@') || last.contains(':'), "untagged accepted: {s:?}");
        assert!(!last.ends_with(":latest"), ":latest accepted: {s:?}");
    }
    if let Ok(r) = validate_image(s, true) {
        assert!(r.reference.contains("@sha256:"), "{s:?}");
        assert!(r.from_default);
    }
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
