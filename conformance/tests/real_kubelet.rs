//! What only a real kubelet, scheduler and admission chain produce, met by
//! the provider as a user invoking it by hand would (one JSON request on
//! stdin, one response on stdout; spec §Provider Protocol, §Deploy State
//! Machine step-2 table, §Kubernetes Binding): a Secret gone before the
//! kubelet reads it (the provider's in-band "confirmed absent", the kubelet's
//! own `CreateContainerConfigError`), `ErrImagePull` /
//! `ImagePullBackOff` for a digest no registry has (the pull-wedge row: the
//! wedged pod is reported, then replaced once `image` is corrected), the
//! scheduler's `Unschedulable`, the kernel's OOM kill under a memory limit
//! with the kubelet's `OnFailure` restart, and PodSecurity `restricted`
//! admitting the provider's pod while refusing a pod that breaks it.

use buzz_conformance::harness_support::TestRelay;
use buzz_conformance::provider_support::{Provider, TestAgent, deploy_request};
use buzz_conformance::real_node_support::{NAME, Scenario, status};
use buzz_conformance::testenv::{Matcher, RealNode, Verb};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");

struct Case {
    rt: tokio::runtime::Runtime,
    node: &'static RealNode,
    ns: String,
    agent: TestAgent,
    relay: TestRelay,
    provider: Provider,
}

fn imported_test_image() -> String {
    buzz_conformance::real_node_support::imported_test_image(Path::new(env!("CARGO_BIN_EXE_acp-test-agent")))
}

impl Drop for Case {
    fn drop(&mut self) {
        // The namespace controller deletes its pods and frees their requests.
        let ns = self.ns.clone();
        let client = self.rt.block_on(self.node.env().admin_client());
        if let Ok(client) = client {
            let _ = self.rt.block_on(
                Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
                    .delete(&ns, &DeleteParams::default()),
            );
        }
    }
}

impl Case {
    fn new(prefix: &str) -> Case {
        let node = RealNode::shared();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let ns = rt.block_on(node.create_namespace(prefix, &[RESTRICTED])).unwrap();
        let relay = rt.block_on(TestRelay::start_at(node.host_addr().into()));
        Case {
            rt,
            node,
            ns,
            agent: TestAgent::new(),
            relay,
            provider: Provider::new(PROVIDER),
        }
    }

    fn request(&self, config: Value) -> Value {
        let mut payload = self.agent.payload();
        payload.relay_url = self.relay.url.clone();
        payload.agent_command = "acp-test-agent".into();
        payload.agent_args = vec!["echo".into()];
        if let Some(l) = payload.launch.as_mut() {
            l.command = "acp-test-agent".into();
            l.args = vec!["echo".into()];
        }
        // Small requests: the node has 2 CPUs and several cases run at once
        // (the default request is 1 CPU; the scheduler really counts).
        let mut c = json!({
            "namespace": self.ns,
            "inactivity_seconds": 7200,
            "cpu_request": "50m",
            "memory_request": "64Mi",
        });
        for (k, v) in config.as_object().cloned().unwrap_or_default() {
            c[k] = v;
        }
        deploy_request(&payload, c.as_object().cloned().unwrap())
    }

    /// One `deploy` by hand, through `kubeconfig`, with a short deadline.
    fn deploy(
        &self,
        kubeconfig: &Path,
        config: Value,
        deadline_secs: u32,
    ) -> buzz_conformance::provider_support::Outcome {
        let req = self.request(config);
        let deadline = deadline_secs.to_string();
        self.rt.block_on(self.provider.deploy(
            kubeconfig,
            &req,
            &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", deadline.as_str())],
        ))
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(
            self.rt.block_on(self.node.env().admin_client()).unwrap(),
            &self.ns,
        )
    }
}

#[test]
fn a_secret_deleted_before_the_kubelet_reads_it_is_the_kubelets_create_container_config_error() {
    let c = Case::new("rk-secret");
    let proxy = c.rt.block_on(c.node.env().start_proxy()).unwrap();
    // Just before the pod create reaches the apiserver, the Secret it
    // references disappears: the kubelet then cannot build the env.
    let client = c.rt.block_on(c.node.env().admin_client()).unwrap();
    let ns = c.ns.clone();
    proxy.on(
        Matcher::new(Verb::Create, "pods").namespace(&c.ns),
        Some(1),
        move |_| {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
            async move {
                if let Ok(list) = secrets.list(&Default::default()).await {
                    for s in list.items {
                        let name = s.metadata.name.unwrap_or_default();
                        let _ = secrets.delete(&name, &DeleteParams::default()).await;
                    }
                }
            }
        },
    );
    let out = c.deploy(
        proxy.admin_kubeconfig(),
        json!({ "image": imported_test_image() }),
        40,
    );
    // The provider's own quorum read confirms the absence at once (it does
    // not wait for the kubelet to find out): reported in-band, naming it.
    let err = out.error();
    assert!(err.contains("is confirmed absent"), "{err}");
    assert!(
        err.contains(&format!("its Secret {}-", c.agent.pod_name())),
        "it names the Secret: {err}"
    );
    // The kubelet's own view of the same pod.
    let end = Instant::now() + Duration::from_secs(60);
    let waiting = loop {
        let pod = c.rt.block_on(c.pods().get(&c.agent.pod_name())).unwrap();
        let w = status(&pod).and_then(|s| s.state.as_ref()?.waiting.clone());
        if w.as_ref()
            .is_some_and(|w| w.reason.as_deref() == Some("CreateContainerConfigError"))
            || Instant::now() > end
        {
            break w;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let waiting = waiting.expect("a waiting container");
    assert_eq!(
        waiting.reason.as_deref(),
        Some("CreateContainerConfigError"),
        "{waiting:?}"
    );
    assert!(waiting.message.unwrap_or_default().contains("not found"));
    assert!(!out.stdout.contains(&c.agent.nsec()) && !out.stderr.contains(&c.agent.nsec()));
}

#[test]
fn a_digest_no_registry_has_is_an_image_pull_back_off_and_a_corrected_image_replaces_the_pod() {
    let c = Case::new("rk-pull");
    let missing = format!("{}/buzz-sprig@sha256:{}", c.node.registry().addr, "0".repeat(64));
    let kubeconfig = c.node.env().admin_kubeconfig().to_path_buf();
    let out = c.deploy(&kubeconfig, json!({ "image": missing }), 30);
    let err = out.error();
    assert!(
        err.contains("ErrImagePull") || err.contains("ImagePullBackOff"),
        "the kubelet's pull failure, in-band: {err}"
    );
    assert!(err.contains(&missing), "it names the image the pod runs: {err}");
    let wedged = c.rt.block_on(c.pods().get(&c.agent.pod_name())).unwrap();

    // The pull-wedge row: the corrected image replaces the stuck pod.
    let out = c.deploy(&kubeconfig, json!({ "image": imported_test_image() }), 90);
    out.agent_id();
    let fixed = c.rt.block_on(c.pods().get(&c.agent.pod_name())).unwrap();
    assert_ne!(fixed.metadata.uid, wedged.metadata.uid, "a new pod");
    assert!(
        status(&fixed)
            .and_then(|s| s.state.as_ref()?.running.as_ref())
            .is_some()
    );
}

#[test]
fn requests_larger_than_the_node_are_the_schedulers_unschedulable_in_band() {
    let c = Case::new("rk-sched");
    let t0 = Instant::now();
    let out = c.deploy(
        c.node.env().admin_kubeconfig(),
        json!({ "image": imported_test_image(), "cpu_request": "64", "cpu_limit": "64" }),
        20,
    );
    let err = out.error();
    assert!(
        err.contains("Unschedulable"),
        "the scheduler's reason, in-band: {err}"
    );
    assert!(err.contains("Insufficient cpu"), "and its message: {err}");
    assert!(
        t0.elapsed() < Duration::from_secs(40),
        "answered within the deadline's bounds: {:?}",
        t0.elapsed()
    );
}

#[test]
fn podsecurity_restricted_admits_the_providers_pod_and_refuses_one_that_breaks_it() {
    let c = Case::new("rk-psa");
    let out = c.deploy(
        c.node.env().admin_kubeconfig(),
        json!({ "image": imported_test_image() }),
        90,
    );
    out.agent_id();
    // The positive control: the same namespace refuses a pod without the
    // restricted security context, so the admission above was enforced.
    let mut bare: Pod = serde_json::from_value(json!({
        "metadata": { "name": "no-context" },
        "spec": { "containers": [{ "name": "c", "image": "localhost/pause:local" }] }
    }))
    .unwrap();
    bare.metadata.namespace = Some(c.ns.clone());
    let refused =
        c.rt.block_on(c.pods().create(&PostParams::default(), &bare))
            .unwrap_err();
    let text = refused.to_string();
    assert!(text.contains("violates PodSecurity \"restricted"), "{text}");
}

/// An agent that takes memory until it is killed: bash growing one string.
const HOG: &str = "s=x; while :; do s=$s$s; done";

#[test]
fn an_agent_over_its_memory_limit_is_oom_killed_and_the_harness_restarts_under_on_failure() {
    let image = imported_test_image();
    let s = Scenario::new("rk-oom", &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, c| {
        rec.agent_command = Some("bash".into());
        rec.agent_args = vec!["-c".into(), HOG.into()];
        // Spawned for the first mention, not at start, so the Start itself succeeds.
        rec.env.insert("BUZZ_ACP_LAZY_POOL".into(), "true".into());
        c.insert("memory_request".into(), "64Mi".into());
        c.insert("memory_limit".into(), "64Mi".into());
        c.insert("inactivity_seconds".into(), 0.into());
    });
    let (pod, _) = s.start();
    let name = pod.metadata.name.clone().unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("OnFailure")
    );
    // A mention wakes the agent; it outgrows the limit, again at every respawn.
    let _ = s.rt.block_on(desktop_launcher::app::chat(
        &s.store,
        NAME,
        "grow",
        Duration::from_secs(5),
    ));
    let restarted = s.wait_pod(&name, "restarted after an OOM kill", |p| {
        status(p).is_some_and(|c| {
            c.restart_count >= 1
                && c.last_state
                    .as_ref()
                    .and_then(|l| l.terminated.as_ref())
                    .is_some_and(|t| t.reason.as_deref() == Some("OOMKilled"))
        })
    });
    let cs = status(&restarted).unwrap();
    let last = cs
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .unwrap();
    assert_eq!(last.reason.as_deref(), Some("OOMKilled"), "{last:?}");
    assert_eq!(
        restarted.metadata.uid, pod.metadata.uid,
        "the same pod, restarted by the kubelet"
    );
}
