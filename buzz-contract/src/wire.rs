//! The provider protocol on the wire (spec §Provider Protocol, §Launch data;
//! wire-facts §7): one JSON request on stdin, one JSON response on stdout.
//!
//! The launcher serializes these types (and records the golden fixtures from
//! them); the provider parses requests with [`parse_agent`], a strict parser
//! whose errors name the field and the expected type but never the value —
//! a value in the wrong field may still be a secret.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// The wire-contract version this code speaks.
pub const PROTOCOL_VERSION: u64 = 1;
/// Cap on a provider's stdin.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// Operation names.
pub const OP_INFO: &str = "info";
/// Operation names.
pub const OP_DEPLOY: &str = "deploy";
/// Operation names: the optional destructor (issue "lifecycle beyond
/// Start"). A provider offers it by listing it in `info`'s optional
/// `operations`; a launcher calls it only then. v1 stays v1: a launcher
/// that does not know it never sends it, a provider that does not list it
/// is handled as before.
pub const OP_UNDEPLOY: &str = "undeploy";
/// `info`'s optional field naming the operations a provider supports
/// (`["deploy", "undeploy"]`); absent means `deploy` only.
pub const INFO_OPERATIONS: &str = "operations";

/// `launch`: the desktop-resolved launch contract (spec §Launch data).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// Command name (never a host path).
    pub command: String,
    /// Normalized args.
    pub args: Vec<String>,
    /// Layered env (tier 2).
    pub env: BTreeMap<String, String>,
    /// Overridable behaviour defaults (tier 1).
    pub policy_env: BTreeMap<String, String>,
    /// Resolved owner pubkey hex, non-secret.
    pub owner_pubkey: Option<String>,
}

impl fmt::Debug for Launch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Launch")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env_keys", &self.env.keys().collect::<Vec<_>>())
            .field("policy_env_keys", &self.policy_env.keys().collect::<Vec<_>>())
            .field("owner_pubkey", &self.owner_pubkey)
            .finish()
    }
}

/// The deploy payload's `agent` object (spec §deploy table, wire-facts §7).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentPayload {
    pub name: String,
    pub relay_url: String,
    /// The identity (I1: never empty).
    pub private_key_nsec: String,
    /// NIP-OA owner attestation JSON, or null.
    pub auth_tag: Option<String>,
    pub agent_command: String,
    pub agent_args: Vec<String>,
    pub system_prompt: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub turn_timeout_seconds: Option<u64>,
    pub idle_timeout_seconds: Option<u64>,
    pub max_turn_duration_seconds: Option<u64>,
    pub parallelism: Option<u64>,
    pub respond_to: String,
    pub respond_to_allowlist: Vec<String>,
    /// Legacy merged user env; used only when `launch` is absent.
    pub env_vars: BTreeMap<String, String>,
    pub launch: Option<Launch>,
    /// A wake's hand-over (issue 33): sent only by a launcher's waker; the
    /// provider writes it as `BUZZ_ACP_WAKE_EVENTS` / `BUZZ_ACP_WAKE_SINCE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<WakePayload>,
}

/// `agent.wake`: `{"events":["<id>",…],"since":<unix seconds>}`, the
/// mentions that woke the agent and when the waker looked
/// ([`crate::wake`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakePayload {
    pub events: Vec<String>,
    pub since: u64,
}

impl fmt::Debug for AgentPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentPayload")
            .field("name", &self.name)
            .field("relay_url", &self.relay_url)
            .field("private_key_nsec", &"<redacted>")
            .field("auth_tag", &self.auth_tag.as_ref().map(|_| "<redacted>"))
            .field("agent_command", &self.agent_command)
            .field("respond_to", &self.respond_to)
            .field("env_var_keys", &self.env_vars.keys().collect::<Vec<_>>())
            .field("launch", &self.launch)
            .finish_non_exhaustive()
    }
}

/// `{"op":"info","request_id":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfoRequest {
    pub op: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// `{"op":"deploy","request_id":…,"agent":…,"provider_config":…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployRequest {
    pub op: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    pub agent: AgentPayload,
    pub provider_config: Map<String, Value>,
}

/// The agent an `undeploy` names: no secret crosses (never the nsec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndeployAgent {
    /// The record's name (for messages only).
    pub name: String,
    /// The agent's public key, 64 lowercase hex: what the provider selects by.
    pub pubkey: String,
}

/// `{"op":"undeploy","request_id":…,"agent":{"name","pubkey"},"provider_config":…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UndeployRequest {
    pub op: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    pub agent: UndeployAgent,
    pub provider_config: Map<String, Value>,
    /// Leave the agent's workspace volume (its files and the agent's own
    /// conversations) in place; the answer names it under `kept`. Sent only
    /// when true, so a provider that predates it sees the request unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_workspace: bool,
}

/// The request field of [`UndeployRequest::keep_workspace`].
pub const KEEP_WORKSPACE: &str = "keep_workspace";

/// What an `undeploy` removed:
/// `{"ok":true,"removed":{"pods":N,"secrets":M,"workspaces":W}}`, and with
/// `keep_workspace`, `"kept":{"workspaces":["<name>"]}`. `workspaces` is the
/// agent's persistent workspace (a Kubernetes PVC, a working directory on
/// a server); an answer without it (a provider that has none) reads as 0.
/// A provider that runs agents as units (`buzz-backend-ssh`) also counts
/// `units` and `env_files`; their presence is what says the answer is
/// theirs ([`removed_text`]). The Kubernetes provider also counts the
/// agent's `network_policies` (issue 53); an answer without it removed none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    pub pods: u64,
    pub secrets: u64,
    #[serde(default)]
    pub workspaces: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_files: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policies: Option<u64>,
}

/// "1 pod and 2 Secrets", "1 pod, 2 Secrets and 1 workspace volume", or
/// for units "1 unit, 1 env file and 1 working directory": what an
/// `undeploy` removed, for people (the provider's errors and the
/// launcher's lines say it the same way).
pub fn removed_text(r: &Removed) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let (first, second, workspace) = match (r.units, r.env_files) {
        (None, None) => (
            plural(r.pods, "pod", "pods"),
            plural(r.secrets, "Secret", "Secrets"),
            ("workspace volume", "workspace volumes"),
        ),
        (u, e) => (
            plural(u.unwrap_or(0), "unit", "units"),
            plural(e.unwrap_or(0), "env file", "env files"),
            ("working directory", "working directories"),
        ),
    };
    let mut parts = vec![first, second];
    if r.workspaces > 0 {
        parts.push(plural(r.workspaces, workspace.0, workspace.1));
    }
    if let Some(n @ 1..) = r.network_policies {
        parts.push(plural(n, "NetworkPolicy", "NetworkPolicies"));
    }
    let last = parts.pop().unwrap_or_default();
    format!("{} and {last}", parts.join(", "))
}

/// True when an `info` object lists `op` in its optional `operations`
/// (`deploy` is always supported; a malformed field supports nothing more).
pub fn info_supports(info: &Map<String, Value>, op: &str) -> bool {
    if op == OP_DEPLOY {
        return true;
    }
    info.get(INFO_OPERATIONS)
        .and_then(Value::as_array)
        .is_some_and(|ops| ops.iter().any(|o| o.as_str() == Some(op)))
}

/// A field-level parse failure. Names the path and the expected type only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("`{0}` is missing")]
    Missing(String),
    #[error("`{field}` must be {expected}")]
    Type { field: String, expected: &'static str },
}

fn ty(field: &str, expected: &'static str) -> WireError {
    WireError::Type {
        field: field.to_string(),
        expected,
    }
}

fn get_str(
    o: &Map<String, Value>,
    path: &str,
    key: &str,
    required: bool,
) -> Result<Option<String>, WireError> {
    let field = format!("{path}.{key}");
    match o.get(key) {
        None if required => Err(WireError::Missing(field)),
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ty(&field, "a string")),
    }
}

fn get_u64(o: &Map<String, Value>, path: &str, key: &str) -> Result<Option<u64>, WireError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| ty(&format!("{path}.{key}"), "a non-negative integer")),
        Some(_) => Err(ty(&format!("{path}.{key}"), "a non-negative integer")),
    }
}

fn get_str_list(o: &Map<String, Value>, path: &str, key: &str) -> Result<Vec<String>, WireError> {
    let field = format!("{path}.{key}");
    match o.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ty(&field, "an array of strings"))
            })
            .collect(),
        Some(_) => Err(ty(&field, "an array of strings")),
    }
}

fn get_str_map(o: &Map<String, Value>, path: &str, key: &str) -> Result<BTreeMap<String, String>, WireError> {
    let field = format!("{path}.{key}");
    match o.get(key) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_string()))
                    .ok_or_else(|| ty(&field, "an object of string values"))
            })
            .collect(),
        Some(_) => Err(ty(&field, "an object of string values")),
    }
}

/// Parses the `agent` object strictly. Unknown fields are ignored.
pub fn parse_agent(v: &Value) -> Result<AgentPayload, WireError> {
    let Value::Object(o) = v else {
        return Err(ty("agent", "an object"));
    };
    let p = "agent";
    let launch = match o.get("launch") {
        None | Some(Value::Null) => None,
        Some(Value::Object(l)) => {
            let lp = "agent.launch";
            Some(Launch {
                command: get_str(l, lp, "command", false)?.unwrap_or_default(),
                args: get_str_list(l, lp, "args")?,
                env: get_str_map(l, lp, "env")?,
                policy_env: get_str_map(l, lp, "policy_env")?,
                owner_pubkey: get_str(l, lp, "owner_pubkey", false)?,
            })
        }
        Some(_) => return Err(ty("agent.launch", "an object or null")),
    };
    Ok(AgentPayload {
        name: get_str(o, p, "name", false)?.unwrap_or_default(),
        relay_url: get_str(o, p, "relay_url", false)?.unwrap_or_default(),
        private_key_nsec: get_str(o, p, "private_key_nsec", true)?.unwrap_or_default(),
        auth_tag: get_str(o, p, "auth_tag", false)?,
        agent_command: get_str(o, p, "agent_command", false)?.unwrap_or_default(),
        agent_args: get_str_list(o, p, "agent_args")?,
        system_prompt: get_str(o, p, "system_prompt", false)?,
        model: get_str(o, p, "model", false)?,
        provider: get_str(o, p, "provider", false)?,
        turn_timeout_seconds: get_u64(o, p, "turn_timeout_seconds")?,
        idle_timeout_seconds: get_u64(o, p, "idle_timeout_seconds")?,
        max_turn_duration_seconds: get_u64(o, p, "max_turn_duration_seconds")?,
        parallelism: get_u64(o, p, "parallelism")?,
        respond_to: get_str(o, p, "respond_to", false)?.unwrap_or_else(|| "owner-only".into()),
        respond_to_allowlist: get_str_list(o, p, "respond_to_allowlist")?,
        env_vars: get_str_map(o, p, "env_vars")?,
        launch,
        wake: parse_wake(o)?,
    })
}

/// `agent.wake`, checked by the one rule of `wake::parse_events`.
fn parse_wake(o: &Map<String, Value>) -> Result<Option<WakePayload>, WireError> {
    let w = match o.get("wake") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(w)) => w,
        Some(_) => return Err(ty("agent.wake", "an object or null")),
    };
    let events = get_str_list(w, "agent.wake", "events")?;
    let events = crate::wake::parse_events(&events.join(","))
        .map_err(|_| ty("agent.wake.events", "at most 64 event ids, 64 hex each"))?;
    let since = get_u64(w, "agent.wake", "since")?.ok_or_else(|| ty("agent.wake.since", "unix seconds"))?;
    Ok(Some(WakePayload { events, since }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full() -> AgentPayload {
        AgentPayload {
            name: "a".into(),
            relay_url: "wss://relay".into(),
            private_key_nsec: "nsec1secretcanary".into(),
            auth_tag: Some("[\"auth\"]".into()),
            agent_command: "goose".into(),
            agent_args: vec!["acp".into()],
            parallelism: Some(2),
            respond_to: "owner-only".into(),
            env_vars: [("K".to_string(), "v".to_string())].into(),
            launch: Some(Launch {
                command: "goose".into(),
                args: vec!["acp".into()],
                env: [("GOOSE_MODEL".to_string(), "m".to_string())].into(),
                policy_env: BTreeMap::new(),
                owner_pubkey: Some("ab".repeat(32)),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn serializer_and_strict_parser_agree() {
        let a = full();
        let v = serde_json::to_value(&a).unwrap();
        assert!(v.get("wake").is_none(), "no wake, no field");
        assert_eq!(parse_agent(&v).unwrap(), a);
        let woken = AgentPayload {
            wake: Some(WakePayload {
                events: vec!["ab".repeat(32)],
                since: 1_700_000_000,
            }),
            ..full()
        };
        let v = serde_json::to_value(&woken).unwrap();
        assert_eq!(parse_agent(&v).unwrap(), woken);
    }

    #[test]
    fn a_malformed_wake_is_refused_by_its_field() {
        let mut v = serde_json::to_value(full()).unwrap();
        for bad in [
            json!({"events": ["xyz"], "since": 1}),
            json!({"events": []}),
            json!("now"),
        ] {
            v["wake"] = bad.clone();
            let e = parse_agent(&v).unwrap_err().to_string();
            assert!(e.contains("agent.wake"), "{bad}: {e}");
        }
    }

    #[test]
    fn errors_name_the_field_not_the_value() {
        let mut v = serde_json::to_value(full()).unwrap();
        v["parallelism"] = json!("nsec1secretcanary");
        let e = parse_agent(&v).unwrap_err();
        assert_eq!(
            e,
            WireError::Type {
                field: "agent.parallelism".into(),
                expected: "a non-negative integer"
            }
        );
        assert!(!e.to_string().contains("canary"));
        v["parallelism"] = json!(-1);
        assert!(parse_agent(&v).is_err());
        let mut v = serde_json::to_value(full()).unwrap();
        v["launch"]["env"]["X"] = json!(5);
        assert!(matches!(parse_agent(&v), Err(WireError::Type { .. })));
        let mut v = serde_json::to_value(full()).unwrap();
        v.as_object_mut().unwrap().remove("private_key_nsec");
        assert_eq!(
            parse_agent(&v),
            Err(WireError::Missing("agent.private_key_nsec".into()))
        );
    }

    #[test]
    fn debug_redacts() {
        let s = format!("{:?}", full());
        assert!(!s.contains("canary") && !s.contains("\"v\""), "{s}");
    }

    #[test]
    fn unknown_fields_ignored_and_nulls_default() {
        let v = json!({"private_key_nsec": "k", "future": {"x": 1}, "launch": null, "auth_tag": null});
        let a = parse_agent(&v).unwrap();
        assert_eq!(a.respond_to, "owner-only");
        assert!(a.launch.is_none() && a.auth_tag.is_none());
    }

    #[test]
    fn operations_are_optional_and_deploy_is_always_there() {
        let info = |v: Value| v.as_object().cloned().unwrap();
        let none = info(serde_json::json!({"protocol_version": 1}));
        assert!(info_supports(&none, OP_DEPLOY));
        assert!(!info_supports(&none, OP_UNDEPLOY));
        let both = info(serde_json::json!({"operations": ["deploy", "undeploy"]}));
        assert!(info_supports(&both, OP_UNDEPLOY));
        for bad in [
            serde_json::json!({"operations": "undeploy"}),
            serde_json::json!({"operations": [1, null]}),
        ] {
            assert!(!info_supports(&info(bad), OP_UNDEPLOY));
        }
        let req = UndeployRequest {
            op: OP_UNDEPLOY.into(),
            request_id: None,
            agent: UndeployAgent {
                name: "scout".into(),
                pubkey: "a".repeat(64),
            },
            provider_config: Map::new(),
            keep_workspace: false,
        };
        let v = serde_json::to_value(&req).unwrap();
        assert!(
            v.get(KEEP_WORKSPACE).is_none(),
            "sent only when true: an older provider sees the request it knows"
        );
        let keep = serde_json::to_value(UndeployRequest {
            keep_workspace: true,
            ..req.clone()
        })
        .unwrap();
        assert_eq!(keep[KEEP_WORKSPACE], true);
        assert_eq!(
            v["agent"],
            serde_json::json!({"name": "scout", "pubkey": "a".repeat(64)})
        );
        assert!(v.get("request_id").is_none());
        assert_eq!(
            serde_json::to_value(Removed {
                pods: 1,
                secrets: 2,
                workspaces: 1,
                ..Default::default()
            })
            .unwrap(),
            serde_json::json!({"pods": 1, "secrets": 2, "workspaces": 1})
        );
        let older: Removed = serde_json::from_value(serde_json::json!({"pods": 1, "secrets": 2})).unwrap();
        assert_eq!(older.workspaces, 0, "an answer without workspaces removed none");
        assert_eq!(removed_text(&older), "1 pod and 2 Secrets");
        assert_eq!(
            removed_text(&Removed {
                pods: 0,
                secrets: 1,
                workspaces: 1,
                ..Default::default()
            }),
            "0 pods, 1 Secret and 1 workspace volume"
        );
        let units: Removed = serde_json::from_value(
            serde_json::json!({"pods": 0, "secrets": 0, "units": 1, "env_files": 1, "workspaces": 1}),
        )
        .unwrap();
        assert_eq!(removed_text(&units), "1 unit, 1 env file and 1 working directory");
        let with_policy: Removed = serde_json::from_value(
            serde_json::json!({"pods": 1, "secrets": 1, "workspaces": 0, "network_policies": 1}),
        )
        .unwrap();
        assert_eq!(removed_text(&with_policy), "1 pod, 1 Secret and 1 NetworkPolicy");
    }
}
