//! The shape every binding's `provider_config` takes (spec I2, §Provider
//! Protocol): a flat object that passes the I2 lint, whose every key is one
//! the binding defines (a typo is an error, never a silent default), read
//! field by field with the same words for the same mistakes.

use crate::refusal::{ConfigError, ConfigErrorKind as K};
use serde_json::{Map, Value};

fn bad(kind: K, field: Option<&str>, msg: String) -> ConfigError {
    ConfigError::new(kind, field, msg)
}

/// `v` as an object that passes the I2 lint and holds only `fields`.
pub fn object<'a>(v: &'a Value, fields: &[&str]) -> Result<&'a Map<String, Value>, ConfigError> {
    let Value::Object(m) = v else {
        return Err(bad(
            K::NotAnObject,
            None,
            "provider_config must be a JSON object".into(),
        ));
    };
    buzz_contract::i2::validate_provider_config(v).map_err(|e| bad(K::SecretLint, None, e.to_string()))?;
    if let Some(unknown) = m.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(bad(
            K::UnknownField,
            Some(unknown),
            format!(
                "provider_config has an unknown field `{unknown}`; the v1 fields are {}",
                fields.join(", ")
            ),
        ));
    }
    Ok(m)
}

/// A field of whole seconds, 0 or more (`zero`: what 0 means), or
/// `default` when absent.
pub fn whole_seconds(
    m: &Map<String, Value>,
    key: &str,
    zero: &str,
    default: u64,
) -> Result<u64, ConfigError> {
    match m.get(key) {
        None => Ok(default),
        Some(Value::Number(n)) => n.as_u64().ok_or_else(|| {
            bad(
                K::Invalid,
                Some(key),
                format!("provider_config.{key} must be a whole number of seconds, 0 or more"),
            )
        }),
        Some(Value::String(s)) if s.is_empty() => Err(bad(
            K::WrongType,
            Some(key),
            format!(
                "provider_config.{key} is an empty string; send a number (0 = {zero}) or omit the field for the default {default}"
            ),
        )),
        Some(_) => Err(bad(
            K::WrongType,
            Some(key),
            format!(
                "provider_config.{key} must be a JSON number (0 = {zero}), not a string, boolean or null"
            ),
        )),
    }
}

/// A string field, trimmed; absent, null or blank is `None`.
pub fn string_field(m: &Map<String, Value>, key: &str) -> Result<Option<String>, ConfigError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
        Some(_) => Err(bad(
            K::WrongType,
            Some(key),
            format!("provider_config.{key} must be a string"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_object_passes_i2_and_holds_only_known_fields() {
        let fields = ["host", "doze_seconds"];
        assert!(object(&json!({"host": "h"}), &fields).is_ok());
        assert_eq!(object(&json!([]), &fields).unwrap_err().kind, K::NotAnObject);
        assert_eq!(
            object(&json!({"ssh_key_path": "/k"}), &fields).unwrap_err().kind,
            K::SecretLint
        );
        let e = object(&json!({"hots": "h"}), &fields).unwrap_err();
        assert_eq!((e.kind, e.field.as_deref()), (K::UnknownField, Some("hots")));
    }

    #[test]
    fn seconds_and_strings_read_the_same_in_every_binding() {
        let m = json!({"a": 5, "b": "", "c": "5", "d": -1, "s": "  x ", "t": " ", "u": 3});
        let m = m.as_object().unwrap();
        assert_eq!(whole_seconds(m, "a", "never", 9).unwrap(), 5);
        assert_eq!(whole_seconds(m, "zz", "never", 9).unwrap(), 9);
        assert_eq!(whole_seconds(m, "b", "never", 9).unwrap_err().kind, K::WrongType);
        assert_eq!(whole_seconds(m, "c", "never", 9).unwrap_err().kind, K::WrongType);
        assert_eq!(whole_seconds(m, "d", "never", 9).unwrap_err().kind, K::Invalid);
        assert_eq!(string_field(m, "s").unwrap().as_deref(), Some("x"));
        assert_eq!(string_field(m, "t").unwrap(), None);
        assert_eq!(string_field(m, "u").unwrap_err().kind, K::WrongType);
    }
}
