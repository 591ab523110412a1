//! `info` (spec §info; wire-facts §7): name, version, `protocol_version: 1`,
//! description and the JSON Schema of the v1 `provider_config` fields (the nine
//! original ones, the optional `telemetry_url` and the pod knobs
//! `runtime_class_name`, `node_selector`, `tolerations`, and the workspace's
//! `workspace_size` and `workspace_storage_class`, and the NetworkPolicy's
//! `network_policy` and `egress_allow` (issue 53): all strings, so
//! invariant I2's flat-scalar rule holds), and the optional
//! `operations` list (`deploy`, `undeploy`; issue 21).
//! Answered with no cluster contact and no kube client construction.

use crate::consts::*;
use rand::Rng;
use serde_json::{Value, json};

/// A fresh `buzz-agents-<6 [a-z0-9]>` namespace default (§K8s Namespace).
pub fn random_namespace() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let suffix: String = (0..6)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("buzz-agents-{suffix}")
}

/// The `config_schema`. `default_image` is the digest-pinned default, if any;
/// without one, `image` is required.
///
/// The default image is deliberately **not** a schema `default` (spec §Image):
/// UIs prefill defaults, a prefilled digest is saved as the user's own
/// `image`, and a provider upgrade that moves the baked digest would then
/// never reach that user. It is named in the description instead, and an
/// empty or omitted `image` means "the provider's default" at deploy time.
pub fn config_schema(default_image: Option<&str>) -> Value {
    const IMAGE_HELP: &str = "Container image with the buzz-acp harness (buzz-sprig or an image built on it). A tag or a digest; :latest is refused.";
    let mut required = vec!["namespace"];
    let description = match default_image {
        Some(d) => format!(
            "{IMAGE_HELP} Leave empty to use this provider's default, which follows provider upgrades (currently {d})."
        ),
        None => {
            required.push("image");
            format!("{IMAGE_HELP} Required: this build of the provider has no default image.")
        }
    };
    let image = json!({
        "type": "string",
        "title": "Image",
        "description": description,
    });
    let quantity = |title: &str, desc: &str, default: &str| json!({ "type": "string", "title": title, "description": desc, "default": default });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "title": "Kubernetes",
        "additionalProperties": false,
        "required": required,
        "properties": {
            "context": {
                "type": "string",
                "title": "Kube context",
                "description": "Context from your kubeconfig ($KUBECONFIG or ~/.kube/config). Empty means the current context. Credentials never go here.",
                "default": "",
            },
            "namespace": {
                "type": "string",
                "title": "Namespace",
                "description": "Namespace the agent's pod runs in. Created when missing if your credentials allow it.",
                "default": random_namespace(),
                "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                "maxLength": 63,
            },
            "image": image,
            "cpu_request": quantity("CPU request", "Kubernetes quantity, for example 500m or 1.", DEFAULT_CPU_REQUEST),
            "memory_request": quantity("Memory request", "Kubernetes quantity, for example 1Gi.", DEFAULT_MEMORY_REQUEST),
            "cpu_limit": quantity("CPU limit", "Kubernetes quantity, at least the request.", DEFAULT_CPU_LIMIT),
            "memory_limit": quantity("Memory limit", "Kubernetes quantity, at least the request.", DEFAULT_MEMORY_LIMIT),
            "inactivity_seconds": {
                "type": "integer",
                "title": "Stop after inactivity (seconds)",
                "description": "The agent stops itself after this long without work. 0 means no bound: it runs until stopped, and Kubernetes restarts it only after a crash.",
                "default": DEFAULT_INACTIVITY_SECONDS,
                "minimum": 0,
            },
            "doze_seconds": {
                "type": "integer",
                "title": "Doze after idle (seconds)",
                "description": "With no turn for this long, the agent's processes end and the pod stays on the relay, presence away, answering the next mention by itself in its old conversation. 0 means no doze. The inactivity bound still stops the agent later.",
                "default": DEFAULT_DOZE_SECONDS,
                "minimum": 0,
            },
            "service_account": {
                "type": "string",
                "title": "Service account",
                "description": "ServiceAccount for scheduling and RBAC. Empty means the namespace default. No API token is mounted either way.",
                "default": "",
            },
            "telemetry_url": {
                "type": "string",
                "title": "Usage ingest URL",
                "description": "Where the image's usage collector ships CPU and memory rollups (runtime-ingest or a compatible backend). https://, or http:// for a loopback host only; no credentials, query or fragment. Empty means the collector only keeps its local spool.",
                "default": "",
            },
            "runtime_class_name": {
                "type": "string",
                "title": "Runtime class",
                "description": "The pod's runtimeClassName: a RuntimeClass your cluster defines, such as gvisor or kata for stronger isolation. Empty means the cluster's default runtime.",
                "default": "",
                "maxLength": 253,
            },
            "node_selector": {
                "type": "string",
                "title": "Node selector",
                "description": "Node labels the pod must run on, as key=value pairs separated by commas, for example kubernetes.io/arch=amd64,pool=agents. Empty means any node.",
                "default": "",
            },
            "tolerations": {
                "type": "string",
                "title": "Tolerations",
                "description": "Taints the pod tolerates, in the Kubernetes JSON form of spec.tolerations, for example [{\"key\":\"dedicated\",\"operator\":\"Equal\",\"value\":\"agents\",\"effect\":\"NoSchedule\"}]. Empty means none.",
                "default": "",
            },
            "workspace_size": {
                "type": "string",
                "title": "Workspace size",
                "description": "A workspace that outlives the pod: a PersistentVolumeClaim of this size (a Kubernetes quantity, for example 10Gi) holds the agent's home and working directory, so its files and conversations survive a restart, a stop and Start, and a pod replacement. Undeploy deletes it unless asked to keep it. Empty means a scratch workspace that goes with the pod.",
                "default": "",
            },
            "workspace_storage_class": {
                "type": "string",
                "title": "Workspace storage class",
                "description": "The StorageClass of the workspace claim (kubectl get storageclass). Empty means the cluster's default class. Needs a workspace size.",
                "default": "",
                "maxLength": 253,
            },
            "network_policy": {
                "type": "string",
                "title": "Network policy",
                "description": "default: the agent's pod gets a NetworkPolicy that lets nothing in and lets it reach only DNS, its relay and public addresses on port 443 (the model APIs); private, link-local and cloud metadata addresses are blocked. Enforced where the cluster's network plugin implements NetworkPolicy. none: no policy, the pod reaches whatever the cluster network lets it.",
                "enum": ["default", "none"],
                "default": "default",
            },
            "egress_allow": {
                "type": "string",
                "title": "Also allow",
                "description": "More destinations the agent may reach, comma-separated: CIDR, CIDR:PORT, CIDR:PORT-LAST or CIDR:PORT/udp (IPv6 in brackets when a port follows, [fd00::/8]:443). For an in-cluster model gateway, a proxy or a package mirror, for example 10.20.0.0/16:8080. Empty means nothing more.",
                "default": "",
                "maxLength": 2048,
            },
        },
    })
}

/// The full `info` response.
pub fn response(default_image: Option<&str>) -> Value {
    buzz_provider::info::response(
        PROVIDER_NAME,
        VERSION,
        "Runs a Buzz agent as a bare pod in a Kubernetes cluster, using your kubeconfig.",
        config_schema(default_image),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FIELDS;
    use buzz_contract::wire::OP_UNDEPLOY;

    #[test]
    fn schema_has_the_fifteen_fields_with_titles_types_and_defaults() {
        let s = config_schema(None);
        let props = s["properties"].as_object().unwrap();
        assert_eq!(props.len(), FIELDS.len());
        assert_eq!(
            props
                .keys()
                .map(String::as_str)
                .collect::<std::collections::BTreeSet<_>>(),
            FIELDS.into_iter().collect()
        );
        for f in FIELDS {
            let p = &props[f];
            assert!(p["title"].is_string() && p["description"].is_string(), "{f}");
            assert!(p["type"].is_string(), "{f}");
        }
        assert_eq!(props["inactivity_seconds"]["type"], "integer");
        assert_eq!(props["inactivity_seconds"]["default"], 7200);
        assert_eq!(props["doze_seconds"]["type"], "integer");
        assert_eq!(props["doze_seconds"]["default"], 300);
        assert_eq!(props["memory_limit"]["default"], "4Gi");
        assert_eq!(
            s["required"],
            json!(["namespace", "image"]),
            "no baked default: image is required"
        );
        let with_default = config_schema(Some("r.test/s@sha256:00"));
        assert_eq!(with_default["required"], json!(["namespace"]));
    }

    #[test]
    fn the_default_image_is_described_never_a_schema_default() {
        let digest = format!("r.test/buzz-sprig@sha256:{}", "1".repeat(64));
        let s = config_schema(Some(&digest));
        let image = &s["properties"]["image"];
        assert_eq!(
            image.get("default"),
            None,
            "a prefilled digest would pin users: {image}"
        );
        let desc = image["description"].as_str().unwrap();
        assert!(desc.contains(&digest) && desc.contains("Leave empty"), "{desc}");
        assert_eq!(config_schema(None)["properties"]["image"].get("default"), None);
    }

    #[test]
    fn info_advertises_deploy_and_undeploy() {
        let r = response(None);
        assert_eq!(r["operations"], json!(["deploy", "undeploy"]));
        let m = r.as_object().unwrap();
        assert!(buzz_contract::wire::info_supports(m, OP_UNDEPLOY));
    }

    #[test]
    fn namespace_default_is_fresh_and_well_formed() {
        let a = random_namespace();
        let b = random_namespace();
        for n in [&a, &b] {
            let suffix = n.strip_prefix("buzz-agents-").unwrap();
            assert_eq!(suffix.len(), 6);
            assert!(
                suffix
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            );
        }
        assert_ne!(a, b, "fresh on every call (36^6 space)");
    }

    /// A config filled with every schema default is I2-valid: every field
    /// is a scalar, so no knob can push a UI into an object or array.
    #[test]
    fn a_config_of_the_schema_defaults_is_i2_valid() {
        let s = config_schema(None);
        let filled: serde_json::Map<String, Value> = s["properties"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, p)| (k.clone(), p.get("default").cloned().unwrap_or(json!(""))))
            .collect();
        assert!(buzz_contract::i2::validate_provider_config(&Value::Object(filled)).is_ok());
        for p in s["properties"].as_object().unwrap().values() {
            assert!(matches!(p["type"].as_str(), Some("string" | "integer")), "{p}");
        }
    }

    #[test]
    fn no_schema_field_trips_the_i2_lint() {
        let s = config_schema(None);
        for k in s["properties"].as_object().unwrap().keys() {
            assert!(!buzz_contract::i2::key_name_is_secretish(k), "{k}");
        }
    }
}
