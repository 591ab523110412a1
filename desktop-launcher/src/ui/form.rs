//! The Start page's form rules, pure (spec §Provider Protocol `info`:
//! `config_schema` drives the form — `properties[*].default` prefill,
//! string/number/boolean coercion, `required` gating; Known Defect 8: a
//! cleared field is omitted, never sent as `""`; I2: the same validator as
//! the CLI, errors keyed by field).
//!
//! The browser renders what [`fields_from_schema`] describes and gates its
//! submit button on `required`; the server never trusts that and applies
//! [`validate_config`] again, with the CLI's own
//! [`rules::normalize_provider_config`].
//!
//! Agent presets (spec §Launch data: a command *name*): the form's
//! `agent_preset` is one of `buzz_contract::agents`' presets or
//! [`CUSTOM`], applied by [`rules::apply_preset`] as `agent create --agent`
//! does; a preset and a different custom command at once is a field error.
//! The permission knobs, the relay URL ([`buzz_contract::relay_url`]) and
//! the preset-or-command rule ([`rules::check_preset_and_command`]) use
//! the CLI's validators (issue 24 item 3: one rule for both front ends). The API key is the one
//! secret the form carries ([`SecretText`]): [`secret_changes`] puts it under
//! the record's preset key env, the routes store it as the CLI stores
//! `--env-file` values, and no response ever carries it back.

use crate::app::rules;
use crate::app::{AgentRecord, Backend, ConfigError, EnvChanges};
use buzz_contract::i2::I2Error;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The key of errors that belong to no single field.
pub const FORM_KEY: &str = "_form";

/// The `agent_preset` value of a custom command.
pub const CUSTOM: &str = "custom";

/// A secret typed into the page: read from the request, never printed (its
/// `Debug` is redacted) and never sent back.
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct SecretText(pub String);

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Field-keyed validation errors (field name → one sentence, never a value).
pub type FieldErrors = BTreeMap<String, String>;

/// The input type of one schema field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    String,
    Integer,
    Number,
    Boolean,
}

/// One rendered `config_schema` field.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchemaField {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: FieldType,
    /// `properties[*].default`, when it is a scalar of the field's type.
    pub default: Option<Value>,
    pub required: bool,
    /// `title`, else `description`: provider text, rendered as text.
    pub label: Option<String>,
    pub description: Option<String>,
}

fn scalar_of(ty: FieldType, v: &Value) -> bool {
    match ty {
        FieldType::String => v.is_string(),
        FieldType::Integer => v.is_i64() || v.is_u64(),
        FieldType::Number => v.is_number(),
        FieldType::Boolean => v.is_boolean(),
    }
}

/// The fields of a `config_schema` (`{"properties": {…}, "required": […]}`).
/// Unknown types render as strings; a default of the wrong type is dropped.
pub fn fields_from_schema(schema: Option<&Value>) -> Vec<SchemaField> {
    let Some(props) = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .and_then(|s| s.get("required"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    props
        .iter()
        .map(|(name, p)| {
            let ty = match p.get("type").and_then(Value::as_str) {
                Some("integer") => FieldType::Integer,
                Some("number") => FieldType::Number,
                Some("boolean") => FieldType::Boolean,
                _ => FieldType::String,
            };
            let text = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_string);
            SchemaField {
                name: name.clone(),
                ty,
                default: p.get("default").filter(|d| scalar_of(ty, d)).cloned(),
                required: required.contains(&name.as_str()),
                label: text("title"),
                description: text("description"),
            }
        })
        .collect()
}

/// The field an I2 or coercion error is about, if any.
fn error_field(e: &ConfigError) -> Option<&str> {
    match e {
        ConfigError::NotNumber(k) | ConfigError::NotBoolean(k) => Some(k),
        ConfigError::I2(I2Error::NotScalar(k) | I2Error::SecretName(k)) => Some(k),
        ConfigError::I2(_) | ConfigError::Missing { .. } => None,
    }
}

fn cleared(v: &Value) -> bool {
    v.is_null() || v.as_str().is_some_and(|s| s.trim().is_empty())
}

/// Validates user config against the schema with the CLI's normaliser:
/// cleared fields are omitted (Known Defect 8), numbers and booleans are
/// coerced, `required` fields must be present, and every I2 error lands on
/// its field (whole-object ones under [`FORM_KEY`]). Returns the normalised
/// config the record stores.
pub fn validate_config(
    input: &Map<String, Value>,
    schema: Option<&Value>,
) -> Result<Map<String, Value>, FieldErrors> {
    let mut errors = FieldErrors::new();
    // The rule `start` applies too (`payload::deploy_config`).
    for name in rules::missing_required(input, schema) {
        errors.insert(name.clone(), format!("`{name}` is required"));
    }
    // Field by field first, so every field's error is reported, not only the first.
    for (k, v) in input {
        let one: Map<String, Value> = std::iter::once((k.clone(), v.clone())).collect();
        if let Err(e) = rules::normalize_provider_config(&one, schema) {
            errors.insert(error_field(&e).unwrap_or(k).to_string(), e.to_string());
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    rules::normalize_provider_config(input, schema).map_err(|e| {
        let key = error_field(&e).unwrap_or(FORM_KEY).to_string();
        FieldErrors::from([(key, e.to_string())])
    })
}

/// What the create/edit form sends. Absent fields are left as they are on
/// edit; an empty string clears an optional field (as `agent edit --x ""`).
/// Env values are never shown on the page: it shows env *names* only (I2);
/// the API key is the one value it may send.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentForm {
    pub name: Option<String>,
    pub relay_url: Option<String>,
    /// `local` or `provider:<id>`.
    pub backend: Option<String>,
    pub display_name: Option<String>,
    /// A preset name ([`buzz_contract::agents::PRESETS`]) or [`CUSTOM`].
    pub agent_preset: Option<String>,
    pub agent_command: Option<String>,
    /// One argument per entry; replaces the list.
    pub agent_args: Option<Vec<String>>,
    pub model: Option<String>,
    /// The agent's session mode id (`BUZZ_ACP_PERMISSION_MODE`).
    pub permission_mode: Option<String>,
    /// `allow`, `reject` or `ask-owner` (`BUZZ_ACP_PERMISSION_POLICY`).
    pub permission_policy: Option<String>,
    /// The same for every author but the owner
    /// (`BUZZ_ACP_PERMISSION_POLICY_OTHERS`; the harness default: `reject`).
    pub permission_policy_others: Option<String>,
    /// The API key, stored under the preset's key env ([`secret_changes`]);
    /// empty or absent leaves a stored one as it is.
    pub api_key: Option<SecretText>,
    pub provider: Option<String>,
    pub system_prompt: Option<String>,
    /// `provider_config` as typed; validated by [`validate_config`].
    pub config: Option<Map<String, Value>>,
}

fn opt(v: &Option<String>) -> Option<Option<String>> {
    v.as_ref().map(|s| {
        let t = s.trim();
        if t.is_empty() { None } else { Some(t.to_string()) }
    })
}

/// Applies the form to a record (the page's `agent create`/`agent edit`),
/// with the same rules as the CLI: a valid provider id, config through the
/// shared normaliser. `schema` is the provider's `config_schema` when it
/// could be fetched.
pub fn apply(rec: &mut AgentRecord, form: &AgentForm, schema: Option<&Value>) -> Result<(), FieldErrors> {
    let mut errors = FieldErrors::new();
    if let Some(u) = &form.relay_url {
        match buzz_contract::relay_url::check(u) {
            Ok(u) => rec.relay_url = u,
            Err(e) => {
                errors.insert("relay_url".into(), e.to_string());
            }
        }
    }
    if let Some(b) = &form.backend {
        match b.as_str() {
            "local" => rec.backend = Backend::Local,
            other => match other.strip_prefix("provider:") {
                Some(id) if rules::valid_provider_id(id) => {
                    let config = match &rec.backend {
                        Backend::Provider { id: old, config, .. } if old == id => config.clone(),
                        _ => Map::new(),
                    };
                    rec.backend = Backend::Provider {
                        id: id.to_string(),
                        config,
                        path_cache: None,
                    };
                }
                _ => {
                    errors.insert(
                        "backend".into(),
                        "the backend must be `local` or `provider:<id>` with id [a-z0-9][a-z0-9_-]*".into(),
                    );
                }
            },
        }
    }
    if let Some(v) = opt(&form.display_name) {
        rec.display_name = v;
    }
    let preset = match form.agent_preset.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(p) if p == CUSTOM => None,
        Some(p) => match rules::lookup_preset(p) {
            Ok(p) => Some(p),
            Err(e) => {
                errors.insert("agent_preset".into(), e.to_string());
                None
            }
        },
    };
    match (preset, opt(&form.agent_command)) {
        (Some(p), Some(Some(c))) => match rules::check_preset_and_command(p, &c) {
            Ok(()) => rules::apply_preset(rec, p),
            Err(e) => {
                errors.insert("agent_command".into(), e.to_string());
            }
        },
        (Some(p), _) => rules::apply_preset(rec, p),
        (None, Some(v)) => rec.agent_command = v,
        (None, None) => {}
    }
    if let Some(v) = opt(&form.permission_mode) {
        match v.as_deref().map(rules::check_permission_mode) {
            Some(Err(e)) => {
                errors.insert("permission_mode".into(), e.to_string());
            }
            _ => rec.permission_mode = v,
        }
    }
    for (key, field, value) in [
        (
            "permission_policy",
            &mut rec.permission_policy,
            &form.permission_policy,
        ),
        (
            "permission_policy_others",
            &mut rec.permission_policy_others,
            &form.permission_policy_others,
        ),
    ] {
        if let Some(v) = opt(value) {
            match v.as_deref().map(rules::permission_policy) {
                Some(Err(e)) => {
                    errors.insert(key.into(), e.to_string());
                }
                Some(Ok(p)) => *field = Some(p.as_str().to_string()),
                None => *field = None,
            }
        }
    }
    if let Some(args) = &form.agent_args {
        rec.agent_args = args.iter().filter(|a| !a.is_empty()).cloned().collect();
    }
    if let Some(v) = opt(&form.model) {
        rec.model = v;
    }
    if let Some(v) = opt(&form.provider) {
        rec.provider = v;
    }
    if let Some(v) = opt(&form.system_prompt) {
        rec.system_prompt = v;
    }
    if let Some(cfg) = &form.config {
        match &mut rec.backend {
            Backend::Provider { config, .. } => match validate_config(cfg, schema) {
                Ok(c) => *config = c,
                Err(e) => errors.extend(e.into_iter().map(|(k, v)| (format!("config.{k}"), v))),
            },
            Backend::Local if cfg.values().all(cleared) => {}
            Backend::Local => {
                errors.insert(
                    "config".into(),
                    "provider config applies to provider backends only".into(),
                );
            }
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// The secret env the form sets: its API key under the key env of `rec`'s
/// preset (run on the record as [`apply`] left it). An API key for a record
/// without such a preset is a field error, never stored under a guessed name.
pub fn secret_changes(rec: &AgentRecord, form: &AgentForm) -> Result<EnvChanges, FieldErrors> {
    let Some(key) = form
        .api_key
        .as_ref()
        .map(|k| k.0.trim())
        .filter(|k| !k.is_empty())
    else {
        return Ok(EnvChanges::new());
    };
    let err = |msg: String| Err(FieldErrors::from([("api_key".to_string(), msg)]));
    if key.chars().any(char::is_control) {
        return err("the API key must be one line of text (it is not shown)".into());
    }
    let env = rec
        .agent_command
        .as_deref()
        .and_then(buzz_contract::agents::preset_for_command)
        .and_then(|p| p.key_env.first());
    match env {
        Some(e) => Ok(EnvChanges::from([(e.to_string(), Some(key.to_string()))])),
        None => {
            let readers: Vec<&str> = buzz_contract::agents::PRESETS
                .iter()
                .filter(|p| !p.key_env.is_empty())
                .map(|p| p.name)
                .collect();
            err(format!(
                "an API key needs an agent preset that reads one ({}); give another agent's env with `buzz-launcher agent edit NAME --env-file FILE`",
                readers.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"properties": {
            "replicas": {"type": "integer", "default": 1, "title": "Replicas"},
            "ratio": {"type": "number"},
            "debug": {"type": "boolean", "default": false},
            "namespace": {"type": "string", "default": 7}},
            "required": ["replicas"]})
    }

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn schema_fields_carry_defaults_required_and_types() {
        let s = schema();
        let f = fields_from_schema(Some(&s));
        let by = |n: &str| f.iter().find(|x| x.name == n).cloned();
        let r = by("replicas").unwrap();
        assert_eq!(
            (r.ty, r.default, r.required),
            (FieldType::Integer, Some(json!(1)), true)
        );
        assert_eq!(by("debug").unwrap().default, Some(json!(false)));
        // A default of the wrong type is not prefilled.
        assert_eq!(by("namespace").unwrap().default, None);
        assert!(fields_from_schema(None).is_empty());
    }

    #[test]
    fn numbers_are_coerced_and_an_empty_number_is_omitted_never_sent_as_empty() {
        let s = schema();
        let out = validate_config(
            &map(json!({"replicas": "3", "ratio": "", "debug": "true"})),
            Some(&s),
        )
        .unwrap();
        assert_eq!(Value::Object(out), json!({"replicas": 3, "debug": true}));
    }

    #[test]
    fn required_and_coercion_errors_are_field_keyed() {
        let s = schema();
        let e = validate_config(
            &map(json!({"replicas": "", "ratio": "x", "debug": "maybe"})),
            Some(&s),
        )
        .unwrap_err();
        assert_eq!(e.keys().collect::<Vec<_>>(), ["debug", "ratio", "replicas"]);
        assert_eq!(e["replicas"], "`replicas` is required");
        assert!(!e["ratio"].contains("\"x\""), "{}", e["ratio"]);
    }

    #[test]
    fn i2_secret_names_are_keyed_by_their_field() {
        let e = validate_config(&map(json!({"apiToken": "v", "ok": "1"})), None).unwrap_err();
        assert_eq!(e.keys().collect::<Vec<_>>(), ["apiToken"]);
        assert!(
            e["apiToken"].contains("looks like it holds a secret"),
            "{}",
            e["apiToken"]
        );
        assert!(!e["apiToken"].contains("\"v\""));
    }

    #[test]
    fn too_many_fields_is_a_form_error() {
        let many: Map<String, Value> = (0..21).map(|i| (format!("f{i}"), json!("v"))).collect();
        let e = validate_config(&many, None).unwrap_err();
        assert_eq!(e.keys().collect::<Vec<_>>(), [FORM_KEY]);
    }

    fn form(v: Value) -> AgentForm {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_preset_fills_the_command_and_the_api_key_goes_to_its_key_env() {
        let mut rec = AgentRecord::new("a", &"0".repeat(64), "wss://r");
        rec.agent_args = vec!["--old".into()];
        let f = form(json!({"agent_preset": "claude", "permission_mode": "acceptEdits",
                            "permission_policy": "ask-owner", "permission_policy_others": "ask-owner",
                            "api_key": " sk-canary-0123 "}));
        assert!(!format!("{f:?}").contains("sk-canary"), "{f:?}");
        apply(&mut rec, &f, None).unwrap();
        assert_eq!(rec.agent_command.as_deref(), Some("claude-agent-acp"));
        assert!(rec.agent_args.is_empty());
        assert_eq!(rec.permission_mode.as_deref(), Some("acceptEdits"));
        assert_eq!(rec.permission_policy.as_deref(), Some("ask-owner"));
        assert_eq!(rec.permission_policy_others.as_deref(), Some("ask-owner"));
        assert!(rec.env.is_empty(), "the key is not a record field");
        assert_eq!(
            secret_changes(&rec, &f).unwrap(),
            EnvChanges::from([(
                "ANTHROPIC_API_KEY".to_string(),
                Some("sk-canary-0123".to_string())
            )])
        );
        // The same command as the preset's is no conflict; custom keeps the command.
        apply(
            &mut rec,
            &form(json!({"agent_preset": "gemini", "agent_command": "gemini"})),
            None,
        )
        .unwrap();
        assert_eq!(rec.agent_command.as_deref(), Some("gemini"));
        apply(
            &mut rec,
            &form(json!({"agent_preset": "custom", "agent_command": "my-acp"})),
            None,
        )
        .unwrap();
        assert_eq!(rec.agent_command.as_deref(), Some("my-acp"));
        // Cleared knobs are cleared.
        apply(
            &mut rec,
            &form(json!({"permission_mode": "", "permission_policy": "", "permission_policy_others": ""})),
            None,
        )
        .unwrap();
        assert_eq!(
            (
                rec.permission_mode.clone(),
                rec.permission_policy.clone(),
                rec.permission_policy_others.clone()
            ),
            (None, None, None)
        );
    }

    #[test]
    fn preset_errors_are_keyed_by_field_and_never_echo_the_key() {
        let mut rec = AgentRecord::new("a", &"0".repeat(64), "wss://r");
        let e = apply(
            &mut rec,
            &form(
                json!({"agent_preset": "nope", "permission_policy": "always", "permission_mode": "a b",
                         "permission_policy_others": "anyone"}),
            ),
            None,
        )
        .unwrap_err();
        assert_eq!(
            e.keys().collect::<Vec<_>>(),
            [
                "agent_preset",
                "permission_mode",
                "permission_policy",
                "permission_policy_others"
            ]
        );
        assert!(
            e["agent_preset"].contains("claude, codex, gemini, goose, echo"),
            "{e:?}"
        );
        let e = apply(
            &mut rec,
            &form(json!({"agent_preset": "codex", "agent_command": "claude-agent-acp"})),
            None,
        )
        .unwrap_err();
        assert_eq!(e.keys().collect::<Vec<_>>(), ["agent_command"]);
        rec.agent_command = Some("my-acp".into());
        let f = form(json!({"api_key": "sk-canary-0123"}));
        let e = secret_changes(&rec, &f).unwrap_err();
        assert!(e["api_key"].contains("claude, codex, gemini"), "{e:?}");
        assert!(!e["api_key"].contains("sk-canary"));
        rec.agent_command = Some("codex-acp".into());
        assert!(secret_changes(&rec, &form(json!({"api_key": "a\nb"}))).is_err());
        assert!(
            secret_changes(&rec, &form(json!({"api_key": "  "})))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn apply_refuses_a_bad_backend_and_relay_with_field_keys() {
        let mut rec = AgentRecord::new("a", &"0".repeat(64), "wss://r");
        let form = AgentForm {
            backend: Some("provider:Bad!".into()),
            relay_url: Some("http://x".into()),
            ..AgentForm::default()
        };
        let e = apply(&mut rec, &form, None).unwrap_err();
        assert_eq!(e.keys().collect::<Vec<_>>(), ["backend", "relay_url"]);
        assert_eq!(
            e["relay_url"],
            "a relay speaks WebSocket, not http://; write the URL with ws:// (or wss:// for a relay behind TLS)"
        );
        // The CLI's rule: credentials and a missing scheme are refused too.
        for bad in ["wss://u:pw-canary@relay", "relay.example.com", " "] {
            let form = AgentForm {
                relay_url: Some(bad.into()),
                ..AgentForm::default()
            };
            let e = apply(&mut rec, &form, None).unwrap_err();
            assert!(!e["relay_url"].contains("canary"), "{e:?}");
        }
        assert_eq!(rec.relay_url, "wss://r");
    }
}
