//! The deploy payload builder (spec §`deploy`, §Launch data, I1, I2, Known
//! Defect 8). The launcher is THE serializer of this payload; the golden
//! fixtures in `fixtures/provider-wire/` are recorded from it.

use crate::record::Identity;
use crate::resolve::{ResolveError, Resolved, Target};
use buzz_contract::i2::{self, I2Error};
use buzz_contract::wire::{
    AgentPayload, DeployRequest, InfoRequest, OP_DEPLOY, OP_INFO, OP_UNDEPLOY, UndeployAgent, UndeployRequest,
};
use serde_json::{Map, Value};

/// Why a `provider_config` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Invariant I2.
    #[error(transparent)]
    I2(#[from] I2Error),
    /// A value that does not parse as the schema's numeric type (never echoes the value).
    #[error("provider_config field `{0}` must be a number; clear the field to use the provider's default")]
    NotNumber(String),
    #[error("provider_config field `{0}` must be true or false")]
    NotBoolean(String),
    /// Fields the provider's `config_schema` requires that the record does
    /// not set, all of them at once, each with its `--config` fix (issue 24
    /// item 5: not one per `start`).
    #[error(
        "the provider requires provider_config {} that agent `{agent}` does not set; set {}: buzz-launcher agent edit {agent} {} (or fill them in on the Start page)",
        fields.join(", "),
        if fields.len() == 1 { "it" } else { "them all at once" },
        fixes.join(" ")
    )]
    Missing {
        agent: String,
        fields: Vec<String>,
        /// `--config NAME=EXAMPLE`, one per field.
        fixes: Vec<String>,
    },
}

/// Why a deploy payload could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `undeploy` selects by the pubkey: a malformed one could match nothing or too much.
    #[error("agent `{0}`: its record's pubkey is not 64 lowercase hex; the provider could not select by it")]
    BadPubkey(String),
}

/// The `info` request.
pub fn info_request(request_id: &str) -> InfoRequest {
    InfoRequest {
        op: OP_INFO.to_string(),
        request_id: Some(request_id.to_string()),
    }
}

fn schema_type<'a>(schema: Option<&'a Value>, field: &str) -> Option<&'a str> {
    schema?.get("properties")?.get(field)?.get("type")?.as_str()
}

/// A name or an example value from a provider's schema, when it is plain
/// enough to print in a command line (the schema is provider output).
fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-/:@".contains(&b))
}

/// The fields `schema` requires (`required`) that `config` leaves unset or
/// cleared: the one rule of the page's form and of `start`. Names that are
/// not plain are skipped (the provider still refuses them by itself).
pub fn missing_required(config: &Map<String, Value>, schema: Option<&Value>) -> Vec<String> {
    let Some(required) = schema.and_then(|s| s.get("required")).and_then(Value::as_array) else {
        return Vec::new();
    };
    required
        .iter()
        .filter_map(Value::as_str)
        .filter(|k| plain(k))
        .filter(|k| {
            config
                .get(*k)
                .is_none_or(|v| v.is_null() || v.as_str().is_some_and(|s| s.trim().is_empty()))
        })
        .map(str::to_string)
        .collect()
}

/// The config a deploy sends: [`normalize_provider_config`], after every
/// field the schema requires is known to be set ([`missing_required`]; all
/// of them named at once, with the schema's default as the example value
/// when it has one).
pub fn deploy_config(
    agent: &str,
    config: &Map<String, Value>,
    schema: Option<&Value>,
) -> Result<Map<String, Value>, ConfigError> {
    let fields = missing_required(config, schema);
    if !fields.is_empty() {
        let fixes = fields
            .iter()
            .map(|k| {
                let example = schema
                    .and_then(|s| s.get("properties")?.get(k)?.get("default")?.as_str())
                    .filter(|d| plain(d))
                    .map_or_else(|| k.to_ascii_uppercase(), str::to_string);
                format!("--config {k}={example}")
            })
            .collect();
        return Err(ConfigError::Missing {
            agent: agent.to_string(),
            fields,
            fixes,
        });
    }
    normalize_provider_config(config, schema)
}

/// Normalises user-entered config against the provider's `config_schema`
/// (Known Defect 8): a cleared field (`""` or null) is **omitted**, never sent
/// as `""`; numeric strings become numbers; `"true"`/`"false"` become booleans
/// for boolean fields. Then I2 applies to the result.
pub fn normalize_provider_config(
    config: &Map<String, Value>,
    schema: Option<&Value>,
) -> Result<Map<String, Value>, ConfigError> {
    let mut out = Map::new();
    for (k, v) in config {
        let cleared = matches!(v, Value::Null) || v.as_str().is_some_and(|s| s.trim().is_empty());
        if cleared {
            continue;
        }
        let ty = schema_type(schema, k);
        let nv = match (ty, v) {
            (Some("integer"), Value::String(s)) => {
                let s = s.trim();
                if let Ok(n) = s.parse::<i64>() {
                    Value::from(n)
                } else {
                    return Err(ConfigError::NotNumber(k.clone()));
                }
            }
            (Some("number"), Value::String(s)) => {
                let s = s.trim();
                if let Ok(n) = s.parse::<i64>() {
                    Value::from(n)
                } else {
                    match s.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                        Some(n) => Value::Number(n),
                        None => return Err(ConfigError::NotNumber(k.clone())),
                    }
                }
            }
            (Some("integer" | "number"), Value::Number(_)) => v.clone(),
            (Some("integer" | "number"), _) => return Err(ConfigError::NotNumber(k.clone())),
            (Some("boolean"), Value::String(s)) => match s.trim() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return Err(ConfigError::NotBoolean(k.clone())),
            },
            _ => v.clone(),
        };
        out.insert(k.clone(), nv);
    }
    i2::validate_provider_config(&Value::Object(out.clone()))?;
    Ok(out)
}

/// Builds the `deploy` request from a resolved launch (spec §`deploy` table).
/// Refuses before anything is invoked when the identity is empty (I1) or has
/// no owner, and when the resolution targeted anything but a remote deploy.
pub fn build_deploy_request(
    record: &crate::record::AgentRecord,
    resolved: &Resolved,
    id: &Identity,
    provider_config: Map<String, Value>,
    request_id: &str,
) -> Result<DeployRequest, PayloadError> {
    // Re-check I1 here too: this is the last point before the secret leaves.
    crate::resolve::check_identity(record, id)?;
    if resolved.provider.as_deref().map(str::trim) == Some(crate::limits::RELAY_MESH) {
        return Err(ResolveError::RelayMesh(record.name.clone()).into());
    }
    i2::validate_provider_config(&Value::Object(provider_config.clone())).map_err(ConfigError::from)?;
    let l = &resolved.launch;
    let agent = AgentPayload {
        name: record.name.clone(),
        relay_url: record.relay_url.trim().to_string(),
        private_key_nsec: id.nsec.trim().to_string(),
        auth_tag: id
            .auth_tag
            .as_ref()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty()),
        agent_command: l.command.clone(),
        agent_args: l.args.clone(),
        system_prompt: resolved.system_prompt.clone(),
        model: resolved.model.clone(),
        provider: resolved.provider.clone(),
        turn_timeout_seconds: record.turn_timeout_seconds,
        idle_timeout_seconds: record.idle_timeout_seconds,
        max_turn_duration_seconds: record.max_turn_duration_seconds,
        parallelism: record.parallelism,
        respond_to: resolved.respond_to.as_str().to_string(),
        respond_to_allowlist: resolved.respond_to_allowlist.clone(),
        env_vars: resolved.user_env.clone(),
        launch: Some(l.clone()),
        // A waker's Start sets it on the request (`app::start_provider_with`).
        wake: None,
    };
    Ok(DeployRequest {
        op: OP_DEPLOY.to_string(),
        request_id: Some(request_id.to_string()),
        agent,
        provider_config,
    })
}

/// Builds the `undeploy` request (issue 21 "No secret crosses"): the
/// record's name and public key and the normalised `provider_config`, and
/// nothing else — the type has no field an nsec, auth tag or env value could
/// travel in. I2 applies to the config as for `deploy`; a record whose
/// pubkey is not 64 lowercase hex is refused (the provider selects by it).
pub fn build_undeploy_request(
    record: &crate::record::AgentRecord,
    provider_config: Map<String, Value>,
    request_id: &str,
    keep_workspace: bool,
) -> Result<UndeployRequest, PayloadError> {
    if !is_pubkey_hex(&record.pubkey) {
        return Err(PayloadError::BadPubkey(record.name.clone()));
    }
    i2::validate_provider_config(&Value::Object(provider_config.clone())).map_err(ConfigError::from)?;
    Ok(UndeployRequest {
        op: OP_UNDEPLOY.to_string(),
        request_id: Some(request_id.to_string()),
        agent: UndeployAgent {
            name: record.name.clone(),
            pubkey: record.pubkey.clone(),
        },
        provider_config,
        keep_workspace,
    })
}

fn is_pubkey_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Resolve + build in one step for the remote target.
pub fn resolve_and_build(
    record: &crate::record::AgentRecord,
    settings: &crate::record::Settings,
    id: &Identity,
    provider_config: Map<String, Value>,
    request_id: &str,
) -> Result<(Resolved, DeployRequest), PayloadError> {
    let resolved = crate::resolve::resolve_launch(record, settings, id, Target::Remote)?;
    let req = build_deploy_request(record, &resolved, id, provider_config, request_id)?;
    Ok((resolved, req))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"properties": {
            "inactivity_seconds": {"type": "integer"},
            "cpu_request": {"type": "string"},
            "ratio": {"type": "number"},
            "debug": {"type": "boolean"}
        }})
    }

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn kd8_cleared_numeric_field_is_omitted_never_empty_string() {
        let out = normalize_provider_config(
            &map(json!({"inactivity_seconds": "", "cpu_request": "1"})),
            Some(&schema()),
        )
        .unwrap();
        assert!(!out.contains_key("inactivity_seconds"));
        assert_eq!(out["cpu_request"], json!("1"));
        let out =
            normalize_provider_config(&map(json!({"inactivity_seconds": null})), Some(&schema())).unwrap();
        assert!(out.is_empty());
        // Without a schema a cleared field is omitted too.
        let out = normalize_provider_config(&map(json!({"inactivity_seconds": "  "})), None).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn kd8_zero_survives_as_a_number() {
        let out =
            normalize_provider_config(&map(json!({"inactivity_seconds": "0"})), Some(&schema())).unwrap();
        assert_eq!(out["inactivity_seconds"], json!(0));
        let out = normalize_provider_config(&map(json!({"ratio": "0.5", "debug": "true"})), Some(&schema()))
            .unwrap();
        assert_eq!(out["ratio"], json!(0.5));
        assert_eq!(out["debug"], json!(true));
    }

    #[test]
    fn kd8_non_numeric_value_is_an_error_not_a_default() {
        let e = normalize_provider_config(
            &map(json!({"inactivity_seconds": "nsec1canaryvalue"})),
            Some(&schema()),
        )
        .unwrap_err();
        assert_eq!(e, ConfigError::NotNumber("inactivity_seconds".into()));
        assert!(!e.to_string().contains("canary"));
    }

    #[test]
    fn every_missing_required_field_is_named_at_once_with_its_fix() {
        let schema = json!({"required": ["namespace", "image", "bad name!"],
            "properties": {"namespace": {"type": "string", "default": "buzz-agents-ab12cd"},
                           "image": {"type": "string"}}});
        let e = deploy_config("k1", &map(json!({"image": " "})), Some(&schema)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the provider requires provider_config namespace, image that agent `k1` does not set; set them all at once: buzz-launcher agent edit k1 --config namespace=buzz-agents-ab12cd --config image=IMAGE (or fill them in on the Start page)"
        );
        let e = deploy_config("k1", &map(json!({"namespace": "ns"})), Some(&schema)).unwrap_err();
        assert!(
            e.to_string()
                .contains("provider_config image that agent `k1` does not set; set it: "),
            "{e}"
        );
        let out = deploy_config(
            "k1",
            &map(json!({"namespace": "ns", "image": "i:1"})),
            Some(&schema),
        )
        .unwrap();
        assert_eq!(out["image"], json!("i:1"));
        assert!(deploy_config("k1", &Map::new(), None).unwrap().is_empty());
    }

    #[test]
    fn i2_applies_after_normalisation() {
        let e = normalize_provider_config(&map(json!({"api_token": "x"})), None).unwrap_err();
        assert!(matches!(e, ConfigError::I2(I2Error::SecretName(_))));
        let e = normalize_provider_config(&map(json!({"nested": {"a": 1}})), None).unwrap_err();
        assert!(matches!(e, ConfigError::I2(I2Error::NotScalar(_))));
        let many: Map<String, Value> = (0..21).map(|i| (format!("f{i}"), json!(i))).collect();
        assert!(matches!(
            normalize_provider_config(&many, None),
            Err(ConfigError::I2(I2Error::TooManyFields(21)))
        ));
        let big = map(json!({"image": "x".repeat(70 * 1024)}));
        assert!(matches!(
            normalize_provider_config(&big, None),
            Err(ConfigError::I2(I2Error::TooLarge(_)))
        ));
    }
}
