//! §K8s Namespace and the ServiceAccount race: restricted users, fresh namespaces.

use super::*;

/// 18. Namespace-scoped user: with an existing namespace, deploy succeeds;
/// with a missing one, the error carries the `kubectl create namespace` hint.
#[tokio::test]
async fn namespace_scoped_user_works_in_its_namespace_and_gets_the_kubectl_hint() {
    let env = env();
    let ns = env.restricted_namespace().to_string();
    let kubelet = env.kubelet().await.unwrap();
    let _auto = kubelet.automate(&ns, QUICK_START);
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
    let _auto = kubelet.automate(&ns, QUICK_START);
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

/// Grants `RESTRICTED_USER` `resources` (create/get/list/watch/delete) in `ns`.
async fn grant_restricted(ns: &str, name: &str, resources: &[&str]) {
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    let client = admin().await;
    let role = Role {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["".into()]),
            resources: Some(resources.iter().map(|r| r.to_string()).collect()),
            verbs: ["create", "get", "list", "watch", "delete"]
                .iter()
                .map(|v| v.to_string())
                .collect(),
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            name: buzz_conformance::testenv::RESTRICTED_USER.into(),
            namespace: None,
        }]),
    };
    Api::<RoleBinding>::namespaced(client, ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

const NOT_VISIBLE: &str = "events are not visible to this user (grant list/watch on events: ";

/// `provider_config` for a user whose Role has no `networkpolicies`: the
/// agent's NetworkPolicy is turned off, and its look for an earlier one is
/// refused and said (issue 53).
fn no_policy(ns: &str) -> serde_json::Map<String, Value> {
    let mut c = config(ns);
    c.insert("network_policy".into(), "none".into());
    c
}

/// Issue 21 part 2: a user without list/watch on events still deploys and is
/// told once that events are not visible; granted them, the notice is gone.
#[tokio::test]
async fn a_user_without_events_rights_still_deploys_and_is_told_once() {
    let ns = env().create_namespace("p-noevents").await.unwrap();
    grant_restricted(&ns, "buzz-no-events", &["pods", "secrets"]).await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&ns, Behavior::StartAfter(Duration::from_millis(1500)));
    let agent = TestAgent::new();
    let out = deploy(
        env().restricted_kubeconfig(),
        &deploy_request(&agent.payload(), no_policy(&ns)),
    )
    .await;
    assert_eq!(out.agent_id(), agent.pod_name(), "{}", out.stderr);
    assert!(
        out.stderr.contains("may not read networkpolicies"),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.stderr.matches(NOT_VISIBLE).count(),
        1,
        "the notice, once:\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("-n {ns}")) && out.stderr.contains("continuing without them"),
        "{}",
        out.stderr
    );

    // The positive control: with list/watch on events, no notice.
    grant_restricted(&ns, "buzz-events", &["events"]).await;
    let second = TestAgent::new();
    let out = deploy(
        env().restricted_kubeconfig(),
        &deploy_request(&second.payload(), no_policy(&ns)),
    )
    .await;
    assert_eq!(out.agent_id(), second.pod_name());
    assert!(!out.stderr.contains(NOT_VISIBLE), "{}", out.stderr);
}
