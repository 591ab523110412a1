//! The strict provider response rules (spec §Invocation, §`info`; wire-facts
//! §8 item 5): a non-zero exit is failure whatever stdout says; stdout must
//! be exactly one JSON object with a boolean `ok`; a missing `ok`, trailing
//! junk or several values are errors; a UTF-8 cut never panics.

use buzz_contract::wire::{PROTOCOL_VERSION, Removed};
use serde_json::{Map, Value};

/// Why a provider's stdout is not a trustworthy response. Never carries stdout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("its stdout is not valid UTF-8 (invalid byte at offset {0})")]
    NotUtf8(usize),
    #[error("its stdout is empty")]
    Empty,
    #[error("its stdout is not one JSON value")]
    NotJson,
    #[error("its stdout has trailing data after the JSON object")]
    Trailing,
    #[error("its stdout holds several JSON values; exactly one object is required")]
    Several,
    #[error("its response is not a JSON object")]
    NotObject,
    #[error("its response has no `ok` field")]
    MissingOk,
    #[error("its response's `ok` is not a boolean")]
    OkNotBool,
}

/// A parsed response: `Ok(fields)` for `ok:true`, `Err(message)` for the in-band failure form.
pub type Parsed = Result<Map<String, Value>, String>;

/// Parses stdout by the strict rules. The caller has already refused a non-zero exit.
pub fn parse_response(stdout: &[u8]) -> Result<Parsed, ResponseError> {
    let text = std::str::from_utf8(stdout).map_err(|e| ResponseError::NotUtf8(e.valid_up_to()))?;
    if text.trim().is_empty() {
        return Err(ResponseError::Empty);
    }
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let first = match stream.next() {
        Some(Ok(v)) => v,
        _ => return Err(ResponseError::NotJson),
    };
    match stream.next() {
        None => {}
        Some(Ok(_)) => return Err(ResponseError::Several),
        Some(Err(_)) => return Err(ResponseError::Trailing),
    }
    let Value::Object(map) = first else {
        return Err(ResponseError::NotObject);
    };
    match map.get("ok") {
        None => Err(ResponseError::MissingOk),
        Some(Value::Bool(true)) => Ok(Ok(map)),
        Some(Value::Bool(false)) => {
            let msg = match map.get("error") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => "the provider reported a failure without an error message".to_string(),
            };
            Ok(Err(msg))
        }
        Some(_) => Err(ResponseError::OkNotBool),
    }
}

/// What is wrong with `info`'s `protocol_version` (spec §`info`: absence is an error, not a presumed 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionIssue {
    Missing,
    NotInteger,
    Unsupported(u64),
}

impl std::fmt::Display for VersionIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionIssue::Missing => write!(
                f,
                "declares no protocol_version (the launcher speaks {PROTOCOL_VERSION}; an absent version is refused, never presumed)"
            ),
            VersionIssue::NotInteger => write!(
                f,
                "declares a protocol_version that is not an integer (the launcher speaks {PROTOCOL_VERSION})"
            ),
            VersionIssue::Unsupported(v) => write!(
                f,
                "speaks protocol_version {v} but the launcher speaks {PROTOCOL_VERSION}"
            ),
        }
    }
}

/// Requires an explicit, supported `protocol_version`.
pub fn check_protocol_version(info: &Map<String, Value>) -> Result<u64, VersionIssue> {
    match info.get("protocol_version") {
        None | Some(Value::Null) => Err(VersionIssue::Missing),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) if v == PROTOCOL_VERSION => Ok(v),
            Some(v) => Err(VersionIssue::Unsupported(v)),
            None => Err(VersionIssue::NotInteger),
        },
        Some(_) => Err(VersionIssue::NotInteger),
    }
}

/// Why an `undeploy` answer's `removed` is not trustworthy (issue 21 "Bad
/// input": a hostile answer is refused like a hostile `deploy` answer).
/// Never carries provider text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemovedError {
    #[error("its response has no `removed` object")]
    Missing,
    #[error("its `removed.{0}` is missing")]
    MissingCount(&'static str),
    #[error("its `removed.{0}` is not a non-negative integer")]
    NotCount(&'static str),
    #[error("its `kept.workspaces` is not a list of at most {KEPT_MAX} names")]
    Kept,
}

/// The most kept workspace names read from an answer.
pub const KEPT_MAX: usize = 8;

/// The counts of an `ok:true` `undeploy` answer: `removed` must be an object
/// whose `pods` and `secrets` are non-negative integers, and `workspaces`
/// too when present (a provider without workspace volumes leaves it out;
/// other fields are ignored, as in `deploy`'s answer).
pub fn parse_removed(resp: &Map<String, Value>) -> Result<Removed, RemovedError> {
    let Some(Value::Object(removed)) = resp.get("removed") else {
        return Err(RemovedError::Missing);
    };
    let count = |k: &'static str| match removed.get(k) {
        None => Err(RemovedError::MissingCount(k)),
        Some(Value::Number(n)) => n.as_u64().ok_or(RemovedError::NotCount(k)),
        Some(_) => Err(RemovedError::NotCount(k)),
    };
    let optional = |k: &'static str| match removed.get(k) {
        None => Ok(None),
        Some(_) => count(k).map(Some),
    };
    let units = optional("units")?;
    let env_files = optional("env_files")?;
    // A provider of units (buzz-backend-ssh) need not count pods.
    let unit_style = units.is_some() || env_files.is_some();
    let required = |k: &'static str| match (removed.get(k), unit_style) {
        (None, true) => Ok(0),
        _ => count(k),
    };
    Ok(Removed {
        pods: required("pods")?,
        secrets: required("secrets")?,
        workspaces: optional("workspaces")?.unwrap_or(0),
        units,
        env_files,
        network_policies: optional("network_policies")?,
    })
}

/// The workspace volumes an `undeploy` with `keep_workspace` left in place
/// (`"kept":{"workspaces":[names]}`): provider text, so each name is one
/// sanitized, bounded line. Absent is none.
pub fn parse_kept(resp: &Map<String, Value>) -> Result<Vec<String>, RemovedError> {
    let Some(kept) = resp.get("kept") else {
        return Ok(Vec::new());
    };
    let names = kept
        .get("workspaces")
        .and_then(Value::as_array)
        .filter(|a| a.len() <= KEPT_MAX)
        .ok_or(RemovedError::Kept)?;
    names
        .iter()
        .map(|n| n.as_str().map(sanitize_agent_id).ok_or(RemovedError::Kept))
        .collect()
}

/// Cuts `s` to at most `max` characters on a char boundary (never panics).
pub fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// What a control or invisible formatting character becomes on display.
pub const REPLACEMENT: char = '\u{fffd}';

/// The longest `agent_id` kept (a DNS-1123 name, the Kubernetes pod name
/// bound, is at most 253 characters).
pub const AGENT_ID_MAX_CHARS: usize = 253;

/// True for characters that must never reach a terminal from a provider:
/// C0 and C1 controls, DEL, and the invisible bidi/zero-width formatting
/// characters that can make displayed text lie about its content.
fn dangerous(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// Provider text for one display line (spec §Provider Output Is Untrusted):
/// every control character, newlines included, becomes [`REPLACEMENT`], so
/// no escape sequence reaches the terminal and no fake line can be forged.
pub fn sanitize_line(s: &str) -> String {
    s.chars()
        .map(|c| if dangerous(c) { REPLACEMENT } else { c })
        .collect()
}

/// Provider text that may span lines (a stderr tail): like [`sanitize_line`]
/// but `\n` is kept.
pub fn sanitize_text(s: &str) -> String {
    s.chars()
        .map(|c| if c != '\n' && dangerous(c) { REPLACEMENT } else { c })
        .collect()
}

/// A provider's `agent_id` made safe to store and show: controls replaced,
/// length capped at [`AGENT_ID_MAX_CHARS`].
pub fn sanitize_agent_id(s: &str) -> String {
    sanitize_line(s).chars().take(AGENT_ID_MAX_CHARS).collect()
}

/// Lossy text from bounded bytes; a cut multi-byte character becomes U+FFFD, never a panic.
pub fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exactly_one_object_with_boolean_ok() {
        let ok = parse_response(br#" {"ok":true,"agent_id":"x"} "#)
            .unwrap()
            .unwrap();
        assert_eq!(ok["agent_id"], json!("x"));
        assert_eq!(
            parse_response(br#"{"ok":false,"error":"boom"}"#).unwrap(),
            Err("boom".to_string())
        );
    }

    #[test]
    fn missing_ok_is_an_error_not_success() {
        assert_eq!(
            parse_response(br#"{"agent_id":"x"}"#),
            Err(ResponseError::MissingOk)
        );
        assert_eq!(parse_response(br#"{"ok":"true"}"#), Err(ResponseError::OkNotBool));
    }

    #[test]
    fn trailing_junk_and_several_objects_are_errors() {
        assert_eq!(
            parse_response(br#"{"ok":true} junk"#),
            Err(ResponseError::Trailing)
        );
        assert_eq!(
            parse_response(br#"{"ok":true}{"ok":true}"#),
            Err(ResponseError::Several)
        );
        assert_eq!(
            parse_response(b"log line\n{\"ok\":true}"),
            Err(ResponseError::NotJson)
        );
        assert_eq!(parse_response(b"[1]"), Err(ResponseError::NotObject));
        assert_eq!(parse_response(b"  \n"), Err(ResponseError::Empty));
    }

    #[test]
    fn utf8_cut_never_panics() {
        let mut b = br#"{"ok":true,"x":""#.to_vec();
        b.extend_from_slice(&"é".as_bytes()[..1]);
        assert_eq!(parse_response(&b), Err(ResponseError::NotUtf8(16)));
        assert_eq!(truncate_chars("ééé", 2), "éé…");
        assert_eq!(lossy(&"é".as_bytes()[..1]), "\u{fffd}");
    }

    #[test]
    fn controls_and_invisible_formatting_never_survive() {
        let evil = "a\u{1b}[2J\u{9b}31m\u{7}b\r\nc\u{202e}d\u{7f}";
        assert_eq!(
            sanitize_line(evil),
            "a\u{fffd}[2J\u{fffd}31m\u{fffd}b\u{fffd}\u{fffd}c\u{fffd}d\u{fffd}"
        );
        assert_eq!(sanitize_text("x\ny\rz"), "x\ny\u{fffd}z");
        assert_eq!(
            sanitize_agent_id(&"p".repeat(400)).chars().count(),
            AGENT_ID_MAX_CHARS
        );
        assert_eq!(sanitize_agent_id("pod\u{1b}]0;x"), "pod\u{fffd}]0;x");
    }

    #[test]
    fn removed_counts_are_strict_non_negative_integers() {
        let m = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            parse_removed(&m(json!({"ok":true,"removed":{"pods":1,"secrets":2}}))),
            Ok(Removed {
                pods: 1,
                secrets: 2,
                workspaces: 0,
                ..Default::default()
            })
        );
        assert_eq!(
            parse_removed(&m(
                json!({"ok":true,"removed":{"pods":0,"secrets":1,"workspaces":1}})
            ))
            .map(|r| r.workspaces),
            Ok(1)
        );
        assert_eq!(
            parse_removed(&m(
                json!({"ok":true,"removed":{"pods":0,"secrets":1,"workspaces":"1"}})
            )),
            Err(RemovedError::NotCount("workspaces"))
        );
        assert_eq!(parse_kept(&m(json!({"ok":true}))), Ok(vec![]));
        assert_eq!(
            parse_kept(&m(
                json!({"ok":true,"kept":{"workspaces":["buzz-agent-0123-workspace\u{1b}[2J"]}})
            )),
            Ok(vec!["buzz-agent-0123-workspace\u{fffd}[2J".to_string()])
        );
        assert_eq!(
            parse_kept(&m(json!({"ok":true,"kept":{"workspaces":"w"}}))),
            Err(RemovedError::Kept)
        );
        assert_eq!(parse_removed(&m(json!({"ok":true}))), Err(RemovedError::Missing));
        assert_eq!(
            parse_removed(&m(json!({"ok":true,"removed":[1,2]}))),
            Err(RemovedError::Missing)
        );
        assert_eq!(
            parse_removed(&m(json!({"ok":true,"removed":{"pods":1}}))),
            Err(RemovedError::MissingCount("secrets"))
        );
        for bad in [json!(-1), json!(1.5), json!("1"), json!(null), json!(true)] {
            assert_eq!(
                parse_removed(&m(json!({"ok":true,"removed":{"pods":bad,"secrets":0}}))),
                Err(RemovedError::NotCount("pods")),
                "{bad}"
            );
        }
    }

    #[test]
    fn protocol_version_absent_is_an_error_not_presumed_one() {
        let m = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            check_protocol_version(&m(json!({"ok":true}))),
            Err(VersionIssue::Missing)
        );
        assert_eq!(check_protocol_version(&m(json!({"protocol_version":1}))), Ok(1));
        assert_eq!(
            check_protocol_version(&m(json!({"protocol_version":2}))),
            Err(VersionIssue::Unsupported(2))
        );
        assert_eq!(
            check_protocol_version(&m(json!({"protocol_version":"1"}))),
            Err(VersionIssue::NotInteger)
        );
        let msg = VersionIssue::Unsupported(2).to_string();
        assert!(msg.contains('2') && msg.contains('1'));
    }
}
