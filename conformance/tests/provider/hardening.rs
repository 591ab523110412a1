//! Hardening cases: the budget runs from process start, a wrong ServiceAccount
//! fails at once, a crash loop has a way out, the GC age gate cannot shrink,
//! the default image follows upgrades, owners and tags are checked, and every
//! DELETE is fenced and keeps the grace period.

use super::*;
use buzz_conformance::provider_support::Spawn;

const DEADLINE: &str = "BUZZ_K8S_DEPLOY_DEADLINE_SECS";

/// `c`'s deploy through `kubeconfig` as a launcher runs it with N = 10 s:
/// stdin after `stdin_delay`, the provider's deadline 10 s, a kill 10 s
/// after spawn. The provider must answer first.
async fn launched_for_10s(kubeconfig: &Path, c: &Case, stdin_delay: Duration) -> Outcome {
    let launch = Spawn {
        stdin_delay,
        kill_after: Some(Duration::from_secs(10)),
    };
    let out = provider()
        .run_launched(kubeconfig, &c.request(), &[(DEADLINE, "10")], launch)
        .await;
    assert!(
        !out.killed,
        "killed at the launcher's deadline; stderr:\n{}",
        out.stderr
    );
    out
}

/// The deadline runs from process start. Stdin arrives 3 s after spawn and
/// the pod never starts; the launcher kills at N = 10 s from spawn. The
/// provider's budget is derived from the same N, so its in-band "not
/// confirmed" answer arrives before the kill.
#[tokio::test]
async fn the_in_band_answer_beats_a_launcher_kill_at_the_deadline() {
    let c = case("p-budget").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::never_start("ImagePullBackOff"));
    let out = launched_for_10s(env().admin_kubeconfig(), &c, Duration::from_secs(3)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let err = out.error();
    assert!(
        err.contains("not confirmed within 10 s") && err.contains("ImagePullBackOff"),
        "{err}"
    );
}

/// An attempt whose pod create is still unanswered when acting must stop
/// drops its own Secret (it holds the nsec) and answers in-band before the
/// launcher's kill. The held request is never forwarded.
#[tokio::test]
async fn an_attempt_out_of_time_before_its_pod_exists_drops_its_own_secret() {
    let c = case("p-budget2").await;
    let proxy = env().start_proxy().await.unwrap();
    proxy.delay(
        Matcher::new(Verb::Create, "pods"),
        Duration::from_secs(14),
        Some(1),
    );
    proxy.reset(Matcher::new(Verb::Create, "pods"), Some(1));
    let out = launched_for_10s(proxy.admin_kubeconfig(), &c, Duration::ZERO).await;
    let err = out.error();
    assert!(
        err.contains("reached its 10 s deadline while it was trying to create the agent pod"),
        "{err}"
    );
    assert!(
        secrets_of(&c.client, &c.ns, &c.agent).await.is_empty(),
        "the attempt's Secret was left behind"
    );
    assert_eq!(proxy.count(Verb::Delete, "secrets"), 1);
    assert!(c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_none());
}

/// A ServiceAccount named in `service_account` that does not exist is an
/// immediate in-band error naming it — not the namespace-`default` race — and
/// the Secret already created is dropped. (The real race: case 19.)
#[tokio::test]
async fn a_missing_named_service_account_fails_at_once_and_leaves_no_secret() {
    let c = case("p-nosa").await;
    let out = deploy(
        env().admin_kubeconfig(),
        &c.request_with(json!({ "service_account": "no-such-runner" })),
    )
    .await;
    let err = out.error();
    assert_eq!(
        err,
        format!(
            "ServiceAccount no-such-runner does not exist in namespace {ns}; create it (kubectl create serviceaccount no-such-runner -n {ns}) or clear service_account to use the namespace default. Nothing was left behind",
            ns = c.ns
        )
    );
    assert!(
        out.elapsed < Duration::from_secs(10),
        "waited {:?} against a 30 s deadline",
        out.elapsed
    );
    assert!(secrets_of(&c.client, &c.ns, &c.agent).await.is_empty());
    assert!(c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_none());
}

/// A crash loop has a way out: an identical Start reports the condition with
/// the last exit code and its meaning and deletes nothing; a Start with a
/// corrected config replaces the crash-looping pod (fenced delete) and runs.
#[tokio::test]
async fn a_crash_looping_pod_is_reported_to_an_identical_start_and_replaced_by_a_corrected_one() {
    let c = case("p-crashfix").await;
    let auto = c.crash_looping().await;
    let proxy = env().start_proxy().await.unwrap();
    let broken = c.request_with(json!({ "inactivity_seconds": 0, "memory_request": "3Gi" }));
    let err = deploy(proxy.admin_kubeconfig(), &broken).await.error();
    assert!(
        err.contains("crash-looping")
            && err.contains(
                "exit code 2 (Error): configuration error: a bad value or combination in the agent's settings"
            ),
        "{err}"
    );
    let looping = c.pod().await;

    let err = deploy(proxy.admin_kubeconfig(), &broken).await.error();
    assert!(
        err.contains("crash-looping") && err.contains("exit code 2 (Error): configuration error"),
        "{err}"
    );
    assert_eq!(
        proxy.count(Verb::Delete, "pods"),
        0,
        "an identical Start never deletes"
    );
    assert_eq!(uid(&c.pod().await), uid(&looping));

    // The kubelet is held, so only a replacement explains a new pod.
    auto.set_behavior(Behavior::Manual);
    let fixed = c.request_with(json!({ "inactivity_seconds": 0 }));
    let replaced = c.unconfirmed(proxy.admin_kubeconfig(), &fixed, "4").await;
    assert_ne!(uid(&replaced), uid(&looping), "replaced, not reported");
    assert_eq!(proxy.count(Verb::Delete, "pods"), 1, "one fenced delete");
    auto.set_behavior(QUICK_START);
    deploy(proxy.admin_kubeconfig(), &fixed).await.agent_id();
    let live = c.pod().await;
    assert_eq!(uid(&live), uid(&replaced), "the replacement runs");
    assert!(running(&live));
}

/// The GC age gate does not follow the deadline knob: a provider with a 1 s
/// deadline leaves a 3 s old unreferenced Secret alone (a default-deadline
/// contender may still be between its Secret create and its pod create).
#[tokio::test]
async fn a_short_deadline_provider_never_deletes_a_young_secret() {
    let c = case("p-gcfloor").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(50)));
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), &c.ns);
    let inflight = inflight_secret(&c, &"cc".repeat(16));
    let name = inflight.metadata.name.clone().unwrap();
    secrets.create(&PostParams::default(), &inflight).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await; // older than 2 × 1 s on any clock
    let proxy = env().start_proxy().await.unwrap();
    let out = deploy_env(proxy.admin_kubeconfig(), &c.request(), &[(DEADLINE, "1")]).await;
    assert!(
        secrets.get_opt(&name).await.unwrap().is_some(),
        "a short deadline shrank the age gate: {}",
        out.stderr
    );
    assert_eq!(proxy.count(Verb::Delete, "secrets"), 0);
}

/// An empty `image` means the provider's default, and follows it across an
/// upgrade (the default moves; the never-started pod is replaced with it).
#[tokio::test]
async fn an_empty_image_follows_the_default_across_an_upgrade() {
    let c = case("p-emptyimg").await;
    let kubelet = env().kubelet().await.unwrap();
    let auto = kubelet.automate(&c.ns, Behavior::never_start("ErrImagePull"));
    let v1 = format!("registry.test/buzz-sprig@sha256:{}", "3".repeat(64));
    let v2 = format!("registry.test/buzz-sprig@sha256:{}", "4".repeat(64));
    let req = c.request_with(json!({ "image": "" }));
    for default in [&v1, &v2] {
        let err = deploy_env(
            env().admin_kubeconfig(),
            &req,
            &[("BUZZ_K8S_DEFAULT_IMAGE", default), (DEADLINE, "4")],
        )
        .await
        .error();
        assert!(err.contains(default.as_str()), "{err}");
        let pod = c.pod().await;
        assert_eq!(
            pod.spec.unwrap().containers[0].image.as_deref(),
            Some(default.as_str())
        );
    }
    drop(auto);
}

/// A payload `auth_tag` that does not verify for the agent's key never
/// reaches the pod: `BUZZ_AUTH_TAG` is absent and the owner comes from
/// `launch.owner_pubkey`.
#[tokio::test]
async fn a_tag_that_fails_verification_is_not_written_to_the_pod() {
    let c = case("p-badtag").await;
    let _auto = c.starting().await;
    let mut payload = c.agent.payload();
    let stranger = nostr::Keys::generate();
    let foreign = buzz_contract::nip_oa::AuthTag::mint(&stranger, &"cd".repeat(32), "").unwrap();
    payload.auth_tag = Some(foreign.to_json());
    let out = deploy(env().admin_kubeconfig(), &deploy_request(&payload, config(&c.ns))).await;
    out.agent_id();
    assert!(out.stderr.contains("does not verify"), "{}", out.stderr);
    let secret = Api::<Secret>::namespaced(c.client.clone(), &c.ns)
        .get(&secret_ref(&c.pod().await))
        .await
        .unwrap();
    let data = secret.data.unwrap();
    assert!(!data.contains_key("BUZZ_AUTH_TAG"), "the bad tag reached the pod");
    assert_eq!(
        String::from_utf8(data["BUZZ_ACP_AGENT_OWNER"].0.clone()).unwrap(),
        c.agent.owner.public_key().to_hex()
    );
}

/// An owner equal to the agent is refused before any cluster contact.
#[tokio::test]
async fn an_owner_equal_to_the_agent_is_refused_before_any_request() {
    let c = case("p-selfowner").await;
    let proxy = env().start_proxy().await.unwrap();
    let mut payload = c.agent.payload();
    payload.auth_tag = None;
    if let Some(l) = payload.launch.as_mut() {
        l.owner_pubkey = Some(c.agent.pubkey.clone());
    }
    let err = deploy(proxy.admin_kubeconfig(), &deploy_request(&payload, config(&c.ns)))
        .await
        .error();
    assert!(
        err.starts_with("agent.launch.owner_pubkey is the agent's own public key"),
        "{err}"
    );
    assert_eq!(proxy.total(), 0, "{:?}", proxy.counts());
}

/// Every DELETE the provider sends carries `preconditions.uid` (the object
/// observed, not a successor at the same name) and
/// `preconditions.resourceVersion`, and never `gracePeriodSeconds: 0`.
#[tokio::test]
async fn every_delete_is_fenced_on_uid_and_resource_version_and_keeps_the_grace_period() {
    let c = case("p-fence").await;
    let (kubelet, auto, old) = c.deployed().await;
    let old_secret = Api::<Secret>::namespaced(c.client.clone(), &c.ns)
        .get(&secret_ref(&old))
        .await
        .unwrap();
    c.complete(&kubelet, &auto).await;
    let proxy = env().start_proxy().await.unwrap();
    deploy(proxy.admin_kubeconfig(), &c.request()).await.agent_id();
    let deletes = proxy.deletes();
    let mut seen: Vec<(String, String)> = Vec::new();
    for (info, body) in &deletes {
        assert!(
            !info.query.contains("gracePeriodSeconds"),
            "grace period in the query: {}",
            info.query
        );
        let v: Value = serde_json::from_slice(body).expect("DeleteOptions body");
        assert_eq!(v.get("gracePeriodSeconds"), None, "{}: {v}", info.path);
        let rv = v["preconditions"]["resourceVersion"].as_str().unwrap_or("");
        assert!(
            !rv.is_empty(),
            "{}: no resourceVersion precondition: {v}",
            info.path
        );
        let uid = v["preconditions"]["uid"].as_str().unwrap_or("").to_string();
        seen.push((info.resource.clone(), uid));
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("pods".to_string(), uid(&old)),
            ("secrets".to_string(), old_secret.metadata.uid.clone().unwrap()),
        ],
        "the terminated pod and its Secret, each fenced on the UID observed"
    );
}

/// The usual cure for a crash loop is a change of agent settings (an env
/// value), which the create-intent fingerprint never sees: the pod's Secret
/// is compared with the new payload, and a difference replaces the pod.
#[tokio::test]
async fn a_crash_loop_is_escaped_by_correcting_the_agent_settings() {
    let c = case("p-crashenv").await;
    let auto = c.crash_looping().await;
    let proxy = env().start_proxy().await.unwrap();
    let cfg = |ns: &str| {
        let mut m = config(ns);
        m.insert("inactivity_seconds".into(), json!(0));
        m
    };
    let mut broken = c.agent.payload();
    if let Some(l) = broken.launch.as_mut() {
        l.env.insert("GOOSE_MODEL".into(), "no-such-model".into());
    }
    let err = deploy(proxy.admin_kubeconfig(), &deploy_request(&broken, cfg(&c.ns)))
        .await
        .error();
    assert!(err.contains("crash-looping"), "{err}");
    let looping = c.pod().await;
    let err = deploy(proxy.admin_kubeconfig(), &deploy_request(&broken, cfg(&c.ns)))
        .await
        .error();
    assert!(err.contains("crash-looping"), "{err}");
    assert_eq!(
        proxy.count(Verb::Delete, "pods"),
        0,
        "identical settings: reported"
    );

    auto.set_behavior(Behavior::Manual);
    let fixed = deploy_request(&c.agent.payload(), cfg(&c.ns));
    let replaced = c.unconfirmed(proxy.admin_kubeconfig(), &fixed, "4").await;
    assert_ne!(
        uid(&replaced),
        uid(&looping),
        "corrected settings replace the pod"
    );
    assert_eq!(proxy.count(Verb::Delete, "pods"), 1);
    let secret = Api::<Secret>::namespaced(c.client.clone(), &c.ns)
        .get(&secret_ref(&replaced))
        .await
        .unwrap();
    assert_eq!(secret.data.unwrap()["GOOSE_MODEL"].0, b"suite-model".to_vec());
}

/// A malformed `telemetry_url` (plain http to a remote host, credentials in the
/// URL) is refused in-band before any request: the cluster sees nothing.
#[tokio::test]
async fn a_malformed_telemetry_url_is_refused_before_any_request() {
    let c = case("p-badtelemetry").await;
    let proxy = env().start_proxy().await.unwrap();
    for (url, why) in [
        (
            "http://ingest.example.com",
            "provider_config.telemetry_url must be https:// (http:// is accepted only for a loopback host)",
        ),
        (
            "https://user:pw@ingest.example.com",
            "provider_config.telemetry_url must not carry user info (credentials never go in provider_config)",
        ),
    ] {
        let mut cfg = config(&c.ns);
        cfg.insert("telemetry_url".into(), json!(url));
        let err = deploy(proxy.admin_kubeconfig(), &deploy_request(&c.agent.payload(), cfg))
            .await
            .error();
        assert!(err.starts_with(why), "{err}");
        assert!(!err.contains("pw@"), "the value is never echoed: {err}");
    }
    assert_eq!(proxy.total(), 0, "{:?}", proxy.counts());
    assert!(secrets_of(&c.client, &c.ns, &c.agent).await.is_empty());
    assert!(c.pods.get_opt(&c.agent.pod_name()).await.unwrap().is_none());
}

/// With `telemetry_url`, the pod spec carries the collector's plain env (the URL,
/// the spool dir on the workspace volume, the Downward API identity, the
/// container and image, and an explicitly empty digest for a tag) and the Secret
/// carries none of it.
#[tokio::test]
async fn a_telemetry_url_is_plain_pod_env_and_never_in_the_secret() {
    let c = case("p-telemetry").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(500)));
    let url = "https://ingest.example.com/base";
    let out = deploy(
        env().admin_kubeconfig(),
        &c.request_with(json!({ "telemetry_url": url })),
    )
    .await;
    assert_eq!(out.agent_id(), c.agent.pod_name());
    let pod = c.pod().await;
    let env_vars = pod.spec.clone().unwrap().containers[0].env.clone().unwrap();
    let value = |name: &str| {
        env_vars
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{name} missing"))
            .clone()
    };
    assert_eq!(value("RUNTIME_AGENT_INGEST_URL").value.as_deref(), Some(url));
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_UID", "metadata.uid"),
        ("NODE_NAME", "spec.nodeName"),
    ] {
        let from = value(name).value_from.unwrap().field_ref.unwrap();
        assert_eq!(from.field_path, path, "{name}");
    }
    assert_eq!(value("CONTAINER_NAME").value.as_deref(), Some("agent"));
    assert_eq!(value("IMAGE_REF").value.as_deref(), Some(IMAGE));
    // An empty value: the apiserver stores the entry without one, and a
    // kubelet sets the variable to "" over anything of that name in envFrom.
    let digest = value("IMAGE_DIGEST");
    assert!(
        digest.value.unwrap_or_default().is_empty() && digest.value_from.is_none(),
        "a tag never yields a digest, and the explicit empty value beats envFrom (review b30b1a0 #6)"
    );
    assert_eq!(
        value("RUNTIME_AGENT_SPOOL_DIR").value.as_deref(),
        Some("/home/agent/.runtime-agent"),
        "the spool survives a container restart on the workspace emptyDir (review b30b1a0 #7)"
    );
    let secret = Api::<Secret>::namespaced(c.client.clone(), &c.ns)
        .get(&secret_ref(&pod))
        .await
        .unwrap();
    let data = secret.data.unwrap();
    assert!(
        !data
            .keys()
            .any(|k| k.starts_with("RUNTIME_AGENT_") || k == "POD_UID"),
        "{:?}",
        data.keys().collect::<Vec<_>>()
    );
    assert!(
        !data
            .values()
            .any(|v| String::from_utf8_lossy(&v.0).contains("ingest.example.com"))
    );
}
