//! A Start whose agent cannot run fails the Start (issue 30 item 3, the
//! provider's half), on the real node: the harness container exits at
//! startup having written why to `/dev/termination-log`, and the deploy
//! answers in-band `ok:false` with the exit code, that message and the
//! image it ran, fast (within 30 s), not at the deploy deadline.
//!
//! Two tests:
//! - **stand-in**: an image whose entrypoint does what the harness's
//!   startup check is to do (write the reason, exit with the config-error
//!   code 2), so the provider's half is proved whatever the harness does;
//! - **the real harness**: `agent_command: claude-agent-acp` into the base
//!   test image, which lacks it: the harness's startup check refuses it
//!   (exit 2) and writes why to the termination message.

use buzz_conformance::container::{Podman, sprig_image, test_image};
use buzz_conformance::provider_support::{Outcome, Provider, TestAgent, deploy_request};
use buzz_conformance::real_node_support::{Scenario, podman_archive};
use buzz_conformance::testenv::RealNode;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const SAID: &str = "`claude-agent-acp` is not in this image; use buzz-sprig-claude";
/// The bound for the whole Start, on the real node.
const FAST: Duration = Duration::from_secs(30);

fn agent_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_acp-test-agent"))
}

/// The test image with a stand-in entrypoint that writes [`SAID`] to its
/// termination message and exits 2, imported into the node; pinned.
fn stand_in_image() -> String {
    let podman = Podman::from_env();
    let base = test_image(&podman, sprig_image(), agent_bin()).expect("the test image");
    let ctx = tempfile::tempdir().expect("a build context");
    let script = format!(
        "#!/bin/sh\n# The harness's startup check, standing in (issue 30 item 3).\nprintf '%s' '{SAID}' > /dev/termination-log\nexit 2\n"
    );
    std::fs::write(ctx.path().join("stand-in.sh"), script).expect("the script");
    std::fs::write(
        ctx.path().join("Containerfile"),
        "ARG BASE\nFROM ${BASE}\nCOPY --chmod=755 stand-in.sh /usr/local/bin/stand-in-harness\nENTRYPOINT [\"/usr/local/bin/stand-in-harness\"]\n",
    )
    .expect("the Containerfile");
    let reference = "localhost/buzz-sprig-stand-in:termination".to_string();
    podman
        .run([
            "build".into(),
            "--quiet".into(),
            "--isolation".into(),
            "chroot".into(),
            "--pull=never".into(),
            "--build-arg".into(),
            format!("BASE={base}"),
            "-t".into(),
            reference.clone(),
            ctx.path().display().to_string(),
        ])
        .expect("built");
    let archive = podman_archive(&podman, &reference).expect("its archive");
    RealNode::shared()
        .import(&archive, "localhost/buzz-sprig-stand-in")
        .expect("imported")
}

fn deploy(s: &Scenario, image: &str, command: &str) -> (Outcome, Duration) {
    let agent = TestAgent::new();
    let mut payload = agent.payload();
    payload.relay_url = s.relay.url.clone();
    payload.agent_command = command.into();
    if let Some(l) = payload.launch.as_mut() {
        l.command = command.into();
    }
    let req = deploy_request(
        &payload,
        json!({"namespace": s.ns, "image": image, "cpu_request": "50m", "memory_request": "64Mi"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let t0 = Instant::now();
    let out = s.rt.block_on(Provider::new(PROVIDER).deploy(
        s.node.env().admin_kubeconfig(),
        &req,
        &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "120")],
    ));
    (out, t0.elapsed())
}

#[test]
fn a_harness_that_cannot_run_fails_the_start_with_its_termination_message() {
    let image = stand_in_image();
    let s = Scenario::new("term-standin", &[], None, Path::new(PROVIDER));
    let (out, took) = deploy(&s, &image, "claude-agent-acp");
    assert_eq!(
        out.response["ok"], false,
        "{}\nstderr:\n{}",
        out.response, out.stderr
    );
    let err = out.error();
    assert!(err.contains("exited before it was confirmed running"), "{err}");
    assert!(err.contains("exit code 2"), "the exit code: {err}");
    assert!(err.contains(&format!("the harness said: {SAID}")), "{err}");
    assert!(
        err.contains(&format!("(image {image})")),
        "the image it ran: {err}"
    );
    assert!(took < FAST, "fast, not at the 120 s deadline: {took:?}");
}

#[test]
fn the_real_harness_without_its_agent_command_fails_the_start_in_band() {
    let image = buzz_conformance::real_node_support::imported_test_image(agent_bin());
    let s = Scenario::new("term-real", &[], None, Path::new(PROVIDER));
    let (out, took) = deploy(&s, &image, "claude-agent-acp");
    // Seen once in CI: a success, unexplained (the harness refuses before
    // its probe listens, so the hook cannot pass). What the pod went
    // through, for the next time.
    assert_eq!(
        out.response["ok"],
        false,
        "{}\nstderr:\n{}\nthe pod's events: {:?}",
        out.response,
        out.stderr,
        out.response["agent_id"].as_str().map(|id| s.pod_events(id))
    );
    let err = out.error();
    assert!(err.contains("exit code 2"), "{err}");
    assert!(err.contains("claude-agent-acp"), "the harness's reason: {err}");
    assert!(err.contains(&format!("(image {image})")), "{err}");
    assert!(took < FAST, "{took:?}");
}
