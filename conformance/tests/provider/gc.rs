//! §K8s GC: the orphan-Secret age gate and the same-clock rule.

use super::*;

/// 13 + 14. GC vs an in-flight attempt, and provider death: a young
/// unreferenced Secret (another attempt between its Secret create and its
/// pod create, or one whose provider died) survives preflight GC; once older
/// than the age gate on the apiserver's clock, a later pass reaps it. The
/// gate (2 × 600 s in production) is lowered to 8 s by the test-only knob.
#[tokio::test]
async fn young_unreferenced_secret_survives_gc_until_the_age_gate() {
    let c = case("p-gcgate").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(50)));
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), &c.ns);
    let inflight = inflight_secret(&c, &"aa".repeat(16));
    secrets.create(&PostParams::default(), &inflight).await.unwrap();
    let gate = [
        ("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "4"),
        ("BUZZ_K8S_TEST_ONLY_ORPHAN_MIN_AGE_SECS", "8"),
    ];
    deploy_env(env().admin_kubeconfig(), &c.request(), &gate)
        .await
        .agent_id();
    let name = inflight.metadata.name.clone().unwrap();
    assert!(
        secrets.get_opt(&name).await.unwrap().is_some(),
        "in-flight Secret deleted by GC"
    );

    // Provider death: nobody ever references it. After the 8 s gate it is reaped.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let out = deploy_env(env().admin_kubeconfig(), &c.request(), &gate).await;
    out.agent_id();
    assert!(
        secrets.get_opt(&name).await.unwrap().is_none(),
        "abandoned Secret not reaped: {}",
        out.stderr
    );
    assert_eq!(
        secrets_of(&c.client, &c.ns, &c.agent).await.len(),
        1,
        "the live generation's Secret stays"
    );
}

/// 15. Bad clocks: with the local clock an hour fast (libfaketime), or the
/// `Date` header stripped, no in-flight Secret is deleted.
#[tokio::test]
async fn local_clock_skew_or_missing_date_never_deletes_an_inflight_secret() {
    let c = case("p-clock").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(50)));
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), &c.ns);
    let inflight = inflight_secret(&c, &"bb".repeat(16));
    let name = inflight.metadata.name.clone().unwrap();
    secrets.create(&PostParams::default(), &inflight).await.unwrap();

    let faketime = buzz_conformance::provider_support::faketime_lib();
    let fast = [
        ("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "3"),
        ("BUZZ_K8S_TEST_ONLY_ORPHAN_MIN_AGE_SECS", "6"),
        ("LD_PRELOAD", faketime.to_str().unwrap()),
        ("FAKETIME", "+1h"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let out = deploy_env(env().admin_kubeconfig(), &c.request(), &fast).await;
    out.agent_id();
    assert!(
        out.stderr.contains("the local clock is 3") && out.stderr.contains("s ahead of the apiserver's"),
        "libfaketime did not take effect in the provider: {}",
        out.stderr
    );
    assert!(
        secrets.get_opt(&name).await.unwrap().is_some(),
        "a fast local clock deleted an in-flight Secret"
    );

    let proxy = env().start_proxy().await.unwrap();
    proxy.set_date_mode(DateMode::Strip);
    tokio::time::sleep(Duration::from_millis(6500)).await; // older than the 6 s gate on any clock
    let out = deploy_env(
        proxy.admin_kubeconfig(),
        &c.request(),
        &[
            ("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "3"),
            ("BUZZ_K8S_TEST_ONLY_ORPHAN_MIN_AGE_SECS", "6"),
        ],
    )
    .await;
    out.agent_id();
    assert!(
        secrets.get_opt(&name).await.unwrap().is_some(),
        "no Date header means no orphan GC"
    );
    assert!(out.stderr.contains("no usable Date header"), "{}", out.stderr);
}
