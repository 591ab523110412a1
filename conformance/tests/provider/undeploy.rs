//! `undeploy` (issue 21 part 1): every verified pod and Secret of the agent
//! removed with fenced deletes, nothing unverified touched, idempotent, the
//! stuck-deployment way out, and convergence with a racing `deploy` — against
//! the real apiserver, with the kubelet driver playing the node.

use super::*;
use buzz_contract::wire::{UndeployAgent, UndeployRequest};

pub(super) fn undeploy_request(agent: &TestAgent, provider_config: serde_json::Map<String, Value>) -> Value {
    serde_json::to_value(UndeployRequest {
        op: "undeploy".into(),
        request_id: Some("suite".into()),
        agent: UndeployAgent {
            name: "suite agent".into(),
            pubkey: agent.pubkey.clone(),
        },
        provider_config,
        keep_workspace: false,
    })
    .expect("serialize")
}

async fn undeploy(kubeconfig: &Path, request: &Value) -> Outcome {
    provider().deploy(kubeconfig, request, &[]).await
}

/// `(pods, secrets)` of a success, panicking with the error otherwise.
fn removed(o: &Outcome) -> (u64, u64) {
    assert_eq!(
        o.response["ok"], true,
        "undeploy failed: {}\nstderr:\n{}",
        o.response, o.stderr
    );
    let r = &o.response["removed"];
    assert_eq!(
        o.response.as_object().unwrap().len(),
        2,
        "exactly ok + removed: {}",
        o.response
    );
    (r["pods"].as_u64().unwrap(), r["secrets"].as_u64().unwrap())
}

impl Case {
    fn undeploy_request(&self) -> Value {
        undeploy_request(&self.agent, config(&self.ns))
    }
    async fn nothing_left(&self) -> bool {
        self.pods.get_opt(&self.agent.pod_name()).await.unwrap().is_none()
            && secrets_of(&self.client, &self.ns, &self.agent).await.is_empty()
    }
}

/// A running harness pod: undeploy deletes it gracefully (the driver, as a
/// kubelet, marks the harness `Completed` after its SIGTERM and finalizes
/// after 1 s), waits for it to disappear, then removes its Secret, and
/// answers the counts. A second undeploy answers 0/0.
#[tokio::test]
async fn undeploy_of_a_running_pod_removes_pod_and_secret_and_is_idempotent() {
    let c = case("p-undeploy").await;
    let kubelet = env().kubelet().await.unwrap();
    let auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(50)));
    auto.set_finalize_delay(Duration::from_secs(1));
    deploy(env().admin_kubeconfig(), &c.request()).await.agent_id();
    assert!(running(&c.pod().await));
    let proxy = env().start_proxy().await.unwrap();
    let out = undeploy(proxy.admin_kubeconfig(), &c.undeploy_request()).await;
    assert_eq!(removed(&out), (1, 1));
    assert!(
        out.elapsed >= Duration::from_secs(1),
        "undeploy returned before the graceful stop ended"
    );
    assert!(c.nothing_left().await, "{}", out.stderr);
    assert_eq!(proxy.count(Verb::Delete, "pods"), 1);
    assert_eq!(proxy.count(Verb::Delete, "secrets"), 1);
    println!("undeploy of a running pod: {} API requests", proxy.total());

    let again = undeploy(env().admin_kubeconfig(), &c.undeploy_request()).await;
    assert_eq!(removed(&again), (0, 0));
}

/// Objects with the agent label but no marker, or the wrong full-pubkey
/// annotation, are never touched; the answer names them as left.
#[tokio::test]
async fn unmarked_or_foreign_objects_are_untouched_and_reported() {
    let c = case("p-undeploy-left").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::Manual);
    let mut unmarked = buzz_backend_kubernetes::podspec::pod(
        &c.agent.pubkey,
        &buzz_backend_kubernetes::podspec::PodIntent::from_config(
            &buzz_backend_kubernetes::config::ProviderConfig::parse(&json!(config(&c.ns)), None).unwrap(),
            &c.agent.pubkey,
        ),
        &"cc".repeat(16),
    );
    unmarked
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("app.kubernetes.io/managed-by");
    c.pods.create(&PostParams::default(), &unmarked).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), &c.ns);
    let mut foreign = inflight_secret(&c, &"dd".repeat(16));
    foreign
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("buzz.block.xyz/agent-pubkey-full".into(), "f".repeat(64));
    secrets.create(&PostParams::default(), &foreign).await.unwrap();

    let err = undeploy(env().admin_kubeconfig(), &c.undeploy_request())
        .await
        .error();
    assert!(err.contains("left: 2 object(s)"), "{err}");
    assert!(
        err.contains(&format!("pod {}", c.agent.pod_name())) && err.contains("not the marker"),
        "{err}"
    );
    assert!(err.contains("annotation names another key"), "{err}");
    assert!(c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_some());
    assert_eq!(secrets_of(&c.client, &c.ns, &c.agent).await.len(), 1);
}

/// A wrong key format or an unknown namespace is an in-band error and
/// deletes nothing; a stray nsec in the request is ignored and never echoed.
#[tokio::test]
async fn bad_key_or_unknown_namespace_deletes_nothing() {
    let c = case("p-undeploy-bad").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(50)));
    deploy(env().admin_kubeconfig(), &c.request()).await.agent_id();
    let nsec = c.agent.nsec();
    for bad in [
        c.agent.pubkey.to_uppercase(),
        c.agent.pubkey[..63].to_string(),
        nsec.clone(),
    ] {
        let mut req = c.undeploy_request();
        req["agent"]["pubkey"] = json!(bad);
        let out = undeploy(env().admin_kubeconfig(), &req).await;
        let err = out.error();
        assert!(err.contains("64 lowercase hex"), "{err}");
        assert!(
            !out.stdout.contains(&bad) && !out.stderr.contains(&bad),
            "echoed: {err}"
        );
    }
    let missing = buzz_conformance::testenv::unique_name("p-nons");
    let err = undeploy(
        env().admin_kubeconfig(),
        &undeploy_request(&c.agent, config(&missing)),
    )
    .await
    .error();
    assert!(
        err.contains(&format!("namespace {missing} does not exist")),
        "{err}"
    );
    let err = undeploy(
        env().restricted_kubeconfig(),
        &undeploy_request(&c.agent, config(&missing)),
    )
    .await
    .error();
    assert!(
        err.contains(&format!("`kubectl auth can-i list pods -n {missing}`")),
        "{err}"
    );
    assert!(running(&c.pod().await), "nothing was deleted");
    assert_eq!(secrets_of(&c.client, &c.ns, &c.agent).await.len(), 1);

    let mut req = c.undeploy_request();
    req["agent"]["private_key_nsec"] = json!(nsec);
    let out = undeploy(env().admin_kubeconfig(), &req).await;
    assert_eq!(removed(&out), (1, 1));
    assert!(!out.stdout.contains(&nsec) && !out.stderr.contains(&nsec));
}

/// The stuck-deployment way out (open decision I): a never-started pod
/// (image pull failing, or unschedulable) and its Secret are removed, and
/// the next Start creates afresh.
#[tokio::test]
async fn never_started_pods_are_removed_and_the_next_start_creates_afresh() {
    let c = case("p-undeploy-stuck").await;
    let (_kubelet, auto, stuck) = c.stuck("ImagePullBackOff", env().admin_kubeconfig()).await;
    let out = undeploy(env().admin_kubeconfig(), &c.undeploy_request()).await;
    assert_eq!(removed(&out), (1, 1));
    assert!(c.nothing_left().await);
    auto.set_behavior(Behavior::StartAfter(Duration::from_millis(50)));
    deploy(env().admin_kubeconfig(), &c.request()).await.agent_id();
    assert_ne!(uid(&c.pod().await), uid(&stuck), "created afresh");

    let u = case("p-undeploy-unsched").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&u.ns, Behavior::Unschedulable);
    let short = [("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "2")];
    let err = deploy_env(env().admin_kubeconfig(), &u.request(), &short)
        .await
        .error();
    assert!(err.contains("not confirmed"), "{err}");
    let out = undeploy(env().restricted_kubeconfig(), &u.undeploy_request()).await;
    // The restricted user's namespace is another one: nothing to see here.
    assert!(out.response["ok"] == false, "{}", out.response);
    let out = undeploy(env().admin_kubeconfig(), &u.undeploy_request()).await;
    assert_eq!(removed(&out), (1, 1));
    assert!(u.nothing_left().await);
}

/// After a racing deploy D and undeploy U both return: nothing of the agent
/// exists, or exactly one running pod whose deploy reported success (and
/// only its own Secret).
async fn assert_converged(c: &Case, deploy_ok: bool, what: &str) {
    let pods = c
        .pods
        .list(
            &ListParams::default().labels(&format!("buzz.block.xyz/agent-pubkey={}", &c.agent.pubkey[..32])),
        )
        .await
        .unwrap()
        .items;
    let secrets: Vec<String> = secrets_of(&c.client, &c.ns, &c.agent)
        .await
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    match pods.as_slice() {
        [] => assert!(secrets.is_empty(), "{what}: no pod but Secrets {secrets:?}"),
        [p] => {
            assert!(deploy_ok, "{what}: a pod is left but the deploy failed");
            assert!(
                running(p) && p.metadata.deletion_timestamp.is_none(),
                "{what}: left pod not live"
            );
            assert_eq!(secrets, vec![secret_ref(p)], "{what}");
        }
        many => panic!("{what}: {} pods", many.len()),
    }
}

/// Order 1 — undeploy lands inside a deploy: U runs to completion between
/// D's Secret create and D's pod create. U must leave D's young,
/// unreferenced Secret (it says so), and D then starts its pod: one live pod.
#[tokio::test]
async fn undeploy_inside_a_deploy_converges() {
    let c = case("p-race-ud").await;
    let _auto = c.starting().await;
    let proxy = env().start_proxy().await.unwrap();
    let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (s, req, kc) = (
        slot.clone(),
        c.undeploy_request(),
        env().admin_kubeconfig().to_path_buf(),
    );
    proxy.on(Matcher::new(Verb::Create, "pods"), Some(1), move |_| {
        let (s, req, kc) = (s.clone(), req.clone(), kc.clone());
        async move {
            let out = undeploy(&kc, &req).await;
            *s.lock().unwrap() = Some(out);
        }
    });
    let d = deploy(proxy.admin_kubeconfig(), &c.request()).await;
    let u = slot.lock().unwrap().take().expect("the undeploy ran");
    let err = u.error();
    assert!(err.contains("may belong to a Start in progress"), "{err}");
    assert_eq!(d.agent_id(), c.agent.pod_name());
    assert_converged(&c, true, "undeploy inside deploy").await;
}

/// Order 2 — deploy lands inside an undeploy: a live pod; U's pod delete is
/// held until D has answered (D sees the live pod: no-op success); then, while
/// U waits for the stop, a second deploy D2 runs: it waits for the old pod to
/// go and creates a new one, which U then finds and removes too.
#[tokio::test]
async fn deploy_inside_an_undeploy_converges() {
    let c = case("p-race-du").await;
    let auto = c.starting().await;
    auto.set_finalize_delay(Duration::from_millis(600));
    deploy(env().admin_kubeconfig(), &c.request()).await.agent_id();
    let proxy = env().start_proxy().await.unwrap();
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (s, req, kc) = (slot.clone(), c.request(), env().admin_kubeconfig().to_path_buf());
    proxy.on(Matcher::new(Verb::Delete, "pods"), Some(1), move |_| {
        let (s, req, kc) = (s.clone(), req.clone(), kc.clone());
        async move {
            let out = deploy(&kc, &req).await;
            s.lock().unwrap().push(out);
        }
    });
    let (s, req, kc) = (slot.clone(), c.request(), env().admin_kubeconfig().to_path_buf());
    proxy.on(Matcher::new(Verb::Watch, "pods"), Some(1), move |_| {
        let (s, req, kc) = (s.clone(), req.clone(), kc.clone());
        async move {
            let out = deploy(&kc, &req).await;
            s.lock().unwrap().push(out);
        }
    });
    let u = undeploy(proxy.admin_kubeconfig(), &c.undeploy_request()).await;
    let ds = std::mem::take(&mut *slot.lock().unwrap());
    assert_eq!(ds.len(), 2, "both deploys ran");
    assert_eq!(ds[0].agent_id(), c.agent.pod_name(), "the live pod: no-op");
    let (pods, secrets) = removed(&u);
    assert!(pods >= 1 && secrets >= 1, "{}", u.response);
    let any_ok = ds.iter().any(|d| d.response["ok"] == true);
    assert_converged(&c, any_ok, "deploy inside undeploy").await;
    assert!(
        c.nothing_left().await,
        "U ran last, so nothing is left: {}",
        u.stderr
    );
}

/// Free-running: a deploy and an undeploy started together, 6 rounds with
/// alternating head starts; every round converges.
#[tokio::test]
async fn concurrent_deploy_and_undeploy_converge() {
    let c = case("p-race-free").await;
    let _auto = c.starting().await;
    // U talks through a proxy that, before forwarding each of U's pod and
    // Secret lists, takes its own quorum list of the agent's objects: what
    // that list holds was committed before U's list was served, so U saw it
    // (review 9b395e0, "Tests that cannot fail": the launcher clears
    // `agent_id` on U's `ok:true`, so "U ok:true ⇒ nothing U saw is left"
    // is the property that matters; an object created after U's last list
    // is D's, legitimately left).
    let proxy = env().start_proxy().await.unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::<String>::new()));
    for resource in ["pods", "secrets"] {
        let (seen, client, ns) = (seen.clone(), c.client.clone(), c.ns.clone());
        let sel = format!("buzz.block.xyz/agent-pubkey={}", &c.agent.pubkey[..32]);
        proxy.on(
            Matcher::new(Verb::List, resource).namespace(&c.ns),
            None,
            move |_| {
                let (seen, client, ns, sel) = (seen.clone(), client.clone(), ns.clone(), sel.clone());
                async move {
                    let lp = ListParams::default().labels(&sel);
                    let pods = Api::<Pod>::namespaced(client.clone(), &ns).list(&lp).await;
                    let secrets = Api::<Secret>::namespaced(client, &ns).list(&lp).await;
                    let mut s = seen.lock().unwrap();
                    for p in pods.map(|l| l.items).unwrap_or_default() {
                        s.insert(format!("pod {}", uid(&p)));
                    }
                    for x in secrets.map(|l| l.items).unwrap_or_default() {
                        s.insert(format!("secret {}", x.metadata.uid.unwrap_or_default()));
                    }
                }
            },
        );
    }
    let mut answered_ok = 0;
    for round in 0..6u64 {
        let what = format!("round {round}");
        seen.lock().unwrap().clear();
        let (dreq, ureq) = (c.request(), c.undeploy_request());
        let head = Duration::from_millis(40 * round);
        let d = async {
            if round % 2 == 1 {
                tokio::time::sleep(head).await;
            }
            deploy(env().admin_kubeconfig(), &dreq).await
        };
        let u = async {
            if round % 2 == 0 {
                tokio::time::sleep(head).await;
            }
            undeploy(proxy.admin_kubeconfig(), &ureq).await
        };
        let (d, u) = tokio::join!(d, u);
        assert_converged(&c, d.response["ok"] == true, &what).await;
        if u.response["ok"] == true {
            answered_ok += 1;
            let lp = ListParams::default()
                .labels(&format!("buzz.block.xyz/agent-pubkey={}", &c.agent.pubkey[..32]));
            let mut now: Vec<String> = c
                .pods
                .list(&lp)
                .await
                .unwrap()
                .items
                .iter()
                .map(|p| format!("pod {}", uid(p)))
                .collect();
            now.extend(
                secrets_of(&c.client, &c.ns, &c.agent)
                    .await
                    .into_iter()
                    .map(|s| format!("secret {}", s.metadata.uid.unwrap_or_default())),
            );
            let seen = seen.lock().unwrap();
            let survivors: Vec<&String> = now.iter().filter(|o| seen.contains(*o)).collect();
            assert!(
                survivors.is_empty(),
                "{what}: U answered ok:true ({}) yet objects it saw survive: {survivors:?}\nU stderr:\n{}",
                u.response,
                u.stderr
            );
        } else {
            // Its failure names what it left, never "not ours" of our own.
            let err = u.error();
            assert!(!err.contains("not provably"), "{what}: {err}");
        }
    }
    println!("concurrent deploy/undeploy: U answered ok:true in {answered_ok} of 6 rounds");
}
