//! The container node's faithfulness (`testenv/container_node.rs`), pinned
//! against the real apiserver with the product image. The Start path runs
//! on the real node (`e2e_real_node`); the container node stays because it
//! plays the kubelet through the API, so a test can script what a real
//! kubelet cannot be told to do on demand, and the image benchmark's podman
//! figures run on it. The harness exits 3 (identity refusal, spec I1) when its
//! Secret names no key, which gives a real non-zero exit to report.

use buzz_conformance::container::sprig_image;
use buzz_conformance::testenv::{ContainerAutomation, ContainerNodeConfig, TestEnv, wait_for_pod};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, Secret};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

fn pod(name: &str, secret: &str, restart: &str, image: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 60,
            "securityContext": { "runAsNonRoot": true, "runAsUser": 10001, "runAsGroup": 10001 },
            "containers": [{
                "name": "agent",
                "image": image,
                "env": [{ "name": "HOME", "value": "/home/agent" }],
                "envFrom": [{ "secretRef": { "name": secret } }],
                "workingDir": "/home/agent",
                "volumeMounts": [{ "name": "workspace", "mountPath": "/home/agent" }]
            }],
            "volumes": [{ "name": "workspace", "emptyDir": {} }]
        }
    }))
    .unwrap()
}

/// A Secret the harness refuses to start with: a relay but no key (exit 3).
fn keyless_secret(name: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([(
            "BUZZ_RELAY_URL".to_string(),
            "ws://127.0.0.1:9".to_string(),
        )])),
        ..Default::default()
    }
}

/// A fresh namespace run by the container node with `config`: the node,
/// the namespace's pods and its Secrets.
async fn node(config: ContainerNodeConfig) -> (ContainerAutomation, Api<Pod>, Api<Secret>) {
    let env = TestEnv::shared();
    let ns = env.create_namespace("node").await.unwrap();
    let node = env.kubelet().await.unwrap().run_containers(&ns, config).unwrap();
    let client = env.admin_client().await.unwrap();
    (
        node,
        Api::namespaced(client.clone(), &ns),
        Api::namespaced(client, &ns),
    )
}

/// Restarts after 0.5 s, backing off to 2 s: `OnFailure` loops a test can watch.
fn quick_restarts() -> ContainerNodeConfig {
    ContainerNodeConfig {
        restart_backoff: Duration::from_millis(500),
        max_backoff: Duration::from_secs(2),
    }
}

/// Creates the keyless Secret `s` ([`keyless_secret`]).
async fn create_keyless(secrets: &Api<Secret>) {
    secrets
        .create(&PostParams::default(), &keyless_secret("s"))
        .await
        .unwrap();
}

fn status(p: &Pod) -> Option<&ContainerStatus> {
    p.status.as_ref()?.container_statuses.as_ref()?.first()
}

fn waiting_reason(p: &Pod) -> Option<String> {
    status(p)?.state.as_ref()?.waiting.as_ref()?.reason.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_secret_waits_then_the_real_exit_code_is_reported() {
    let image = sprig_image().clone();
    let (node, pods, secrets) = node(ContainerNodeConfig::default()).await;
    pods.create(&PostParams::default(), &pod("p", "s", "Never", &image.pinned()))
        .await
        .unwrap();
    let waiting = wait_for_pod(&pods, "p", "CreateContainerConfigError", |p| {
        waiting_reason(p).as_deref() == Some("CreateContainerConfigError")
    })
    .await;
    let msg = status(&waiting)
        .unwrap()
        .state
        .as_ref()
        .unwrap()
        .waiting
        .as_ref()
        .unwrap()
        .message
        .clone();
    assert_eq!(msg.as_deref(), Some("secret \"s\" not found"));
    assert!(
        node.containers().is_empty(),
        "no container may start without its Secret"
    );

    create_keyless(&secrets).await;
    let done = wait_for_pod(&pods, "p", "Failed", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    })
    .await;
    let cs = status(&done).unwrap();
    let term = cs
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .expect("terminated");
    assert_eq!(
        term.exit_code, 3,
        "the harness's real exit code (identity refusal)"
    );
    assert!(term.started_at.is_some() && term.finished_at.is_some());
    assert!(
        cs.image_id.ends_with(&image.digest),
        "imageID from the image that ran: {}",
        cs.image_id
    );
    assert_eq!(cs.restart_count, 0, "restartPolicy Never never restarts");
    assert_eq!(node.containers().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_restarts_a_non_zero_exit_with_backoff() {
    let image = sprig_image().clone();
    let (_node, pods, secrets) = node(quick_restarts()).await;
    create_keyless(&secrets).await;
    pods.create(
        &PostParams::default(),
        &pod("p", "s", "OnFailure", &image.reference),
    )
    .await
    .unwrap();
    let looping = wait_for_pod(&pods, "p", "two restarts in CrashLoopBackOff", |p| {
        status(p).is_some_and(|c| c.restart_count >= 2)
            && waiting_reason(p).as_deref() == Some("CrashLoopBackOff")
    })
    .await;
    let cs = status(&looping).unwrap();
    let last = cs
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .expect("lastState");
    assert_eq!(last.exit_code, 3);
    assert_eq!(
        looping.status.as_ref().unwrap().phase.as_deref(),
        Some("Running"),
        "a crash-looping pod stays in phase Running"
    );
}

/// Review b30b1a0 #7: an `OnFailure` restart is a new container, as a
/// kubelet makes one — a fresh writable layer, the pod's volumes kept. The
/// container's script tells the runs apart by exit code: the first writes a
/// marker in `/tmp` (the writable layer) and one in the workspace volume and
/// exits 1; a restart exits 7 if the `/tmp` marker survived (restart in
/// place), 1 again if the volume's was lost, and 0 only on a fresh layer over
/// the kept volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_failure_restart_gets_a_fresh_writable_layer_and_keeps_the_volume() {
    let image = sprig_image().clone();
    let (node, pods, secrets) = node(quick_restarts()).await;
    create_keyless(&secrets).await;
    let script = "if [ -e /tmp/layer-marker ]; then exit 7; fi; \
                  if [ -e /home/agent/volume-marker ]; then exit 0; fi; \
                  touch /tmp/layer-marker /home/agent/volume-marker; exit 1";
    let mut p = pod("p", "s", "OnFailure", &image.reference);
    p.spec.as_mut().unwrap().containers[0].command =
        Some(vec!["/bin/bash".into(), "-c".into(), script.into()]);
    pods.create(&PostParams::default(), &p).await.unwrap();
    let done = wait_for_pod(&pods, "p", "a terminal phase after one restart", |p| {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        let restarts = status(p).map_or(0, |c| c.restart_count);
        matches!(phase, Some("Succeeded" | "Failed")) || restarts >= 2
    })
    .await;
    let cs = status(&done).unwrap();
    let last = cs
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .expect("lastState: the first run's termination");
    assert_eq!(last.exit_code, 1, "the first run wrote its markers and failed");
    let now = cs
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code);
    assert_eq!(
        now,
        Some(0),
        "exit 7: the writable layer survived the restart; exit 1: the volume was lost"
    );
    assert_eq!(cs.restart_count, 1);
    assert_eq!(done.status.as_ref().unwrap().phase.as_deref(), Some("Succeeded"));
    assert_eq!(
        node.containers().len(),
        2,
        "one container per attempt, the dead one kept"
    );
}
