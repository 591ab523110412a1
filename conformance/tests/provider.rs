//! Provider conformance ([L2] item 4, [L3] 1; spec §Conformance case families)
//! — the `buzz-backend-kubernetes` binary over real pipes against the real
//! kube-apiserver + etcd of `TestEnv`, with the kubelet driver and the fault proxy.

use buzz_conformance::provider_support::{IMAGE, Outcome, Provider, TestAgent, config, deploy_request};
use buzz_conformance::testenv::{Behavior, TestEnv};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::Value;
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
    fn request(&self) -> Value {
        deploy_request(&self.agent.payload(), config(&self.ns))
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
