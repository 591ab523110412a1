//! The Start page's server-side rules on hostile input: a provider's
//! `config_schema` and the page's config map (`ui::form`), and the request
//! guard (`ui::guard`). Nothing may panic, and:
//!
//! - an accepted config never carries a cleared value (`null` or a blank
//!   string: Known Defect 8), holds only keys the user sent, and has every
//!   `required` field;
//! - a field error never quotes a value the user typed (I2: errors name
//!   fields, never values); the seeds carry `CANARY` values for this;
//! - the guard lets an `/api/` request through only with the exact token.
//!
//! Input: a JSON array `[schema, config, headers]`; anything else is fed
//! to the schema reader alone.
#![cfg_attr(fuzzing, no_main)]

use desktop_launcher::ui::form::{fields_from_schema, validate_config};
use desktop_launcher::ui::guard::{Guard, Seen};
use serde_json::Value;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Some([schema, config, headers]) = v
        .as_array()
        .and_then(|a| <&[Value; 3]>::try_from(a.as_slice()).ok())
    else {
        let _ = fields_from_schema(Some(&v));
        return;
    };
    let fields = fields_from_schema(Some(schema));
    if let Some(input) = config.as_object() {
        match validate_config(input, Some(schema)) {
            Ok(out) => {
                for (k, val) in &out {
                    assert!(input.contains_key(k), "key {k} was not sent");
                    assert!(!val.is_null(), "{k} kept as null");
                    assert!(
                        !val.as_str().is_some_and(|s| s.trim().is_empty()),
                        "{k} kept blank"
                    );
                }
                for f in fields.iter().filter(|f| f.required) {
                    assert!(
                        out.contains_key(&f.name),
                        "required {} missing from an accepted config",
                        f.name
                    );
                }
            }
            Err(errors) => {
                assert!(!errors.is_empty(), "a refusal names at least one field");
                let mut typed = Vec::new();
                strings(config, &mut typed);
                let keys_and_fields: String = input
                    .keys()
                    .cloned()
                    .chain(fields.iter().map(|f| f.name.clone()))
                    .collect();
                for value in typed.iter().filter(|s| s.contains("CANARY")) {
                    if keys_and_fields.contains(value.as_str()) {
                        continue; // the value is also a name the error may cite
                    }
                    for (field, message) in &errors {
                        assert!(
                            !message.contains(value.as_str()),
                            "the error for {field} quotes a typed value"
                        );
                    }
                }
            }
        }
    }

    let addr = "127.0.0.1:4711".parse().expect("an address");
    let guard = Guard::new(addr, TOKEN.to_string());
    let h = |k: &str| headers.get(k).and_then(Value::as_str);
    let path = h("path").unwrap_or("/api/agents");
    let seen = Seen {
        path,
        host: h("host"),
        origin: h("origin"),
        sec_fetch_site: h("sec-fetch-site"),
        authorization: h("authorization"),
    };
    if guard.check(&seen).is_ok() && path.starts_with("/api/") {
        assert_eq!(
            seen.authorization,
            Some(format!("Bearer {TOKEN}").as_str()),
            "an API request without the token"
        );
        assert!(
            seen.host
                .is_some_and(|x| x.eq_ignore_ascii_case("127.0.0.1:4711"))
        );
    }
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
