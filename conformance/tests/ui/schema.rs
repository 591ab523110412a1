//! The provider `config_schema` on the server side (spec §Provider Protocol
//! `info` config_schema rendering, Known Defect 8, I2): defaults, required
//! fields and coercion, and I2 errors keyed by field.

use super::*;

/// The form field `name` of a provider's schema answer.
fn field(schema: &Value, name: &str) -> Value {
    schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no field {name}: {schema}"))
}

fn fields(r: &Resp) -> Value {
    assert_eq!(r.status, 422, "{}", r.body);
    r.json()["fields"].clone()
}

#[test]
fn ui_schema_rules_defaults_required_and_coercion_on_the_server() {
    let s = setup();
    let ui = s.ui();
    let r = ui.call("GET", "/api/providers/schema/schema", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["sha256"].as_str().map(str::len), Some(64));
    let f = |n: &str| field(&v, n);
    assert_eq!(f("replicas")["type"], "integer");
    assert_eq!(f("replicas")["default"], 1);
    assert_eq!(f("replicas")["required"], true);
    assert_eq!(f("replicas")["label"], "Replicas");
    assert_eq!(f("timeout_seconds")["type"], "number");
    assert_eq!(f("timeout_seconds")["default"], 30);
    assert_eq!(f("timeout_seconds")["required"], false);
    assert_eq!(f("debug")["type"], "boolean");
    assert_eq!(f("debug")["default"], false);
    assert_eq!(f("namespace")["default"], "buzz-agents");
    assert_eq!(f("ssh_key_path")["default"], Value::Null);

    let create = |name: &str, config: Value| {
        let body = json!({"name": name, "relay_url": "ws://127.0.0.1:1", "backend": "provider:schema", "config": config});
        ui.call("POST", "/api/agents", Some(&body.to_string()))
    };
    // Strings from the form are coerced; a cleared number is omitted, never "".
    let r = create(
        "s1",
        json!({"replicas": "3", "timeout_seconds": "", "debug": "true", "namespace": "ns1"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.json()["config"],
        json!({"replicas": 3, "debug": true, "namespace": "ns1"})
    );
    // Typed values pass as they are.
    let r = create(
        "s2",
        json!({"replicas": 2, "timeout_seconds": 2.5, "debug": false}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.json()["config"],
        json!({"replicas": 2, "timeout_seconds": 2.5, "debug": false})
    );

    // Required gates the save; nothing is created.
    let e = fields(&create("s3", json!({"replicas": "", "namespace": "x"})));
    assert_eq!(e, json!({"config.replicas": "`replicas` is required"}));
    let e = fields(&create("s3", json!({"namespace": "x"})));
    assert_eq!(e, json!({"config.replicas": "`replicas` is required"}));
    assert_eq!(ui.call("GET", "/api/agents/s3", None).status, 404);
    // Not-a-number and not-a-boolean are keyed by field and never echo the value.
    let e = fields(&create(
        "s3",
        json!({"replicas": "three", "timeout_seconds": "1e", "debug": "maybe"}),
    ));
    assert_eq!(
        e,
        json!({
            "config.replicas": "provider_config field `replicas` must be a number; clear the field to use the provider's default",
            "config.timeout_seconds": "provider_config field `timeout_seconds` must be a number; clear the field to use the provider's default",
            "config.debug": "provider_config field `debug` must be true or false"
        })
    );
    assert_eq!(ui.call("GET", "/api/agents/s3", None).status, 404);

    // An edit replaces the config by the same rules.
    let r = ui.call(
        "PUT",
        "/api/agents/s1",
        Some(&json!({"config": {"replicas": "5", "namespace": ""}}).to_string()),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["config"], json!({"replicas": 5}));
}

#[test]
fn ui_i2_errors_are_keyed_by_field() {
    let s = setup();
    let ui = s.ui();
    let path = "/home/someone/.ssh/id_ed25519";
    let body = json!({"name": "i2", "relay_url": "ws://127.0.0.1:1", "backend": "provider:schema",
                      "config": {"replicas": 1, "ssh_key_path": path}});
    let r = ui.call("POST", "/api/agents", Some(&body.to_string()));
    let e = fields(&r);
    assert_eq!(
        e.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["config.ssh_key_path"]
    );
    assert!(
        e["config.ssh_key_path"]
            .as_str()
            .unwrap()
            .starts_with("provider_config field `ssh_key_path` looks like it holds a secret"),
        "{e}"
    );
    assert!(!r.body.contains(path), "{}", r.body);
    // The same on edit, for a field the schema does not know, and for nested values.
    s.cli(&[
        "agent",
        "create",
        "e",
        "--relay",
        "ws://127.0.0.1:1",
        "--backend",
        "provider:schema",
    ]);
    let r = ui.call(
        "PUT",
        "/api/agents/e",
        Some(&json!({"config": {"replicas": 1, "dbPassword": "x", "labels": {"a": "b"}}}).to_string()),
    );
    let e = fields(&r);
    assert_eq!(
        e.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["config.dbPassword", "config.labels"]
    );
    assert_eq!(
        e["config.labels"],
        "provider_config field `labels` must be a string, number, boolean or null, not an object or array"
    );
    // Other fields are keyed too.
    let r = ui.call(
        "PUT",
        "/api/agents/e",
        Some(&json!({"relay_url": "http://relay", "backend": "provider:Bad"}).to_string()),
    );
    let e = fields(&r);
    assert_eq!(
        e.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["backend", "relay_url"]
    );
    s.cli(&["agent", "create", "l", "--relay", "ws://127.0.0.1:1"]);
    let r = ui.call(
        "PUT",
        "/api/agents/l",
        Some(&json!({"config": {"replicas": 1}}).to_string()),
    );
    assert_eq!(
        fields(&r),
        json!({"config": "provider config applies to provider backends only"})
    );
}

/// Issue 51: the page offers the SSH provider, with its `info` schema as the
/// form: `host` required, the paths and the bounds, and an agent created
/// with it; a field I2 refuses is a field error.
#[test]
fn ui_offers_the_ssh_provider_with_its_fields() {
    let s = setup();
    let providers = PathBuf::from(&s.envs[0].1);
    install_provider(
        &providers,
        "ssh",
        Path::new(env!("CARGO_BIN_EXE_ssh-provider-under-test")),
    )
    .expect("install the ssh provider");
    let ui = s.ui();
    let r = ui.call("GET", "/api/providers/ssh/schema", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let f = |n: &str| field(&v, n);
    assert_eq!(f("host")["required"], true);
    for name in buzz_backend_ssh::config::FIELDS {
        assert!(f(name)["label"].is_string(), "{name}");
    }
    assert_eq!(f("doze_seconds")["type"], "integer");
    assert_eq!(f("doze_seconds")["default"], 300);
    let create = |name: &str, config: Value| {
        let body = json!({"name": name, "relay_url": "ws://127.0.0.1:1", "backend": "provider:ssh", "config": config});
        ui.call("POST", "/api/agents", Some(&body.to_string()))
    };
    let r = create(
        "vps",
        json!({"host": "agent@vps.example.com:2222", "doze_seconds": "60"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.json()["config"],
        json!({"host": "agent@vps.example.com:2222", "doze_seconds": 60})
    );
    let r = create("vps2", json!({"host": "h", "ssh_key_path": "/k"}));
    assert_eq!(r.status, 422, "{}", r.body);
}
