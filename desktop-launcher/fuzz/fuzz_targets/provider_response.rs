//! Provider output parsing on arbitrary bytes (spec §Invocation, §Provider
//! Output Is Untrusted): the input is split into stdout and stderr at the
//! first 0x00. The strict response rules never panic; whatever reaches the
//! terminal or the records (status line, stderr tail, in-band error,
//! `agent_id`) carries no control character and no fragment of a secret.
#![cfg_attr(fuzzing, no_main)]

use desktop_launcher::redact::{FRAGMENT_MIN, Redactor, contains_fragment};
use desktop_launcher::response::{
    AGENT_ID_MAX_CHARS, check_protocol_version, lossy, parse_response, sanitize_agent_id, sanitize_line,
    sanitize_text, truncate_chars,
};

const SECRET: &str = "nsec1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq";
const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn clean(s: &str, newlines: bool) {
    assert!(
        !s.chars().any(|c| c.is_control() && !(newlines && c == '\n')),
        "{s:?}"
    );
    assert!(!contains_fragment(s, SECRET, FRAGMENT_MIN), "{s:?}");
    assert!(!contains_fragment(s, HEX, FRAGMENT_MIN), "{s:?}");
}

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    let (stdout, stderr) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let redactor = Redactor::new([SECRET.to_string(), HEX.to_string()]);
    // The stderr tail and the status line, as the gate builds them.
    let tail = sanitize_text(&redactor.scrub(&lossy(stderr)));
    clean(&tail, true);
    if let Some(line) = lossy(stderr).lines().last() {
        let shown = sanitize_line(&redactor.scrub(&truncate_chars(line, 200)));
        clean(&shown, false);
    }
    match parse_response(stdout) {
        Ok(Ok(map)) => {
            let _ = check_protocol_version(&map);
            if let Some(serde_json::Value::String(id)) = map.get("agent_id") {
                let id = sanitize_agent_id(&redactor.scrub_handle(id.trim()));
                assert!(id.chars().count() <= AGENT_ID_MAX_CHARS);
                clean(&id, false);
            }
        }
        Ok(Err(msg)) => {
            let shown = sanitize_line(&truncate_chars(&redactor.scrub(&msg), 2000));
            clean(&shown, false);
        }
        Err(e) => {
            // The error names the rule, never the provider's text.
            let text = e.to_string();
            assert!(text.starts_with("its "), "{text}");
        }
    }
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
