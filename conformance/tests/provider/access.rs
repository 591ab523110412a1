//! §K8s Namespace and the ServiceAccount race: restricted users, fresh namespaces.

use super::*;

/// 18. Namespace-scoped user: with an existing namespace, deploy succeeds;
/// with a missing one, the error carries the `kubectl create namespace` hint.
#[tokio::test]
async fn namespace_scoped_user_works_in_its_namespace_and_gets_the_kubectl_hint() {
    let env = env();
    let ns = env.restricted_namespace().to_string();
    let kubelet = env.kubelet().await.unwrap();
    let _auto = kubelet.automate(&ns, Behavior::StartAfter(Duration::from_millis(100)));
    let agent = TestAgent::new();
    let out = deploy(
        env.restricted_kubeconfig(),
        &deploy_request(&agent.payload(), config(&ns)),
    )
    .await;
    assert_eq!(out.agent_id(), agent.pod_name());

    let missing = buzz_conformance::testenv::unique_name("p-missing");
    let out = deploy(
        env.restricted_kubeconfig(),
        &deploy_request(&agent.payload(), config(&missing)),
    )
    .await;
    let err = out.error();
    assert!(
        err.contains(&format!("`kubectl create namespace {missing}`")),
        "{err}"
    );
}

/// 19. ServiceAccount race: the provider creates the namespace, the default
/// ServiceAccount appears late, and deploy still succeeds.
#[tokio::test]
async fn late_default_service_account_is_waited_for() {
    let env = env();
    let ns = buzz_conformance::testenv::unique_name("p-sarace");
    env.set_service_account_delay(&ns, Duration::from_secs(2));
    let kubelet = env.kubelet().await.unwrap();
    let _auto = kubelet.automate(&ns, Behavior::StartAfter(Duration::from_millis(100)));
    let agent = TestAgent::new();
    let out = deploy(
        env.admin_kubeconfig(),
        &deploy_request(&agent.payload(), config(&ns)),
    )
    .await;
    assert_eq!(out.agent_id(), agent.pod_name());
    assert!(
        out.stderr.contains(&format!("created namespace {ns}")),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("waiting for the ServiceAccount default"),
        "{}",
        out.stderr
    );
}
