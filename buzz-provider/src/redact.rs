//! The redaction of every output a provider writes (spec §Provider Output
//! Is Untrusted; [L2] item 5): every secret value the payload carries, in
//! each form the key takes (as sent, trimmed, hex, bech32), the auth tag,
//! and every value of the user's env tiers. The scrub itself, and its
//! catch-all for any `nsec1…` token, is `buzz_contract::redact`.

use buzz_contract::keys::parse_private_key;
use nostr::ToBech32;
use serde_json::Value;

/// Scrubs known secret values (and any `nsec1…` token) from diagnostics and
/// errors.
pub type Redactor = buzz_contract::redact::Literals;

/// Every secret value `agent` (a deploy payload, or an undeploy's agent with
/// a stray key) carries.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_the_key_the_tag_and_the_env_values_are_scrubbed() {
        let keys = nostr::Keys::generate();
        let hex = keys.secret_key().to_secret_hex();
        let Ok(nsec) = keys.secret_key().to_bech32();
        let agent = serde_json::json!({
            "private_key_nsec": format!("  {hex}\n"),
            "auth_tag": "[\"auth\",\"tag-canary\"]",
            "env_vars": {"A": "legacy-canary"},
            "launch": {"env": {"B": "env-canary"}, "policy_env": {"C": "policy-canary"}},
        });
        let r = redactor_for(&agent);
        let text = format!("{hex} {nsec} [\"auth\",\"tag-canary\"] legacy-canary env-canary policy-canary");
        let out = r.scrub(&text);
        for c in [
            hex.as_str(),
            nsec.as_str(),
            "tag-canary",
            "legacy-canary",
            "env-canary",
            "policy-canary",
        ] {
            assert!(!out.contains(c), "{c} left in {out}");
        }
    }
}
