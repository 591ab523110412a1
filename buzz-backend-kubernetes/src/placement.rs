//! The pod-level placement and isolation knobs of `provider_config` (issue
//! 30 item 4; spec §provider_config v1 fields, §Pod shape): the
//! `runtimeClassName` (gVisor, Kata: the isolation a cluster offers), a node
//! selector and tolerations (placement). Pure: a string in, a validated
//! value or a [`ConfigError`] that names the field out, before any cluster
//! contact (wire-facts §8.4: a bad value can never leave an orphan behind).
//!
//! ## Decisions (the issue is silent on these)
//! - **Every knob is a string.** Invariant I2 (`buzz_contract::i2`) keeps
//!   `provider_config` a flat object of scalars, so `node_selector` is
//!   `k=v,k2=v2` and `tolerations` is the Kubernetes JSON form of
//!   `spec.tolerations` (an array of toleration objects) *inside* a string.
//!   Empty means unset, as for every other string field.
//! - **The apiserver's rules, applied here first**, so the answer names the
//!   field and the element instead of a create that fails after the Secret
//!   was written: `runtime_class_name` is an RFC 1123 subdomain; a selector
//!   key is a qualified name (optional DNS-subdomain prefix, `/`, a name of
//!   at most 63 characters), a value is a label value; a toleration's
//!   fields are checked as `ValidateTolerations` does (an empty key needs
//!   `Exists`, `Exists` takes no value, `tolerationSeconds` only with
//!   `NoExecute`), and, stricter than the apiserver, an unknown field, a
//!   duplicate selector key and a negative `tolerationSeconds` are refused
//!   (a typo must not silently mean "tolerate everything" or "evict now").
//!   The newer `Lt`/`Gt` operators are refused: this binding's minimum
//!   cluster has no such thing.
//! - **Whether a RuntimeClass exists is the cluster's to say.** The provider
//!   reads no `RuntimeClass` (no RBAC on `node.k8s.io`): admission refuses a
//!   pod naming a missing one (`RuntimeClass` admission, a `Forbidden` at
//!   the pod create), and the deploy reports that answer.
//! - All three are pod spec, so all three enter the create-intent
//!   fingerprint (`podspec`): a changed knob replaces a never-started pod.

use crate::config::is_dns_subdomain;
use crate::error::{ConfigError, ConfigErrorKind as K, DeployError};
use k8s_openapi::api::core::v1::Toleration as KubeToleration;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// At most this many tolerations (a bound, not a Kubernetes limit).
pub const MAX_TOLERATIONS: usize = 32;
/// At most this many node selector terms.
pub const MAX_SELECTOR_TERMS: usize = 32;

fn bad(field: &str, msg: String) -> DeployError {
    ConfigError::new(K::Invalid, Some(field), msg).into()
}

/// A label value: empty, or at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

/// The name part of a qualified name (a label key without its prefix).
fn is_label_name(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| alnum(b) || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().next().is_some_and(alnum)
        && s.bytes().last().is_some_and(alnum)
}

/// A label key (Kubernetes "qualified name"): `[prefix/]name`, the prefix a
/// lowercase RFC 1123 subdomain.
pub fn is_label_key(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(s),
    }
}

/// `runtime_class_name`: an RFC 1123 subdomain, as `RuntimeClass` names are.
pub fn runtime_class_name(s: &str) -> Result<String, DeployError> {
    if is_dns_subdomain(s) {
        return Ok(s.to_string());
    }
    Err(bad(
        "runtime_class_name",
        format!(
            "provider_config.runtime_class_name `{s}` is not a valid RuntimeClass name (a lowercase RFC 1123 subdomain, for example gvisor or kata-qemu)"
        ),
    ))
}

/// `node_selector`: `k=v` terms separated by commas; spaces around a term are ignored.
pub fn node_selector(s: &str) -> Result<BTreeMap<String, String>, DeployError> {
    const F: &str = "node_selector";
    let mut out = BTreeMap::new();
    let terms: Vec<&str> = s.split(',').map(str::trim).collect();
    if terms.len() > MAX_SELECTOR_TERMS {
        return Err(bad(
            F,
            format!(
                "provider_config.node_selector has {} terms; at most {MAX_SELECTOR_TERMS}",
                terms.len()
            ),
        ));
    }
    for term in terms {
        let Some((k, v)) = term.split_once('=') else {
            return Err(bad(
                F,
                format!(
                    "provider_config.node_selector term `{term}` is not key=value (for example kubernetes.io/arch=amd64,pool=agents)"
                ),
            ));
        };
        let (k, v) = (k.trim(), v.trim());
        if !is_label_key(k) {
            return Err(bad(
                F,
                format!(
                    "provider_config.node_selector key `{k}` is not a valid label key ([prefix/]name: a name of at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends; a prefix is a DNS subdomain)"
                ),
            ));
        }
        if !is_label_value(v) {
            return Err(bad(
                F,
                format!(
                    "provider_config.node_selector value `{v}` of `{k}` is not a valid label value (at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends, or empty)"
                ),
            ));
        }
        if out.insert(k.to_string(), v.to_string()).is_some() {
            return Err(bad(F, format!("provider_config.node_selector names `{k}` twice")));
        }
    }
    Ok(out)
}

/// One validated toleration, in the fields Kubernetes has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    pub key: Option<String>,
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// The pod spec's form.
    pub fn to_kube(&self) -> KubeToleration {
        KubeToleration {
            key: self.key.clone(),
            operator: self.operator.clone(),
            value: self.value.clone(),
            effect: self.effect.clone(),
            toleration_seconds: self.toleration_seconds,
        }
    }
}

const TOLERATION_FIELDS: [&str; 5] = ["key", "operator", "value", "effect", "tolerationSeconds"];

/// `tolerations`: the JSON of `spec.tolerations`, an array of objects.
pub fn tolerations(s: &str) -> Result<Vec<Toleration>, DeployError> {
    const F: &str = "tolerations";
    let v: Value = serde_json::from_str(s).map_err(|e| {
        bad(
            F,
            format!(
                "provider_config.tolerations is not JSON ({e}); give the Kubernetes form as a string, for example [{{\"key\":\"dedicated\",\"operator\":\"Equal\",\"value\":\"agents\",\"effect\":\"NoSchedule\"}}]"
            ),
        )
    })?;
    let Value::Array(items) = v else {
        return Err(bad(
            F,
            "provider_config.tolerations must be a JSON array of toleration objects".into(),
        ));
    };
    if items.len() > MAX_TOLERATIONS {
        return Err(bad(
            F,
            format!(
                "provider_config.tolerations has {} entries; at most {MAX_TOLERATIONS}",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(m) => toleration(i, m),
            _ => Err(bad(
                F,
                format!("provider_config.tolerations[{i}] must be an object"),
            )),
        })
        .collect()
}

fn toleration(i: usize, m: &Map<String, Value>) -> Result<Toleration, DeployError> {
    let at = |f: &str| format!("provider_config.tolerations[{i}].{f}");
    let fail = |msg: String| bad("tolerations", msg);
    if let Some(unknown) = m.keys().find(|k| !TOLERATION_FIELDS.contains(&k.as_str())) {
        return Err(fail(format!(
            "provider_config.tolerations[{i}] has an unknown field `{unknown}`; a toleration has {}",
            TOLERATION_FIELDS.join(", ")
        )));
    }
    let text = |f: &str| -> Result<Option<String>, DeployError> {
        match m.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(fail(format!("{} must be a string", at(f)))),
        }
    };
    let key = text("key")?;
    let operator = text("operator")?;
    let value = text("value")?;
    let effect = text("effect")?;
    if let Some(k) = &key
        && !is_label_key(k)
    {
        return Err(fail(format!("{} `{k}` is not a valid label key", at("key"))));
    }
    let exists = match operator.as_deref() {
        None | Some("Equal") => false,
        Some("Exists") => true,
        Some(o) => {
            return Err(fail(format!("{} `{o}` is not Equal or Exists", at("operator"))));
        }
    };
    if key.is_none() && !exists {
        return Err(fail(format!(
            "{} must be Exists when the key is empty (that tolerates every taint)",
            at("operator")
        )));
    }
    match &value {
        Some(_) if exists => {
            return Err(fail(format!(
                "{} must be empty when the operator is Exists",
                at("value")
            )));
        }
        Some(v) if !is_label_value(v) => {
            return Err(fail(format!("{} `{v}` is not a valid label value", at("value"))));
        }
        _ => {}
    }
    if let Some(e) = &effect
        && !matches!(e.as_str(), "NoSchedule" | "PreferNoSchedule" | "NoExecute")
    {
        return Err(fail(format!(
            "{} `{e}` is not NoSchedule, PreferNoSchedule or NoExecute (empty means every effect)",
            at("effect")
        )));
    }
    let toleration_seconds = match m.get("tolerationSeconds") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(n.as_u64().and_then(|n| i64::try_from(n).ok()).ok_or_else(|| {
            fail(format!(
                "{} must be a whole number of seconds, 0 or more",
                at("tolerationSeconds")
            ))
        })?),
        Some(_) => {
            return Err(fail(format!("{} must be a JSON number", at("tolerationSeconds"))));
        }
    };
    if toleration_seconds.is_some() && effect.as_deref() != Some("NoExecute") {
        return Err(fail(format!(
            "{} is allowed only with effect NoExecute",
            at("tolerationSeconds")
        )));
    }
    Ok(Toleration {
        key,
        operator,
        value,
        effect,
        toleration_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(r: Result<impl std::fmt::Debug, DeployError>) -> String {
        match r {
            Err(DeployError::Config(e)) => {
                assert_eq!(e.kind, K::Invalid);
                e.to_string()
            }
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn label_keys_and_values() {
        for ok in ["pool", "kubernetes.io/arch", "a.b-c_d", "x/Y.z", "A1"] {
            assert!(is_label_key(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "Bad_Prefix/x",
            "a/",
            "/a",
            "a/b/c",
            &"x".repeat(64),
            "a b",
        ] {
            assert!(!is_label_key(bad), "{bad}");
        }
        assert!(is_label_value("") && is_label_value("amd64") && is_label_value("a.b_c-d"));
        assert!(!is_label_value("-x") && !is_label_value("a,b") && !is_label_value(&"v".repeat(64)));
    }

    #[test]
    fn runtime_class_name_is_a_subdomain() {
        assert_eq!(runtime_class_name("buzz-runc").unwrap(), "buzz-runc");
        assert_eq!(runtime_class_name("kata.qemu").unwrap(), "kata.qemu");
        for bad in ["Gvisor", "run_c", "-x", "a..b"] {
            let e = refused(runtime_class_name(bad));
            assert!(
                e.starts_with(&format!("provider_config.runtime_class_name `{bad}`")),
                "{e}"
            );
        }
    }

    #[test]
    fn node_selector_terms() {
        let m = node_selector("kubernetes.io/arch=amd64, pool = agents,empty=").unwrap();
        assert_eq!(
            m,
            BTreeMap::from([
                ("empty".into(), "".into()),
                ("kubernetes.io/arch".into(), "amd64".into()),
                ("pool".into(), "agents".into()),
            ])
        );
        for (bad, says) in [
            ("pool", "term `pool` is not key=value"),
            ("pool=a,", "term `` is not key=value"),
            ("-x=1", "key `-x` is not a valid label key"),
            ("pool=a b", "value `a b` of `pool` is not a valid label value"),
            ("pool=a,pool=b", "names `pool` twice"),
        ] {
            let e = refused(node_selector(bad));
            assert!(
                e.starts_with("provider_config.node_selector ") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn tolerations_in_the_kubernetes_form() {
        let t = tolerations(
            r#"[{"key":"dedicated","operator":"Equal","value":"agents","effect":"NoSchedule"},
                {"operator":"Exists"},
                {"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":30}]"#,
        )
        .unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[1].key, None);
        assert_eq!(t[2].toleration_seconds, Some(30));
        assert_eq!(t[0].to_kube().value.as_deref(), Some("agents"));
        assert!(tolerations("[]").unwrap().is_empty());
    }

    /// Each rule refuses its own case, naming the element and the field.
    #[test]
    fn each_toleration_rule_refuses_its_own_case() {
        let cases = [
            ("nope", "is not JSON"),
            (r#"{"key":"a"}"#, "must be a JSON array"),
            (r#"["a"]"#, "tolerations[0] must be an object"),
            (
                r#"[{"key":"a","colour":"x"}]"#,
                "tolerations[0] has an unknown field `colour`",
            ),
            (r#"[{"key":5}]"#, "tolerations[0].key must be a string"),
            (
                r#"[{"key":"-a"}]"#,
                "tolerations[0].key `-a` is not a valid label key",
            ),
            (
                r#"[{"key":"a","operator":"Lt"}]"#,
                "tolerations[0].operator `Lt` is not Equal or Exists",
            ),
            (
                r#"[{"value":"v"}]"#,
                "tolerations[0].operator must be Exists when the key is empty",
            ),
            (
                r#"[{"key":"a","operator":"Exists","value":"v"}]"#,
                "tolerations[0].value must be empty",
            ),
            (
                r#"[{"key":"a","value":"a b"}]"#,
                "tolerations[0].value `a b` is not a valid label value",
            ),
            (
                r#"[{"key":"a","effect":"NoRun"}]"#,
                "tolerations[0].effect `NoRun` is not",
            ),
            (
                r#"[{"key":"a","effect":"NoExecute","tolerationSeconds":-1}]"#,
                "tolerations[0].tolerationSeconds must be a whole number",
            ),
            (
                r#"[{"key":"a","effect":"NoExecute","tolerationSeconds":"5"}]"#,
                "tolerations[0].tolerationSeconds must be a JSON number",
            ),
            (
                r#"[{"key":"a"},{"key":"b","effect":"NoSchedule","tolerationSeconds":5}]"#,
                "tolerations[1].tolerationSeconds is allowed only with effect NoExecute",
            ),
        ];
        for (input, says) in cases {
            let e = refused(tolerations(input));
            assert!(e.starts_with("provider_config.tolerations"), "{input}: {e}");
            assert!(e.contains(says), "{input}: {e}");
        }
        let many = format!(
            "[{}]",
            vec![r#"{"operator":"Exists"}"#; MAX_TOLERATIONS + 1].join(",")
        );
        assert!(refused(tolerations(&many)).contains("at most 32"));
    }
}
