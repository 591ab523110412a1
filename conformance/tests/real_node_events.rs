//! Start progress from the cluster's own events on the real node (issue 21
//! part 2; spec §Provider Protocol status lines on stderr, §Provider Output
//! Is Untrusted, §Deploy State Machine "Startup is part of create"): the
//! events a real scheduler and kubelet write for the provider's pod become
//! its stderr status lines, each once, and a failed Start names the last
//! Warning event in-band.
//!
//! The provider is invoked as a user would (one JSON on stdin; its whole
//! stderr kept), and once through the launcher, whose status callback must
//! see the event lines while the Start is still running.

use buzz_conformance::container::Podman;
use buzz_conformance::provider_support::{Outcome, Provider, TestAgent, deploy_request};
use buzz_conformance::real_node_support::{Scenario, podman_archive};
use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Instant;

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");
const PREFIX: &str = "buzz-backend-kubernetes: ";

fn imported_test_image() -> String {
    buzz_conformance::real_node_support::imported_test_image(Path::new(env!("CARGO_BIN_EXE_acp-test-agent")))
}

/// A deploy request for `agent` into the scenario's namespace.
fn request(s: &Scenario, agent: &TestAgent, config: Value) -> Value {
    let mut payload = agent.payload();
    payload.relay_url = s.relay.url.clone();
    payload.agent_command = "acp-test-agent".into();
    payload.agent_args = vec!["echo".into()];
    if let Some(l) = payload.launch.as_mut() {
        l.command = "acp-test-agent".into();
        l.args = vec!["echo".into()];
    }
    let mut c = json!({
        "namespace": s.ns,
        "inactivity_seconds": 7200,
        "cpu_request": "50m",
        "memory_request": "64Mi",
    });
    for (k, v) in config.as_object().cloned().unwrap_or_default() {
        c[k] = v;
    }
    deploy_request(&payload, c.as_object().cloned().unwrap_or_default())
}

fn deploy(s: &Scenario, agent: &TestAgent, config: Value, deadline_secs: u32) -> Outcome {
    let deadline = deadline_secs.to_string();
    s.rt.block_on(Provider::new(PROVIDER).deploy(
        s.node.env().admin_kubeconfig(),
        &request(s, agent, config),
        &[("BUZZ_K8S_DEPLOY_DEADLINE_SECS", deadline.as_str())],
    ))
}

/// The provider's stderr lines, prefix removed.
fn lines(out: &Outcome) -> Vec<String> {
    out.stderr
        .lines()
        .map(|l| l.strip_prefix(PREFIX).unwrap_or(l).to_string())
        .collect()
}

/// Index of the first line starting with `start`, with the whole stderr on failure.
fn position(lines: &[String], start: &str) -> usize {
    lines
        .iter()
        .position(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{}", lines.join("\n")))
}

/// Index of the line that is exactly `text`.
fn exact(lines: &[String], text: &str) -> usize {
    lines
        .iter()
        .position(|l| l == text)
        .unwrap_or_else(|| panic!("no line {text:?} in:\n{}", lines.join("\n")))
}

/// Every line starting with `start` is shown once.
fn each_once(lines: &[String], start: &str) -> usize {
    let matching: Vec<&String> = lines.iter().filter(|l| l.starts_with(start)).collect();
    let mut unique = matching.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        matching.len(),
        "a {start:?} line shown twice:\n{}",
        lines.join("\n")
    );
    matching.len()
}

/// The real events of the pod, recorded as JSON when `BUZZ_RECORD_EVENTS` names a directory.
fn record_events(s: &Scenario, agent: &TestAgent, name: &str) -> Vec<Event> {
    let pod = s.rt.block_on(s.pods.get(&agent.pod_name())).expect("the pod");
    let uid = pod.metadata.uid.unwrap_or_default();
    let lp = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    let events = s.rt.block_on(s.events.list(&lp)).expect("events").items;
    if let Ok(dir) = std::env::var("BUZZ_RECORD_EVENTS") {
        let path = Path::new(&dir).join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&events).unwrap_or_default()).expect("recorded");
    }
    events
}

#[test]
fn an_unpullable_image_shows_pulling_then_failed_and_back_off_once_each_and_the_error_names_the_last_warning()
{
    let s = Scenario::new("ev-pull", &[RESTRICTED], None, Path::new(PROVIDER));
    let agent = TestAgent::new();
    let missing = format!("{}/buzz-sprig@sha256:{}", s.node.registry().addr, "0".repeat(64));
    let out = deploy(&s, &agent, json!({ "image": missing }), 25);
    let err = out.error();
    let l = lines(&out);
    record_events(&s, &agent, "unpullable");

    assert!(
        l.iter().any(|x| x.starts_with("scheduled on ")),
        "the scheduler's event:\n{}",
        l.join("\n")
    );
    let pulling = position(&l, &format!("pulling {missing}"));
    assert_eq!(each_once(&l, "pulling "), 1, "{}", l.join("\n"));
    let failed = each_once(&l, "Failed: ");
    // The kubelet's back-off event may come later than the deadline; once if at all.
    each_once(&l, "BackOff: ");
    assert!(failed >= 1, "the kubelet's pull failure:\n{}", l.join("\n"));
    assert!(position(&l, "Failed: ") > pulling, "pulling comes first");
    // The in-band error names the pod's condition and the last Warning event.
    assert!(
        err.contains("ErrImagePull") || err.contains("ImagePullBackOff"),
        "the condition: {err}"
    );
    let (_, event) = err
        .split_once("; last warning event: ")
        .unwrap_or_else(|| panic!("no last warning event in: {err}"));
    assert!(
        event.starts_with("Failed: ") || event.starts_with("BackOff: "),
        "{event}"
    );
    assert!(
        l.iter().any(|x| x == event),
        "the named event is one of the lines shown: {event}"
    );
    for text in [&out.stdout, &out.stderr] {
        assert!(!text.contains(&agent.nsec()));
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text}");
    }
}

#[test]
fn a_good_start_shows_scheduled_pulling_pulled_created_started_in_order() {
    let image = imported_test_image();
    // The same image under a registry name the node has not pulled: a real pull.
    let archive = podman_archive(&Podman::from_env(), &{
        // The archive of the imported image, cached by reference.
        let podman = Podman::from_env();
        buzz_conformance::container::test_image(
            &podman,
            buzz_conformance::container::sprig_image(),
            Path::new(env!("CARGO_BIN_EXE_acp-test-agent")),
        )
        .expect("the test image")
    })
    .expect("its archive");
    let tag = format!("ev{}", std::process::id());
    let s = Scenario::new("ev-good", &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    let pinned = s
        .node
        .registry()
        .push_archive(&archive, "buzz-events-test", &tag)
        .expect("pushed");

    let agent = TestAgent::new();
    let out = deploy(&s, &agent, json!({ "image": pinned }), 90);
    out.agent_id();
    let l = lines(&out);
    record_events(&s, &agent, "good-pull");
    let order = [
        position(&l, "scheduled on "),
        position(&l, &format!("pulling {pinned}")),
        position(&l, "pulled in "),
        exact(&l, "created"),
        exact(&l, "started"),
    ];
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "in order: {order:?}\n{}",
        l.join("\n")
    );
    for start in ["scheduled on ", "pulling ", "pulled in "] {
        assert_eq!(each_once(&l, start), 1, "{start}");
    }
    for text in ["created", "started"] {
        assert_eq!(l.iter().filter(|x| *x == text).count(), 1, "{text}");
    }

    // The image is now present: the second agent's Start says so.
    let second = TestAgent::new();
    let out = deploy(&s, &second, json!({ "image": pinned }), 90);
    out.agent_id();
    let l = lines(&out);
    record_events(&s, &second, "good-present");
    let order = [
        position(&l, "scheduled on "),
        position(&l, "image "),
        exact(&l, "created"),
        exact(&l, "started"),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{}", l.join("\n"));
    assert!(l[order[1]].ends_with(" already present"), "{}", l[order[1]]);
}

#[test]
fn the_launcher_sees_event_lines_while_the_start_runs() {
    let image = imported_test_image();
    let s = Scenario::new("ev-launcher", &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    let t0 = Instant::now();
    let mut seen: Vec<(std::time::Duration, String)> = Vec::new();
    let r = desktop_launcher::app::start_provider(
        &s.store,
        buzz_conformance::real_node_support::NAME,
        &s.opts,
        &mut |l| seen.push((t0.elapsed(), l.to_string())),
    );
    let took = t0.elapsed();
    r.unwrap_or_else(|e| panic!("start: {e}; {seen:?}"));
    let event_lines: Vec<&(std::time::Duration, String)> = seen
        .iter()
        .filter(|(_, l)| l.contains("scheduled on ") || l.ends_with("started") || l.ends_with("created"))
        .collect();
    assert!(
        !event_lines.is_empty(),
        "no event line reached the launcher: {seen:?}"
    );
    // Shown as they arrive: the first event line well before the Start returned.
    assert!(
        event_lines[0].0 + std::time::Duration::from_millis(200) < took,
        "the first event line came only at the end ({:?} of {took:?}): {seen:?}",
        event_lines[0].0
    );
}
