//! `info`'s answer (spec §info; wire-facts §7), the same shape for every
//! binding: `name`, `version`, `protocol_version`, a description, the JSON
//! Schema of the binding's flat `provider_config` (I2), and the optional
//! `operations` list: every binding here implements `deploy` and
//! `undeploy`. Answered without contacting anything.

use buzz_contract::wire::{INFO_OPERATIONS, OP_DEPLOY, OP_UNDEPLOY, PROTOCOL_VERSION};
use serde_json::{Map, Value, json};

/// The `info` response.
pub fn response(name: &str, version: &str, description: &str, config_schema: Value) -> Value {
    json!({
        "ok": true,
        "name": name,
        "version": version,
        "protocol_version": PROTOCOL_VERSION,
        "description": description,
        "config_schema": config_schema,
        INFO_OPERATIONS: [OP_DEPLOY, OP_UNDEPLOY],
    })
}

/// A `provider_config` schema: a flat object of these properties, no
/// other field allowed.
pub fn schema(title: &str, required: &[&str], properties: Map<String, Value>) -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "title": title,
        "additionalProperties": false,
        "required": required,
        "properties": properties,
    })
}

/// A field of whole seconds, 0 or more.
pub fn seconds(title: &str, description: &str, default: u64) -> Value {
    json!({ "type": "integer", "title": title, "description": description, "default": default, "minimum": 0 })
}

/// A string field.
pub fn string(title: &str, description: &str) -> Value {
    json!({ "type": "string", "title": title, "description": description, "default": "" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_the_protocol_and_both_operations() {
        let mut props = Map::new();
        props.insert("host".into(), string("Host", "where"));
        let v = response("ssh", "1.0", "d", schema("SSH", &["host"], props));
        assert_eq!(v["protocol_version"], PROTOCOL_VERSION);
        assert_eq!(v["operations"], json!(["deploy", "undeploy"]));
        assert_eq!(v["config_schema"]["additionalProperties"], false);
        assert_eq!(v["config_schema"]["required"], json!(["host"]));
    }
}
