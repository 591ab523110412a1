//! Acceptance for the test control plane: each test proves one Kubernetes
//! semantic that the provider's reconciler relies on, against the real
//! kube-apiserver + etcd of [`TestEnv`].

use buzz_conformance::testenv::{DateMode, Matcher, TestEnv, TestEnvConfig, Verb, process, wait_for_pod};
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec, Secret};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

fn agent_pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "agent".into(),
                image: Some("registry.test/buzz-sprig:v1".into()),
                ..Default::default()
            }],
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(60),
            automount_service_account_token: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn api_status(err: &kube::Error) -> (u16, String, String) {
    match err {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API status error, got {other:?}"),
    }
}

async fn admin() -> Client {
    TestEnv::shared().admin_client().await.expect("admin client")
}

/// 1. A graceful delete of a bound, running pod sets `deletionTimestamp`; the
/// pod stays readable in phase `Running` until finalised; then GET is 404.
#[tokio::test]
async fn graceful_delete_keeps_running_phase_until_kubelet_finalises() {
    let env = TestEnv::shared();
    let ns = env.create_namespace("t-graceful").await.unwrap();
    let kubelet = env.kubelet().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin().await, &ns);
    pods.create(&PostParams::default(), &agent_pod("p"))
        .await
        .unwrap();
    kubelet.bind(&ns, "p").await.unwrap();
    kubelet.set_running(&ns, "p", 0).await.unwrap();

    pods.delete("p", &DeleteParams::default()).await.unwrap();
    let dying = pods
        .get("p")
        .await
        .expect("a gracefully deleted pod is still readable");
    assert!(
        dying.metadata.deletion_timestamp.is_some(),
        "deletionTimestamp must be set"
    );
    assert_eq!(dying.metadata.deletion_grace_period_seconds, Some(60));
    assert_eq!(
        dying.status.and_then(|s| s.phase).as_deref(),
        Some("Running"),
        "there is no Terminating phase: a dying pod stays Running"
    );

    kubelet.finalize_deletion(&ns, "p").await.unwrap();
    let err = pods.get("p").await.expect_err("finalised pod must be gone");
    assert_eq!(api_status(&err).0, 404);
}

/// 2. Deleting an unbound `Pending` pod is immediate.
#[tokio::test]
async fn deleting_unbound_pending_pod_is_immediate() {
    let env = TestEnv::shared();
    let ns = env.create_namespace("t-unbound").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin().await, &ns);
    pods.create(&PostParams::default(), &agent_pod("p"))
        .await
        .unwrap();
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    assert!(
        pods.get_opt("p").await.unwrap().is_none(),
        "an unscheduled pod has no grace period"
    );
}

/// 3. A stale `resourceVersion` precondition gives 409 `Conflict`; creating
/// an existing name gives 409 `AlreadyExists`. Same code, different reason.
#[tokio::test]
async fn conflict_and_already_exists_share_409_but_not_reason() {
    let env = TestEnv::shared();
    let ns = env.create_namespace("t-409").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin().await, &ns);
    let created = pods
        .create(&PostParams::default(), &agent_pod("p"))
        .await
        .unwrap();
    let stale_rv = created.metadata.resource_version.clone();
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await
    .unwrap();

    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: created.metadata.uid.clone(),
            resource_version: stale_rv,
        }),
        ..Default::default()
    };
    let (code, reason, _) = api_status(&pods.delete("p", &dp).await.expect_err("stale precondition"));
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(
        pods.get_opt("p").await.unwrap().is_some(),
        "a failed precondition deletes nothing"
    );

    let (code, reason, _) = api_status(
        &pods
            .create(&PostParams::default(), &agent_pod("p"))
            .await
            .expect_err("duplicate name"),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
}

async fn date_headers(client: &Client, ns: &str) -> Vec<(String, Option<String>)> {
    let base = format!("/api/v1/namespaces/{ns}/pods");
    let mut out = Vec::new();
    for (what, uri) in [
        ("get", format!("{base}/p")),
        ("list", base.clone()),
        ("watch", format!("{base}?watch=true&timeoutSeconds=1")),
    ] {
        let req = http::Request::get(uri).body(kube::client::Body::empty()).unwrap();
        let resp = client.send(req).await.unwrap();
        assert!(resp.status().is_success(), "{what}: {}", resp.status());
        let date = resp
            .headers()
            .get(http::header::DATE)
            .map(|v| v.to_str().unwrap().to_string());
        out.push((what.to_string(), date));
    }
    out
}

/// 4. Get, list and watch responses carry a parseable `Date`; through the
/// proxy with stripping on, none do.
#[tokio::test]
async fn date_header_on_get_list_watch_and_proxy_strips_it() {
    let env = TestEnv::shared();
    let ns = env.create_namespace("t-date").await.unwrap();
    let client = admin().await;
    Api::<Pod>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &agent_pod("p"))
        .await
        .unwrap();
    for (what, date) in date_headers(&client, &ns).await {
        let date = date.unwrap_or_else(|| panic!("{what}: no Date header"));
        httpdate::parse_http_date(&date).unwrap_or_else(|e| panic!("{what}: Date {date:?} unparseable: {e}"));
    }

    let proxy = env.start_proxy().await.unwrap();
    let via = env.client_for(proxy.admin_kubeconfig()).await.unwrap();
    for (what, date) in date_headers(&via, &ns).await {
        assert!(date.is_some(), "{what}: the proxy passes Date through by default");
    }
    proxy.set_date_mode(DateMode::Strip);
    for (what, date) in date_headers(&via, &ns).await {
        assert_eq!(date, None, "{what}: Date must be stripped");
    }
    proxy.set_date_mode(DateMode::Skew(3600));
    let (_, skewed) = date_headers(&via, &ns).await.remove(0);
    let skewed = httpdate::parse_http_date(&skewed.unwrap()).unwrap();
    let ahead = skewed
        .duration_since(std::time::SystemTime::now())
        .expect("skewed into the future");
    assert!(ahead > Duration::from_secs(3000), "skew applied: {ahead:?}");
}

/// 5. The restricted user: 403 on namespace create and on a cluster-scoped
/// namespace GET; pod and Secret CRUD inside its namespace works.
#[tokio::test]
async fn restricted_user_is_confined_to_its_namespace() {
    let env = TestEnv::shared();
    let client = env.restricted_client().await.unwrap();
    let ns = env.restricted_namespace();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let new_ns = Namespace {
        metadata: ObjectMeta {
            name: Some("restricted-may-not".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let err = namespaces
        .create(&PostParams::default(), &new_ns)
        .await
        .expect_err("namespace create");
    assert_eq!(api_status(&err).0, 403);
    let err = namespaces
        .get(ns)
        .await
        .expect_err("cluster-scoped namespace GET");
    assert_eq!(api_status(&err).0, 403);

    let name = buzz_conformance::testenv::unique_name("crud");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.create(&PostParams::default(), &agent_pod(&name))
        .await
        .unwrap();
    pods.get(&name).await.unwrap();
    assert!(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(&name))
    );
    pods.delete(&name, &DeleteParams::default()).await.unwrap();

    let secrets: Api<Secret> = Api::namespaced(client, ns);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        string_data: Some([("K".to_string(), "v".to_string())].into()),
        immutable: Some(true),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    secrets.get(&name).await.unwrap();
    secrets.list(&ListParams::default()).await.unwrap();
    secrets.delete(&name, &DeleteParams::default()).await.unwrap();
}

/// 6. A pod created before the namespace's `default` ServiceAccount exists is
/// rejected by the ServiceAccount admission plugin; it succeeds once the
/// creator has run. The exact text (kube-apiserver v1.36.3), which the
/// provider matches to retry within its deadline:
///
/// `pods "p" is forbidden: error looking up service account <ns>/default: serviceaccount "default" not found`
/// (HTTP 403, `Status.reason` `Forbidden`).
#[tokio::test]
async fn pod_before_default_service_account_is_rejected_then_admitted() {
    let env = TestEnv::shared();
    let ns = buzz_conformance::testenv::unique_name("t-sa-race");
    env.set_service_account_delay(&ns, Duration::from_secs(3));
    let client = admin().await;
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let err = pods
        .create(&PostParams::default(), &agent_pod("p"))
        .await
        .expect_err("no default SA yet");
    let (code, reason, message) = api_status(&err);
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
        format!(
            "pods \"p\" is forbidden: error looking up service account {ns}/default: serviceaccount \"default\" not found"
        )
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pods.create(&PostParams::default(), &agent_pod("p")).await {
            Ok(_) => break,
            Err(e)
                if api_status(&e).2.contains("serviceaccount \"default\" not found")
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("pod create after the creator ran: {e}"),
        }
    }
}

/// 7. The proxy runs a hook before forwarding and counts requests; a DELETE
/// whose precondition was read before the hook changed the pod meets 409.
#[tokio::test]
async fn proxy_hook_runs_before_forwarding_and_counts_requests() {
    let env = TestEnv::shared();
    let ns = env.create_namespace("t-proxy").await.unwrap();
    let proxy = env.start_proxy().await.unwrap();
    let kubelet = env.kubelet().await.unwrap();
    let via = env.client_for(proxy.admin_kubeconfig()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(via, &ns);
    let observed = pods
        .create(&PostParams::default(), &agent_pod("p"))
        .await
        .unwrap();
    kubelet.bind(&ns, "p").await.unwrap();
    let observed_rv = pods.get("p").await.unwrap().metadata.resource_version;

    let calls = Arc::new(AtomicU32::new(0));
    let (k, n, c) = (kubelet.clone(), ns.clone(), calls.clone());
    proxy.on(
        Matcher::new(Verb::Delete, "pods").namespace(&ns).name("p"),
        Some(1),
        move |_req| {
            let (k, n, c) = (k.clone(), n.clone(), c.clone());
            async move {
                k.set_running(&n, "p", 0)
                    .await
                    .expect("hook: make the container run");
                c.fetch_add(1, Ordering::SeqCst);
            }
        },
    );
    proxy.reset_counts();
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: observed.metadata.uid.clone(),
            resource_version: observed_rv,
        }),
        ..Default::default()
    };
    let (code, reason, _) = api_status(&pods.delete("p", &dp).await.expect_err("fenced delete must fail"));
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(calls.load(Ordering::SeqCst), 1, "hook ran exactly once");
    let live = pods.get("p").await.unwrap();
    assert!(
        live.metadata.deletion_timestamp.is_none(),
        "the live pod survived"
    );
    assert_eq!(proxy.count(Verb::Delete, "pods"), 1);
    assert_eq!(proxy.count(Verb::Get, "pods"), 1);
    assert_eq!(
        proxy.mutations(),
        1,
        "the hook's status write goes direct, not through the proxy"
    );

    proxy.fail(Matcher::new(Verb::Get, "pods").name("p"), 500, Some(1));
    let (code, _, _) = api_status(&pods.get("p").await.expect_err("injected 500"));
    assert_eq!(code, 500);
    pods.get("p").await.expect("the failure was for one request only");
    assert_eq!(proxy.count(Verb::Get, "pods"), 3);
    // kube's client retries 503 on its own: one injected 503 costs one extra request.
    proxy.fail(Matcher::new(Verb::Get, "pods").name("p"), 503, Some(1));
    pods.get("p").await.expect("kube retries a 503");
    assert_eq!(proxy.count(Verb::Get, "pods"), 5);

    proxy.reset(Matcher::new(Verb::List, "pods"), Some(1));
    assert!(
        pods.list(&ListParams::default()).await.is_err(),
        "reset connection is an error"
    );
    pods.list(&ListParams::default())
        .await
        .expect("next list goes through");
}

/// 8. After teardown no process the `TestEnv` started is alive and its temp dir is gone.
#[test]
fn teardown_leaves_no_process_and_no_temp_dir() {
    let env = TestEnv::start(TestEnvConfig::default()).expect("private TestEnv");
    let pids: Vec<u32> = env.pids().to_vec();
    let dir = env.dir().to_path_buf();
    assert_eq!(pids.len(), 2, "etcd and kube-apiserver");
    assert!(pids.iter().all(|p| process::pid_alive(*p as i32)));
    assert!(dir.exists());
    drop(env);
    for pid in pids {
        assert!(!process::pid_alive(pid as i32), "pid {pid} survived teardown");
    }
    assert!(!dir.exists(), "{} survived teardown", dir.display());
}

fn waiting_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

fn running(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// The driver's faithful mode behaves like a kubelet: a missing `envFrom`
/// Secret gives `CreateContainerConfigError`, and the container starts once it exists.
#[tokio::test]
async fn kubelet_faithful_mode_waits_for_the_env_from_secret() {
    let env = TestEnv::shared();
    let ns = env.create_namespace("t-faithful").await.unwrap();
    let kubelet = env.kubelet().await.unwrap();
    let _auto = kubelet.automate(&ns, buzz_conformance::testenv::Behavior::Faithful);
    let client = admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut pod = agent_pod("p");
    pod.spec.as_mut().unwrap().containers[0].env_from =
        Some(vec![k8s_openapi::api::core::v1::EnvFromSource {
            secret_ref: Some(k8s_openapi::api::core::v1::SecretEnvSource {
                name: "s".into(),
                optional: None,
            }),
            ..Default::default()
        }]);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let p = wait_for_pod(&pods, "p", "CreateContainerConfigError", |p| {
        waiting_reason(p).as_deref() == Some("CreateContainerConfigError")
    })
    .await;
    let msg = p.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap()
        .message;
    assert_eq!(msg.as_deref(), Some("secret \"s\" not found"));

    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("s".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Secret>::namespaced(client, &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    wait_for_pod(&pods, "p", "running", running).await;
}

/// Scripted behaviours: `Unschedulable` leaves the pod unbound with the
/// condition; switching to `StartAfter` heals it; an `OnFailure` pod whose
/// startup fails crash-loops with a growing restart count.
#[tokio::test]
async fn kubelet_scripts_unschedulable_heal_and_crash_loop() {
    use buzz_conformance::testenv::Behavior;
    let env = TestEnv::shared();
    let ns = env.create_namespace("t-scripts").await.unwrap();
    let kubelet = env.kubelet().await.unwrap();
    let auto = kubelet.automate(&ns, Behavior::Unschedulable);
    let pods: Api<Pod> = Api::namespaced(admin().await, &ns);
    pods.create(&PostParams::default(), &agent_pod("p"))
        .await
        .unwrap();
    let p = wait_for_pod(&pods, "p", "Unschedulable", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            })
    })
    .await;
    assert!(p.spec.unwrap().node_name.is_none(), "unschedulable means unbound");
    auto.set_behavior(Behavior::StartAfter(Duration::from_millis(100)));
    wait_for_pod(&pods, "p", "healed and running", running).await;

    auto.set_behavior(Behavior::FailStartup {
        code: 3,
        reason: "Error".into(),
        message: "boom".into(),
    });
    let mut crashing = agent_pod("c");
    crashing.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
    pods.create(&PostParams::default(), &crashing).await.unwrap();
    let p = wait_for_pod(&pods, "c", "CrashLoopBackOff", |p| {
        waiting_reason(p).as_deref() == Some("CrashLoopBackOff")
    })
    .await;
    let cs = &p.status.unwrap().container_statuses.unwrap()[0];
    assert!(cs.restart_count > 0);
    assert_eq!(
        cs.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        3
    );
}
