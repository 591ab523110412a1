//! One test per undeploy rule (module doc of [`super`]).

use super::*;
use crate::consts::*;
use crate::gc::tests::{claim_for_another, g, sec, unlabel};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

const PK: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const GATE: Duration = Duration::from_secs(1200);

/// `PK`'s pod of `generation` in `phase`, stored now.
fn pd(generation: &str, phase: &str) -> Pod {
    crate::gc::tests::pd(generation, phase, SystemTime::now())
}

fn names(f: &[Fenced]) -> Vec<String> {
    f.iter().map(|f| f.name.clone()).collect()
}

fn none() -> BTreeSet<String> {
    BTreeSet::new()
}

#[test]
fn a_running_pod_and_its_secret_are_deleted_fenced() {
    let now = SystemTime::now();
    let p = plan(
        PK,
        &[pd(&g(1), "Running")],
        &[sec(&g(1), now)],
        &none(),
        &none(),
        Some(now),
        GATE,
    );
    assert_eq!(names(&p.pods), vec!["buzz-agent-0123456789ab"]);
    assert_eq!(p.pods[0].uid, "uid-buzz-agent-0123456789ab");
    assert_eq!(p.pods[0].resource_version, "7");
    assert_eq!(
        names(&p.secrets),
        vec![format!("buzz-agent-0123456789ab-{}", g(1))],
        "a Secret whose pod is removed goes, whatever its age"
    );
    assert!(p.left.is_empty() && !p.settled());
}

#[test]
fn a_never_started_pod_is_removed_like_any_other() {
    let now = SystemTime::now();
    let p = plan(
        PK,
        &[pd(&g(1), "Pending")],
        &[sec(&g(1), now)],
        &none(),
        &none(),
        Some(now),
        GATE,
    );
    assert_eq!((p.pods.len(), p.secrets.len()), (1, 1));
}

#[test]
fn a_terminating_pod_is_waited_on_and_its_secret_stays_doomed() {
    let now = SystemTime::now();
    let mut dying = pd(&g(1), "Running");
    dying.metadata.deletion_timestamp = Some(Time(now.try_into().unwrap()));
    let p = plan(
        PK,
        &[dying],
        &[sec(&g(1), now)],
        &none(),
        &none(),
        Some(now),
        GATE,
    );
    assert!(p.pods.is_empty());
    assert_eq!(p.terminating.len(), 1);
    assert_eq!(p.secrets.len(), 1);
    // Once the pod is gone, the doomed name still authorizes its Secret.
    let later = plan(PK, &[], &[sec(&g(1), now)], &p.doomed, &none(), Some(now), GATE);
    assert_eq!(later.secrets.len(), 1);
}

#[test]
fn unmarked_or_foreign_objects_are_left_and_reported() {
    let now = SystemTime::now();
    let ancient = now - Duration::from_secs(100_000);
    let mut unmarked = pd(&g(1), "Running");
    unlabel(&mut unmarked.metadata, LABEL_MANAGED_BY);
    let mut foreign = sec(&g(2), ancient);
    claim_for_another(&mut foreign.metadata);
    let p = plan(
        PK,
        &[unmarked],
        &[sec(&g(1), ancient), foreign],
        &none(),
        &none(),
        Some(now),
        GATE,
    );
    assert!(p.pods.is_empty() && p.secrets.is_empty(), "{p:?}");
    let why: Vec<LeftWhy> = p.left.iter().map(|l| l.why).collect();
    assert_eq!(
        why,
        vec![
            LeftWhy::Unmarked,
            LeftWhy::ReferencedByUntouchedPod,
            LeftWhy::ForeignAnnotation
        ]
    );
    assert!(p.settled(), "nothing to act on: the answer reports what is left");
}

#[test]
fn a_young_unreferenced_secret_is_left_an_old_one_goes() {
    let server_now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
    let young = sec(&g(2), server_now - Duration::from_secs(60));
    let old = sec(&g(3), server_now - Duration::from_secs(1201));
    let p = plan(PK, &[], &[young, old], &none(), &none(), Some(server_now), GATE);
    assert_eq!(
        names(&p.secrets),
        vec![format!("buzz-agent-0123456789ab-{}", g(3))]
    );
    assert_eq!(p.left.len(), 1);
    assert_eq!(p.left[0].why, LeftWhy::YoungUnreferenced);
    assert_eq!(
        p.left[0].removable_at,
        Some(server_now - Duration::from_secs(60) + GATE),
        "the time from which a retry removes it"
    );
}

/// Issue 30 item 5: a young Secret whose owner pod was proved gone (a pod
/// deleted by other hands) is doomed, not young; the answer about a young
/// one calls it this agent's and says when a retry removes it, never "not
/// ours".
#[test]
fn an_owned_secret_whose_owner_is_gone_goes_and_a_young_one_is_named_young() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
    let s = crate::gc::tests::owned(sec(&g(2), now), "uid-gone");
    let gone = BTreeSet::from(["uid-gone".to_string()]);
    let p = plan(PK, &[], std::slice::from_ref(&s), &none(), &gone, Some(now), GATE);
    assert_eq!(
        names(&p.secrets),
        vec![format!("buzz-agent-0123456789ab-{}", g(2))]
    );
    assert!(p.left.is_empty());
    let p = plan(PK, &[], &[s], &none(), &none(), Some(now), GATE);
    let e = UndeployError::Left {
        name: "scout".into(),
        namespace: "ns".into(),
        removed: Default::default(),
        left: p.left,
    }
    .to_string();
    assert!(!e.contains("not provably"), "{e}");
    assert!(e.contains("this agent's, young"), "{e}");
    assert!(
        e.contains(&format!(
            "after {} (apiserver clock)",
            httpdate::fmt_http_date(now + GATE)
        )),
        "{e}"
    );
}

#[test]
fn no_date_means_no_unreferenced_secret_is_deleted() {
    let ancient = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    let p = plan(PK, &[], &[sec(&g(2), ancient)], &none(), &none(), None, GATE);
    assert!(p.secrets.is_empty());
    assert_eq!(p.left[0].why, LeftWhy::AgeUnknown);
}

#[test]
fn nothing_listed_is_settled_with_nothing_left() {
    let p = plan(PK, &[], &[], &none(), &none(), Some(SystemTime::now()), GATE);
    assert!(p.settled() && p.left.is_empty());
}

#[test]
fn the_request_is_parsed_strictly_and_never_echoed() {
    let cfg = json!({ "namespace": "ns", "image": "registry.test/s:v1" });
    let t = parse(&json!({"name": "scout", "pubkey": PK}), &cfg, false, None).unwrap();
    assert_eq!(
        (t.name.as_str(), t.pubkey.as_str(), t.config.namespace.as_str()),
        ("scout", PK, "ns")
    );
    let canary = "nsec1canarycanarycanarycanarycanarycanarycanarycanarycanary";
    let with_nsec = json!({"name": "scout", "pubkey": PK, "private_key_nsec": canary});
    assert!(
        parse(&with_nsec, &cfg, false, None).is_ok(),
        "a stray key is ignored"
    );
    for bad_key in [
        PK.to_uppercase(),
        PK[..63].to_string(),
        format!("{PK}0"),
        canary.to_string(),
        format!("g{}", &PK[1..]),
    ] {
        let e = parse(&json!({"name": "scout", "pubkey": bad_key}), &cfg, false, None).unwrap_err();
        let shown = e.to_string();
        assert!(shown.contains("64 lowercase hex"), "{shown}");
        assert!(!shown.contains(&bad_key), "the value is never echoed: {shown}");
    }
    assert!(parse(&json!({"name": "scout"}), &cfg, false, None).is_err());
    assert!(parse(&json!({"pubkey": PK}), &cfg, false, None).is_err());
    let e = parse(
        &json!({"name": "s", "pubkey": PK}),
        &json!({"namespace": "Bad_NS", "image": "r.test/s:v1"}),
        false,
        None,
    )
    .unwrap_err();
    assert!(
        matches!(e, DeployError::Config(_)),
        "the deploy's config validation: {e}"
    );
}

#[test]
fn errors_name_what_is_left_and_why() {
    let e = UndeployError::Left {
        name: "scout".into(),
        namespace: "ns".into(),
        removed: buzz_contract::wire::Removed {
            pods: 1,
            secrets: 2,
            workspaces: 0,
            ..Default::default()
        },
        left: vec![Left::pod("buzz-agent-0123456789ab".into(), LeftWhy::Unmarked)],
    };
    let s = e.to_string();
    assert!(
        s.contains("removed 1 pod and 2 Secrets") && s.contains("left: 1 object(s)"),
        "{s}"
    );
    assert!(
        s.contains("pod buzz-agent-0123456789ab (it carries this agent's identity but not the marker"),
        "{s}"
    );
    assert!(
        s.contains("not provably this provider's") && !s.contains("Undeploy again"),
        "{s}"
    );
    let f = UndeployError::Forbidden {
        verb: "delete",
        resource: "pods",
        namespace: "ns".into(),
        message: "denied".into(),
        removed: Default::default(),
    };
    assert!(
        f.to_string().contains("`kubectl auth can-i delete pods -n ns`"),
        "{f}"
    );
}

/// `PK`'s workspace claim as the apiserver stores it.
fn claim() -> PersistentVolumeClaim {
    let spec = crate::workspace::WorkspaceSpec {
        size: "1Gi".into(),
        storage_class: None,
    };
    let mut c = crate::workspace::claim(PK, &spec);
    c.metadata.uid = Some("claim-uid".into());
    c.metadata.resource_version = Some("7".into());
    c
}

#[test]
fn the_claim_is_deleted_only_in_a_pass_that_lists_no_pod() {
    let now = SystemTime::now();
    let running = [pd(&g(1), "Running")];
    let mut p = plan(PK, &running, &[], &none(), &none(), Some(now), GATE);
    plan_claims(&mut p, PK, &running, &[claim()]);
    assert!(
        p.claims.is_empty(),
        "a pod this undeploy removes may still use it"
    );
    assert!(p.left.is_empty(), "and it is not left: the next pass deletes it");
    assert!(!p.settled());

    let mut p = plan(PK, &[], &[], &none(), &none(), Some(now), GATE);
    plan_claims(&mut p, PK, &[], &[claim()]);
    assert_eq!(names(&p.claims), ["buzz-agent-0123456789ab-workspace"]);
    assert_eq!(p.claims[0].uid, "claim-uid", "fenced on what was listed");
    assert!(!p.settled());
}

#[test]
fn a_claim_a_pod_we_may_not_touch_keeps_is_left_and_a_foreign_one_is_never_touched() {
    let now = SystemTime::now();
    let mut unmarked = pd(&g(1), "Running");
    unlabel(&mut unmarked.metadata, LABEL_MANAGED_BY);
    let foreign_pod = [unmarked];
    let mut p = plan(PK, &foreign_pod, &[], &none(), &none(), Some(now), GATE);
    plan_claims(&mut p, PK, &foreign_pod, &[claim()]);
    assert!(p.claims.is_empty());
    assert!(
        p.left
            .iter()
            .any(|l| l.kind == error::Kind::Claim && l.why == LeftWhy::ReferencedByUntouchedPod),
        "{:?}",
        p.left
    );

    let mut other = claim();
    other
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANN_PUBKEY_FULL.into(), "f".repeat(64));
    let mut p = plan(PK, &[], &[], &none(), &none(), Some(now), GATE);
    plan_claims(&mut p, PK, &[], &[other]);
    assert!(p.claims.is_empty());
    assert_eq!(p.left[0].why, LeftWhy::ForeignAnnotation);
    assert!(
        p.left[0]
            .to_string()
            .starts_with("PersistentVolumeClaim buzz-agent-0123456789ab-workspace")
    );
}

#[test]
fn a_claim_being_deleted_is_waited_on() {
    let mut going = claim();
    going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let mut p = plan(PK, &[], &[], &none(), &none(), Some(SystemTime::now()), GATE);
    plan_claims(&mut p, PK, &[], &[going]);
    assert_eq!(p.claims_terminating, 1);
    assert!(!p.settled(), "the undeploy waits until it is gone");
}
