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

mod access;
mod concurrency;
mod egress;
mod events;
mod gc;
mod hardening;
mod lifecycle;
mod lost_reply;
mod ownership;
mod pod_knobs;
mod undeploy;
mod workspace;

/// The kubelet's usual pace here: bind, then run 100 ms later.
const QUICK_START: Behavior = Behavior::StartAfter(Duration::from_millis(100));

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

/// The shipped Role (deploy/kubernetes/provider-rbac.yaml), bound to the
/// suite's restricted user in this case's namespace.
async fn shipped_role_in(c: &Case) {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding, Subject};
    let f = buzz_conformance::testenv::rbac::provider_rbac().unwrap();
    let mut role = f.role;
    role.metadata.namespace = Some(c.ns.clone());
    let mut binding = f.binding;
    binding.metadata.namespace = Some(c.ns.clone());
    binding.subjects = Some(vec![Subject {
        kind: "User".into(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        name: buzz_conformance::testenv::RESTRICTED_USER.into(),
        namespace: None,
    }]);
    let pp = PostParams::default();
    Api::<Role>::namespaced(c.client.clone(), &c.ns)
        .create(&pp, &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(c.client.clone(), &c.ns)
        .create(&pp, &binding)
        .await
        .unwrap();
}

impl Case {
    /// Leaves a never-started pod behind: the kubelet keeps it waiting with
    /// `reason`, and one deploy through `kubeconfig` ends "not confirmed"
    /// after 2 s. Returns the driver, its automation and the stuck pod.
    async fn stuck(&self, reason: &str, kubeconfig: &Path) -> (KubeletDriver, PodAutomation, Pod) {
        let kubelet = env().kubelet().await.unwrap();
        let auto = kubelet.automate(&self.ns, Behavior::never_start(reason));
        let pod = self.unconfirmed(kubeconfig, &self.request(), "2").await;
        (kubelet, auto, pod)
    }

    /// The kubelet runs this case's pods at [`QUICK_START`] pace while the
    /// automation lives.
    async fn starting(&self) -> PodAutomation {
        env().kubelet().await.unwrap().automate(&self.ns, QUICK_START)
    }

    /// One deploy straight to the apiserver with the kubelet at
    /// [`QUICK_START`] pace: the driver, its automation and the running pod.
    async fn deployed(&self) -> (KubeletDriver, PodAutomation, Pod) {
        let kubelet = env().kubelet().await.unwrap();
        let auto = kubelet.automate(&self.ns, QUICK_START);
        deploy(env().admin_kubeconfig(), &self.request()).await.agent_id();
        (kubelet, auto, self.pod().await)
    }

    /// A deploy of `request` through `kubeconfig` with a deadline of `secs`
    /// s that ends "not confirmed" (the kubelet holds the pod); the pod it
    /// leaves.
    async fn unconfirmed(&self, kubeconfig: &Path, request: &Value, secs: &str) -> Pod {
        let err = deploy_env(kubeconfig, request, &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", secs)])
            .await
            .error();
        assert!(err.contains("not confirmed"), "{err}");
        self.pod().await
    }

    /// The running pod ends (exit 0, `Completed`) while the kubelet is
    /// held; then `auto` starts pods at [`QUICK_START`] pace again.
    async fn complete(&self, kubelet: &KubeletDriver, auto: &PodAutomation) {
        auto.set_behavior(Behavior::Manual);
        kubelet
            .set_terminated(&self.ns, &self.agent.pod_name(), 0, "Completed", "")
            .await
            .unwrap();
        auto.set_behavior(QUICK_START);
    }

    /// Makes every pod of this case fail at start-up with exit code 2
    /// (`Error`, a configuration error): the crash loop several cases start from.
    async fn crash_looping(&self) -> PodAutomation {
        let kubelet = env().kubelet().await.unwrap();
        kubelet.automate(
            &self.ns,
            Behavior::FailStartup {
                code: 2,
                reason: "Error".into(),
                message: String::new(),
            },
        )
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

fn inflight_secret(c: &Case, generation: &str) -> Secret {
    buzz_backend_kubernetes::podspec::secret(
        &c.agent.pubkey,
        generation,
        [("BUZZ_PRIVATE_KEY".to_string(), c.agent.nsec())].into(),
    )
}
