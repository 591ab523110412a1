//! The Start page's form rules, pure (spec §Provider Protocol `info`:
//! `config_schema` drives the form — `properties[*].default` prefill,
//! string/number/boolean coercion, `required` gating; Known Defect 8: a
//! cleared field is omitted, never sent as `""`; I2: the same validator as
//! the CLI, errors keyed by field).
//!
//! The browser renders what [`fields_from_schema`] describes and gates its
//! submit button on `required`; the server never trusts that and applies
//! [`validate_config`] again, with the CLI's own
//! [`crate::payload::normalize_provider_config`].

use crate::discovery;
use crate::payload::{self, ConfigError};
use crate::record::{AgentRecord, Backend};
use buzz_contract::i2::I2Error;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The key of errors that belong to no single field.
pub const FORM_KEY: &str = "_form";

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
        ConfigError::I2(_) => None,
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
    for f in fields_from_schema(schema).iter().filter(|f| f.required) {
        if input.get(&f.name).is_none_or(cleared) {
            errors.insert(f.name.clone(), format!("`{}` is required", f.name));
        }
    }
    // Field by field first, so every field's error is reported, not only the first.
    for (k, v) in input {
        let one: Map<String, Value> = std::iter::once((k.clone(), v.clone())).collect();
        if let Err(e) = payload::normalize_provider_config(&one, schema) {
            errors.insert(error_field(&e).unwrap_or(k).to_string(), e.to_string());
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    payload::normalize_provider_config(input, schema).map_err(|e| {
        let key = error_field(&e).unwrap_or(FORM_KEY).to_string();
        FieldErrors::from([(key, e.to_string())])
    })
}

/// What the create/edit form sends. Absent fields are left as they are on
/// edit; an empty string clears an optional field (as `agent edit --x ""`).
/// Env values are not part of the page: it shows env *names* only (I2).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentForm {
    pub name: Option<String>,
    pub relay_url: Option<String>,
    /// `local` or `provider:<id>`.
    pub backend: Option<String>,
    pub display_name: Option<String>,
    pub agent_command: Option<String>,
    /// One argument per entry; replaces the list.
    pub agent_args: Option<Vec<String>>,
    pub model: Option<String>,
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
        let u = u.trim();
        if u.starts_with("ws://") || u.starts_with("wss://") {
            rec.relay_url = u.to_string();
        } else {
            errors.insert(
                "relay_url".into(),
                "the relay URL must start with ws:// or wss://".into(),
            );
        }
    }
    if let Some(b) = &form.backend {
        match b.as_str() {
            "local" => rec.backend = Backend::Local,
            other => match other.strip_prefix("provider:") {
                Some(id) if discovery::valid_id(id) => {
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
    if let Some(v) = opt(&form.agent_command) {
        rec.agent_command = v;
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
    }
}
