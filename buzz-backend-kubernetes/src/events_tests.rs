//! One test per row of the [`super`] table, over real event shapes: the
//! objects in `events_recorded.json` were listed from the real node's
//! apiserver (conformance/tests/real_node_events.rs with
//! `BUZZ_RECORD_EVENTS`; kube-scheduler and kubelet v1.36.3), the rest are
//! serialized `k8s-openapi` Events carrying the kubelet's v1.36.3 texts.

use super::*;
use serde_json::json;

const UID: &str = "6f1c2a0e-0000-4000-8000-000000000001";

fn event(type_: &str, reason: &str, message: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": { "name": "buzz-agent-0123456789ab.18a0", "namespace": "ns", "uid": "e-1" },
        "involvedObject": { "kind": "Pod", "name": "buzz-agent-0123456789ab", "namespace": "ns", "uid": UID },
        "type": type_, "reason": reason, "message": message,
        "lastTimestamp": "2026-01-01T00:00:10Z",
    }))
    .expect("an Event")
}

fn line(type_: &str, reason: &str, message: &str) -> Option<String> {
    status_line(&event(type_, reason, message), None).map(|l| l.text().to_string())
}

#[test]
fn scheduled_names_the_node() {
    assert_eq!(
        line(
            "Normal",
            "Scheduled",
            "Successfully assigned ns/buzz-agent-0123456789ab to node-a"
        ),
        Some("scheduled on node-a".into())
    );
    assert_eq!(line("Normal", "Scheduled", ""), Some("scheduled".into()));
}

#[test]
fn pulling_names_the_image() {
    assert_eq!(
        line("Normal", "Pulling", "Pulling image \"10.0.0.1:5000/s@sha256:00\""),
        Some("pulling 10.0.0.1:5000/s@sha256:00".into())
    );
}

#[test]
fn pulled_takes_the_kubelets_duration_else_the_time_since_pulling() {
    let m = "Successfully pulled image \"r/s:v1\" in 1.234s (1.5s including waiting). Image size: 123 bytes.";
    assert_eq!(line("Normal", "Pulled", m), Some("pulled in 1.234s".into()));
    let mut t = Tracker::new(UID);
    let mut pulling = event("Normal", "Pulling", "Pulling image \"r/s:v1\"");
    pulling.last_timestamp = Some(serde_json::from_value(json!("2026-01-01T00:00:10Z")).unwrap());
    let mut pulled = event("Normal", "Pulled", "Successfully pulled image \"r/s:v1\"");
    pulled.last_timestamp = Some(serde_json::from_value(json!("2026-01-01T00:00:13Z")).unwrap());
    let r = Literals::default();
    assert_eq!(t.observe(&pulling, &r).as_deref(), Some("pulling r/s:v1"));
    assert_eq!(t.observe(&pulled, &r).as_deref(), Some("pulled in 3.0s"));
}

#[test]
fn pulled_already_present_says_so() {
    assert_eq!(
        line(
            "Normal",
            "Pulled",
            "Container image \"localhost/s:t\" already present on machine and can be accessed by the pod"
        ),
        Some("image localhost/s:t already present".into())
    );
}

#[test]
fn created_and_started() {
    assert_eq!(
        line("Normal", "Created", "Created container: agent"),
        Some("created".into())
    );
    assert_eq!(
        line("Normal", "Started", "Started container agent"),
        Some("started".into())
    );
}

#[test]
fn failed_scheduling_back_off_failed_mount_and_failed_are_reason_and_message() {
    for (reason, message) in [
        ("FailedScheduling", "0/1 nodes are available: 1 Insufficient cpu."),
        ("BackOff", "Back-off pulling image \"r/s@sha256:00\""),
        (
            "FailedMount",
            "MountVolume.SetUp failed for volume \"x\" : secret \"buzz-agent-0123456789ab-00\" not found",
        ),
        ("Failed", "Error: ImagePullBackOff"),
    ] {
        assert_eq!(
            line("Warning", reason, message),
            Some(format!("{reason}: {message}"))
        );
    }
}

#[test]
fn quota_errors_are_shown() {
    let m = "Error creating: pods \"x\" is forbidden: exceeded quota: q, requested: cpu=1, used: cpu=1, limited: cpu=1";
    assert_eq!(
        line("Warning", "FailedCreate", m),
        Some(format!("FailedCreate: {m}"))
    );
    assert_eq!(line("Warning", "Quota", m), Some(format!("Quota: {m}")));
}

#[test]
fn any_other_warning_is_shown_and_any_other_normal_is_not() {
    assert_eq!(
        line("Warning", "FailedCreatePodSandBox", "no CNI"),
        Some("FailedCreatePodSandBox: no CNI".into())
    );
    assert_eq!(line("Normal", "Killing", "Stopping container agent"), None);
    assert_eq!(line("Normal", "SandboxChanged", "Pod sandbox changed"), None);
    assert_eq!(line("Warning", "", "no reason"), None);
}

#[test]
fn a_line_is_redacted_before_it_is_bounded_and_has_no_control_characters() {
    let secret = "s3cret-value-that-is-long";
    let r = Literals::new([secret.to_string()]);
    // The secret straddles the bound: cutting first would show its prefix.
    let message = format!(
        "{}{secret} nsec1qqqqqq\u{1b}[31m\r\nend",
        "x".repeat(MAX_LINE_CHARS - 20)
    );
    let out = sanitize(&format!("Failed: {message}"), &r);
    assert!(!out.contains("s3cret"), "{out}");
    assert!(!out.contains("nsec1"), "{out}");
    assert!(!out.chars().any(char::is_control), "{out:?}");
    assert!(out.chars().count() <= MAX_LINE_CHARS, "{}", out.chars().count());
    assert!(out.ends_with('…'));
    assert_eq!(sanitize("a\tb\nc", &r), "a b c");
}

#[test]
fn each_line_is_shown_once_and_the_last_warning_is_kept() {
    let r = Literals::default();
    let mut t = Tracker::new(UID);
    let mut back_off = event("Warning", "BackOff", "Back-off pulling image \"r/s\"");
    assert!(t.observe(&back_off, &r).is_some());
    // The kubelet re-counts the same event: not shown again.
    back_off.count = Some(5);
    assert_eq!(t.observe(&back_off, &r), None);
    let failed = event("Warning", "Failed", "Error: ImagePullBackOff");
    assert!(t.observe(&failed, &r).is_some());
    assert_eq!(t.last_warning(), Some("Failed: Error: ImagePullBackOff"));
    assert_eq!(t.observe(&back_off, &r), None);
    assert_eq!(t.last_warning(), Some("BackOff: Back-off pulling image \"r/s\""));
    assert!(!t.started());
    assert!(
        t.observe(&event("Normal", "Started", "Started container agent"), &r)
            .is_some()
    );
    assert!(t.started());
}

#[test]
fn another_pods_event_is_ignored() {
    let mut t = Tracker::new("other-uid");
    assert_eq!(
        t.observe(
            &event("Normal", "Started", "Started container agent"),
            &Literals::default()
        ),
        None
    );
}

#[test]
fn event_time_falls_back_from_last_timestamp_to_event_time() {
    let mut e = event("Normal", "Scheduled", "x");
    assert_eq!(event_millis(&e), Some(1_767_225_610_000));
    e.last_timestamp = None;
    e.event_time = Some(serde_json::from_value(json!("2026-01-01T00:00:11.500000Z")).unwrap());
    assert_eq!(event_millis(&e), Some(1_767_225_611_500));
}

#[test]
fn the_not_visible_notice_names_the_grant() {
    let n = not_visible_notice("ns1");
    assert!(n.starts_with("events are not visible to this user (grant list/watch on events: "));
    assert!(n.contains("-n ns1"));
    assert!(n.ends_with("continuing without them"));
}

/// The recorded events of one pod, in the order a list shows them, and its UID.
fn recorded(json: &str) -> (Vec<Event>, String) {
    let mut events: Vec<Event> = serde_json::from_str(json).expect("recorded Events");
    events.sort_by_key(first_millis);
    let uid = events[0].involved_object.uid.clone().expect("a uid");
    (events, uid)
}

fn lines_of(events: &[Event], uid: &str) -> (Vec<String>, Tracker) {
    let mut t = Tracker::new(uid);
    let r = Literals::default();
    let lines = events.iter().filter_map(|e| t.observe(e, &r)).collect();
    (lines, t)
}

/// Recorded on the real node: a digest no registry has.
#[test]
fn recorded_unpullable_image_lines() {
    let (events, uid) = recorded(include_str!("events_recorded/unpullable.json"));
    let (all, t) = lines_of(&events, &uid);
    // The test node's kubelet has no cluster DNS: a real Warning, shown, set aside here.
    assert!(
        all.iter().any(|l| l.starts_with("MissingClusterDNS: ")),
        "{all:?}"
    );
    let lines: Vec<&String> = all
        .iter()
        .filter(|l| !l.starts_with("MissingClusterDNS: "))
        .collect();
    let image = "127.0.0.1:5213/buzz-sprig@sha256:".to_string() + &"0".repeat(64);
    assert_eq!(lines[0], "scheduled on localhost");
    assert_eq!(*lines[1], format!("pulling {image}"));
    assert!(lines[2].starts_with(&format!("Failed: Failed to pull image \"{image}\": rpc error")));
    assert_eq!(lines[3], "Failed: Error: ErrImagePull");
    // The kubelet v1.36 writes the pull back-off as a Normal event.
    assert_eq!(*lines[4], format!("BackOff: Back-off pulling image \"{image}\""));
    assert_eq!(lines[5], "Failed: Error: ImagePullBackOff");
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert!(all.iter().all(|l| l.chars().count() <= MAX_LINE_CHARS));
    assert_eq!(t.last_warning(), Some("Failed: Error: ImagePullBackOff"));
    assert!(!t.started());
}

/// Recorded on the real node: a pull from the local registry, then the start.
#[test]
fn recorded_good_pull_lines() {
    let (events, uid) = recorded(include_str!("events_recorded/good-pull.json"));
    let (lines, t) = lines_of(&events, &uid);
    let progress: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| !l.starts_with("MissingClusterDNS: "))
        .collect();
    assert_eq!(progress.len(), 5, "{lines:?}");
    assert_eq!(progress[0], "scheduled on localhost");
    assert!(progress[1].starts_with("pulling 127.0.0.1:5213/buzz-events-test@sha256:"));
    assert!(
        progress[2].starts_with("pulled in ") && progress[2].ends_with('s'),
        "{}",
        progress[2]
    );
    assert_eq!(&progress[3..], ["created", "started"]);
    assert!(t.started());
}
