//! The agent's NetworkPolicy (issue 53) against the real apiserver, through
//! the shipped RBAC: created before the pod, adopted by a redeploy,
//! updated when its rules change, refused in-band when a foreign policy
//! holds the name, removed by `network_policy: none` and by undeploy. That
//! an enforcer makes it hold is `real_node_egress`'s.

use super::undeploy::undeploy_request;
use super::*;
use k8s_openapi::api::networking::v1::NetworkPolicy;

fn policies(c: &Case) -> Api<NetworkPolicy> {
    Api::namespaced(c.client.clone(), &c.ns)
}

fn policy_name(c: &Case) -> String {
    format!("buzz-agent-{}-egress", &c.agent.pubkey[..12])
}

/// Every (cidr, ports) of the policy's egress rules, as text.
fn rules(p: &NetworkPolicy) -> Vec<String> {
    let spec = p.spec.as_ref().unwrap();
    spec.egress
        .iter()
        .flatten()
        .map(|r| serde_json::to_string(&(&r.to, &r.ports)).unwrap())
        .collect()
}

const NOTE: &str = "whether it is enforced depends on the cluster's network plugin";

/// A deploy makes the policy before the pod; it selects the agent's pod by
/// its labels, lets nothing in, and names the relay's address and port. The
/// namespace's first deploy says that enforcement is the cluster's; the
/// next agent's does not say it again.
#[tokio::test]
async fn a_deploy_confines_its_pod_with_a_policy_made_before_the_pod() {
    let c = case("p-egress").await;
    shipped_role_in(&c).await;
    let _auto = c.starting().await;
    let proxy = env().start_proxy().await.unwrap();
    let out = deploy(proxy.restricted_kubeconfig(), &c.request()).await;
    out.agent_id();
    let order: Vec<String> = proxy
        .requests()
        .into_iter()
        .filter(|r| r.verb == Verb::Create)
        .map(|r| r.resource)
        .collect();
    assert_eq!(
        order.first().map(String::as_str),
        Some("networkpolicies"),
        "{order:?}"
    );
    let p = policies(&c).get(&policy_name(&c)).await.unwrap();
    let spec = p.spec.clone().unwrap();
    let labels = c.pod().await.metadata.labels.unwrap();
    let selects = spec.pod_selector.unwrap().match_labels.unwrap();
    assert!(
        selects.iter().all(|(k, v)| labels.get(k) == Some(v)),
        "{selects:?} vs {labels:?}"
    );
    assert_eq!(spec.policy_types.unwrap(), vec!["Ingress", "Egress"]);
    assert!(spec.ingress.unwrap_or_default().is_empty());
    assert!(
        rules(&p)
            .iter()
            .any(|r| r.contains("192.0.2.10/32") && r.contains("443")),
        "the relay's rule: {:?}",
        rules(&p)
    );
    assert_eq!(out.stderr.matches(NOTE).count(), 1, "{}", out.stderr);

    let other = Case {
        ns: c.ns.clone(),
        agent: TestAgent::new(),
        pods: c.pods.clone(),
        client: c.client.clone(),
    };
    let out = deploy(env().restricted_kubeconfig(), &other.request()).await;
    out.agent_id();
    assert!(
        policies(&c)
            .get_opt(&policy_name(&other))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        !out.stderr.contains(NOTE),
        "said once per namespace: {}",
        out.stderr
    );
}

/// A redeploy adopts the policy as it is (its UID stays); a changed
/// `egress_allow` replaces its rules in place.
#[tokio::test]
async fn a_redeploy_adopts_the_policy_and_a_changed_config_updates_it() {
    let c = case("p-egress-adopt").await;
    shipped_role_in(&c).await;
    let _auto = c.starting().await;
    deploy(env().restricted_kubeconfig(), &c.request())
        .await
        .agent_id();
    let first = policies(&c).get(&policy_name(&c)).await.unwrap();
    let proxy = env().start_proxy().await.unwrap();
    deploy(proxy.restricted_kubeconfig(), &c.request())
        .await
        .agent_id();
    assert_eq!(proxy.count(Verb::Create, "networkpolicies"), 0);
    assert_eq!(proxy.count(Verb::Update, "networkpolicies"), 0);
    let allow = c.request_with(json!({ "egress_allow": "10.44.0.0/16:8080" }));
    let out = deploy(env().restricted_kubeconfig(), &allow).await;
    out.agent_id();
    let now = policies(&c).get(&policy_name(&c)).await.unwrap();
    assert_eq!(now.metadata.uid, first.metadata.uid, "the same policy");
    assert!(
        rules(&now)
            .iter()
            .any(|r| r.contains("10.44.0.0/16") && r.contains("8080"))
    );
    assert!(out.stderr.contains("updated NetworkPolicy"), "{}", out.stderr);
}

/// A policy at the agent's name that is not this provider's is never
/// adopted or changed: the deploy fails in-band naming it, and makes no
/// pod and no Secret.
#[tokio::test]
async fn a_foreign_policy_at_the_name_is_refused_in_band() {
    for (prefix, labels) in [
        (
            "p-egress-foreign",
            json!({ "buzz.block.xyz/agent-pubkey": "0".repeat(32) }),
        ),
        ("p-egress-unmarked", json!({})),
    ] {
        let c = case(prefix).await;
        let mut labels = labels;
        if labels.as_object().unwrap().is_empty() {
            labels = json!({ "buzz.block.xyz/agent-pubkey": &c.agent.pubkey[..32] });
        }
        let foreign: NetworkPolicy = serde_json::from_value(json!({
            "metadata": {
                "name": policy_name(&c),
                "labels": labels,
                "annotations": { "buzz.block.xyz/agent-pubkey-full": c.agent.pubkey },
            },
            "spec": { "podSelector": {}, "policyTypes": ["Egress"] },
        }))
        .unwrap();
        policies(&c)
            .create(&PostParams::default(), &foreign)
            .await
            .unwrap();
        let _auto = c.starting().await;
        let err = deploy(env().admin_kubeconfig(), &c.request()).await.error();
        assert!(
            err.contains(&policy_name(&c)) && err.contains("nothing was changed"),
            "{err}"
        );
        assert!(c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_none());
        assert!(secrets_of(&c.client, &c.ns, &c.agent).await.is_empty());
        let still = policies(&c).get(&policy_name(&c)).await.unwrap();
        assert_eq!(still.spec, foreign.spec, "untouched");
    }
}

/// `network_policy: none` takes away the policy an earlier Start made, so
/// the pod is not confined; undeploy removes the policy after the pod and
/// counts it.
#[tokio::test]
async fn none_removes_the_policy_and_undeploy_removes_it_after_the_pod() {
    let c = case("p-egress-none").await;
    shipped_role_in(&c).await;
    let _auto = c.starting().await;
    deploy(env().restricted_kubeconfig(), &c.request())
        .await
        .agent_id();
    let none = c.request_with(json!({ "network_policy": "none" }));
    let out = deploy(env().restricted_kubeconfig(), &none).await;
    out.agent_id();
    assert!(
        policies(&c).get_opt(&policy_name(&c)).await.unwrap().is_none(),
        "{}",
        out.stderr
    );

    deploy(env().restricted_kubeconfig(), &c.request())
        .await
        .agent_id();
    assert!(policies(&c).get_opt(&policy_name(&c)).await.unwrap().is_some());
    let proxy = env().start_proxy().await.unwrap();
    let gone = deploy(
        proxy.restricted_kubeconfig(),
        &undeploy_request(&c.agent, config(&c.ns)),
    )
    .await;
    assert_eq!(gone.response["ok"], true, "{} {}", gone.response, gone.stderr);
    assert_eq!(
        gone.response["removed"]["network_policies"], 1,
        "{}",
        gone.response
    );
    assert!(policies(&c).get_opt(&policy_name(&c)).await.unwrap().is_none());
    let order: Vec<String> = proxy
        .requests()
        .into_iter()
        .filter(|r| r.verb == Verb::Delete)
        .map(|r| r.resource)
        .collect();
    assert_eq!(
        order.last().map(String::as_str),
        Some("networkpolicies"),
        "{order:?}"
    );
}
