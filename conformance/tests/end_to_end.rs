//! The desktop's Start button end to end: the launcher's real gate
//! (discover → stage + digest → `info` → version check → `deploy` on the staged
//! bytes) drives the real `buzz-backend-kubernetes` code against the real
//! kube-apiserver, with the kubelet driver starting the container.
//!
//! One test in its own binary: the provider inherits the launcher's
//! environment (spec §Invocation), so `KUBECONFIG` is set on this process,
//! once the control plane is up and before the launcher runs.

use buzz_conformance::provider_support::IMAGE;
use buzz_conformance::testenv::{Behavior, TestEnv};
use desktop_launcher::app::{self, StartOptions};
use desktop_launcher::gate::GateConfig;
use desktop_launcher::record::Backend;
use desktop_launcher::store::Store;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

#[test]
fn launcher_start_deploys_through_the_real_provider_and_a_second_start_is_a_no_op() {
    let env = TestEnv::shared();
    // SAFETY: the only test in this binary. The env's own threads (runtime workers,
    // spawner) do not read the environment, and Rust's env access is serialised.
    unsafe { std::env::set_var("KUBECONFIG", env.admin_kubeconfig()) };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ns = rt.block_on(env.create_namespace("e2e")).unwrap();
    let kubelet = rt.block_on(env.kubelet()).unwrap();
    let _auto = kubelet.automate(&ns, Behavior::StartAfter(Duration::from_millis(300)));

    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("state")).unwrap();
    let owner = store.init_owner(None).unwrap();
    // An address: the deploy resolves the relay for the agent's NetworkPolicy.
    let mut rec = store.create_agent("scout", "wss://192.0.2.10").unwrap();
    let workdir = tmp.path().join("work");
    std::fs::create_dir_all(&workdir).unwrap();
    rec.workdir = Some(workdir);
    let mut config = serde_json::Map::new();
    config.insert("namespace".into(), ns.clone().into());
    config.insert("image".into(), IMAGE.into());
    rec.backend = Backend::Provider {
        id: "kubernetes".into(),
        config,
        path_cache: None,
    };
    store.save_agent(&rec).unwrap();

    let providers = tmp.path().join("providers");
    std::fs::create_dir_all(&providers).unwrap();
    let installed = providers.join("buzz-backend-kubernetes");
    std::fs::copy(env!("CARGO_BIN_EXE_provider-under-test"), &installed).unwrap();
    std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(0o755)).unwrap();
    let opts = StartOptions {
        dirs: vec![providers],
        gate: GateConfig {
            deploy_deadline: Duration::from_secs(60),
            ..GateConfig::default()
        },
    };

    let mut status_lines = Vec::new();
    let deployed = app::start_provider(&store, "scout", &opts, &mut |l| status_lines.push(l.to_string()))
        .unwrap_or_else(|e| panic!("start failed: {e}; status: {status_lines:?}"));
    let pubkey = rec.pubkey.clone();
    assert_eq!(deployed.agent_id, format!("buzz-agent-{}", &pubkey[..12]));
    assert_eq!(
        store.deploy_state("scout").unwrap().agent_id.as_deref(),
        Some(deployed.agent_id.as_str())
    );

    let client = rt.block_on(env.admin_client()).unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = rt.block_on(pods.get(&deployed.agent_id)).unwrap();
    let running = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some());
    assert!(running, "success only once the harness container runs");
    let secret_name = pod.spec.as_ref().unwrap().containers[0]
        .env_from
        .as_ref()
        .unwrap()[0]
        .secret_ref
        .as_ref()
        .unwrap()
        .name
        .clone();
    let secret = rt
        .block_on(Api::<Secret>::namespaced(client, &ns).get(&secret_name))
        .unwrap();
    let data = secret.data.unwrap();
    let key = String::from_utf8(data["BUZZ_PRIVATE_KEY"].0.clone()).unwrap();
    let parsed = buzz_contract::keys::parse_private_key(&key).unwrap();
    assert_eq!(
        parsed.public_key().to_hex(),
        pubkey,
        "the pod holds the agent's own key"
    );
    let auth = String::from_utf8(data["BUZZ_AUTH_TAG"].0.clone()).unwrap();
    assert_eq!(
        buzz_contract::nip_oa::AuthTag::verified_owner(&auth, &pubkey).unwrap(),
        owner.public_key().to_hex(),
        "the launcher's NIP-OA tag reaches the pod"
    );

    let again = app::start_provider(&store, "scout", &opts, &mut |_| {}).unwrap();
    assert_eq!(again.agent_id, deployed.agent_id);
    let same = rt.block_on(pods.get(&deployed.agent_id)).unwrap();
    assert_eq!(
        same.metadata.uid, pod.metadata.uid,
        "a second Start on a live agent is a no-op"
    );
}
