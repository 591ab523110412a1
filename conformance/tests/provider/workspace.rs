//! The workspace that outlives the pod (issue 32 item 2): `workspace_size`
//! makes one PersistentVolumeClaim per agent key, created before the Secret
//! and the pod and adopted by every later Start; a claim that is not
//! provably this agent's, too small or of another class is refused in-band,
//! naming it, with nothing created; an unknown StorageClass is named before
//! anything is created; a claim that does not bind fails the Start after
//! the bound, naming it; `undeploy` removes the claim unless asked to keep
//! it. Against the real apiserver, through the shipped RBAC where it
//! matters. (Binding and the files surviving a pod are the real node's:
//! `real_node_workspace`.)

use super::*;
use buzz_backend_kubernetes::workspace::{WorkspaceSpec, claim, claim_name};
use buzz_contract::wire::{UndeployAgent, UndeployRequest};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

fn claims(c: &Case) -> Api<PersistentVolumeClaim> {
    Api::namespaced(c.client.clone(), &c.ns)
}

fn with_workspace(c: &Case, size: &str, class: Option<&str>) -> Value {
    let mut extra = json!({ "workspace_size": size });
    if let Some(class) = class {
        extra["workspace_storage_class"] = json!(class);
    }
    c.request_with(extra)
}

fn undeploy_request(c: &Case, size: &str, keep: bool) -> Value {
    let mut cfg = config(&c.ns);
    cfg.insert("workspace_size".into(), json!(size));
    serde_json::to_value(UndeployRequest {
        op: "undeploy".into(),
        request_id: Some("suite".into()),
        agent: UndeployAgent {
            name: "suite agent".into(),
            pubkey: c.agent.pubkey.clone(),
        },
        provider_config: cfg,
        keep_workspace: keep,
    })
    .unwrap()
}

#[tokio::test]
async fn one_claim_per_agent_is_created_before_the_pod_and_every_later_start_adopts_it() {
    let c = case("p-ws").await;
    shipped_role_in(&c).await;
    let _auto = c.starting().await;
    let out = deploy(env().restricted_kubeconfig(), &with_workspace(&c, "1Gi", None)).await;
    out.agent_id();
    let name = claim_name(&c.agent.pubkey);
    let first = claims(&c).get(&name).await.expect("the claim");
    let meta = &first.metadata;
    assert_eq!(
        meta.annotations.as_ref().unwrap()["buzz.block.xyz/agent-pubkey-full"],
        c.agent.pubkey
    );
    assert_eq!(
        meta.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
        "buzz-backend-kubernetes"
    );
    let spec = first.spec.as_ref().unwrap();
    assert_eq!(
        spec.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"].0,
        "1Gi"
    );
    let pod = c.pod().await;
    let volume = &pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
    assert_eq!(
        volume
            .persistent_volume_claim
            .as_ref()
            .map(|v| v.claim_name.as_str()),
        Some(name.as_str())
    );
    assert!(
        out.stderr.contains(&format!("workspace: created claim {name}")),
        "{}",
        out.stderr
    );
    // The pod is replaced by other hands; the next Start adopts the claim.
    c.pods
        .delete(&c.agent.pod_name(), &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&c).await;
    let again = deploy(env().restricted_kubeconfig(), &with_workspace(&c, "1Gi", None)).await;
    again.agent_id();
    assert!(
        again.stderr.contains(&format!("workspace: using claim {name}")),
        "{}",
        again.stderr
    );
    let adopted = claims(&c).get(&name).await.unwrap();
    assert_eq!(
        adopted.metadata.uid, first.metadata.uid,
        "the same claim, never a new one"
    );
    assert_ne!(uid(&c.pod().await), uid(&pod), "a new pod on the old claim");
    let l = claims(&c).list(&ListParams::default()).await.unwrap();
    assert_eq!(l.items.len(), 1, "one claim per agent key");
}

async fn wait_gone(c: &Case) {
    for _ in 0..300 {
        if c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the pod did not go");
}

/// Refusals are judged before the Secret and the pod, so each one leaves
/// nothing of this deploy behind; the found claim is never changed.
#[tokio::test]
async fn a_claim_not_ours_too_small_or_of_another_class_is_refused_naming_it() {
    let c = case("p-ws-refused").await;
    let name = claim_name(&c.agent.pubkey);
    let ours = |size: &str| {
        claim(
            &c.agent.pubkey,
            &WorkspaceSpec {
                size: size.into(),
                storage_class: Some("suite-slow".into()),
            },
        )
    };
    let pp = PostParams::default();
    let mut unmarked = ours("1Gi");
    unmarked
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("app.kubernetes.io/managed-by");
    claims(&c).create(&pp, &unmarked).await.unwrap();
    let err = deploy(env().admin_kubeconfig(), &with_workspace(&c, "1Gi", None))
        .await
        .error();
    assert!(
        err.contains(&format!("PersistentVolumeClaim {name} in namespace {}", c.ns))
            && err.contains("this provider did not create it"),
        "{err}"
    );
    claims(&c).delete(&name, &DeleteParams::default()).await.unwrap();

    claims(&c).create(&pp, &ours("1Gi")).await.unwrap();
    let err = deploy(env().admin_kubeconfig(), &with_workspace(&c, "5Gi", None))
        .await
        .error();
    assert!(
        err.contains(&format!(
            "{name} in namespace {} asks for 1Gi, less than provider_config.workspace_size 5Gi",
            c.ns
        )),
        "{err}"
    );
    let err = deploy(
        env().admin_kubeconfig(),
        &with_workspace(&c, "1Gi", Some("suite-fast")),
    )
    .await
    .error();
    assert!(
        err.contains("uses StorageClass suite-slow, not provider_config.workspace_storage_class suite-fast"),
        "{err}"
    );
    assert!(
        secrets_of(&c.client, &c.ns, &c.agent).await.is_empty(),
        "nothing was created"
    );
    assert!(c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_none());
    let left = claims(&c).get(&name).await.unwrap();
    assert_eq!(
        left.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
        "1Gi",
        "never resized"
    );
}

/// A class the cluster does not have is named before anything is created
/// (the shipped optional ClusterRole lets the restricted user ask); a class
/// that exists but never provisions fails the Start after the bound with
/// the claim named, and the claim and the pod stay for the next Start.
#[tokio::test]
async fn an_unknown_class_is_named_at_once_and_a_claim_that_never_binds_after_the_bound() {
    let c = case("p-ws-class").await;
    shipped_role_in(&c).await;
    let err = deploy(
        env().restricted_kubeconfig(),
        &with_workspace(&c, "1Gi", Some("no-such-class")),
    )
    .await
    .error();
    assert!(
        err.starts_with(
            "provider_config.workspace_storage_class: StorageClass no-such-class does not exist in this cluster"
        ),
        "{err}"
    );
    assert!(
        claims(&c)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(secrets_of(&c.client, &c.ns, &c.agent).await.is_empty());

    // A class whose provisioner nobody runs: the claim stays Pending.
    let class_name = buzz_conformance::testenv::unique_name("suite-never");
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": class_name},
        "provisioner": "suite.example/nobody",
    }))
    .unwrap();
    Api::<StorageClass>::all(c.client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::Unschedulable);
    let out = deploy_env(
        env().restricted_kubeconfig(),
        &with_workspace(&c, "1Gi", Some(&class_name)),
        &[("BUZZ_K8S_WORKSPACE_BIND_SECS", "2")],
    )
    .await;
    let err = out.error();
    let name = claim_name(&c.agent.pubkey);
    assert!(
        err.contains(&format!(
            "the workspace PersistentVolumeClaim {name} in namespace {} is still not bound after",
            c.ns
        )) && err.contains("the claim and the pod are kept"),
        "{err}"
    );
    assert!(
        claims(&c).get_opt(&name).await.unwrap().is_some(),
        "the claim is kept"
    );
    assert!(
        c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_some(),
        "and the pod"
    );
}

#[tokio::test]
async fn undeploy_keeps_the_claim_when_asked_and_removes_it_otherwise() {
    let c = case("p-ws-undeploy").await;
    shipped_role_in(&c).await;
    let _auto = c.starting().await;
    deploy(env().restricted_kubeconfig(), &with_workspace(&c, "1Gi", None))
        .await
        .agent_id();
    let name = claim_name(&c.agent.pubkey);
    let kept = deploy(env().restricted_kubeconfig(), &undeploy_request(&c, "1Gi", true)).await;
    assert_eq!(kept.response["ok"], true, "{} {}", kept.response, kept.stderr);
    assert_eq!(
        kept.response["removed"],
        json!({"pods": 1, "secrets": 1, "workspaces": 0, "network_policies": 1})
    );
    assert_eq!(kept.response["kept"], json!({"workspaces": [name]}));
    assert!(claims(&c).get_opt(&name).await.unwrap().is_some());
    assert!(c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_none());

    // Without keep_workspace, and with workspace_size cleared since: the
    // claim still goes.
    let mut cleared = undeploy_request(&c, "1Gi", false);
    cleared["provider_config"]
        .as_object_mut()
        .unwrap()
        .remove("workspace_size");
    let gone = deploy(env().restricted_kubeconfig(), &cleared).await;
    assert_eq!(gone.response["ok"], true, "{} {}", gone.response, gone.stderr);
    assert_eq!(
        gone.response["removed"],
        json!({"pods": 0, "secrets": 0, "workspaces": 1, "network_policies": 0})
    );
    assert!(gone.response.get("kept").is_none());
    assert!(claims(&c).get_opt(&name).await.unwrap().is_none());
    let again = deploy(env().restricted_kubeconfig(), &cleared).await;
    assert_eq!(
        again.response["removed"],
        json!({"pods": 0, "secrets": 0, "workspaces": 0, "network_policies": 0}),
        "idempotent"
    );
}
