//! `buzz-launcher demo --kubernetes` (issue 10 item 5, issue 18): the
//! first-run loop through the real provider, the real kube-apiserver with
//! etcd and the real node (kubelet, containerd, CNI) running the product
//! sprig image pulled by digest from the local registry (no test layer: the
//! pod's `buzz-acp` serves its built-in echo agent), against the launcher's
//! embedded relay bound to the bridge address (`BUZZ_EMBEDDED_RELAY_HOST`),
//! the only host address a pod reaches — the same parts
//! `scripts/local-cluster.sh up` starts for a developer.

use buzz_conformance::container::sprig_image;
use buzz_conformance::testenv::RealNode;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_buzz-launcher-under-test");
const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");

#[test]
fn demo_kubernetes_runs_every_step_through_a_pod_of_the_sprig_image() {
    let node = RealNode::shared();
    let env = node.env();
    let img = sprig_image();
    let tag = img.reference.rsplit(':').next().unwrap();
    let image = node
        .registry()
        .push_archive(&img.archive, "buzz-sprig", tag)
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ns = rt
        .block_on(node.create_namespace("demo", &[("pod-security.kubernetes.io/enforce", "restricted")]))
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let providers = tmp.path().join("providers");
    std::fs::create_dir_all(&providers).unwrap();
    let provider = providers.join("buzz-backend-kubernetes");
    std::fs::copy(PROVIDER, &provider).unwrap();
    std::fs::set_permissions(&provider, std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = tmp.path().join("state");
    let out = Command::new(LAUNCHER)
        .args(["demo", "--kubernetes", "--state-dir"])
        .arg(&state)
        .env("KUBECONFIG", env.admin_kubeconfig())
        .env("BUZZ_PROVIDER_PATH", &providers)
        .env("BUZZ_ACP_BIN", HARNESS)
        .env("BUZZ_LOCAL_CLUSTER_NAMESPACE", &ns)
        .env("BUZZ_SPRIG_IMAGE", &image)
        .env("BUZZ_EMBEDDED_RELAY_HOST", node.host_addr().to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let logs = || {
        std::fs::read_dir(state.join("logs"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    };
    assert_eq!(out.status.code(), Some(0), "{text}\n--- logs:\n{}", logs());
    for (n, step) in [
        (3, "backend"),
        (5, "start"),
        (6, "chat"),
        (7, "status"),
        (8, "stop"),
        (10, "cleanup"),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("[{n}/10] {step}")) && l.contains(" ok ")),
            "step {step}: {text}"
        );
    }
    assert!(text.contains(&format!("namespace={ns}")), "{text}");
    assert!(text.contains("reply: hello from the buzz demo"), "{text}");
    assert!(
        text.contains("demo online") && text.contains("demo offline"),
        "{text}"
    );
    assert!(text.contains("demo ok: every step succeeded"), "{text}");
}
