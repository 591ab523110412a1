//! The redactor's property (issue "fragments of secrets"): whatever the text
//! around a secret and wherever the launcher cuts it before redaction, no
//! substring of [`FRAGMENT_MIN`] or more bytes of any secret survives.
//!
//! Input layout: byte 0 picks the secret length (12..=91), the next bytes
//! the secret (mapped onto printable ASCII without `[` `]`, see the
//! redactor's module doc), two bytes the cut points, the rest the text
//! around the secret, which may repeat it.
#![cfg_attr(fuzzing, no_main)]

use desktop_launcher::redact::{FRAGMENT_MIN, Redactor, contains_fragment};

fn printable(b: u8) -> char {
    let c = (0x21 + (b % 94)) as char;
    if c == '[' || c == ']' { 'x' } else { c }
}

fn boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let len = 12 + (data[0] as usize % 80);
    let rest = &data[1..];
    if rest.len() < len + 2 {
        return;
    }
    let secret: String = rest[..len].iter().map(|b| printable(*b)).collect();
    let (a, b) = (rest[len] as usize, rest[len + 1] as usize);
    let around = String::from_utf8_lossy(&rest[len + 2..]).into_owned();
    // The text: the fuzzer's bytes with the secret spliced in at a few places.
    let mut text = String::new();
    for (i, part) in around.split('\u{1}').enumerate() {
        if i > 0 {
            text.push_str(&secret);
        }
        text.push_str(part);
    }
    text.push_str(&secret);
    text.push_str(&around);
    let other = secret.to_ascii_uppercase();
    let r = Redactor::new([secret.clone(), other.clone()]);
    // A cut at any two points, scaled over the whole text.
    let start = boundary(&text, a * text.len() / 255);
    let end = boundary(&text, start + (b * text.len().saturating_sub(start)) / 255);
    let out = r.scrub(&text[start..end]);
    assert!(
        !contains_fragment(&out, &secret, FRAGMENT_MIN),
        "{secret:?} in {out:?}"
    );
    assert!(
        !contains_fragment(&out, &other, FRAGMENT_MIN),
        "{other:?} in {out:?}"
    );
    let whole = r.scrub(&text);
    assert!(
        !contains_fragment(&whole, &secret, FRAGMENT_MIN),
        "{secret:?} in {whole:?}"
    );
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
