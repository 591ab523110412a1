//! The request and the answers' shapes (spec §Provider Protocol; [L2]
//! item 1): one JSON object (≤ 16 MiB, `op` = `info` | `deploy` |
//! `undeploy`, optional string `request_id`, unknown fields ignored).
//! Every failure a provider can describe is an in-band
//! `{"ok":false,"error":…}` ([`failure`]).
//!
//! Errors are typed by kind and field ([`RequestError`]), so a test tells
//! them apart without matching text, and they never echo a value: a value
//! in the wrong field may still be a secret.

use buzz_contract::wire::{KEEP_WORKSPACE, MAX_REQUEST_BYTES, OP_DEPLOY, OP_INFO, OP_UNDEPLOY};
use serde_json::{Map, Value, json};

/// A parsed request. Deliberately not `Debug`: it holds the raw payload.
pub enum Request {
    Info,
    Deploy {
        agent: Value,
        provider_config: Value,
    },
    /// `agent` is `{name, pubkey}`: no secret crosses ([`UndeployTarget`]).
    /// `keep_workspace` leaves the agent's workspace.
    Undeploy {
        agent: Value,
        provider_config: Value,
        keep_workspace: bool,
    },
}

/// What is wrong with the request object itself (spec §Invocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestErrorKind {
    /// Over the 16 MiB bound.
    TooLarge,
    /// Not JSON, or truncated JSON.
    NotJson,
    /// JSON, but not an object.
    NotAnObject,
    /// A known field with the wrong JSON type.
    WrongType,
    /// A required field is absent.
    Missing,
    /// `op` names an operation this provider does not implement.
    UnknownOp,
    /// The deploy payload's `agent` object does not parse.
    Payload,
}

/// A malformed request: its kind, the field at fault, the sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub kind: RequestErrorKind,
    /// The request field at fault (`op`, `agent`, `request_id`), if one is.
    pub field: Option<&'static str>,
    message: String,
}

impl RequestError {
    pub fn new(kind: RequestErrorKind, field: Option<&'static str>, message: impl Into<String>) -> Self {
        Self {
            kind,
            field,
            message: message.into(),
        }
    }
}

use RequestErrorKind as RK;

fn req(kind: RK, field: Option<&'static str>, m: &str) -> RequestError {
    RequestError::new(kind, field, m)
}

/// Parses the raw stdin bytes into a request.
pub fn parse(bytes: &[u8]) -> Result<Request, RequestError> {
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(req(
            RK::TooLarge,
            None,
            "the request is larger than 16 MiB; send one JSON object with op \"info\" or \"deploy\"",
        ));
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        let what = if e.is_eof() {
            "is truncated"
        } else {
            "is not valid JSON"
        };
        req(
            RK::NotJson,
            None,
            &format!("the request {what} ({e}); send exactly one JSON object with op \"info\" or \"deploy\""),
        )
    })?;
    let Value::Object(mut o) = v else {
        return Err(req(
            RK::NotAnObject,
            None,
            "the request must be a JSON object with op \"info\" or \"deploy\"",
        ));
    };
    if !matches!(o.get("request_id"), None | Some(Value::String(_))) {
        return Err(req(
            RK::WrongType,
            Some("request_id"),
            "request_id must be a string",
        ));
    }
    let op = match o.get("op") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(req(
                RK::WrongType,
                Some("op"),
                "op must be a string: \"info\" or \"deploy\"",
            ));
        }
        None => {
            return Err(req(
                RK::Missing,
                Some("op"),
                "the request has no op; expected \"info\" or \"deploy\"",
            ));
        }
    };
    match op.as_str() {
        OP_INFO => Ok(Request::Info),
        OP_DEPLOY | OP_UNDEPLOY => {
            let agent = match o.remove("agent") {
                Some(a @ Value::Object(_)) => a,
                Some(_) => {
                    return Err(req(
                        RK::WrongType,
                        Some("agent"),
                        &format!("{op}'s agent must be a JSON object"),
                    ));
                }
                None => {
                    return Err(req(
                        RK::Missing,
                        Some("agent"),
                        &format!("{op} needs an agent object"),
                    ));
                }
            };
            let provider_config = match o.remove("provider_config") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(c) => c,
            };
            if op == OP_DEPLOY {
                return Ok(Request::Deploy {
                    agent,
                    provider_config,
                });
            }
            let keep_workspace = match o.get(KEEP_WORKSPACE) {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(req(
                        RK::WrongType,
                        Some("keep_workspace"),
                        "keep_workspace must be true or false; nothing was deleted",
                    ));
                }
            };
            Ok(Request::Undeploy {
                agent,
                provider_config,
                keep_workspace,
            })
        }
        other => {
            let shown: String = other.chars().take(32).collect();
            Err(req(
                RK::UnknownOp,
                Some("op"),
                &format!(
                    "unknown op {shown:?}; this provider implements \"info\", \"deploy\" and \"undeploy\""
                ),
            ))
        }
    }
}

/// The in-band failure form.
pub fn failure(msg: &str) -> Value {
    json!({ "ok": false, "error": msg })
}

/// True for exactly 64 lowercase hex characters.
pub fn is_pubkey_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The agent an `undeploy` names: no secret in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndeployTarget {
    /// The record's name, for messages only (bounded to [`NAME_SHOWN`]).
    pub name: String,
    /// The agent's public key, 64 lowercase hex.
    pub pubkey: String,
}

/// The longest record name echoed in a message.
pub const NAME_SHOWN: usize = 64;

/// Parses undeploy's `agent` strictly; never echoes a value. A stray
/// `private_key_nsec` is ignored (and redacted by the caller).
pub fn undeploy_target(agent: &Value) -> Result<UndeployTarget, RequestError> {
    let bad = |kind, m: &str| req(kind, Some("agent"), m);
    let Some(o) = agent.as_object() else {
        return Err(bad(RK::WrongType, "undeploy's agent must be a JSON object"));
    };
    let name = match o.get("name") {
        Some(Value::String(s)) => s.chars().take(NAME_SHOWN).collect(),
        Some(_) => return Err(bad(RK::WrongType, "agent.name must be a string")),
        None => return Err(bad(RK::Missing, "undeploy needs agent.name")),
    };
    let pubkey = match o.get("pubkey") {
        Some(Value::String(s)) if is_pubkey_hex(s) => s.clone(),
        Some(Value::String(s)) => {
            return Err(bad(
                RK::Payload,
                &format!(
                    "agent.pubkey must be the agent's public key as 64 lowercase hex characters (got {} characters{}); nothing was deleted",
                    s.chars().count(),
                    if s.starts_with("npub1") || s.starts_with("nsec1") {
                        ", bech32 is not accepted"
                    } else {
                        ""
                    }
                ),
            ));
        }
        Some(_) => return Err(bad(RK::WrongType, "agent.pubkey must be a string")),
        None => return Err(bad(RK::Missing, "undeploy needs agent.pubkey")),
    };
    Ok(UndeployTarget { name, pubkey })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Malformed requests are told apart by kind and field, not by text.
    #[test]
    fn request_errors_are_typed_by_kind_and_field() {
        let big = vec![b' '; MAX_REQUEST_BYTES + 1];
        let cases: [(&[u8], RK, Option<&str>); 10] = [
            (&big, RK::TooLarge, None),
            (b"{\"op\":", RK::NotJson, None),
            (b"nope", RK::NotJson, None),
            (b"[1]", RK::NotAnObject, None),
            (
                b"{\"op\":\"info\",\"request_id\":7}",
                RK::WrongType,
                Some("request_id"),
            ),
            (b"{\"op\":1}", RK::WrongType, Some("op")),
            (b"{}", RK::Missing, Some("op")),
            (b"{\"op\":\"deploy\",\"agent\":[]}", RK::WrongType, Some("agent")),
            (b"{\"op\":\"destroy\"}", RK::UnknownOp, Some("op")),
            (
                b"{\"op\":\"undeploy\",\"agent\":{},\"keep_workspace\":\"yes\"}",
                RK::WrongType,
                Some("keep_workspace"),
            ),
        ];
        for (bytes, kind, field) in cases {
            match parse(bytes) {
                Err(e) => assert_eq!((e.kind, e.field), (kind, field), "{e}"),
                Ok(_) => panic!(
                    "expected a request error for {:?}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
                ),
            }
        }
    }

    #[test]
    fn the_three_operations_parse() {
        assert!(matches!(parse(br#"{"op":"info","extra":1}"#), Ok(Request::Info)));
        assert!(matches!(
            parse(br#"{"op":"deploy","agent":{},"provider_config":null}"#),
            Ok(Request::Deploy {
                provider_config: Value::Object(_),
                ..
            })
        ));
        assert!(matches!(
            parse(br#"{"op":"undeploy","agent":{},"keep_workspace":true}"#),
            Ok(Request::Undeploy {
                keep_workspace: true,
                ..
            })
        ));
    }

    #[test]
    fn an_undeploy_target_is_a_hex_key_and_a_bounded_name_never_echoed() {
        let key = "ab".repeat(32);
        let t = undeploy_target(&json!({"name": "n".repeat(100), "pubkey": key})).unwrap();
        assert_eq!((t.name.len(), t.pubkey.as_str()), (NAME_SHOWN, key.as_str()));
        let secret = format!("nsec1{}", "q".repeat(58));
        let e = undeploy_target(&json!({"name": "a", "pubkey": secret})).unwrap_err();
        assert_eq!(e.kind, RK::Payload);
        assert!(
            !e.to_string().contains(&secret) && e.to_string().contains("bech32"),
            "{e}"
        );
        assert_eq!(
            undeploy_target(&json!({"name": "a"})).unwrap_err().kind,
            RK::Missing
        );
        assert_eq!(
            undeploy_target(&json!({"name": 1, "pubkey": key}))
                .unwrap_err()
                .kind,
            RK::WrongType
        );
    }
}
