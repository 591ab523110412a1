//! Step 1 and the auto-repair fence: unmarked look-alikes and identity collisions.

use super::*;

async fn plant_pod(c: &Case, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
    let mut p = Pod {
        metadata: ObjectMeta {
            name: Some(c.agent.pod_name()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
        containers: vec![k8s_openapi::api::core::v1::Container {
            name: "agent".into(),
            image: Some(IMAGE.into()),
            ..Default::default()
        }],
        restart_policy: Some("Never".into()),
        ..Default::default()
    });
    c.pods.create(&PostParams::default(), &p).await.unwrap()
}

/// 11. Unmarked objects: a label- and annotation-matching object without the
/// management marker is never deleted, never GC'd, and is reported.
#[tokio::test]
async fn unmarked_look_alikes_are_never_touched_and_are_reported() {
    let c = case("p-unmarked").await;
    let kubelet = env().kubelet().await.unwrap();
    let short_pk = c.agent.pubkey[..32].to_string();
    let labels = [("buzz.block.xyz/agent-pubkey", short_pk.as_str())];
    let ann = [("buzz.block.xyz/agent-pubkey-full", c.agent.pubkey.as_str())];
    let planted = plant_pod(&c, &labels, &ann).await;
    kubelet.bind(&c.ns, &c.agent.pod_name()).await.unwrap();
    kubelet
        .set_terminated(&c.ns, &c.agent.pod_name(), 1, "Error", "")
        .await
        .unwrap();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(format!("{}-{}", c.agent.pod_name(), "ee".repeat(16))),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: Some(ann.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Secret>::namespaced(c.client.clone(), &c.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // Orphan age gate lowered to 2 s (test-only knob); wait until the
    // apiserver's clock has passed it, so only the missing marker protects it.
    tokio::time::sleep(Duration::from_millis(2600)).await;

    let proxy = env().start_proxy().await.unwrap();
    let out = deploy_env(
        proxy.admin_kubeconfig(),
        &c.request(),
        &[
            ("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "1"),
            ("BUZZ_K8S_TEST_ONLY_ORPHAN_MIN_AGE_SECS", "2"),
        ],
    )
    .await;
    let err = out.error();
    assert!(err.contains("not created by this provider"), "{err}");
    assert_eq!(
        proxy.mutations(),
        0,
        "nothing unmarked is touched: {:?}",
        proxy.counts()
    );
    assert_eq!(uid(&c.pod().await), uid(&planted));
    assert_eq!(
        secrets_of(&c.client, &c.ns, &c.agent).await.len(),
        1,
        "the unmarked Secret survived GC"
    );
    assert!(out.stderr.contains("left untouched"), "reported: {}", out.stderr);
}

/// 12. Annotation mismatch: a collision error and no mutation.
#[tokio::test]
async fn annotation_mismatch_is_a_collision_with_no_mutation() {
    let c = case("p-collide").await;
    let other = "f".repeat(64);
    let short_pk = c.agent.pubkey[..32].to_string();
    plant_pod(
        &c,
        &[
            ("buzz.block.xyz/agent-pubkey", short_pk.as_str()),
            ("app.kubernetes.io/managed-by", "buzz-backend-kubernetes"),
            ("buzz.block.xyz/binding-version", "1"),
        ],
        &[("buzz.block.xyz/agent-pubkey-full", other.as_str())],
    )
    .await;
    let proxy = env().start_proxy().await.unwrap();
    let err = deploy(proxy.admin_kubeconfig(), &c.request()).await.error();
    assert!(
        err.contains("is not this agent's") && err.contains("annotation"),
        "{err}"
    );
    assert_eq!(proxy.mutations(), 0);
}
