//! Provider conformance ([L2] item 4, [L3] 1; spec §Conformance case families)
//! — the `buzz-backend-kubernetes` binary over real pipes against the real
//! kube-apiserver + etcd of `TestEnv`, with the kubelet driver and the fault proxy.

use buzz_conformance::provider_support::{IMAGE, Outcome, Provider, TestAgent, config, deploy_request};
use buzz_conformance::testenv::{
    Behavior, DateMode, KubeletDriver, Matcher, PodAutomation, TestEnv, Verb, wait_for_pod,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

fn provider() -> Provider {
    Provider::new(env!("CARGO_BIN_EXE_provider-under-test"))
}

fn env() -> &'static TestEnv {
    TestEnv::shared()
}

async fn admin() -> Client {
    env().admin_client().await.expect("admin client")
}

async fn deploy(kubeconfig: &Path, request: &Value) -> Outcome {
    provider().deploy(kubeconfig, request, &[]).await
}

async fn deploy_env(kubeconfig: &Path, request: &Value, extra: &[(&str, &str)]) -> Outcome {
    provider().deploy(kubeconfig, request, extra).await
}

fn running(p: &Pod) -> bool {
    container(p)
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

fn container(p: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    p.status.as_ref()?.container_statuses.as_ref()?.first()
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

fn secret_ref(p: &Pod) -> String {
    p.spec.as_ref().unwrap().containers[0].env_from.as_ref().unwrap()[0]
        .secret_ref
        .as_ref()
        .unwrap()
        .name
        .clone()
}

async fn secrets_of(client: &Client, ns: &str, agent: &TestAgent) -> Vec<Secret> {
    let sel = format!("buzz.block.xyz/agent-pubkey={}", &agent.pubkey[..32]);
    Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&sel))
        .await
        .unwrap()
        .items
}

struct Case {
    ns: String,
    agent: TestAgent,
    pods: Api<Pod>,
    client: Client,
}

async fn case(prefix: &str) -> Case {
    let ns = env().create_namespace(prefix).await.unwrap();
    let client = admin().await;
    Case {
        pods: Api::namespaced(client.clone(), &ns),
        ns,
        agent: TestAgent::new(),
        client,
    }
}

impl Case {
    /// Leaves a never-started pod behind: the kubelet keeps it waiting with
    /// `reason`, and one deploy through `kubeconfig` ends "not confirmed"
    /// after 2 s. Returns the driver, its automation and the stuck pod.
    async fn stuck(&self, reason: &str, kubeconfig: &Path) -> (KubeletDriver, PodAutomation, Pod) {
        let kubelet = env().kubelet().await.unwrap();
        let auto = kubelet.automate(&self.ns, Behavior::never_start(reason));
        let short = [("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "2")];
        let err = deploy_env(kubeconfig, &self.request(), &short).await.error();
        assert!(err.contains("not confirmed"), "{err}");
        (kubelet, auto, self.pod().await)
    }

    fn request(&self) -> Value {
        deploy_request(&self.agent.payload(), config(&self.ns))
    }
    fn request_with(&self, extra: Value) -> Value {
        let mut cfg = config(&self.ns);
        for (k, v) in extra.as_object().unwrap() {
            cfg.insert(k.clone(), v.clone());
        }
        deploy_request(&self.agent.payload(), cfg)
    }
    async fn pod(&self) -> Pod {
        self.pods.get(&self.agent.pod_name()).await.expect("agent pod")
    }
}

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
    assert_eq!(data["GOOSE_MODEL"], "suite-model");
    assert_eq!(data["GOOSE_MODE"], "auto");
    assert!(!data.contains_key("BUZZ_ACP_NO_PRESENCE"));
    assert!(!out.stderr.contains(&c.agent.nsec()), "no secret in diagnostics");
}

/// 2. Live agent: a second deploy is a strict no-op with zero mutations.
#[tokio::test]
async fn second_deploy_against_a_live_agent_mutates_nothing() {
    let c = case("p-noop").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(100)));
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
    let kubelet = env().kubelet().await.unwrap();
    let auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(100)));
    deploy(env().admin_kubeconfig(), &c.request()).await.agent_id();
    let old = c.pod().await;
    auto.set_behavior(Behavior::Manual);
    kubelet
        .set_terminated(&c.ns, &c.agent.pod_name(), 0, "Completed", "")
        .await
        .unwrap();
    auto.set_behavior(Behavior::StartAfter(Duration::from_millis(100)));
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

    auto.set_behavior(Behavior::StartAfter(Duration::from_millis(100)));
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
    let err = deploy_env(env().admin_kubeconfig(), &c.request(), &short)
        .await
        .error();
    assert!(err.contains("not confirmed"), "{err}");
    let replaced = c.pod().await;
    assert_ne!(
        uid(&replaced),
        uid(&wedged),
        "the pull wedge is escaped by correcting image"
    );
    assert_eq!(
        replaced.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some(IMAGE)
    );
    auto.set_behavior(Behavior::StartAfter(Duration::from_millis(100)));
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

async fn plant_pod(c: &Case, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
    let mut p = Pod {
        metadata: ObjectMeta {
            name: Some(c.agent.pod_name()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
        containers: vec![k8s_openapi::api::core::v1::Container {
            name: "agent".into(),
            image: Some(IMAGE.into()),
            ..Default::default()
        }],
        restart_policy: Some("Never".into()),
        ..Default::default()
    });
    c.pods.create(&PostParams::default(), &p).await.unwrap()
}

/// 11. Unmarked objects: a label- and annotation-matching object without the
/// management marker is never deleted, never GC'd, and is reported.
#[tokio::test]
async fn unmarked_look_alikes_are_never_touched_and_are_reported() {
    let c = case("p-unmarked").await;
    let kubelet = env().kubelet().await.unwrap();
    let short_pk = c.agent.pubkey[..32].to_string();
    let labels = [("buzz.block.xyz/agent-pubkey", short_pk.as_str())];
    let ann = [("buzz.block.xyz/agent-pubkey-full", c.agent.pubkey.as_str())];
    let planted = plant_pod(&c, &labels, &ann).await;
    kubelet.bind(&c.ns, &c.agent.pod_name()).await.unwrap();
    kubelet
        .set_terminated(&c.ns, &c.agent.pod_name(), 1, "Error", "")
        .await
        .unwrap();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(format!("{}-{}", c.agent.pod_name(), "ee".repeat(16))),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: Some(ann.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Secret>::namespaced(c.client.clone(), &c.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // Orphan age gate = 2 × 1 s; wait until the apiserver's clock has passed it.
    tokio::time::sleep(Duration::from_millis(2600)).await;

    let proxy = env().start_proxy().await.unwrap();
    let out = deploy_env(
        proxy.admin_kubeconfig(),
        &c.request(),
        &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "1")],
    )
    .await;
    let err = out.error();
    assert!(err.contains("not created by this provider"), "{err}");
    assert_eq!(
        proxy.mutations(),
        0,
        "nothing unmarked is touched: {:?}",
        proxy.counts()
    );
    assert_eq!(uid(&c.pod().await), uid(&planted));
    assert_eq!(
        secrets_of(&c.client, &c.ns, &c.agent).await.len(),
        1,
        "the unmarked Secret survived GC"
    );
    assert!(out.stderr.contains("left untouched"), "reported: {}", out.stderr);
}

/// 12. Annotation mismatch: a collision error and no mutation.
#[tokio::test]
async fn annotation_mismatch_is_a_collision_with_no_mutation() {
    let c = case("p-collide").await;
    let other = "f".repeat(64);
    let short_pk = c.agent.pubkey[..32].to_string();
    plant_pod(
        &c,
        &[
            ("buzz.block.xyz/agent-pubkey", short_pk.as_str()),
            ("app.kubernetes.io/managed-by", "buzz-backend-kubernetes"),
            ("buzz.block.xyz/binding-version", "1"),
        ],
        &[("buzz.block.xyz/agent-pubkey-full", other.as_str())],
    )
    .await;
    let proxy = env().start_proxy().await.unwrap();
    let err = deploy(proxy.admin_kubeconfig(), &c.request()).await.error();
    assert!(
        err.contains("is not this agent's") && err.contains("annotation"),
        "{err}"
    );
    assert_eq!(proxy.mutations(), 0);
}

fn inflight_secret(c: &Case, generation: &str) -> Secret {
    buzz_backend_kubernetes::podspec::secret(
        &c.agent.pubkey,
        generation,
        [("BUZZ_PRIVATE_KEY".to_string(), c.agent.nsec())].into(),
    )
}

/// 13 + 14. GC vs an in-flight attempt, and provider death: a young
/// unreferenced Secret (another attempt between its Secret create and its
/// pod create, or one whose provider died) survives preflight GC; once older
/// than 2 × deadline on the apiserver's clock, a later pass reaps it.
#[tokio::test]
async fn young_unreferenced_secret_survives_gc_until_the_age_gate() {
    let c = case("p-gcgate").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(50)));
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), &c.ns);
    let inflight = inflight_secret(&c, &"aa".repeat(16));
    secrets.create(&PostParams::default(), &inflight).await.unwrap();
    let gate = [("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "4")];
    deploy_env(env().admin_kubeconfig(), &c.request(), &gate)
        .await
        .agent_id();
    let name = inflight.metadata.name.clone().unwrap();
    assert!(
        secrets.get_opt(&name).await.unwrap().is_some(),
        "in-flight Secret deleted by GC"
    );

    // Provider death: nobody ever references it. After 2 × 4 s it is reaped.
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
        ("LD_PRELOAD", faketime.to_str().unwrap()),
        ("FAKETIME", "+1h"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let out = deploy_env(env().admin_kubeconfig(), &c.request(), &fast).await;
    out.agent_id();
    assert!(
        secrets.get_opt(&name).await.unwrap().is_some(),
        "a fast local clock deleted an in-flight Secret"
    );

    let proxy = env().start_proxy().await.unwrap();
    proxy.set_date_mode(DateMode::Strip);
    tokio::time::sleep(Duration::from_millis(6500)).await; // older than 2 × 3 s on any clock
    let out = deploy_env(
        proxy.admin_kubeconfig(),
        &c.request(),
        &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "3")],
    )
    .await;
    out.agent_id();
    assert!(
        secrets.get_opt(&name).await.unwrap().is_some(),
        "no Date header means no orphan GC"
    );
    assert!(out.stderr.contains("no usable Date header"), "{}", out.stderr);
}

/// 16. The 409 split, `AlreadyExists` arm: a contender that loses the pod
/// create cleans up only its own Secret and adopts the winner. (The
/// `Conflict` arm is case 7.)
#[tokio::test]
async fn create_loser_cleans_only_its_own_secret_and_adopts_the_winner() {
    let c = case("p-loser").await;
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(100)));
    let proxy = env().start_proxy().await.unwrap();
    let winner_request = c.request();
    let direct = env().admin_kubeconfig().to_path_buf();
    let winner_out = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = winner_out.clone();
    // Before the first pod create reaches the apiserver, another deploy runs to completion.
    proxy.on(Matcher::new(Verb::Create, "pods"), Some(1), move |_| {
        let (req, kc, slot) = (winner_request.clone(), direct.clone(), slot.clone());
        async move {
            let out = provider().deploy(&kc, &req, &[]).await;
            *slot.lock().unwrap() = Some(out);
        }
    });
    let loser = deploy(proxy.admin_kubeconfig(), &c.request()).await;
    let winner = winner_out.lock().unwrap().take().expect("the winner ran");
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
        out.stderr.contains("waiting for the default ServiceAccount"),
        "{}",
        out.stderr
    );
}

/// 20. Deletion-marked pod: deploy waits for it to disappear, then creates.
#[tokio::test]
async fn deletion_marked_pod_is_awaited_then_replaced() {
    let c = case("p-dying").await;
    let kubelet = env().kubelet().await.unwrap();
    let auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(100)));
    deploy(env().admin_kubeconfig(), &c.request()).await.agent_id();
    let old = c.pod().await;
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
    let kubelet = env().kubelet().await.unwrap();
    let auto = kubelet.automate(
        &c.ns,
        Behavior::FailStartup {
            code: 2,
            reason: "Error".into(),
            message: String::new(),
        },
    );
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

/// 22. Hostile images: a startup that keeps failing returns the exit code and
/// reason, never the terminated `message`.
#[tokio::test]
async fn failed_startup_reports_exit_code_and_reason_but_never_the_message() {
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
    assert!(
        !err.contains("CANARY") && !out.stderr.contains("CANARY"),
        "message leaked: {err}\n{}",
        out.stderr
    );
    // One create attempt per call: the failed attempt stays for the next Start's GC.
    assert_eq!(secrets_of(&c.client, &c.ns, &c.agent).await.len(), 1);
}
