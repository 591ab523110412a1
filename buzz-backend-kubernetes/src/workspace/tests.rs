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

/// `stored` as the PV controller leaves it once it bound the claim.
fn bound_by_controller(c: &mut PersistentVolumeClaim, volume: &str) {
    c.spec.as_mut().unwrap().volume_name = Some(volume.into());
    c.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
}

#[test]
fn a_claim_the_pv_controller_bound_is_usable() {
    let mut c = stored("10Gi", "local-path", "Bound");
    bound_by_controller(&mut c, "pvc-1234");
    assert_eq!(
        judge(Some(&c), PK, &spec("10Gi", None)),
        Judgement::Usable { bound: true }
    );
}

/// Review afa2bf1 finding 9: a claim made to be adopted with files in it.
#[test]
fn a_claim_filled_from_a_data_source_is_refused() {
    use k8s_openapi::api::core::v1::{TypedLocalObjectReference, TypedObjectReference};
    let s = spec("10Gi", None);
    let mut from_snapshot = stored("10Gi", "local-path", "Bound");
    bound_by_controller(&mut from_snapshot, "pvc-1234");
    from_snapshot.spec.as_mut().unwrap().data_source = Some(TypedLocalObjectReference {
        api_group: Some("snapshot.storage.k8s.io".into()),
        kind: "VolumeSnapshot".into(),
        name: "dotfiles".into(),
    });
    assert_eq!(
        judge(Some(&from_snapshot), PK, &s),
        Judgement::Prefilled {
            source: "VolumeSnapshot dotfiles".into()
        }
    );
    let mut from_ref = stored("10Gi", "local-path", "Pending");
    from_ref.spec.as_mut().unwrap().data_source_ref = Some(TypedObjectReference {
        api_group: None,
        kind: "PersistentVolumeClaim".into(),
        name: "seed\nline".into(),
        namespace: Some("elsewhere".into()),
    });
    assert_eq!(
        judge(Some(&from_ref), PK, &s),
        Judgement::Prefilled {
            source: "PersistentVolumeClaim elsewhere/seed line".into()
        },
        "a control character is never shown"
    );
    let mut going = from_ref.clone();
    going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    assert_eq!(
        judge(Some(&going), PK, &s),
        Judgement::Terminating,
        "the deletion mark first"
    );
    let small = {
        let mut c = from_ref.clone();
        c.spec.as_mut().unwrap().resources = stored("1Gi", "x", "Bound").spec.unwrap().resources;
        c
    };
    assert!(
        matches!(judge(Some(&small), PK, &s), Judgement::Prefilled { .. }),
        "where the files came from before their room"
    );
    let e = WorkspaceError::Prefilled {
        claim: claim_name(PK),
        namespace: "agents".into(),
        source_object: "VolumeSnapshot dotfiles".into(),
    }
    .to_string();
    assert!(
        e.contains("buzz-agent-0123456789ab-workspace")
            && e.contains("VolumeSnapshot dotfiles")
            && e.contains("kubectl delete pvc buzz-agent-0123456789ab-workspace -n agents")
            && e.contains("undeploy"),
        "{e}"
    );
}

/// Review afa2bf1 finding 9: a claim made to be adopted on a chosen volume.
#[test]
fn a_claim_pre_bound_to_a_volume_is_refused() {
    let s = spec("10Gi", None);
    let mut pre = stored("10Gi", "local-path", "Bound");
    pre.spec.as_mut().unwrap().volume_name = Some("planted".into());
    assert_eq!(
        judge(Some(&pre), PK, &s),
        Judgement::PreBound {
            volume: "planted".into()
        }
    );
    pre.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANN_BOUND_BY_CONTROLLER.into(), "no".into());
    assert!(
        matches!(judge(Some(&pre), PK, &s), Judgement::PreBound { .. }),
        "only `yes` says the controller chose it"
    );
    let mut unbound_yet = stored("10Gi", "local-path", "Pending");
    unbound_yet.spec.as_mut().unwrap().volume_name = Some(String::new());
    assert_eq!(
        judge(Some(&unbound_yet), PK, &s),
        Judgement::Usable { bound: false },
        "an empty volumeName names nothing"
    );
    let e = WorkspaceError::PreBound {
        claim: claim_name(PK),
        namespace: "agents".into(),
        volume: "planted".into(),
    }
    .to_string();
    assert!(
        e.contains("buzz-agent-0123456789ab-workspace")
            && e.contains("PersistentVolume planted")
            && e.contains("kubectl delete pvc buzz-agent-0123456789ab-workspace -n agents"),
        "{e}"
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
