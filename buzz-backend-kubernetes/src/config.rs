//! `provider_config` v1 (spec §provider_config v1 fields, §K8s Auth,
//! §Namespace, §Image, §Pod shape "Resources", §Auto-Stop; Known Defect 8).
//!
//! Parsing is strict and happens before any cluster contact, so a bad value
//! can never leave an orphan behind (wire-facts §8.4):
//! - scalars only, and the I2 key-name lint (L2 item 2: no credentials in config);
//! - unknown fields are refused (a typo must not silently fall back to a default);
//! - a numeric field holding a non-number, `""` or null is an in-band error, never a
//!   silent default (KD8) — omit the field to get the default;
//! - quantities, the namespace (RFC 1123 label), the service account (RFC 1123
//!   subdomain) and the image reference are validated; `:latest` and untagged
//!   references (which mean `:latest`) are refused;
//! - the pod knobs `runtime_class_name`, `node_selector` and `tolerations`
//!   (issue 30 item 4) are strings (I2) validated by [`crate::placement`];
//! - `workspace_size` and `workspace_storage_class` (issue 32 item 2) ask for
//!   a workspace that outlives the pod ([`crate::workspace`]): a storage
//!   quantity of at least 1Mi in whole bytes, and a StorageClass name (an
//!   RFC 1123 subdomain); a class without a size is refused, since it would
//!   otherwise be silently unused;
//! - `network_policy` (`default` or `none`) and `egress_allow` (issue 53)
//!   shape the agent's NetworkPolicy ([`crate::egress`]): `egress_allow` is
//!   comma-separated CIDRs with optional ports, and with `none` it is
//!   refused, since it would otherwise be silently unused.

use crate::consts::*;
use crate::error::{ConfigError, ConfigErrorKind, ConfigErrorKind as K, DeployError};
use crate::image::{ImageRef, validate_image};
use crate::quantity::Quantity;
use buzz_provider::config::{string_field, whole_seconds};
use serde_json::Value;

/// The v1 field names, in schema order (the nine original ones, then the additive
/// `telemetry_url`, the pod knobs of [`crate::placement`], the workspace
/// of [`crate::workspace`], the doze bound and the NetworkPolicy of
/// [`crate::egress`]).
pub const FIELDS: [&str; 18] = [
    "context",
    "namespace",
    "image",
    "cpu_request",
    "memory_request",
    "cpu_limit",
    "memory_limit",
    "inactivity_seconds",
    "service_account",
    "telemetry_url",
    "runtime_class_name",
    "node_selector",
    "tolerations",
    "workspace_size",
    "workspace_storage_class",
    "doze_seconds",
    "network_policy",
    "egress_allow",
];

/// Validated provider configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// Kubeconfig context; `None` = current context.
    pub context: Option<String>,
    pub namespace: String,
    /// The image the pod runs and whether it came from the default.
    pub image: ImageRef,
    pub cpu_request: String,
    pub memory_request: String,
    pub cpu_limit: String,
    pub memory_limit: String,
    /// 0 = no inactivity bound (indefinite lifetime, `restartPolicy: OnFailure`).
    pub inactivity_seconds: u64,
    /// The harness's doze bound (`BUZZ_ACP_DOZE`, issue 50); 0 = no doze.
    pub doze_seconds: u64,
    /// `None` = the namespace's default ServiceAccount.
    pub service_account: Option<String>,
    /// Where the image's usage collector ships ([`crate::telemetry`]); `None` = the
    /// collector only spools.
    pub telemetry_url: Option<String>,
    /// The pod's `runtimeClassName` ([`crate::placement`]); `None` = the cluster's default.
    pub runtime_class_name: Option<String>,
    /// The pod's `nodeSelector`; empty = none.
    pub node_selector: std::collections::BTreeMap<String, String>,
    /// The pod's `tolerations`; empty = none.
    pub tolerations: Vec<crate::placement::Toleration>,
    /// A PersistentVolumeClaim for the workspace ([`crate::workspace`]);
    /// `None` = an `emptyDir`, gone with the pod.
    pub workspace: Option<crate::workspace::WorkspaceSpec>,
    /// The agent's NetworkPolicy ([`crate::egress`]); `None` =
    /// `network_policy: none`, no policy.
    pub egress: Option<crate::egress::EgressSpec>,
}

fn bad(kind: ConfigErrorKind, field: Option<&str>, msg: String) -> DeployError {
    ConfigError::new(kind, field, msg).into()
}

/// True for an RFC 1123 label (namespace names).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// True for an RFC 1123 subdomain (ServiceAccount names).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The default image baked into the binary, set once by its `main`.
static BAKED_DEFAULT_IMAGE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Records the digest-pinned default image the binary was built with
/// (`option_env!("BUZZ_K8S_DEFAULT_IMAGE")` in `main.rs`, spec §Image). The
/// constant lives in the binary, not this library, so a release build that
/// bakes a digest recompiles one file. The first call wins; empty is none.
pub fn bake_default_image(image: Option<&'static str>) {
    if let Some(i) = image.filter(|s| !s.trim().is_empty()) {
        let _ = BAKED_DEFAULT_IMAGE.set(i);
    }
}

/// The default image: run-time override, else the compile-time baked value.
pub fn default_image() -> Option<String> {
    std::env::var(DEFAULT_IMAGE_ENV)
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| BAKED_DEFAULT_IMAGE.get().map(|s| s.to_string()))
}

impl ProviderConfig {
    /// Parses and validates `provider_config`, resolving the image against
    /// `default_image` (pass [`default_image()`] in production).
    pub fn parse(v: &Value, default_image: Option<&str>) -> Result<ProviderConfig, DeployError> {
        let m = buzz_provider::config::object(v, &FIELDS)?;
        let context = string_field(m, "context")?;
        let namespace = string_field(m, "namespace")?.ok_or_else(|| {
            bad(
                K::Missing,
                Some("namespace"),
                "provider_config.namespace is required (for example buzz-agents-abc123)".into(),
            )
        })?;
        if !is_dns_label(&namespace) {
            return Err(bad(
                K::Invalid,
                Some("namespace"),
                format!(
                    "provider_config.namespace `{namespace}` is not a valid namespace name (lowercase letters, digits and '-', at most 63, starting and ending alphanumeric)"
                ),
            ));
        }
        let image = match string_field(m, "image")? {
            Some(user) => validate_image(&user, false)
                .map_err(|e| bad(K::Invalid, Some("image"), format!("provider_config.image: {e}")))?,
            None => match default_image {
                Some(d) => validate_image(d, true).map_err(|e| {
                    bad(
                        K::DefaultImage,
                        Some("image"),
                        format!("the provider's default image is unusable ({e}); set provider_config.image"),
                    )
                })?,
                None => {
                    return Err(bad(K::Missing, Some("image"),
                        "provider_config.image is required: this build of buzz-backend-kubernetes has no baked default image; set it to a buzz-sprig-compatible image (tag or digest, not :latest)".into(),
                    ));
                }
            },
        };
        let quantity = |key: &str, default: &str, memory: bool| -> Result<(String, Quantity), DeployError> {
            let s = string_field(m, key)?.unwrap_or_else(|| default.to_string());
            let q = Quantity::parse(&s).ok_or_else(|| {
                bad(
                    K::Invalid,
                    Some(key),
                    format!(
                        "provider_config.{key} `{s}` is not a Kubernetes quantity (for example {})",
                        if memory { "512Mi, 2Gi" } else { "500m, 1, 2" }
                    ),
                )
            })?;
            Ok((s, q))
        };
        let (cpu_request, cpu_req_q) = quantity("cpu_request", DEFAULT_CPU_REQUEST, false)?;
        let (memory_request, mem_req_q) = quantity("memory_request", DEFAULT_MEMORY_REQUEST, true)?;
        let (cpu_limit, cpu_lim_q) = quantity("cpu_limit", DEFAULT_CPU_LIMIT, false)?;
        let (memory_limit, mem_lim_q) = quantity("memory_limit", DEFAULT_MEMORY_LIMIT, true)?;
        if cpu_req_q > cpu_lim_q {
            return Err(bad(
                K::Conflict,
                Some("cpu_request"),
                format!("provider_config.cpu_request {cpu_request} exceeds cpu_limit {cpu_limit}"),
            ));
        }
        if mem_req_q > mem_lim_q {
            return Err(bad(
                K::Conflict,
                Some("memory_request"),
                format!(
                    "provider_config.memory_request {memory_request} exceeds memory_limit {memory_limit}"
                ),
            ));
        }
        let inactivity_seconds = whole_seconds(
            m,
            "inactivity_seconds",
            "no inactivity bound",
            DEFAULT_INACTIVITY_SECONDS,
        )?;
        let doze_seconds = whole_seconds(m, "doze_seconds", "no doze", DEFAULT_DOZE_SECONDS)?;
        if inactivity_seconds == 0 && !ON_FAILURE_ENABLED {
            return Err(bad(K::Unsupported, Some("inactivity_seconds"),
                "inactivity_seconds 0 (no inactivity bound) needs restartPolicy OnFailure, which this provider refuses until the harness exit-code contract is pinned; set a bound such as 7200".into(),
            ));
        }
        let service_account = string_field(m, "service_account")?;
        if let Some(sa) = &service_account
            && !is_dns_subdomain(sa)
        {
            return Err(bad(
                K::Invalid,
                Some("service_account"),
                format!(
                    "provider_config.service_account `{sa}` is not a valid ServiceAccount name (lowercase RFC 1123 subdomain)"
                ),
            ));
        }
        let telemetry_url = match string_field(m, "telemetry_url")? {
            None => None,
            Some(u) => Some(crate::telemetry::validate_telemetry_url(&u).map_err(|why| {
                bad(
                    K::Invalid,
                    Some("telemetry_url"),
                    format!("provider_config.telemetry_url {why}"),
                )
            })?),
        };
        let runtime_class_name = string_field(m, "runtime_class_name")?
            .map(|s| crate::placement::runtime_class_name(&s))
            .transpose()?;
        let node_selector = match string_field(m, "node_selector")? {
            Some(s) => crate::placement::node_selector(&s)?,
            None => Default::default(),
        };
        let tolerations = match string_field(m, "tolerations")? {
            Some(s) => crate::placement::tolerations(&s)?,
            None => Vec::new(),
        };
        let workspace = crate::workspace::WorkspaceSpec::parse(
            string_field(m, "workspace_size")?,
            string_field(m, "workspace_storage_class")?,
        )?;
        let egress = crate::egress::parse(
            string_field(m, crate::egress::MODE_FIELD)?.as_deref(),
            string_field(m, crate::egress::ALLOW_FIELD)?.as_deref(),
        )?;
        Ok(ProviderConfig {
            egress,
            context,
            namespace,
            image,
            cpu_request,
            memory_request,
            cpu_limit,
            memory_limit,
            inactivity_seconds,
            doze_seconds,
            service_account,
            telemetry_url,
            runtime_class_name,
            node_selector,
            tolerations,
            workspace,
        })
    }

    /// `Never` for a bounded lifetime, `OnFailure` for `inactivity_seconds: 0` (§Pod shape).
    pub fn restart_policy(&self) -> &'static str {
        if self.inactivity_seconds == 0 {
            "OnFailure"
        } else {
            "Never"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const IMG: &str = "registry.test/buzz-sprig:v1";

    fn parse(v: Value) -> Result<ProviderConfig, DeployError> {
        ProviderConfig::parse(&v, None)
    }

    #[test]
    fn defaults_apply_when_fields_are_omitted() {
        let c = parse(json!({"namespace": "buzz-agents-abc123", "image": IMG})).unwrap();
        assert_eq!(c.cpu_request, "1");
        assert_eq!(c.memory_request, "2Gi");
        assert_eq!(c.cpu_limit, "2");
        assert_eq!(c.memory_limit, "4Gi");
        assert_eq!(c.inactivity_seconds, 7200);
        assert_eq!(c.doze_seconds, 300);
        assert_eq!(c.restart_policy(), "Never");
        assert_eq!(c.context, None);
        assert_eq!(c.service_account, None);
    }

    #[test]
    fn kd8_numeric_field_never_silently_defaults() {
        for field in ["inactivity_seconds", "doze_seconds"] {
            for v in [
                json!(""),
                json!("30"),
                json!(null),
                json!(true),
                json!(-1),
                json!(1.5),
            ] {
                let e = parse(json!({"namespace": "ns", "image": IMG, field: v.clone()})).unwrap_err();
                assert!(e.to_string().contains(field), "{field} {v}: {e}");
            }
        }
        let c = parse(json!({"namespace": "ns", "image": IMG, "doze_seconds": 0})).unwrap();
        assert_eq!(c.doze_seconds, 0, "0: no doze");
        let c = parse(json!({"namespace": "ns", "image": IMG, "inactivity_seconds": 0})).unwrap();
        assert_eq!(
            (c.inactivity_seconds, c.restart_policy()),
            (0, "OnFailure"),
            "0 is blessed"
        );
    }

    /// The config error `v` is refused with (panics on success or another kind).
    fn refused(v: Value) -> String {
        match parse(v) {
            Err(DeployError::Config(e)) => e.to_string(),
            Err(other) => panic!("expected a config error, got {other:?}"),
            Ok(c) => panic!("expected a config error, got {c:?}"),
        }
    }

    #[test]
    fn validates_names_quantities_and_scalars() {
        assert!(
            refused(json!({"namespace": "Bad_NS", "image": IMG}))
                .starts_with("provider_config.namespace `Bad_NS` is not a valid namespace name")
        );
        assert_eq!(
            refused(json!({"image": IMG})),
            "provider_config.namespace is required (for example buzz-agents-abc123)"
        );
        assert_eq!(
            refused(json!({"namespace": "ns", "image": IMG, "cpu_request": "lots"})),
            "provider_config.cpu_request `lots` is not a Kubernetes quantity (for example 500m, 1, 2)"
        );
        assert_eq!(
            refused(json!({"namespace": "ns", "image": IMG, "memory_limit": "4GB"})),
            "provider_config.memory_limit `4GB` is not a Kubernetes quantity (for example 512Mi, 2Gi)"
        );
        assert_eq!(
            refused(json!({"namespace": "ns", "image": IMG, "cpu_request": "3"})),
            "provider_config.cpu_request 3 exceeds cpu_limit 2"
        );
        assert!(
            refused(json!({"namespace": "ns", "image": IMG, "service_account": "Not Valid"})).starts_with(
                "provider_config.service_account `Not Valid` is not a valid ServiceAccount name"
            )
        );
        let ok = parse(json!({"namespace": "ns", "image": IMG, "service_account": "agents.runner"})).unwrap();
        assert_eq!(ok.service_account.as_deref(), Some("agents.runner"));
        let e = refused(json!({"namespace": "ns", "image": IMG, "context": {"x": 1}}));
        assert!(e.contains("context"), "the nested value is named: {e}");
        assert!(
            refused(json!({"namespace": "ns", "image": IMG, "memory_requests": "1Gi"}))
                .starts_with("provider_config has an unknown field `memory_requests`")
        );
        let e = refused(json!({"namespace": "ns", "image": IMG, "api_token": "x"}));
        assert!(e.contains("api_token"), "the I2 lint names the key: {e}");
        let e = refused(json!([]));
        assert!(e.contains("object"), "{e}");
    }

    /// Config errors are told apart by kind and field, not by text.
    #[test]
    fn config_errors_carry_kind_and_field() {
        use ConfigErrorKind as K;
        let cases = [
            (json!([]), K::NotAnObject, None),
            (
                json!({"namespace": "ns", "image": IMG, "api_token": "x"}),
                K::SecretLint,
                None,
            ),
            (
                json!({"namespace": "ns", "image": IMG, "memory_requests": "1Gi"}),
                K::UnknownField,
                Some("memory_requests"),
            ),
            (
                json!({"namespace": 5, "image": IMG}),
                K::WrongType,
                Some("namespace"),
            ),
            (json!({"image": IMG}), K::Missing, Some("namespace")),
            (
                json!({"namespace": "Bad_NS", "image": IMG}),
                K::Invalid,
                Some("namespace"),
            ),
            (json!({"namespace": "ns"}), K::Missing, Some("image")),
            (
                json!({"namespace": "ns", "image": "r.test/s:latest"}),
                K::Invalid,
                Some("image"),
            ),
            (
                json!({"namespace": "ns", "image": IMG, "memory_limit": "4GB"}),
                K::Invalid,
                Some("memory_limit"),
            ),
            (
                json!({"namespace": "ns", "image": IMG, "cpu_request": "3"}),
                K::Conflict,
                Some("cpu_request"),
            ),
            (
                json!({"namespace": "ns", "image": IMG, "inactivity_seconds": ""}),
                K::WrongType,
                Some("inactivity_seconds"),
            ),
            (
                json!({"namespace": "ns", "image": IMG, "inactivity_seconds": -1}),
                K::Invalid,
                Some("inactivity_seconds"),
            ),
            (
                json!({"namespace": "ns", "image": IMG, "service_account": "A B"}),
                K::Invalid,
                Some("service_account"),
            ),
            (
                json!({"namespace": "ns", "image": IMG, "telemetry_url": "ftp://x"}),
                K::Invalid,
                Some("telemetry_url"),
            ),
            (
                json!({"namespace": "ns", "image": IMG, "runtime_class_name": "Kata_QEMU"}),
                K::Invalid,
                Some("runtime_class_name"),
            ),
            (
                json!({"namespace": "ns", "image": IMG, "node_selector": "pool"}),
                K::Invalid,
                Some("node_selector"),
            ),
            (
                json!({"namespace": "ns", "image": IMG, "tolerations": "[{\"effect\":\"NoRun\"}]"}),
                K::Invalid,
                Some("tolerations"),
            ),
            (
                json!({"namespace": "ns", "image": IMG, "tolerations": [{"operator": "Exists"}]}),
                K::SecretLint,
                None,
            ),
        ];
        for (v, kind, field) in cases {
            match parse(v.clone()) {
                Err(DeployError::Config(e)) => {
                    assert_eq!((e.kind, e.field.as_deref()), (kind, field), "{v}: {e}")
                }
                Err(other) => panic!("{v}: expected a config error, got {other:?}"),
                Ok(c) => panic!("{v}: expected a config error, got {c:?}"),
            }
        }
    }

    #[test]
    fn the_pod_knobs_parse_into_the_config_and_empty_means_unset() {
        let c = parse(json!({"namespace": "ns", "image": IMG})).unwrap();
        assert_eq!(
            (c.runtime_class_name, c.node_selector.len(), c.tolerations.len()),
            (None, 0, 0)
        );
        let c = parse(json!({"namespace": "ns", "image": IMG,
            "runtime_class_name": "", "node_selector": " ", "tolerations": ""}))
        .unwrap();
        assert_eq!(
            (c.runtime_class_name, c.node_selector.len(), c.tolerations.len()),
            (None, 0, 0)
        );
        let c = parse(json!({"namespace": "ns", "image": IMG,
            "runtime_class_name": "buzz-runc", "node_selector": "pool=agents",
            "tolerations": "[{\"operator\":\"Exists\"}]"}))
        .unwrap();
        assert_eq!(c.runtime_class_name.as_deref(), Some("buzz-runc"));
        assert_eq!(c.node_selector["pool"], "agents");
        assert_eq!(c.tolerations[0].operator.as_deref(), Some("Exists"));
    }

    #[test]
    fn image_rules() {
        assert!(
            refused(json!({"namespace": "ns", "image": "registry.test/sprig:latest"}))
                .starts_with("provider_config.image: ")
        );
        assert!(
            refused(json!({"namespace": "ns", "image": "registry.test/sprig"}))
                .starts_with("provider_config.image: "),
            "untagged = latest"
        );
        let digest = format!("registry.test/sprig@sha256:{}", "a".repeat(64));
        let c = parse(json!({"namespace": "ns", "image": digest})).unwrap();
        assert_eq!(c.image.reference, digest);
        assert!(!c.image.from_default);
        let e = refused(json!({"namespace": "ns"}));
        assert!(e.starts_with("provider_config.image is required"), "{e}");
        for omitted_or_empty in [
            json!({"namespace": "ns"}),
            json!({"namespace": "ns", "image": ""}),
            json!({"namespace": "ns", "image": "  "}),
        ] {
            let c = ProviderConfig::parse(&omitted_or_empty, Some(&digest)).unwrap();
            assert!(c.image.from_default, "{omitted_or_empty}");
            assert_eq!(c.image.reference, digest, "empty means the provider's default");
        }
        match ProviderConfig::parse(&json!({"namespace": "ns"}), Some("registry.test/sprig:v1")) {
            Err(DeployError::Config(e)) => {
                assert_eq!(
                    (e.kind, e.field.as_deref()),
                    (ConfigErrorKind::DefaultImage, Some("image"))
                );
                assert!(
                    e.to_string()
                        .starts_with("the provider's default image is unusable"),
                    "{e}"
                )
            }
            other => panic!("the default must be digest-pinned: {other:?}"),
        }
    }

    #[test]
    fn no_field_name_trips_the_i2_lint() {
        for f in FIELDS {
            assert!(!buzz_contract::i2::key_name_is_secretish(f), "{f}");
        }
    }

    #[test]
    fn telemetry_url_is_optional_validated_and_never_echoed() {
        let c = parse(json!({"namespace": "ns", "image": IMG})).unwrap();
        assert_eq!(c.telemetry_url, None);
        let c = parse(json!({"namespace": "ns", "image": IMG, "telemetry_url": "https://i.example.com/"}))
            .unwrap();
        assert_eq!(c.telemetry_url.as_deref(), Some("https://i.example.com"));
        let c = parse(json!({"namespace": "ns", "image": IMG, "telemetry_url": ""})).unwrap();
        assert_eq!(c.telemetry_url, None, "empty means unset");
        let e =
            refused(json!({"namespace": "ns", "image": IMG, "telemetry_url": "http://s3cr3t.example.com"}));
        assert_eq!(
            e,
            "provider_config.telemetry_url must be https:// (http:// is accepted only for a loopback host)"
        );
        assert_eq!(
            refused(json!({"namespace": "ns", "image": IMG, "telemetry_url": 7})),
            "provider_config.telemetry_url must be a string"
        );
    }
}
