//! The pod knobs of `provider_config` (issue 30 item 4): a bad
//! `runtime_class_name`, `node_selector` or `tolerations` is refused in-band,
//! naming the field, before any request reaches the cluster; good ones are
//! the pod's spec, exactly as given, and a RuntimeClass the cluster does
//! not have is the apiserver's admission answer, reported with nothing left.

use super::*;

#[tokio::test]
async fn bad_pod_knobs_are_refused_naming_the_field_before_any_request() {
    let c = case("p-badknobs").await;
    let proxy = env().start_proxy().await.unwrap();
    for (field, value, says) in [
        (
            "runtime_class_name",
            json!("Kata_QEMU"),
            "provider_config.runtime_class_name `Kata_QEMU` is not a valid RuntimeClass name",
        ),
        (
            "node_selector",
            json!("pool"),
            "provider_config.node_selector term `pool` is not key=value",
        ),
        (
            "tolerations",
            json!(r#"[{"key":"a","effect":"NoSchedule","tolerationSeconds":5}]"#),
            "provider_config.tolerations[0].tolerationSeconds is allowed only with effect NoExecute",
        ),
        (
            "tolerations",
            json!([{"operator": "Exists"}]),
            "provider_config field `tolerations` must be a string, number, boolean or null",
        ),
    ] {
        let mut cfg = config(&c.ns);
        cfg.insert(field.into(), value.clone());
        let err = deploy(proxy.admin_kubeconfig(), &deploy_request(&c.agent.payload(), cfg))
            .await
            .error();
        assert!(err.starts_with(says), "{field} {value}: {err}");
    }
    assert_eq!(proxy.total(), 0, "{:?}", proxy.counts());
    assert!(secrets_of(&c.client, &c.ns, &c.agent).await.is_empty());
    assert!(c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_none());
}

#[tokio::test]
async fn good_pod_knobs_are_the_pods_spec() {
    let c = case("p-knobs").await;
    let _auto = c.starting().await;
    let mut cfg = config(&c.ns);
    cfg.insert(
        "node_selector".into(),
        json!("kubernetes.io/hostname=testenv-node"),
    );
    cfg.insert(
        "tolerations".into(),
        json!(r#"[{"key":"dedicated","operator":"Equal","value":"agents","effect":"NoSchedule"},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":30}]"#),
    );
    deploy(env().admin_kubeconfig(), &deploy_request(&c.agent.payload(), cfg))
        .await
        .agent_id();
    let spec = c.pod().await.spec.unwrap();
    assert_eq!(
        spec.node_selector.unwrap(),
        std::collections::BTreeMap::from([(
            "kubernetes.io/hostname".to_string(),
            "testenv-node".to_string()
        )])
    );
    let t = spec.tolerations.unwrap();
    let mine: Vec<_> = t
        .iter()
        .filter(|t| t.key.as_deref() == Some("dedicated") || t.toleration_seconds == Some(30))
        .collect();
    assert_eq!(mine.len(), 2, "{t:?}");
    assert_eq!(mine[0].value.as_deref(), Some("agents"));
    assert_eq!(mine[1].operator.as_deref(), Some("Exists"));
}

/// RuntimeClass admission refuses a pod naming a class the cluster lacks;
/// the answer says so (not "may not create pods") and the attempt's own
/// Secret is gone.
#[tokio::test]
async fn a_runtime_class_the_cluster_lacks_is_named_and_leaves_nothing() {
    let c = case("p-norc").await;
    let _auto = c.starting().await;
    let mut cfg = config(&c.ns);
    cfg.insert("runtime_class_name".into(), json!("buzz-absent-class"));
    let err = deploy(env().admin_kubeconfig(), &deploy_request(&c.agent.payload(), cfg))
        .await
        .error();
    assert!(
        err.starts_with(
            "provider_config.runtime_class_name: RuntimeClass buzz-absent-class does not exist in this cluster"
        ),
        "{err}"
    );
    assert!(secrets_of(&c.client, &c.ns, &c.agent).await.is_empty());
    assert!(c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_none());
}
