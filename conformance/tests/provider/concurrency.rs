//! §Conflicts converge: the 409 split and concurrent contenders.

use super::*;

/// 16. The 409 split, `AlreadyExists` arm, as a live interleave: the
/// winner's preflight GC runs between the real loser's Secret create and its
/// pod create, and the loser's Secret survives it — even though the winner
/// runs with a 3 s deadline and the Secret is by then 8 s old, older than 2 × 3 s
/// (the age gate never follows the deadline knob). The loser then cleans up
/// only its own Secret and adopts the winner. (The `Conflict` arm is case 7.)
#[tokio::test]
async fn create_loser_cleans_only_its_own_secret_and_adopts_the_winner() {
    let c = case("p-loser").await;
    let _auto = c.starting().await;
    let proxy = env().start_proxy().await.unwrap();
    let winner_request = c.request();
    let direct = env().admin_kubeconfig().to_path_buf();
    let winner_out = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = winner_out.clone();
    let (client, ns, agent) = (c.client.clone(), c.ns.clone(), c.agent.clone());
    // Before the loser's pod create reaches the apiserver, another deploy runs to completion.
    proxy.on(Matcher::new(Verb::Create, "pods"), Some(1), move |_| {
        let (req, kc, slot) = (winner_request.clone(), direct.clone(), slot.clone());
        let (client, ns, agent) = (client.clone(), ns.clone(), agent.clone());
        async move {
            let before = secrets_of(&client, &ns, &agent).await.len();
            // Older than 2 × 3 s even on the apiserver's whole-second clocks.
            tokio::time::sleep(Duration::from_secs(8)).await;
            let out = provider()
                .deploy(&kc, &req, &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "3")])
                .await;
            let after = secrets_of(&client, &ns, &agent).await.len();
            *slot.lock().unwrap() = Some((out, before, after));
        }
    });
    let loser = deploy(proxy.admin_kubeconfig(), &c.request()).await;
    let (winner, before, after) = winner_out.lock().unwrap().take().expect("the winner ran");
    assert_eq!(before, 1, "the loser's Secret exists when the winner starts");
    assert_eq!(
        after, 2,
        "the winner's GC left the loser's in-flight Secret alone: {}",
        winner.stderr
    );
    assert_eq!(
        winner.agent_id(),
        loser.agent_id(),
        "both return the one live pod"
    );
    assert!(loser.stderr.contains("adopting"), "{}", loser.stderr);
    let pod = c.pod().await;
    let remaining: Vec<String> = secrets_of(&c.client, &c.ns, &c.agent)
        .await
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        remaining,
        vec![secret_ref(&pod)],
        "the loser deleted exactly its own Secret"
    );
    assert_eq!(proxy.count(Verb::Delete, "pods"), 0);
    assert_eq!(proxy.count(Verb::Delete, "secrets"), 1);
}

/// 17a. Concurrency: 5 concurrent deploys with the same payload, 10 times:
/// one live pod every time, and every call returns its id.
#[tokio::test]
async fn five_concurrent_identical_deploys_converge_ten_times() {
    let ns = env().create_namespace("p-conc").await.unwrap();
    let client = admin().await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&ns, Behavior::StartAfter(Duration::from_millis(200)));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for round in 0..10 {
        let agent = TestAgent::new();
        let req = deploy_request(&agent.payload(), config(&ns));
        let runs = (0..5).map(|_| {
            let req = req.clone();
            async move { deploy(env().admin_kubeconfig(), &req).await }
        });
        let outs = futures::future::join_all(runs).await;
        for o in &outs {
            assert_eq!(o.agent_id(), agent.pod_name(), "round {round}");
        }
        let sel = format!("buzz.block.xyz/agent-pubkey={}", &agent.pubkey[..32]);
        let live = pods
            .list(&ListParams::default().labels(&sel))
            .await
            .unwrap()
            .items;
        assert_eq!(live.len(), 1, "round {round}: one pod");
        assert!(running(&live[0]));
        let c = Case {
            ns: ns.clone(),
            agent: agent.clone(),
            pods: pods.clone(),
            client: client.clone(),
        };
        assert_eq!(
            secrets_of(&client, &ns, &agent).await.len(),
            1,
            "round {round}: losers cleaned their Secrets"
        );
        drop(c);
    }
}

/// 17b. Two contenders with different payloads: the create loser adopts the
/// elected winner (no divergence delete); a later deploy replaces the
/// never-started divergent winner. The race is made deterministic with the
/// proxy: contender B runs to completion while A's pod create is held.
#[tokio::test]
async fn different_payload_contenders_then_a_later_deploy_replaces_the_winner() {
    let c = case("p-diverge").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::never_start("ImagePullBackOff"));
    let proxy = env().start_proxy().await.unwrap();
    let a = c.request_with(json!({ "cpu_request": "500m" }));
    let b = c.request_with(json!({ "cpu_request": "750m" }));
    let direct = env().admin_kubeconfig().to_path_buf();
    let b_hook = b.clone();
    proxy.on(Matcher::new(Verb::Create, "pods"), Some(1), move |_| {
        let (req, kc) = (b_hook.clone(), direct.clone());
        async move {
            let out = provider()
                .deploy(&kc, &req, &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "4")])
                .await;
            assert!(
                out.error().contains("not confirmed"),
                "B wins and waits: {}",
                out.response
            );
        }
    });
    let out = deploy_env(
        proxy.admin_kubeconfig(),
        &a,
        &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "12")],
    )
    .await;
    assert!(out.error().contains("not confirmed"), "{}", out.response);
    assert!(
        out.stderr.contains("adopting"),
        "A lost the create: {}",
        out.stderr
    );
    assert_eq!(
        proxy.count(Verb::Delete, "pods"),
        0,
        "the loser never deletes the divergent winner"
    );
    let winner = c.pod().await;
    let cpu = |p: &Pod| {
        p.spec.as_ref().unwrap().containers[0]
            .resources
            .clone()
            .unwrap()
            .requests
            .unwrap()["cpu"]
            .0
            .clone()
    };
    assert_eq!(cpu(&winner), "750m", "B won");

    let err = deploy_env(
        proxy.admin_kubeconfig(),
        &a,
        &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "4")],
    )
    .await
    .error();
    assert!(err.contains("not confirmed"), "{err}");
    assert_eq!(
        proxy.count(Verb::Delete, "pods"),
        1,
        "a later deploy replaces the never-started divergent winner"
    );
    let replaced = c.pod().await;
    assert_ne!(uid(&replaced), uid(&winner));
    assert_eq!(cpu(&replaced), "500m");
}
