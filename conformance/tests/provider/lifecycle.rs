//! The deploy state machine's rows against the real apiserver: first deploy,
//! no-op, restart, the never-started rows, deletion marks, the crash loop.

use super::*;

/// 1. First deploy: the pod runs, and `agent_id` comes back only once the
/// container is running. The pod and Secret have the spec's shape.
#[tokio::test]
async fn first_deploy_returns_only_after_the_container_runs() {
    let c = case("p-first").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(1500)));
    let out = deploy(env().admin_kubeconfig(), &c.request()).await;
    assert_eq!(out.agent_id(), c.agent.pod_name());
    let pod = c.pod().await;
    assert!(running(&pod), "deploy returned before the container ran");
    assert_eq!(out.stdout.matches('\n').count(), 1, "exactly one output line");

    let meta = &pod.metadata;
    let labels = meta.labels.clone().unwrap();
    assert_eq!(labels["buzz.block.xyz/agent-pubkey"], c.agent.pubkey[..32]);
    assert_eq!(labels["app.kubernetes.io/managed-by"], "buzz-backend-kubernetes");
    assert_eq!(labels["buzz.block.xyz/binding-version"], "1");
    let ann = meta.annotations.clone().unwrap();
    assert_eq!(ann["buzz.block.xyz/agent-pubkey-full"], c.agent.pubkey);
    assert_eq!(ann["buzz.block.xyz/create-intent"].len(), 64);
    assert_eq!(
        ann["buzz.block.xyz/image"],
        container(&pod).unwrap().image_id,
        "the resolved image ID is recorded once running"
    );
    let spec = pod.spec.clone().unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.termination_grace_period_seconds, Some(60));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let ctr = &spec.containers[0];
    assert_eq!(ctr.name, "agent");
    assert_eq!(ctr.image.as_deref(), Some(IMAGE));
    assert_eq!(ctr.working_dir.as_deref(), Some("/home/agent"));
    let res = ctr.resources.clone().unwrap();
    assert_eq!(res.requests.unwrap()["memory"].0, "2Gi");
    assert_eq!(res.limits.unwrap()["cpu"].0, "2");

    let generation = ann["buzz.block.xyz/generation"].clone();
    assert!(buzz_contract::keys::is_hex32_lower(&generation));
    assert_eq!(secret_ref(&pod), format!("{}-{generation}", c.agent.pod_name()));
    let secret = Api::<Secret>::namespaced(c.client.clone(), &c.ns)
        .get(&secret_ref(&pod))
        .await
        .unwrap();
    assert_eq!(secret.immutable, Some(true));
    let data: std::collections::BTreeMap<String, String> = secret
        .data
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect();
    assert_eq!(data["BUZZ_PRIVATE_KEY"], c.agent.nsec());
    assert_eq!(data["NOSTR_PRIVATE_KEY"], c.agent.nsec());
    assert_eq!(
        data["BUZZ_MANAGED_AGENT_START_NONCE"], generation,
        "the nonce is the generation token"
    );
    assert_eq!(data["BUZZ_ACP_AGENT_OWNER"], c.agent.owner.public_key().to_hex());
    assert_eq!(data["BUZZ_ACP_EXIT_AFTER_INACTIVITY"], "7200");
    assert_eq!(data["BUZZ_ACP_DOZE"], "300", "the schema default of doze_seconds");
    assert_eq!(data["GOOSE_MODEL"], "suite-model");
    assert_eq!(data["GOOSE_MODE"], "auto");
    assert!(!data.contains_key("BUZZ_ACP_NO_PRESENCE"));
    assert!(!out.stderr.contains(&c.agent.nsec()), "no secret in diagnostics");
}

/// 2. Live agent: a second deploy is a strict no-op with zero mutations.
#[tokio::test]
async fn second_deploy_against_a_live_agent_mutates_nothing() {
    let c = case("p-noop").await;
    let _auto = c.starting().await;
    let proxy = env().start_proxy().await.unwrap();
    let first = deploy(proxy.admin_kubeconfig(), &c.request()).await.agent_id();
    let before = c.pod().await;
    proxy.reset_counts();
    let second = deploy(proxy.admin_kubeconfig(), &c.request()).await.agent_id();
    assert_eq!(first, second);
    assert_eq!(
        proxy.mutations(),
        0,
        "no-op means zero mutation: {:?}",
        proxy.counts()
    );
    assert_eq!(uid(&c.pod().await), uid(&before));
}

/// 3. Restart path: a terminated pod is deleted (with its Secret), its
/// disappearance awaited, and the pod recreated.
#[tokio::test]
async fn terminated_pod_is_replaced_on_the_next_start() {
    let c = case("p-restart").await;
    let (kubelet, auto, old) = c.deployed().await;
    c.complete(&kubelet, &auto).await;
    deploy(env().admin_kubeconfig(), &c.request()).await.agent_id();
    let new = c.pod().await;
    assert_ne!(uid(&new), uid(&old), "recreated");
    assert!(running(&new));
    let secrets = secrets_of(&c.client, &c.ns, &c.agent).await;
    let names: Vec<String> = secrets.iter().map(|s| s.metadata.name.clone().unwrap()).collect();
    assert_eq!(
        names,
        vec![secret_ref(&new)],
        "the terminated generation's Secret went with its pod"
    );
}

/// 3b. A pod replaced before its phase says so (the container exited, the
/// phase still `Running`: a Start right after a stop) is not GC's but the
/// loop's to delete, and its Secret goes with it: nothing is left for an
/// `undeploy` to find young and unreferenced.
#[tokio::test]
async fn a_pod_replaced_while_its_phase_lags_takes_its_secret_with_it() {
    let c = case("p-replace").await;
    let (kubelet, auto, old) = c.deployed().await;
    auto.set_behavior(Behavior::Manual);
    kubelet
        .set_container_exited(&c.ns, &c.agent.pod_name(), 0)
        .await
        .unwrap();
    auto.set_behavior(QUICK_START);
    let out = deploy(env().admin_kubeconfig(), &c.request()).await;
    out.agent_id();
    let new = c.pod().await;
    assert_ne!(uid(&new), uid(&old), "recreated");
    let names: Vec<String> = secrets_of(&c.client, &c.ns, &c.agent)
        .await
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        vec![secret_ref(&new)],
        "the replaced pod's Secret went with it: {}",
        out.stderr
    );
}

/// 4. Slow scheduling: `Unschedulable` is observed without deletion; when it
/// heals only after the deadline, the original pod and its creationTimestamp
/// survive and a later deploy adopts it (the anti-livelock case).
#[tokio::test]
async fn unschedulable_past_the_deadline_survives_and_is_adopted_later() {
    let c = case("p-sched").await;
    let kubelet = env().kubelet().await.unwrap();
    let auto = kubelet.automate(&c.ns, Behavior::Unschedulable);
    let proxy = env().start_proxy().await.unwrap();
    let short = [("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "5")];
    let out = deploy_env(proxy.admin_kubeconfig(), &c.request(), &short).await;
    let err = out.error();
    assert!(
        err.contains("not confirmed within 5 s") && err.contains("Unschedulable"),
        "{err}"
    );
    assert!(
        out.stderr.contains("Unschedulable"),
        "progress names the condition: {}",
        out.stderr
    );
    let original = c.pod().await;
    assert_eq!(proxy.count(Verb::Delete, "pods"), 0, "observe, never delete");

    auto.set_behavior(QUICK_START);
    let id = deploy(proxy.admin_kubeconfig(), &c.request()).await.agent_id();
    let adopted = c.pod().await;
    assert_eq!(id, c.agent.pod_name());
    assert_eq!(uid(&adopted), uid(&original), "the same pod was adopted");
    assert_eq!(
        adopted.metadata.creation_timestamp,
        original.metadata.creation_timestamp
    );
    assert_eq!(proxy.count(Verb::Delete, "pods"), 0);
}

/// 5. Identical Starts against a permanently Pending pod delete nothing,
/// whatever the pod's age.
#[tokio::test]
async fn identical_starts_against_a_permanently_pending_pod_delete_nothing() {
    let c = case("p-pending").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(
        &c.ns,
        Behavior::NeverStart {
            reason: "ImagePullBackOff".into(),
            message: "Back-off pulling image".into(),
        },
    );
    let proxy = env().start_proxy().await.unwrap();
    let short = [("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "5")];
    let mut first_uid = None;
    for _ in 0..3 {
        let err = deploy_env(proxy.admin_kubeconfig(), &c.request(), &short)
            .await
            .error();
        assert!(
            err.contains("ImagePullBackOff for image registry.test/buzz-sprig:v1"),
            "{err}"
        );
        let u = uid(&c.pod().await);
        assert_eq!(first_uid.get_or_insert(u.clone()), &u);
    }
    assert_eq!(proxy.count(Verb::Delete, "pods"), 0);
    assert_eq!(proxy.count(Verb::Create, "pods"), 1, "one pod, ever");
}

/// 6. Missing Secret: a referenced Secret confirmed absent gets a fenced
/// delete-recreate — the never-started winner is repaired.
#[tokio::test]
async fn never_started_pod_whose_secret_is_gone_is_repaired() {
    let c = case("p-nosecret").await;
    let (_kubelet, auto, broken) = c.stuck("ContainerCreating", env().admin_kubeconfig()).await;
    Api::<Secret>::namespaced(c.client.clone(), &c.ns)
        .delete(&secret_ref(&broken), &DeleteParams::default())
        .await
        .unwrap();
    auto.set_behavior(Behavior::Faithful);
    wait_for_pod(&c.pods, &c.agent.pod_name(), "CreateContainerConfigError", |p| {
        container(p)
            .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
            .as_deref()
            == Some("CreateContainerConfigError")
    })
    .await;
    let out = deploy(env().admin_kubeconfig(), &c.request()).await;
    out.agent_id();
    let repaired = c.pod().await;
    assert_ne!(
        uid(&repaired),
        uid(&broken),
        "delete-recreate, never a silent no-op"
    );
    assert!(running(&repaired));
    assert!(out.stderr.contains("confirmed absent"), "{}", out.stderr);
}

/// 7. The classification→DELETE race: the container starts between the read
/// that authorised the delete and the delete; the precondition fails (409
/// `Conflict`), the provider re-reads, and the live agent is kept.
#[tokio::test]
async fn container_starting_before_the_fenced_delete_is_kept() {
    let c = case("p-race").await;
    let (kubelet, auto, original) = c.stuck("ImagePullBackOff", env().admin_kubeconfig()).await;
    auto.set_behavior(Behavior::Manual);

    let proxy = env().start_proxy().await.unwrap();
    let (k, ns, name) = (kubelet.clone(), c.ns.clone(), c.agent.pod_name());
    proxy.on(
        Matcher::new(Verb::Delete, "pods").name(&name),
        Some(1),
        move |_| {
            let (k, ns, name) = (k.clone(), ns.clone(), name.clone());
            async move {
                k.set_running(&ns, &name, 0)
                    .await
                    .expect("start the container under the delete");
            }
        },
    );
    // A corrected image makes the never-started pod divergent → Replace.
    let fixed = c.request_with(json!({ "image": "registry.test/buzz-sprig:v2" }));
    let out = deploy(proxy.admin_kubeconfig(), &fixed).await;
    assert_eq!(out.agent_id(), c.agent.pod_name(), "the live agent is returned");
    let kept = c.pod().await;
    assert_eq!(
        uid(&kept),
        uid(&original),
        "the precondition protected the live pod"
    );
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert_eq!(proxy.count(Verb::Delete, "pods"), 1, "one fenced delete, refused");
    assert!(out.stderr.contains("changed since it was read"), "{}", out.stderr);
}

/// 8. Corrected config: a resource or image correction against a never-started
/// pod (pull wedge included) replaces it; against a started pod it is a no-op.
#[tokio::test]
async fn corrected_config_replaces_a_never_started_pod_but_not_a_started_one() {
    let c = case("p-correct").await;
    let kubelet = env().kubelet().await.unwrap();
    let auto = kubelet.automate(&c.ns, Behavior::never_start("ImagePullBackOff"));
    let short = [("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "5")];
    let bad = c.request_with(json!({ "image": "registry.test/typo:v1" }));
    let err = deploy_env(env().admin_kubeconfig(), &bad, &short).await.error();
    assert!(
        err.contains("ImagePullBackOff for image registry.test/typo:v1"),
        "names the stuck image: {err}"
    );
    let wedged = c.pod().await;

    // The kubelet keeps the replacement pending, so only a replacement explains a new pod.
    let replaced = c.unconfirmed(env().admin_kubeconfig(), &c.request(), "5").await;
    assert_ne!(
        uid(&replaced),
        uid(&wedged),
        "the pull wedge is escaped by correcting image"
    );
    assert_eq!(
        replaced.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some(IMAGE)
    );
    auto.set_behavior(QUICK_START);
    deploy(env().admin_kubeconfig(), &c.request()).await.agent_id();
    assert_eq!(
        uid(&c.pod().await),
        uid(&replaced),
        "same intent: the replacement is adopted once it runs"
    );

    let proxy = env().start_proxy().await.unwrap();
    let more_memory = c.request_with(json!({ "memory_request": "3Gi" }));
    deploy(proxy.admin_kubeconfig(), &more_memory).await.agent_id();
    assert_eq!(
        proxy.mutations(),
        0,
        "a started pod is strict no-op whatever its fingerprint"
    );
    assert_eq!(uid(&c.pod().await), uid(&replaced));
}

/// 9. Provider upgrade: a changed baked default image against a never-started
/// pod counts as divergence and replaces it.
#[tokio::test]
async fn a_changed_default_image_replaces_a_never_started_pod() {
    let c = case("p-upgrade").await;
    let kubelet = env().kubelet().await.unwrap();
    let auto = kubelet.automate(&c.ns, Behavior::never_start("ErrImagePull"));
    let v1 = format!("registry.test/buzz-sprig@sha256:{}", "1".repeat(64));
    let v2 = format!("registry.test/buzz-sprig@sha256:{}", "2".repeat(64));
    let mut cfg = config(&c.ns);
    cfg.remove("image");
    let req = deploy_request(&c.agent.payload(), cfg);
    let err = deploy_env(
        env().admin_kubeconfig(),
        &req,
        &[
            ("BUZZ_K8S_DEFAULT_IMAGE", &v1),
            ("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "5"),
        ],
    )
    .await
    .error();
    assert!(err.contains(&v1), "{err}");
    let old = c.pod().await;
    let err = deploy_env(
        env().admin_kubeconfig(),
        &req,
        &[
            ("BUZZ_K8S_DEFAULT_IMAGE", &v2),
            ("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "5"),
        ],
    )
    .await
    .error();
    assert!(err.contains(&v2), "the report names the new pod's image: {err}");
    drop(auto);
    let new = c.pod().await;
    assert_ne!(uid(&new), uid(&old));
    assert_eq!(
        new.spec.unwrap().containers[0].image.as_deref(),
        Some(v2.as_str())
    );
}

/// 10. Admission defaulting: the apiserver mutates every pod (tolerations,
/// DNS policy, …); the recorded fingerprint shows no false divergence.
#[tokio::test]
async fn admission_defaulting_causes_no_false_divergence() {
    let c = case("p-admission").await;
    let proxy = env().start_proxy().await.unwrap();
    let (_kubelet, _auto, live) = c.stuck("ContainerCreating", proxy.admin_kubeconfig()).await;
    let short = [("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "2")];
    let spec = live.spec.clone().unwrap();
    assert!(
        spec.tolerations.is_some_and(|t| !t.is_empty()),
        "admission added tolerations"
    );
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"), "defaulted");
    deploy_env(proxy.admin_kubeconfig(), &c.request(), &short)
        .await
        .error();
    assert_eq!(
        proxy.count(Verb::Delete, "pods"),
        0,
        "same intent: observed, never replaced"
    );
    assert_eq!(uid(&c.pod().await), uid(&live));
}

/// 20. Deletion-marked pod: deploy waits for it to disappear, then creates.
#[tokio::test]
async fn deletion_marked_pod_is_awaited_then_replaced() {
    let c = case("p-dying").await;
    let (_kubelet, auto, old) = c.deployed().await;
    auto.set_finalize_delay(Duration::from_millis(1500));
    c.pods
        .delete(&c.agent.pod_name(), &DeleteParams::default())
        .await
        .unwrap();
    let dying = c.pod().await;
    assert!(
        dying.metadata.deletion_timestamp.is_some() && running(&dying),
        "still Running while dying"
    );
    let out = deploy(env().admin_kubeconfig(), &c.request()).await;
    out.agent_id();
    let new = c.pod().await;
    assert_ne!(uid(&new), uid(&old), "the dying instance's id is not a success");
    assert!(out.stderr.contains("finish terminating"), "{}", out.stderr);
}

/// 21. `inactivity_seconds: 0` → `restartPolicy: OnFailure`: a crash loop is
/// reported and never deleted; a clean exit completes the pod.
#[tokio::test]
async fn on_failure_crash_loop_is_reported_and_clean_exit_completes() {
    let c = case("p-onfail").await;
    let auto = c.crash_looping().await;
    let proxy = env().start_proxy().await.unwrap();
    let indefinite = c.request_with(json!({ "inactivity_seconds": 0 }));
    let err = deploy(proxy.admin_kubeconfig(), &indefinite).await.error();
    assert!(
        err.contains("crash-looping") && err.contains("exit code 2"),
        "{err}"
    );
    let pod = c.pod().await;
    assert_eq!(
        pod.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("OnFailure")
    );
    let err = deploy(proxy.admin_kubeconfig(), &indefinite).await.error();
    assert!(err.contains("crash-looping"), "{err}");
    assert_eq!(
        proxy.count(Verb::Delete, "pods"),
        0,
        "a crash loop is never deleted"
    );

    // A fresh agent whose harness starts, then exits 0 on purpose.
    let c2 = Case {
        agent: TestAgent::new(),
        ..c
    };
    auto.set_behavior(Behavior::RunThenExit {
        after: Duration::from_millis(500),
        code: 0,
    });
    // The harness runs 500 ms: the deploy answers once it runs.
    deploy(
        env().admin_kubeconfig(),
        &c2.request_with(json!({ "inactivity_seconds": 0 })),
    )
    .await
    .agent_id();
    let done = wait_for_pod(&c2.pods, &c2.agent.pod_name(), "Succeeded", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
    })
    .await;
    assert_eq!(
        container(&done).unwrap().restart_count,
        0,
        "a clean exit is not restarted"
    );
}

/// 22. Hostile images: a startup that keeps failing returns the exit code,
/// the reason and the terminated `message` (the harness's termination
/// message, issue 30 item 3), with the agent's key redacted from it.
#[tokio::test]
async fn failed_startup_reports_exit_code_reason_and_the_message_with_the_key_redacted() {
    let c = case("p-hostile").await;
    let kubelet = env().kubelet().await.unwrap();
    let canary = format!("CANARY-{}", c.agent.nsec());
    let _auto = kubelet.automate(
        &c.ns,
        Behavior::FailStartup {
            code: 137,
            reason: "OOMKilled".into(),
            message: canary.clone(),
        },
    );
    let out = deploy(env().admin_kubeconfig(), &c.request()).await;
    let err = out.error();
    assert!(err.contains("exit code 137 (OOMKilled)"), "{err}");
    assert!(err.contains("the harness said: CANARY-"), "{err}");
    let nsec = c.agent.nsec();
    assert!(
        !err.contains(&nsec) && !out.stderr.contains(&nsec),
        "the key leaked: {err}\n{}",
        out.stderr
    );
    // One create attempt per call: the failed attempt stays for the next Start's GC.
    assert_eq!(secrets_of(&c.client, &c.ns, &c.agent).await.len(), 1);
}

/// Counts a fresh deploy's requests at a proxy: `(verb, resource) → n`.
async fn fresh_deploy_counts(
    prefix: &str,
    config: serde_json::Value,
) -> (std::collections::BTreeMap<(Verb, String), u64>, u64) {
    let c = case(prefix).await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(300)));
    let proxy = env().start_proxy().await.unwrap();
    let request = c.request_with(config);
    let out = deploy(proxy.admin_kubeconfig(), &request).await;
    assert_eq!(out.agent_id(), c.agent.pod_name());
    let pod = c.pod().await;
    assert_eq!(
        pod.metadata.annotations.clone().unwrap()["buzz.block.xyz/image"],
        container(&pod).unwrap().image_id,
        "the annotation names the resolved image either way"
    );
    assert_eq!(
        out.response["generation"],
        pod.metadata.annotations.clone().unwrap()["buzz.block.xyz/generation"],
        "the answer names the running pod's generation"
    );
    (proxy.counts(), proxy.total())
}

/// Issue 49 item 3 (issue 22's goal): a fresh deploy of a digest-pinned
/// image (the default image always is) costs 7 requests: the preflight
/// lists, one create each, the Secret's ownerReference PATCH (issue 30 item
/// 5), one pod watch from the create to the event that shows the container
/// running (success needs no GET after it), and one events watch. The GET
/// before the create is the preflight list's answer; the image-ID PATCH
/// would repeat the pin. The agent's NetworkPolicy (issue 53) adds 3: its
/// GET, the list that tells whether it is the namespace's first, and its
/// create; with `network_policy: none`, the GET alone (a policy an earlier
/// Start made would be deleted).
#[tokio::test]
async fn a_fresh_deploy_of_a_pinned_image_costs_seven_requests_and_its_policy_three() {
    let pinned = buzz_conformance::testenv::resolved_image_id(IMAGE);
    let (counts, total) = fresh_deploy_counts("p-requests", serde_json::json!({ "image": pinned })).await;
    let n = |verb: Verb, resource: &str| counts.get(&(verb, resource.to_string())).copied().unwrap_or(0);
    assert_eq!(
        (n(Verb::List, "pods"), n(Verb::List, "secrets")),
        (1, 1),
        "the preflight lists: {counts:?}"
    );
    assert_eq!(
        (n(Verb::Create, "secrets"), n(Verb::Create, "pods")),
        (1, 1),
        "one create attempt: {counts:?}"
    );
    assert_eq!(
        n(Verb::Get, "secrets"),
        0,
        "the own Secret is not re-read: {counts:?}"
    );
    assert_eq!(
        n(Verb::Get, "pods"),
        0,
        "the watch event that shows it running answers: {counts:?}"
    );
    assert_eq!(n(Verb::Watch, "pods"), 1, "one wait, from the create: {counts:?}");
    assert_eq!(
        (n(Verb::List, "events"), n(Verb::Watch, "events")),
        (0, 1),
        "the pod's events, one watch, opened at the create: {counts:?}"
    );
    assert_eq!(
        n(Verb::Patch, "pods"),
        0,
        "the pin already names the image: {counts:?}"
    );
    assert_eq!(
        n(Verb::Patch, "secrets"),
        1,
        "the Secret's owner, once: {counts:?}"
    );
    assert_eq!(
        (
            n(Verb::Get, "networkpolicies"),
            n(Verb::List, "networkpolicies"),
            n(Verb::Create, "networkpolicies")
        ),
        (1, 1, 1),
        "the policy's read, the namespace's first, its create: {counts:?}"
    );
    assert_eq!(total, 10, "{counts:?}");
    let (counts, total) = fresh_deploy_counts(
        "p-requests-none",
        serde_json::json!({ "image": pinned, "network_policy": "none" }),
    )
    .await;
    assert_eq!(total, 8, "without the policy, its GET: {counts:?}");
}

/// Issue 49 item 3: the pod a watch event carries may end a deploy or keep
/// it watching, never authorize a delete. A never-started pod of an
/// earlier Start ends while this deploy watches it; the replacement that
/// follows is decided on a quorum GET made after that watch, and its fenced
/// delete carries that GET's resourceVersion (spec §Destructive decisions
/// come from views you control).
#[tokio::test]
async fn a_watched_change_that_would_replace_a_pod_is_read_again_before_the_delete() {
    let c = case("p-watch-fence").await;
    let kubelet = env().kubelet().await.unwrap();
    let auto = kubelet.automate(&c.ns, Behavior::never_start("ImagePullBackOff"));
    let earlier = c.unconfirmed(env().admin_kubeconfig(), &c.request(), "5").await;
    auto.set_behavior(Behavior::Manual);
    let proxy = env().start_proxy().await.unwrap();
    let name = c.agent.pod_name();
    let end_it_while_watched = async {
        let until = std::time::Instant::now() + Duration::from_secs(30);
        while proxy.count(Verb::Watch, "pods") == 0 {
            assert!(
                std::time::Instant::now() < until,
                "the deploy never watched the pod"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        c.complete(&kubelet, &auto).await;
    };
    let request = c.request();
    let (out, ()) = tokio::join!(deploy(proxy.admin_kubeconfig(), &request), end_it_while_watched);
    out.agent_id();
    assert_ne!(uid(&c.pod().await), uid(&earlier), "replaced");
    let pod_requests: Vec<Verb> = proxy
        .requests()
        .into_iter()
        .filter(|r| r.resource == "pods" && r.name.as_deref().is_none_or(|n| n == name))
        .map(|r| r.verb)
        .collect();
    let delete = pod_requests
        .iter()
        .position(|v| *v == Verb::Delete)
        .unwrap_or_else(|| panic!("no delete: {pod_requests:?}"));
    let last_watch = pod_requests[..delete]
        .iter()
        .rposition(|v| *v == Verb::Watch)
        .unwrap_or_else(|| panic!("no watch before the delete: {pod_requests:?}"));
    assert!(
        pod_requests[last_watch..delete].contains(&Verb::Get),
        "the delete followed the watch event without a quorum GET: {pod_requests:?}"
    );
}

/// A tag costs the one request more that records what it resolved to.
#[tokio::test]
async fn a_fresh_deploy_of_a_tag_records_the_resolved_image_with_one_patch() {
    let (counts, total) = fresh_deploy_counts("p-requests-tag", serde_json::json!({})).await;
    let n = |verb: Verb, resource: &str| counts.get(&(verb, resource.to_string())).copied().unwrap_or(0);
    assert_eq!(n(Verb::Patch, "pods"), 1, "{counts:?}");
    assert_eq!(total, 11, "the pinned image's 10 and the PATCH: {counts:?}");
}
