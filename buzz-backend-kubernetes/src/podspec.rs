//! Pod and Secret shape (spec §Pod shape, §K8s Secrets, §Entrypoint; wire-facts §7)
//! and the create-intent fingerprint (§Deploy State Machine "Create-intent fingerprint").
//!
//! The fingerprint hashes the pod spec this module builds with a fixed
//! placeholder in place of the per-attempt Secret name. Its input type,
//! [`PodIntent`], holds no Secret data and no attempt identity, so "secret
//! values never change it" holds by construction; admission defaults never
//! enter it because it is computed before the create, from our own template.

use crate::config::ProviderConfig;
use crate::consts::*;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvFromSource, EnvVar, ExecAction, HTTPGetAction,
    Lifecycle, LifecycleHandler, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, Probe,
    ResourceRequirements, SeccompProfile, Secret, SecretEnvSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Stands in for the per-attempt Secret name inside the fingerprinted template.
pub const SECRET_PLACEHOLDER: &str = "<generation-secret>";

/// Everything provider-controlled that can affect scheduling or container creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIntent {
    pub image: String,
    pub cpu_request: String,
    pub memory_request: String,
    pub cpu_limit: String,
    pub memory_limit: String,
    pub service_account: Option<String>,
    pub restart_policy: String,
    /// The collector's ingest URL (`provider_config.telemetry_url`): plain pod spec,
    /// so it is fingerprinted.
    pub telemetry_url: Option<String>,
    /// `runtimeClassName`, `nodeSelector`, `tolerations` ([`crate::placement`]).
    pub runtime_class_name: Option<String>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<crate::placement::Toleration>,
    /// The agent's workspace claim ([`crate::workspace::claim_name`]);
    /// `None` = an `emptyDir`. Only the name is pod spec: the claim's size
    /// and class are the claim's, so a changed size never replaces a pod.
    pub workspace_claim: Option<String>,
}

impl PodIntent {
    /// The intent of `config` for the agent `pubkey`.
    pub fn from_config(c: &ProviderConfig, pubkey: &str) -> Self {
        PodIntent {
            image: c.image.reference.clone(),
            cpu_request: c.cpu_request.clone(),
            memory_request: c.memory_request.clone(),
            cpu_limit: c.cpu_limit.clone(),
            memory_limit: c.memory_limit.clone(),
            service_account: c.service_account.clone(),
            restart_policy: c.restart_policy().to_string(),
            telemetry_url: c.telemetry_url.clone(),
            runtime_class_name: c.runtime_class_name.clone(),
            node_selector: c.node_selector.clone(),
            tolerations: c.tolerations.clone(),
            workspace_claim: c.workspace.as_ref().map(|_| crate::workspace::claim_name(pubkey)),
        }
    }
}

/// `buzz-agent-<first 12 hex>`: pod name and `agent_id`.
pub fn pod_name(pubkey: &str) -> String {
    format!("{NAME_PREFIX}{}", &pubkey[..12])
}

/// `buzz-agent-<first 12 hex>-<generation>`.
pub fn secret_name(pubkey: &str, generation: &str) -> String {
    format!("{NAME_PREFIX}{}-{generation}", &pubkey[..12])
}

/// Identity labels plus the management marker.
pub fn labels(pubkey: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_PUBKEY.to_string(), pubkey[..32].to_string()),
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (LABEL_BINDING_VERSION.to_string(), BINDING_VERSION.to_string()),
    ])
}

/// The label selector for this agent's objects.
pub fn selector(pubkey: &str) -> String {
    format!("{LABEL_PUBKEY}={}", &pubkey[..32])
}

fn quantities(cpu: &str, mem: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.into())),
        ("memory".to_string(), Quantity(mem.into())),
    ])
}

/// The pod spec for `intent`, referencing `secret` through `envFrom`.
pub fn pod_spec(intent: &PodIntent, secret: &str) -> PodSpec {
    PodSpec {
        restart_policy: Some(intent.restart_policy.clone()),
        termination_grace_period_seconds: Some(GRACE_SECONDS),
        automount_service_account_token: Some(false),
        service_account_name: intent.service_account.clone(),
        enable_service_links: Some(false),
        runtime_class_name: intent.runtime_class_name.clone(),
        node_selector: (!intent.node_selector.is_empty()).then(|| intent.node_selector.clone()),
        tolerations: (!intent.tolerations.is_empty())
            .then(|| intent.tolerations.iter().map(|t| t.to_kube()).collect()),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS),
            run_as_group: Some(RUN_AS),
            fs_group: Some(RUN_AS),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        containers: vec![Container {
            name: CONTAINER.into(),
            image: Some(intent.image.clone()),
            env: Some({
                // Plain `env` wins over the Secret's `envFrom`: neither can be
                // moved by the user's env.
                let mut env = vec![
                    EnvVar {
                        name: "HOME".into(),
                        value: Some(HOME.into()),
                        value_from: None,
                    },
                    EnvVar {
                        name: buzz_contract::env::SESSION_CWD.into(),
                        value: Some(SESSION_CWD.into()),
                        value_from: None,
                    },
                    EnvVar {
                        name: buzz_contract::probe::PROBE_ADDR_ENV.into(),
                        value: Some(format!("0.0.0.0:{}", buzz_contract::probe::POD_PROBE_PORT)),
                        value_from: None,
                    },
                ];
                if let Some(url) = &intent.telemetry_url {
                    env.extend(crate::telemetry::collector_env(url, CONTAINER, &intent.image));
                }
                env
            }),
            env_from: Some(vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: secret.into(),
                    optional: Some(false),
                }),
                ..Default::default()
            }]),
            working_dir: Some(HOME.into()),
            // The harness writes why it cannot run here before it exits
            // (issue 30 item 3); `File`, never `FallbackToLogsOnError`:
            // only what the harness chose to tell the user is shown, never
            // a tail of its log, which the kubelet cuts at 2 KiB and so can
            // halve a secret past recognition ([`crate::classify`]).
            termination_message_path: Some(TERMINATION_MESSAGE_PATH.into()),
            termination_message_policy: Some("File".into()),
            lifecycle: Some(started_hook()),
            readiness_probe: Some(ready_probe()),
            volume_mounts: Some(vec![VolumeMount {
                name: WORKSPACE_VOLUME.into(),
                mount_path: HOME.into(),
                ..Default::default()
            }]),
            resources: Some(ResourceRequirements {
                requests: Some(quantities(&intent.cpu_request, &intent.memory_request)),
                limits: Some(quantities(&intent.cpu_limit, &intent.memory_limit)),
                ..Default::default()
            }),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                privileged: Some(false),
                run_as_non_root: Some(true),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    add: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }],
        volumes: Some(vec![workspace_volume(intent.workspace_claim.as_deref())]),
        ..Default::default()
    }
}

/// The `postStart` hook: `buzz-acp started`, which ends once the harness
/// passed its startup checks. The kubelet reports the container `running`
/// only after its `postStart` handler ended, and kills it when the handler
/// fails, so a deploy that sees `running` has seen a harness past its
/// checks, and one that exits at startup is reported with its own exit code
/// and termination message ([`crate::reconcile`], issue 49 item 1).
fn started_hook() -> Lifecycle {
    use buzz_contract::probe::{STARTED_ARG, WAIT_FLAG};
    Lifecycle {
        post_start: Some(LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec![
                    HARNESS_COMMAND.into(),
                    STARTED_ARG.into(),
                    WAIT_FLAG.into(),
                    STARTED_HOOK_WAIT.as_secs().to_string(),
                ]),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The readiness probe: `Ready` while the harness is authenticated to its
/// relay (issue 49 item 2). An HTTP GET costs the kubelet one connection per
/// period and starts nothing in the container.
fn ready_probe() -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(buzz_contract::probe::READY_PATH.into()),
            port: IntOrString::Int(buzz_contract::probe::POD_PROBE_PORT.into()),
            ..Default::default()
        }),
        period_seconds: Some(READY_PERIOD_SECONDS),
        timeout_seconds: Some(READY_TIMEOUT_SECONDS),
        failure_threshold: Some(1),
        success_threshold: Some(1),
        ..Default::default()
    }
}

/// The workspace volume: the agent's claim, else an `emptyDir` (spec §Pod
/// shape "Workspace"). One mount either way, at `HOME`: the agent's files
/// (in [`SESSION_CWD`]) and its own transcripts live there.
fn workspace_volume(claim: Option<&str>) -> Volume {
    match claim {
        Some(claim) => Volume {
            name: WORKSPACE_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: Some(false),
            }),
            ..Default::default()
        },
        None => Volume {
            name: WORKSPACE_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    }
}

/// Unkeyed SHA-256 over the canonical serialization of the create-intent
/// template (binding version + pod spec with the Secret placeholder).
pub fn fingerprint(intent: &PodIntent) -> String {
    let template = serde_json::json!({
        "binding_version": BINDING_VERSION,
        "container": CONTAINER,
        "spec": pod_spec(intent, SECRET_PLACEHOLDER),
    });
    // serde_json maps are ordered (BTreeMap), so this serialization is canonical.
    hex::encode(Sha256::digest(template.to_string().as_bytes()))
}

/// The full Pod object for one create attempt.
pub fn pod(pubkey: &str, intent: &PodIntent, generation: &str) -> Pod {
    let annotations = BTreeMap::from([
        (ANN_PUBKEY_FULL.to_string(), pubkey.to_string()),
        (ANN_CREATE_INTENT.to_string(), fingerprint(intent)),
        (ANN_IMAGE.to_string(), intent.image.clone()),
        (ANN_GENERATION.to_string(), generation.to_string()),
        (ANN_PROVIDER_VERSION.to_string(), VERSION.to_string()),
    ]);
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(pubkey)),
            labels: Some(labels(pubkey)),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(pod_spec(intent, &secret_name(pubkey, generation))),
        status: None,
    }
}

/// The immutable per-attempt Secret holding the agent env.
pub fn secret(pubkey: &str, generation: &str, env: BTreeMap<String, String>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(pubkey, generation)),
            labels: Some(labels(pubkey)),
            annotations: Some(BTreeMap::from([
                (ANN_PUBKEY_FULL.to_string(), pubkey.to_string()),
                (ANN_GENERATION.to_string(), generation.to_string()),
            ])),
            ..Default::default()
        },
        immutable: Some(true),
        string_data: Some(env),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// A fresh generation token: 32 lowercase hex.
pub fn new_generation() -> String {
    use rand::Rng;
    let bytes: [u8; 16] = rand::rng().random();
    hex::encode(bytes)
}

/// A representative intent for unit tests.
#[cfg(test)]
pub(crate) fn sample_intent() -> PodIntent {
    PodIntent {
        image: "registry.test/sprig:v1".into(),
        cpu_request: "1".into(),
        memory_request: "2Gi".into(),
        cpu_limit: "2".into(),
        memory_limit: "4Gi".into(),
        service_account: None,
        restart_policy: "Never".into(),
        telemetry_url: None,
        runtime_class_name: None,
        node_selector: BTreeMap::new(),
        tolerations: Vec::new(),
        workspace_claim: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn intent() -> PodIntent {
        sample_intent()
    }
    const PK: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn names_labels_annotations() {
        let g = new_generation();
        assert!(buzz_contract::keys::is_hex32_lower(&g));
        let p = pod(PK, &intent(), &g);
        assert_eq!(p.metadata.name.as_deref(), Some("buzz-agent-0123456789ab"));
        let l = p.metadata.labels.unwrap();
        assert_eq!(l[LABEL_PUBKEY], &PK[..32]);
        assert_eq!(l[LABEL_MANAGED_BY], "buzz-backend-kubernetes");
        assert_eq!(l[LABEL_BINDING_VERSION], "1");
        let a = p.metadata.annotations.unwrap();
        assert_eq!(a[ANN_PUBKEY_FULL], PK);
        assert_eq!(a[ANN_CREATE_INTENT], fingerprint(&intent()));
        let s = secret(PK, &g, BTreeMap::new());
        assert_eq!(s.metadata.name.unwrap(), format!("buzz-agent-0123456789ab-{g}"));
        assert_eq!(s.immutable, Some(true));
    }

    #[test]
    fn hardening_defaults() {
        let spec = pod_spec(&intent(), "s");
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.termination_grace_period_seconds, Some(60));
        let psc = spec.security_context.unwrap();
        assert_eq!((psc.run_as_non_root, psc.run_as_user), (Some(true), Some(10001)));
        assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let c = &spec.containers[0];
        let sc = c.security_context.clone().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
        assert_eq!(c.working_dir.as_deref(), Some("/home/agent"));
        // The sessions work inside HOME, never the reverse (review afa2bf1 #1).
        let env = c.env.clone().unwrap();
        let session = env.iter().find(|e| e.name == "BUZZ_ACP_CWD").unwrap();
        assert_eq!(session.value.as_deref(), Some("/home/agent/work"));
        assert!(spec.host_network.is_none() && spec.host_pid.is_none());
        assert!(spec.volumes.unwrap()[0].empty_dir.is_some());
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
    }

    /// Issue 49: `running` means the harness passed its startup checks (the
    /// hook), `Ready` means it is on its relay (the probe), both on the port
    /// the harness is told to listen on.
    #[test]
    fn the_hook_and_the_probe_ask_the_harness_where_it_listens() {
        let c = pod_spec(&intent(), "s").containers[0].clone();
        let env = c.env.clone().unwrap();
        let addr = env.iter().find(|e| e.name == "BUZZ_ACP_PROBE_ADDR").unwrap();
        assert_eq!(addr.value.as_deref(), Some("0.0.0.0:4785"));
        let hook = c.lifecycle.unwrap().post_start.unwrap().exec.unwrap();
        assert_eq!(hook.command.unwrap(), ["buzz-acp", "started", "--wait", "60"]);
        let probe = c.readiness_probe.unwrap();
        let get = probe.http_get.unwrap();
        assert_eq!(get.path.as_deref(), Some("/readyz"));
        assert_eq!(get.port, IntOrString::Int(4785));
        assert_eq!(probe.failure_threshold, Some(1));
    }

    proptest! {
        /// The Secret name (attempt identity) never changes the fingerprint:
        /// two attempts with the same intent agree.
        #[test]
        fn attempt_identity_never_changes_the_fingerprint(g1 in "[0-9a-f]{32}", g2 in "[0-9a-f]{32}") {
            let a = pod(PK, &intent(), &g1);
            let b = pod(PK, &intent(), &g2);
            prop_assert_eq!(
                &a.metadata.annotations.unwrap()[ANN_CREATE_INTENT],
                &b.metadata.annotations.unwrap()[ANN_CREATE_INTENT]
            );
        }

        /// Every fingerprinted field changes it.
        #[test]
        fn every_fingerprinted_field_changes_it(field in 0usize..12, v in "[a-z0-9]{1,8}") {
            let base = intent();
            let mut changed = base.clone();
            match field {
                0 => changed.image = format!("registry.test/sprig:{v}x"),
                1 => changed.cpu_request = format!("{v}m"),
                2 => changed.memory_request = format!("{v}Mi"),
                3 => changed.cpu_limit = format!("{v}m"),
                4 => changed.memory_limit = format!("{v}Mi"),
                5 => changed.service_account = Some(v.clone()),
                6 => changed.telemetry_url = Some(format!("https://{v}.example.com")),
                7 => changed.runtime_class_name = Some(v.clone()),
                8 => changed.node_selector = BTreeMap::from([("pool".to_string(), v.clone())]),
                9 => changed.tolerations = crate::placement::tolerations(
                    &format!(r#"[{{"key":"k","value":"{v}"}}]"#)).unwrap(),
                10 => changed.workspace_claim = Some(format!("buzz-agent-{v}-workspace")),
                _ => changed.restart_policy = "OnFailure".into(),
            }
            prop_assert_ne!(fingerprint(&base), fingerprint(&changed));
        }
    }

    #[test]
    fn a_telemetry_url_puts_the_collector_env_in_the_pod_spec_never_in_the_secret() {
        let mut i = intent();
        assert!(
            !serde_json::to_string(&pod_spec(&i, "s"))
                .unwrap()
                .contains("RUNTIME_AGENT_INGEST_URL"),
            "no URL, no collector env"
        );
        i.telemetry_url = Some("https://ingest.example.com".into());
        let spec = pod_spec(&i, "s");
        let env = spec.containers[0].env.as_ref().unwrap();
        let url = env.iter().find(|e| e.name == "RUNTIME_AGENT_INGEST_URL").unwrap();
        assert_eq!(url.value.as_deref(), Some("https://ingest.example.com"));
        for name in [
            "POD_NAME",
            "POD_NAMESPACE",
            "POD_UID",
            "NODE_NAME",
            "CONTAINER_NAME",
            "IMAGE_REF",
        ] {
            assert!(env.iter().any(|e| e.name == name), "{name}");
        }
        // The Secret is built from the caller's env only; nothing here reaches it.
        let s = secret(
            PK,
            "g",
            BTreeMap::from([("BUZZ_AUTH_TAG".to_string(), "t".to_string())]),
        );
        assert!(!serde_json::to_string(&s).unwrap().contains("ingest.example.com"));
    }

    /// Review b30b1a0 #7: the collector's spool (unshipped windows, OOM
    /// events, `state/alive`) must survive an `OnFailure` container restart,
    /// so it lies under a mounted `emptyDir`, never on the writable layer.
    #[test]
    fn the_collector_spool_lies_on_a_mounted_empty_dir() {
        let mut i = intent();
        i.telemetry_url = Some("https://ingest.example.com".into());
        i.restart_policy = "OnFailure".into();
        let spec = pod_spec(&i, "s");
        let c = &spec.containers[0];
        let spool = c
            .env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == "RUNTIME_AGENT_SPOOL_DIR")
            .and_then(|e| e.value.clone())
            .expect("the provider sets the collector's spool dir");
        let spool = std::path::Path::new(&spool);
        assert!(spool.is_absolute());
        let volumes = spec.volumes.unwrap();
        let mount = c
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| spool.starts_with(&m.mount_path))
            .expect("the spool dir is under a volume mount");
        assert!(
            volumes
                .iter()
                .any(|v| v.name == mount.name && v.empty_dir.is_some()),
            "that mount is an emptyDir"
        );
        assert_ne!(
            spool,
            std::path::Path::new(&mount.mount_path),
            "a subdirectory, not the workspace itself"
        );
    }

    #[test]
    fn the_pod_knobs_reach_the_pod_spec_and_unset_ones_stay_absent() {
        let spec = pod_spec(&intent(), "s");
        assert!(
            spec.runtime_class_name.is_none() && spec.node_selector.is_none() && spec.tolerations.is_none()
        );
        let mut i = intent();
        i.runtime_class_name = Some("buzz-runc".into());
        i.node_selector = BTreeMap::from([("pool".to_string(), "agents".to_string())]);
        i.tolerations =
            crate::placement::tolerations(r#"[{"operator":"Exists","effect":"NoSchedule"}]"#).unwrap();
        let spec = pod_spec(&i, "s");
        assert_eq!(spec.runtime_class_name.as_deref(), Some("buzz-runc"));
        assert_eq!(spec.node_selector.unwrap()["pool"], "agents");
        let t = &spec.tolerations.unwrap()[0];
        assert_eq!(
            (t.operator.as_deref(), t.effect.as_deref(), t.key.as_deref()),
            (Some("Exists"), Some("NoSchedule"), None)
        );
    }

    #[test]
    fn a_changed_default_image_changes_it() {
        let d1 = format!("ghcr.io/block/buzz-sprig@sha256:{}", "1".repeat(64));
        let d2 = format!("ghcr.io/block/buzz-sprig@sha256:{}", "2".repeat(64));
        let cfg = |d: &str| {
            crate::config::ProviderConfig::parse(&serde_json::json!({"namespace": "ns"}), Some(d)).unwrap()
        };
        assert_ne!(
            fingerprint(&PodIntent::from_config(&cfg(&d1), PK)),
            fingerprint(&PodIntent::from_config(&cfg(&d2), PK))
        );
    }

    #[test]
    fn a_workspace_size_mounts_the_agent_s_claim_at_home_and_nothing_else_changes() {
        let cfg = |extra: serde_json::Value| {
            let mut c = serde_json::json!({"namespace": "ns", "image": "registry.test/sprig:v1"});
            c.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            crate::config::ProviderConfig::parse(&c, None).unwrap()
        };
        let plain = PodIntent::from_config(&cfg(serde_json::json!({})), PK);
        let kept = PodIntent::from_config(&cfg(serde_json::json!({"workspace_size": "10Gi"})), PK);
        let bigger = PodIntent::from_config(&cfg(serde_json::json!({"workspace_size": "20Gi"})), PK);
        let spec = pod_spec(&kept, "s");
        let volume = &spec.volumes.as_ref().unwrap()[0];
        assert_eq!(
            volume
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("buzz-agent-0123456789ab-workspace")
        );
        assert!(volume.empty_dir.is_none());
        let mount = &spec.containers[0].volume_mounts.as_ref().unwrap()[0];
        assert_eq!(
            (mount.name.as_str(), mount.mount_path.as_str()),
            (WORKSPACE_VOLUME, HOME)
        );
        assert_eq!(spec.containers[0].working_dir.as_deref(), Some(HOME));
        let plain_spec = pod_spec(&plain, "s");
        assert!(plain_spec.volumes.as_ref().unwrap()[0].empty_dir.is_some());
        assert_ne!(
            fingerprint(&plain),
            fingerprint(&kept),
            "emptyDir → claim replaces the pod"
        );
        assert_eq!(
            fingerprint(&kept),
            fingerprint(&bigger),
            "the size is the claim's, not the pod's: a new size never replaces the pod"
        );
    }
}
