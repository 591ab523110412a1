//! The usage collector (`runtime-agent`) as a sidecar of the image, started
//! by the entrypoint with the env the provider puts on the pod
//! (`buzz_backend_kubernetes::telemetry::collector_env`, the Downward API
//! fields filled in as the kubelet would), shipping to a reference ingest on
//! loopback.

use super::*;
use buzz_backend_kubernetes::telemetry::collector_env;

/// The image reference the provider would write as `IMAGE_REF`: tag-pinned.
const TEST_IMAGE_REF: &str = "localhost/buzz-sprig-test:contract";

/// A reference ingest on loopback, stopped on drop.
struct Ingest {
    state: std::sync::Arc<runtime_ingest::server::State>,
    url: String,
    server: tokio::task::JoinHandle<std::convert::Infallible>,
    _db: tempfile::TempDir,
}

impl Ingest {
    async fn start() -> Ingest {
        let db = tempfile::tempdir().unwrap();
        let store = runtime_ingest::store::Store::open(&db.path().join("ingest.db")).unwrap();
        let options = runtime_ingest::server::Options {
            source_id: "image-test".into(),
            ..Default::default()
        };
        let state = std::sync::Arc::new(runtime_ingest::server::State::new(store, options));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(runtime_ingest::server::serve(
            listener,
            std::sync::Arc::clone(&state),
        ));
        Ingest {
            state,
            url,
            server,
            _db: db,
        }
    }

    /// The stored `collection_coverage` payloads of `pod_uid`, oldest first.
    fn coverage(&self, pod_uid: &str) -> Vec<serde_json::Value> {
        self.records("collection_coverage", pod_uid)
            .iter()
            .map(|p| serde_json::from_str(p).unwrap())
            .collect()
    }

    fn records(&self, kind: &str, pod_uid: &str) -> Vec<String> {
        self.state
            .store
            .lock()
            .unwrap()
            .records(Some(kind), Some(pod_uid))
            .unwrap()
            .into_iter()
            .map(|r| r.payload)
            .collect()
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The pod's plain env for the collector, exactly as the provider builds it
/// for `image` (Downward API fields resolved to test values), plus short
/// poll and shipping intervals.
fn plain_env(url: &str, image: &str, pod_uid: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = collector_env(url, "agent", image)
        .into_iter()
        .map(|e| {
            let field = e
                .value_from
                .as_ref()
                .and_then(|f| f.field_ref.as_ref())
                .map(|f| f.field_path.clone());
            let value = match field.as_deref() {
                Some("metadata.name" | "metadata.namespace") => "image-test".to_string(),
                Some("metadata.uid") => pod_uid.to_string(),
                Some("spec.nodeName") => "image-test-node".to_string(),
                Some(other) => panic!("a Downward API field this test does not fill: {other}"),
                None => e.value.clone().unwrap_or_default(),
            };
            (e.name, value)
        })
        .collect();
    env.push(("RUNTIME_AGENT_INTERVAL_SECS".into(), "1".into()));
    env.push(("RUNTIME_AGENT_SHIP_INTERVAL_SECS".into(), "1".into()));
    env
}

fn delivered(state: &runtime_ingest::server::State) -> usize {
    state
        .received
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.status == 204)
        .count()
}

/// The usage collector (`runtime-agent`, a sidecar of the image) runs beside
/// buzz-acp with the provider's plain env, ships to a reference ingest on loopback,
/// holds no secret and no user env in its `/proc/<pid>/environ`, gets the stop from
/// PID 1 and makes its final shipping round before the container exits — and
/// presence `offline` is still published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_ships_beside_buzz_acp_and_makes_its_final_round_at_the_stop() {
    let ingest = Ingest::start().await;
    let (state, url) = (&ingest.state, ingest.url.clone());
    let pod_uid = "7c1e2f30-aaaa-bbbb-cccc-0123456789ab";
    let b = Boxed::start_with_env("echo", plain_env(&url, TEST_IMAGE_REF, pod_uid)).await;
    b.wait_presence("online").await;
    wait_until(WAIT, || (delivered(state) >= 2).then_some(()))
        .await
        .unwrap_or_else(|| panic!("nothing shipped; container log:\n{}", b.podman.logs(&b.id)));

    // The collector's environment: the allowlist only — no key, no tag, no user env.
    let tree = host::tree(b.init_pid());
    let collector = tree
        .iter()
        .find(|p| p.comm.starts_with("10-runtime-age") && p.stat.state != 'Z')
        .unwrap_or_else(|| {
            panic!(
                "no collector in {:?}",
                tree.iter().map(|p| &p.comm).collect::<Vec<_>>()
            )
        });
    assert_eq!(
        env_value(&collector.environ, "POD_UID"),
        Some(pod_uid),
        "positive control"
    );
    let nsec = b.agent.secret_key().to_bech32().unwrap();
    let joined = collector.environ.join("\n");
    for (what, secret) in [
        ("the key", nsec.as_str()),
        ("the auth tag", b.auth_tag.as_str()),
        ("a user env value", USER_CANARY),
    ] {
        assert!(!joined.contains(secret), "{what} is visible to the collector");
    }
    for name in [
        "BUZZ_PRIVATE_KEY",
        "NOSTR_PRIVATE_KEY",
        "BUZZ_AUTH_TAG",
        "MY_SERVICE_TOKEN",
    ] {
        assert!(
            env_value(&collector.environ, name).is_none(),
            "{name} visible to the collector"
        );
    }

    let stop_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    b.stop();
    assert_eq!(b.wait_exit(WAIT).await, 0);
    b.wait_presence("offline").await;
    // The final flush's coverage (captured after the stop) arrived: the final round
    // ran before PID 1 exited.
    let coverage = ingest.coverage(pod_uid);
    assert_eq!(coverage.len(), 1);
    let cov = &coverage[0];
    let captured = cov["captured_at"].as_str().unwrap();
    let captured_secs = runtime_agent::time::parse_rfc3339(captured).unwrap();
    assert!(
        captured_secs >= stop_at,
        "the last coverage ({captured}) predates the stop: no final round"
    );
    // Nothing the ingest received holds a secret or a user env value.
    for r in state.received.lock().unwrap().iter() {
        for secret in [nsec.as_str(), b.auth_tag.as_str(), USER_CANARY] {
            assert!(!r.body.contains(secret), "a secret reached the ingest");
        }
    }
}

/// Review b30b1a0 #6: a tag-pinned pod whose Secret holds `IMAGE_DIGEST`
/// (a user value; the provider's own tiers refuse it, so here it is added to
/// the Secret-shaped file by hand) must not pass the collector's digest gate:
/// the provider writes an explicit empty `IMAGE_DIGEST` in the plain env,
/// which beats the Secret's `envFrom`. Coverage says `blocked`, and no
/// digest-keyed `process_peaks` is shipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_image_digest_in_user_env_does_not_pass_the_digest_gate() {
    let forged = format!("sha256:{}", "5".repeat(64));
    // The provider refuses it in every user tier.
    let payload = json!({
        "name": "image-test", "relay_url": "ws://127.0.0.1:1",
        "private_key_nsec": Keys::generate().secret_key().to_bech32().unwrap(),
        "launch": { "command": "acp-test-agent", "env": { "IMAGE_DIGEST": forged } }
    });
    let config = json!({ "namespace": "image-test", "image": TEST_IMAGE_REF });
    let refused = buzz_backend_kubernetes::protocol::prepare(&payload, &config, None).and_then(|plan| {
        Ok(buzz_backend_kubernetes::envtiers::assemble(
            &plan.agent,
            &plan.authoritative,
        )?)
    });
    assert!(refused.is_err(), "the provider must refuse a user IMAGE_DIGEST");

    let ingest = Ingest::start().await;
    let pod_uid = "5f0d9a11-aaaa-bbbb-cccc-0123456789ab";
    let b = Boxed::start_with(
        "echo",
        plain_env(&ingest.url, TEST_IMAGE_REF, pod_uid),
        BTreeMap::from([("IMAGE_DIGEST".to_string(), forged.clone())]),
    )
    .await;
    b.wait_presence("online").await;
    wait_until(WAIT, || (delivered(&ingest.state) >= 2).then_some(()))
        .await
        .unwrap_or_else(|| panic!("nothing shipped; container log:\n{}", b.podman.logs(&b.id)));
    b.stop();
    assert_eq!(b.wait_exit(WAIT).await, 0);
    let coverage = ingest.coverage(pod_uid);
    let last = coverage.last().expect("a coverage record");
    assert_eq!(
        last["agent"]["digest_gate"]["state"], "blocked",
        "a forged digest passed the gate: {last}"
    );
    assert!(
        ingest.records("process_peaks", pod_uid).is_empty(),
        "process_peaks were shipped under a digest nobody deployed"
    );
    for r in ingest.state.received.lock().unwrap().iter() {
        assert!(!r.body.contains(&forged), "the forged digest reached the ingest");
    }
}

/// One sidecar allowlist (review b30b1a0 #6): the names the collector reads
/// are the contract's sidecar identity, settings and proxy names, exactly.
/// (A buzz-contract test ties the entrypoint's list to the same contract.)
#[test]
fn the_collector_reads_exactly_the_contracts_sidecar_names() {
    use buzz_contract::sidecar::{
        SIDECAR_ENV_ALLOWLIST, SIDECAR_IDENTITY, SIDECAR_PROCESS_ENV, SIDECAR_PROXY_ENV, SIDECAR_SETTINGS,
    };
    let mut read: Vec<&str> = runtime_agent::config::READ_NAMES
        .iter()
        .chain(runtime_agent::proxy::PROXY_READ_NAMES.iter())
        .copied()
        .collect();
    let mut contract: Vec<&str> = SIDECAR_IDENTITY
        .iter()
        .chain(SIDECAR_SETTINGS)
        .chain(SIDECAR_PROXY_ENV)
        .copied()
        .collect();
    read.sort_unstable();
    contract.sort_unstable();
    assert_eq!(read, contract);
    // What the entrypoint hands over beyond that is ordinary process env.
    for name in SIDECAR_ENV_ALLOWLIST {
        assert!(
            contract.contains(name) || SIDECAR_PROCESS_ENV.contains(name),
            "{name}"
        );
    }
}
