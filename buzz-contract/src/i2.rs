//! Invariant I2, no secrets in configuration: `provider_config` is a flat
//! object of scalars, at most 20 fields and 64 KiB, and no key whose
//! word-split contains `secret`, `password`, `token`, `key` or `credential`.
//! The key-name lint has false positives by design (`ssh_key_path` is refused;
//! rename it `identity_file`), per spec I2.

use serde_json::Value;

/// Field-count cap.
pub const MAX_FIELDS: usize = 20;
/// Serialized-size cap in bytes.
pub const MAX_BYTES: usize = 64 * 1024;
/// Words that mark a key name as secret-bearing.
pub const DENY_WORDS: &[&str] = &["secret", "password", "token", "key", "credential"];

/// Why a `provider_config` was refused. Never carries a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum I2Error {
    #[error("provider_config must be a JSON object")]
    NotObject,
    #[error("provider_config has {0} fields; at most 20 are allowed")]
    TooManyFields(usize),
    #[error("provider_config is {0} bytes; at most 65536 are allowed")]
    TooLarge(usize),
    #[error("provider_config field `{0}` must be a string, number, boolean or null, not an object or array")]
    NotScalar(String),
    #[error(
        "provider_config field `{0}` looks like it holds a secret (its name contains secret/password/token/key/credential); secrets travel only in the deploy payload — rename the field if it is not one"
    )]
    SecretName(String),
}

/// Splits a key into lowercase words on non-alphanumerics and camelCase humps.
pub fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// True when a key name trips the I2 lint.
pub fn key_name_is_secretish(name: &str) -> bool {
    words(name).iter().any(|w| {
        DENY_WORDS
            .iter()
            .any(|d| w == d || w.strip_suffix('s') == Some(d))
    })
}

/// Validates a `provider_config` value against I2.
pub fn validate_provider_config(v: &Value) -> Result<(), I2Error> {
    let Value::Object(map) = v else {
        return Err(I2Error::NotObject);
    };
    if map.len() > MAX_FIELDS {
        return Err(I2Error::TooManyFields(map.len()));
    }
    let size = serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX);
    if size > MAX_BYTES {
        return Err(I2Error::TooLarge(size));
    }
    for (k, val) in map {
        if key_name_is_secretish(k) {
            return Err(I2Error::SecretName(k.clone()));
        }
        if val.is_object() || val.is_array() {
            return Err(I2Error::NotScalar(k.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn word_split_lint() {
        for bad in [
            "api_key",
            "apiKey",
            "ssh_key_path",
            "TOKEN",
            "db-password",
            "client_secret",
            "Credentials",
            "keys",
        ] {
            assert!(key_name_is_secretish(bad), "{bad}");
        }
        for ok in [
            "keyboard",
            "namespace",
            "image",
            "cpu_request",
            "monkey",
            "tokenizer_model",
            "inactivity_seconds",
        ] {
            assert!(!key_name_is_secretish(ok), "{ok}");
        }
    }

    #[test]
    fn shape_rules() {
        assert_eq!(validate_provider_config(&json!([])), Err(I2Error::NotObject));
        assert_eq!(
            validate_provider_config(&json!({"a": {"b": 1}})),
            Err(I2Error::NotScalar("a".into()))
        );
        assert_eq!(
            validate_provider_config(&json!({"a": [1]})),
            Err(I2Error::NotScalar("a".into()))
        );
        assert!(validate_provider_config(&json!({"a": 1, "b": "x", "c": true, "d": null})).is_ok());
        let many: serde_json::Map<String, Value> = (0..21).map(|i| (format!("f{i}"), json!(1))).collect();
        assert_eq!(
            validate_provider_config(&Value::Object(many)),
            Err(I2Error::TooManyFields(21))
        );
        let big = json!({"a": "x".repeat(MAX_BYTES)});
        assert!(matches!(
            validate_provider_config(&big),
            Err(I2Error::TooLarge(_))
        ));
        assert_eq!(
            validate_provider_config(&json!({"token": "x"})),
            Err(I2Error::SecretName("token".into()))
        );
    }
}
