//! Writes the apiserver committed but whose answer the provider never heard
//! (review b30b1a0 #10): the fault proxy forwards the create, lets the
//! apiserver answer in full, then answers the provider a 500 or drops the
//! connection. The provider retries the create, meets its own object
//! (`AlreadyExists`) and must recognise it: the deploy succeeds and the
//! Secret the pod references is still there.

use super::*;

/// Deploys through `proxy` with a kubelet that runs a pod only once every
/// Secret it references exists, and checks the outcome: success, one create
/// retried, exactly one Secret (the pod's), nothing deleted.
async fn deploys_through_a_lost_answer(
    c: &Case,
    proxy: &buzz_conformance::testenv::FaultProxy,
    resource: &str,
) {
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::Faithful);
    let out = deploy(proxy.admin_kubeconfig(), &c.request()).await;
    assert_eq!(out.agent_id(), c.agent.pod_name());
    assert_eq!(
        proxy.count(Verb::Create, resource),
        2,
        "the lost create was retried once and met its own {resource}; stderr:\n{}",
        out.stderr
    );
    let pod = c.pod().await;
    assert!(running(&pod), "the pod runs: it found its Secret");
    let secrets = secrets_of(&c.client, &c.ns, &c.agent).await;
    let names: Vec<String> = secrets.iter().filter_map(|s| s.metadata.name.clone()).collect();
    assert_eq!(
        names,
        vec![secret_ref(&pod)],
        "the pod's Secret, and only it, remains; stderr:\n{}",
        out.stderr
    );
    assert_eq!(
        proxy.count(Verb::Delete, "secrets"),
        0,
        "no Secret was deleted; stderr:\n{}",
        out.stderr
    );
    assert_eq!(proxy.count(Verb::Delete, "pods"), 0);
}

/// The first pod create is committed, and its answer replaced by a 500.
#[tokio::test]
async fn a_committed_pod_create_whose_answer_is_lost_keeps_its_secret_and_succeeds() {
    let c = case("p-lostpod").await;
    let proxy = env().start_proxy().await.unwrap();
    proxy.fail_after_forward(Matcher::new(Verb::Create, "pods").namespace(&c.ns), 500, Some(1));
    deploys_through_a_lost_answer(&c, &proxy, "pods").await;
}

/// The first Secret create is committed, and its connection dropped before
/// the answer.
#[tokio::test]
async fn a_committed_secret_create_whose_answer_is_lost_is_used_and_succeeds() {
    let c = case("p-lostsecret").await;
    let proxy = env().start_proxy().await.unwrap();
    proxy.reset_after_forward(Matcher::new(Verb::Create, "secrets").namespace(&c.ns), Some(1));
    deploys_through_a_lost_answer(&c, &proxy, "secrets").await;
}
