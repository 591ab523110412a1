//! The process contract (spec §Provider Protocol, §Invocation; [L2] item 1):
//! the request, the redaction of every output, and the deploy's run. The
//! checks that come before any mutation are [`prepare`].
//!
//! One JSON object in (≤ 16 MiB, `op` = `info` | `deploy` | `undeploy`
//! ([`crate::undeploy`]), optional string
//! `request_id`, unknown fields ignored); one JSON object out ([`success`],
//! [`failure`]). Every failure
//! the provider can describe is an in-band `{"ok":false,"error":…}` with exit
//! code 0; the binary exits non-zero only on crash paths.

mod prepare;
pub use prepare::prepare;

use crate::config::default_image;
use crate::consts::*;
use crate::diag::{self, Redactor};
use crate::error::{DeployError, RequestError, RequestErrorKind as RK};
use crate::kubeconfig;
use crate::reconcile::{self, Timing};
use buzz_contract::keys::parse_private_key;
use buzz_contract::wire::{MAX_REQUEST_BYTES, OP_DEPLOY, OP_INFO, OP_UNDEPLOY};
use nostr::ToBech32;
use serde_json::{Map, Value, json};
use std::time::Instant;

/// A parsed request. Deliberately not `Debug`: it holds the raw payload.
pub enum Request {
    Info,
    Deploy {
        agent: Value,
        provider_config: Value,
    },
    /// `agent` is `{name, pubkey}`: no secret crosses ([`crate::undeploy`]).
    /// `keep_workspace` leaves the workspace claim ([`crate::workspace`]).
    Undeploy {
        agent: Value,
        provider_config: Value,
        keep_workspace: bool,
    },
}

/// A deploy's answer: `{"ok":true,"agent_id":…}` (spec §`deploy`), with
/// the running pod's `generation` when it has one: a field the spec's
/// response does not name, which a launcher that does not know it ignores.
/// The launcher's Start reads it to tell a stopped run still reported
/// running (the kubelet reports a container's exit a moment late) from a
/// fresh one (`desktop-launcher`'s `restart`).
pub fn success(started: &reconcile::Started) -> Value {
    let mut v = json!({ "ok": true, "agent_id": started.agent_id });
    if let Some(g) = &started.generation {
        v["generation"] = json!(g);
    }
    v
}

/// The in-band failure form.
pub fn failure(msg: &str) -> Value {
    json!({ "ok": false, "error": msg })
}

/// Parses the raw stdin bytes into a request.
pub fn parse_request(bytes: &[u8]) -> Result<Request, DeployError> {
    let req = |kind, field, m: &str| DeployError::from(RequestError::new(kind, field, m));
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
    match o.get("request_id") {
        None | Some(Value::String(_)) => {}
        Some(_) => {
            return Err(req(
                RK::WrongType,
                Some("request_id"),
                "request_id must be a string",
            ));
        }
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
            Ok(if op == OP_DEPLOY {
                Request::Deploy {
                    agent,
                    provider_config,
                }
            } else {
                let keep_workspace = match o.get(buzz_contract::wire::KEEP_WORKSPACE) {
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
                Request::Undeploy {
                    agent,
                    provider_config,
                    keep_workspace,
                }
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

/// Every secret value the payload carries, for scrubbing output (L2 item 5).
pub fn redactor_for(agent: &Value) -> Redactor {
    let mut values: Vec<String> = Vec::new();
    let s = |v: &Value| v.as_str().map(str::to_string);
    if let Some(k) = agent.get("private_key_nsec").and_then(s) {
        values.push(k.trim().to_string());
        if let Ok(keys) = parse_private_key(&k) {
            values.push(keys.secret_key().to_secret_hex());
            let Ok(bech32) = keys.secret_key().to_bech32();
            values.push(bech32);
        }
        values.push(k);
    }
    values.extend(agent.get("auth_tag").and_then(s));
    let maps = [
        agent.get("env_vars"),
        agent.pointer("/launch/env"),
        agent.pointer("/launch/policy_env"),
    ];
    for m in maps.into_iter().flatten() {
        if let Some(o) = m.as_object() {
            values.extend(o.values().filter_map(s));
        }
    }
    Redactor::new(values)
}

/// The redactor of everything a deploy or undeploy writes: the payload's
/// secrets and the kubeconfig's credentials ([`kubeconfig::file_secrets`]).
pub fn output_redactor(agent: &Value) -> Redactor {
    redactor_for(agent).with(kubeconfig::file_secrets())
}

/// The budget in force, measured from `started` (the process start):
/// 600 s or `BUZZ_K8S_DEPLOY_DEADLINE_SECS`; see [`crate::timing`].
pub fn timing(started: Instant) -> Timing {
    Timing::from_env(started)
}

/// Runs a deploy end to end; the caller redacts the error. `started` is the
/// process start, from which the deadline is measured.
pub async fn deploy(
    agent: &Value,
    provider_config: &Value,
    started: Instant,
) -> Result<reconcile::Started, DeployError> {
    let plan = prepare(agent, provider_config, default_image().as_deref())?;
    let context = provider_config
        .get("context")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let connected = kubeconfig::connect(context).await?;
    let cluster = crate::cluster::KubeCluster::new(connected.client, &plan.namespace);
    reconcile::deploy(&cluster, &plan, timing(started))
        .await
        .map_err(|e| kubeconfig::name_endpoint(kubeconfig::name_exec_plugin(e, context), &connected.endpoint))
}

/// Prepends the spec's PATH entries so kubeconfig exec plugins resolve (§K8s Auth).
/// Call while the process is still single-threaded.
pub fn augment_path() {
    let mut parts = path_prepend();
    if let Some(p) = std::env::var_os("PATH") {
        parts.extend(std::env::split_paths(&p).map(|p| p.to_string_lossy().into_owned()));
    }
    let mut seen = std::collections::HashSet::new();
    parts.retain(|p| seen.insert(p.clone()));
    if let Ok(joined) = std::env::join_paths(parts) {
        // SAFETY: called from main before any thread is spawned.
        unsafe { std::env::set_var("PATH", joined) };
    }
}

/// Handles one request and returns the response object (never panics on
/// input). `started` is the process start (the deadline's origin).
pub fn handle(bytes: &[u8], started: Instant) -> Value {
    let request = match parse_request(bytes) {
        Ok(r) => r,
        Err(e) => return failure(&e.to_string()),
    };
    match request {
        Request::Info => crate::info::response(default_image().as_deref()),
        Request::Deploy {
            agent,
            provider_config,
        } => {
            let redactor = output_redactor(&agent);
            diag::set_redactor(redactor.clone());
            augment_path();
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return failure(&format!("could not start the async runtime: {e}")),
            };
            match rt.block_on(deploy(&agent, &provider_config, started)) {
                Ok(started) => success(&started),
                Err(e) => failure(&redactor.scrub(&e.to_string())),
            }
        }
        Request::Undeploy {
            agent,
            provider_config,
            keep_workspace,
        } => crate::undeploy::run::handle(&agent, &provider_config, keep_workspace, started),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deploy_answer_names_the_generation_only_when_the_pod_has_one() {
        let started = |generation: Option<&str>| reconcile::Started {
            agent_id: "buzz-agent-0123456789ab".into(),
            generation: generation.map(str::to_string),
        };
        assert_eq!(
            success(&started(Some("0123456789abcdef0123456789abcdef"))),
            json!({ "ok": true, "agent_id": "buzz-agent-0123456789ab",
                    "generation": "0123456789abcdef0123456789abcdef" })
        );
        assert_eq!(
            success(&started(None)),
            json!({ "ok": true, "agent_id": "buzz-agent-0123456789ab" })
        );
    }

    /// Malformed requests are told apart by kind and field, not by text.
    #[test]
    fn request_errors_are_typed_by_kind_and_field() {
        let big = vec![b' '; MAX_REQUEST_BYTES + 1];
        let cases: [(&[u8], RK, Option<&str>); 9] = [
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
        ];
        for (bytes, kind, field) in cases {
            match parse_request(bytes) {
                Err(DeployError::Request(e)) => assert_eq!((e.kind, e.field), (kind, field), "{e}"),
                Err(other) => panic!("expected a request error, got {other:?}"),
                Ok(_) => panic!(
                    "expected a request error for {:?}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
                ),
            }
        }
    }
}
