//! The pod knobs on the real node (issue 30 item 4): a Start with
//! `runtime_class_name: buzz-runc` (the node's RuntimeClass for its runc
//! handler, `testenv::runtime_class`) runs through RuntimeClass admission
//! and the kubelet's handler lookup; a `node_selector` that matches no node
//! shows the real scheduler's `FailedScheduling` as a Start progress line,
//! and the deploy fails within its budget naming it, not as a bare timeout.

use buzz_conformance::provider_support::{Provider, TestAgent, deploy_request};
use buzz_conformance::real_node_support::{Scenario, container_state};
use buzz_conformance::testenv::runtime_class;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");

fn imported_test_image() -> String {
    buzz_conformance::real_node_support::imported_test_image(Path::new(env!("CARGO_BIN_EXE_acp-test-agent")))
}

#[test]
fn a_start_with_the_nodes_runtime_class_runs() {
    let image = imported_test_image();
    let s = Scenario::new("knob-rc", &[], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, config| {
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
        config.insert("runtime_class_name".into(), json!(runtime_class::NAME));
    });
    let (pod, _) = s.start();
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.runtime_class_name.as_deref()),
        Some(runtime_class::NAME)
    );
    assert!(container_state(&pod).is_some_and(|c| c.running.is_some()));
}

#[test]
fn a_node_selector_that_matches_nothing_fails_with_the_schedulers_reason() {
    let image = imported_test_image();
    let s = Scenario::new("knob-sel", &[], Some(&image), Path::new(PROVIDER));
    let agent = TestAgent::new();
    let mut payload = agent.payload();
    payload.relay_url = s.relay.url.clone();
    let req = deploy_request(
        &payload,
        json!({
            "namespace": s.ns,
            "image": image,
            "cpu_request": "50m",
            "memory_request": "64Mi",
            "node_selector": "buzz.test/pool=nowhere",
        })
        .as_object()
        .cloned()
        .unwrap_or_default(),
    );
    let deadline = 20u64;
    let t0 = Instant::now();
    let out = s.rt.block_on(Provider::new(PROVIDER).deploy(
        s.node.env().admin_kubeconfig(),
        &req,
        &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", &deadline.to_string())],
    ));
    let took = t0.elapsed();
    let err = out.error();
    assert!(
        out.stderr.lines().any(|l| l.contains("FailedScheduling: ")),
        "the scheduler's event is a progress line; error: {err}; stderr:\n{}",
        out.stderr
    );
    assert!(err.contains("Unschedulable"), "the condition: {err}");
    assert!(err.contains("last warning event: FailedScheduling: "), "{err}");
    assert!(err.contains("node"), "the scheduler's own words: {err}");
    assert!(
        took < Duration::from_secs(deadline + 15),
        "answered within its budget (the process spawn aside): {took:?}"
    );
}
