//! One test per rule of [`super`].

use super::*;
use k8s_openapi::api::core::v1::PersistentVolumeClaimStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const PK: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn spec(size: &str, class: Option<&str>) -> WorkspaceSpec {
    WorkspaceSpec {
        size: size.into(),
        storage_class: class.map(str::to_string),
    }
}

/// The claim as the apiserver stores it: the default class filled in.
fn stored(size: &str, class: &str, phase: &str) -> PersistentVolumeClaim {
    let mut c = claim(PK, &spec(size, None));
    c.spec.as_mut().unwrap().storage_class_name = Some(class.into());
    c.status = Some(PersistentVolumeClaimStatus {
        phase: Some(phase.into()),
        ..Default::default()
    });
    c
}

#[test]
fn the_fields_parse_strictly_and_a_class_alone_is_refused() {
    assert_eq!(WorkspaceSpec::parse(None, None).unwrap(), None);
    assert_eq!(
        WorkspaceSpec::parse(Some("10Gi".into()), Some("local-path".into())).unwrap(),
        Some(spec("10Gi", Some("local-path")))
    );
    for bad in ["10GB", "ten", "-1Gi", "1", "512Ki", "1.5"] {
        let e = WorkspaceSpec::parse(Some(bad.into()), None).unwrap_err();
        assert!(e.to_string().contains("workspace_size"), "{bad}: {e}");
    }
    let e = WorkspaceSpec::parse(None, Some("fast".into())).unwrap_err();
    assert!(e.to_string().contains("workspace_size is empty"), "{e}");
    let e = WorkspaceSpec::parse(Some("1Gi".into()), Some("Fast_SSD".into())).unwrap_err();
    assert!(e.to_string().contains("not a StorageClass name"), "{e}");
}

#[test]
fn the_claim_carries_the_identity_and_the_marker_and_asks_for_the_size() {
    let c = claim(PK, &spec("10Gi", Some("local-path")));
    assert_eq!(
        c.metadata.name.as_deref(),
        Some("buzz-agent-0123456789ab-workspace")
    );
    assert_eq!(ownership(&c.metadata, PK), Ownership::Ours);
    let s = c.spec.unwrap();
    assert_eq!(s.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
    assert_eq!(s.storage_class_name.as_deref(), Some("local-path"));
    assert_eq!(s.resources.unwrap().requests.unwrap()["storage"].0, "10Gi");
    let default_class = claim(PK, &spec("1Gi", None));
    assert_eq!(
        default_class.spec.unwrap().storage_class_name,
        None,
        "no class: the cluster's default class fills it in"
    );
}

#[test]
fn every_judgement_has_its_own_case_in_the_rules_order() {
    let s = spec("10Gi", None);
    assert_eq!(judge(None, PK, &s), Judgement::Absent);
    assert_eq!(
        judge(Some(&stored("10Gi", "local-path", "Bound")), PK, &s),
        Judgement::Usable { bound: true }
    );
    assert_eq!(
        judge(Some(&stored("20Gi", "local-path", "Pending")), PK, &s),
        Judgement::Usable { bound: false },
        "more room is never a failure"
    );
    assert_eq!(
        judge(Some(&stored("5Gi", "local-path", "Bound")), PK, &s),
        Judgement::TooSmall { has: "5Gi".into() }
    );
    assert_eq!(
        judge(
            Some(&stored("10Gi", "local-path", "Bound")),
            PK,
            &spec("10Gi", Some("fast"))
        ),
        Judgement::OtherClass {
            has: Some("local-path".into())
        }
    );
    let mut going = stored("10Gi", "local-path", "Bound");
    going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    assert_eq!(judge(Some(&going), PK, &s), Judgement::Terminating);
    let mut unmarked = going.clone();
    unmarked
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(LABEL_MANAGED_BY);
    assert_eq!(
        judge(Some(&unmarked), PK, &s),
        Judgement::Unmarked,
        "identity before the deletion mark"
    );
    let other = "f".repeat(64);
    assert_eq!(
        judge(Some(&stored("10Gi", "local-path", "Bound")), &other, &s),
        Judgement::NotOurs(Mismatch::Label)
    );
}

#[test]
fn the_pending_cause_is_the_latest_warning_redacted() {
    let ev = |type_: &str, reason: &str, message: &str, secs: i64| Event {
        type_: Some(type_.into()),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_timestamp: Some(Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())),
        ..Default::default()
    };
    let redactor = buzz_contract::redact::Literals::new(["s3cr3t-value".to_string()]);
    assert_eq!(pending_cause(&[], &redactor), None);
    let events = [
        ev("Warning", "ProvisioningFailed", "old", 10),
        ev(
            "Warning",
            "ProvisioningFailed",
            "storageclass.storage.k8s.io \"fast\" not found; s3cr3t-value",
            20,
        ),
        ev("Normal", "WaitForFirstConsumer", "waiting for first consumer", 30),
    ];
    let cause = pending_cause(&events, &redactor).unwrap();
    assert!(
        cause.starts_with("ProvisioningFailed: storageclass.storage.k8s.io \"fast\" not found"),
        "{cause}"
    );
    assert!(!cause.contains("s3cr3t-value"), "{cause}");
    assert_eq!(
        pending_cause(&events[2..], &redactor).as_deref(),
        Some("WaitForFirstConsumer: waiting for first consumer"),
        "no warning: the latest event"
    );
}
