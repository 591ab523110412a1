//! One test per row of the spec's step-2 table (and per added row), named after it.

use super::*;
use crate::podspec::{PodIntent, fingerprint, pod};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, PodCondition,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const PK: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn intent() -> PodIntent {
    crate::podspec::sample_intent()
}

fn fp() -> String {
    fingerprint(&intent())
}

fn ctx<'a>(fp: &'a str, secret: Option<bool>) -> Context<'a> {
    Context {
        pubkey: PK,
        fingerprint: fp,
        secret_present: secret,
        payload_matches: None,
    }
}

/// A context whose crash-loop payload comparison is done.
fn ctx_payload<'a>(fp: &'a str, same_payload: bool) -> Context<'a> {
    Context {
        payload_matches: Some(same_payload),
        ..ctx(fp, None)
    }
}

fn base() -> Pod {
    pod(PK, &intent(), &"ab".repeat(16))
}

fn with_state(mut p: Pod, phase: &str, state: ContainerState, restarts: i32) -> Pod {
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        container_statuses: Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
            name: "agent".into(),
            state: Some(state),
            restart_count: restarts,
            ..Default::default()
        }]),
        ..Default::default()
    });
    p
}

/// `p` pending, the scheduler unable to place it.
fn unschedulable(mut p: Pod) -> Pod {
    p.status = Some(PodStatus {
        phase: Some("Pending".into()),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    p
}

fn waiting(reason: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: Some("m".into()),
        }),
        ..Default::default()
    }
}

fn running() -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning { started_at: None }),
        ..Default::default()
    }
}

fn terminated(code: i32) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            reason: Some("Error".into()),
            message: None,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn row_instance_marked_for_deletion_is_checked_before_phase() {
    let mut p = with_state(base(), "Running", running(), 0);
    p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    assert_eq!(classify(Some(&p), ctx(&fp(), None)), Row::DeletionMarked);
}

#[test]
fn row_no_instance() {
    assert_eq!(classify(None, ctx(&fp(), None)), Row::NoInstance);
}

#[test]
fn row_terminated_succeeded_or_failed() {
    for phase in ["Succeeded", "Failed"] {
        let p = with_state(base(), phase, terminated(1), 0);
        let row = classify(Some(&p), ctx(&fp(), None));
        assert!(
            matches!(&row, Row::Terminated { summary } if summary == "exit code 1 (Error): internal error in the harness"),
            "{row:?}"
        );
    }
}

/// Issue 30 item 3: what the harness wrote to its termination message
/// (`terminationMessagePolicy: File`) follows the exit code, one line, with
/// the image the pod ran; the output redactor scrubs it with every other
/// provider text (`protocol`).
#[test]
fn row_terminated_reports_the_harness_message_with_the_image() {
    let mut state = terminated(2);
    state.terminated.as_mut().unwrap().message =
        Some("  `claude-agent-acp` is not in this image;\nuse buzz-sprig-claude\n".into());
    let p = with_state(base(), "Failed", state, 0);
    let Row::Terminated { summary } = classify(Some(&p), ctx(&fp(), None)) else {
        panic!()
    };
    assert_eq!(
        summary,
        format!(
            "exit code 2 (Error): configuration error: a bad value or combination in the agent's settings; the harness said: `claude-agent-acp` is not in this image; use buzz-sprig-claude (image {})",
            pod_image(&p)
        )
    );
    assert_eq!(
        harness_message(Some(" \n ")),
        None,
        "nothing written, nothing said"
    );
    let long = "x".repeat(MAX_TERMINATION_MESSAGE_CHARS + 10);
    assert_eq!(
        harness_message(Some(&long)).map(|m| m.chars().count()),
        Some(MAX_TERMINATION_MESSAGE_CHARS)
    );
}

#[test]
fn row_live_and_started_means_container_running_not_phase() {
    let p = with_state(base(), "Running", running(), 0);
    assert_eq!(classify(Some(&p), ctx(&fp(), None)), Row::Started);
    let p = with_state(base(), "Running", waiting("ContainerCreating"), 0);
    assert_eq!(
        classify(Some(&p), ctx(&fp(), Some(true))),
        Row::NeverStartedRecoverable {
            condition: "ContainerCreating: m".into()
        },
        "phase Running is not readiness"
    );
}

#[test]
fn row_crash_loop_is_reported_never_started_is_not() {
    let mut p = with_state(base(), "Running", waiting("CrashLoopBackOff"), 3);
    p.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
    assert_eq!(
        classify(Some(&p), ctx_payload(&fp(), true)),
        Row::CrashLoop {
            summary: "phase Running".into()
        }
    );
    let mut p = with_state(base(), "Running", running(), 3);
    p.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
    assert_eq!(
        classify(Some(&p), ctx(&fp(), None)),
        Row::Started,
        "restarted and running again is live"
    );
}

#[test]
fn row_never_started_asks_for_a_quorum_secret_read() {
    let p = with_state(base(), "Pending", waiting("CreateContainerConfigError"), 0);
    assert!(matches!(
        classify(Some(&p), ctx(&fp(), None)),
        Row::NeedSecretRead { .. }
    ));
}

#[test]
fn row_never_started_secret_confirmed_absent_is_broken() {
    let p = with_state(base(), "Pending", waiting("CreateContainerConfigError"), 0);
    assert!(matches!(
        classify(Some(&p), ctx(&fp(), Some(false))),
        Row::NeverStartedBroken { .. }
    ));
}

#[test]
fn row_never_started_invalid_image_is_broken() {
    let mut p = base();
    p.spec.as_mut().unwrap().containers[0].image = Some("Bad Image".into());
    assert!(matches!(
        classify(Some(&p), ctx(&fp(), None)),
        Row::NeverStartedBroken { .. }
    ));
}

#[test]
fn row_never_started_recoverable_same_intent_observes() {
    for reason in [
        "ImagePullBackOff",
        "CreateContainerConfigError",
        "ContainerCreating",
    ] {
        let p = with_state(base(), "Pending", waiting(reason), 0);
        assert!(
            matches!(
                classify(Some(&p), ctx(&fp(), Some(true))),
                Row::NeverStartedRecoverable { .. }
            ),
            "{reason}"
        );
    }
    let p = unschedulable(base());
    let row = classify(Some(&p), ctx(&fp(), Some(true)));
    assert_eq!(
        row,
        Row::NeverStartedRecoverable {
            condition: "Unschedulable".into()
        }
    );
}

#[test]
fn row_never_started_divergent_fingerprint_is_compared_before_pull_failure() {
    let p = with_state(base(), "Pending", waiting("ImagePullBackOff"), 0);
    let other = "f".repeat(64);
    let row = classify(Some(&p), ctx(&other, Some(true)));
    assert_eq!(
        row,
        Row::NeverStartedDivergent {
            condition: "ImagePullBackOff for image registry.test/sprig:v1".into()
        },
        "the report names the stuck pod's own image"
    );
    let mut p = p;
    p.metadata.annotations.as_mut().unwrap().remove(ANN_CREATE_INTENT);
    assert!(
        matches!(
            classify(Some(&p), ctx(&fp(), Some(true))),
            Row::NeverStartedDivergent { .. }
        ),
        "absent = differs"
    );
}

#[test]
fn step1_annotation_mismatch_is_not_ours_and_unmarked_is_fenced() {
    let mut p = base();
    p.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANN_PUBKEY_FULL.into(), "e".repeat(64));
    assert!(matches!(
        classify(Some(&p), ctx(&fp(), None)),
        Row::NotOurs { .. }
    ));
    let mut p = base();
    p.metadata.labels.as_mut().unwrap().remove(LABEL_MANAGED_BY);
    assert_eq!(classify(Some(&p), ctx(&fp(), None)), Row::Unmarked);
}

#[test]
fn decide_one_create_attempt_per_call() {
    let own = CallState {
        created_uid: Some("u1".into()),
        adopting: false,
    };
    let fresh = CallState::default();
    let t = Row::Terminated {
        summary: "exit code 1 (Error)".into(),
    };
    assert!(matches!(
        decide(t.clone(), Some("u1"), &own, "a"),
        Action::Fail(DeployError::StartupFailed(StartupFailure::Exited { .. }))
    ));
    assert!(matches!(
        decide(t, Some("u0"), &fresh, "a"),
        Action::Replace { .. }
    ));
    assert!(matches!(
        decide(Row::NoInstance, None, &own, "a"),
        Action::Fail(_)
    ));
    assert_eq!(decide(Row::NoInstance, None, &fresh, "a"), Action::Create);
    assert_eq!(
        decide(Row::Started, Some("u1"), &own, "a"),
        Action::Succeed { record_image: true },
        "running means past the startup checks (the postStart hook): no settle (issue 49)"
    );
    assert_eq!(
        decide(Row::Started, Some("u0"), &fresh, "a"),
        Action::Succeed { record_image: false }
    );
}

#[test]
fn decide_create_loser_adopts_a_divergent_winner_but_a_later_deploy_replaces_it() {
    let loser = CallState {
        created_uid: None,
        adopting: true,
    };
    let row = Row::NeverStartedDivergent {
        condition: "c".into(),
    };
    assert!(matches!(
        decide(row.clone(), Some("w"), &loser, "a"),
        Action::Observe { .. }
    ));
    assert!(matches!(
        decide(row, Some("w"), &CallState::default(), "a"),
        Action::Replace { .. }
    ));
}

#[test]
fn decide_crash_loop_never_deletes() {
    let a = decide(
        Row::CrashLoop {
            summary: "exit code 1 (Error)".into(),
        },
        Some("u"),
        &CallState::default(),
        "a",
    );
    assert_eq!(
        a,
        Action::Fail(DeployError::StartupFailed(StartupFailure::CrashLooping {
            agent_id: "a".into(),
            summary: "exit code 1 (Error)".into()
        }))
    );
}

fn crash_looping_with_last_exit(code: i32) -> Pod {
    let mut p = with_state(base(), "Running", waiting("CrashLoopBackOff"), 4);
    p.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
    let cs = &mut p.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0];
    cs.last_state = Some(terminated(code));
    p
}

#[test]
fn row_crash_loop_reports_the_last_exit_code_and_its_meaning() {
    let p = crash_looping_with_last_exit(2);
    assert_eq!(
        classify(Some(&p), ctx(&fp(), None)),
        Row::NeedPayloadRead {
            secret: format!("buzz-agent-0123456789ab-{}", "ab".repeat(16))
        },
        "the payload is compared before the row is known"
    );
    assert_eq!(
        classify(Some(&p), ctx_payload(&fp(), true)),
        Row::CrashLoop {
            summary:
                "exit code 2 (Error): configuration error: a bad value or combination in the agent's settings"
                    .into()
        }
    );
}

#[test]
fn row_crash_loop_with_a_different_create_intent_is_divergent() {
    let p = crash_looping_with_last_exit(2);
    let other = "f".repeat(64);
    assert!(matches!(
        classify(Some(&p), ctx(&other, None)),
        Row::CrashLoopDivergent { .. }
    ));
    assert!(
        matches!(
            classify(Some(&p), ctx_payload(&fp(), false)),
            Row::CrashLoopDivergent { .. }
        ),
        "a changed payload (agent settings) is divergence too"
    );
    let mut unrecorded = p;
    unrecorded
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(ANN_CREATE_INTENT);
    assert!(matches!(
        classify(Some(&unrecorded), ctx(&fp(), None)),
        Row::CrashLoopDivergent { .. }
    ));
}

#[test]
fn decide_divergent_crash_loop_is_replaced_unless_this_call_attempted() {
    let row = Row::CrashLoopDivergent {
        summary: "exit code 2 (Error)".into(),
    };
    assert_eq!(
        decide(row.clone(), Some("u"), &CallState::default(), "a"),
        Action::Replace {
            why: "it is crash-looping and its recorded create intent differs from this deploy's".into()
        }
    );
    let own = CallState {
        created_uid: Some("u".into()),
        adopting: false,
    };
    assert!(matches!(
        decide(row, Some("u"), &own, "a"),
        Action::Fail(DeployError::StartupFailed(StartupFailure::CrashLooping { .. }))
    ));
}

/// Issue 49 item 3: a watch event may end or continue the call, never
/// authorize a delete, a create or the Secret read that could lead to one.
#[test]
fn only_actions_that_delete_nothing_follow_from_a_watch_event() {
    let own = CallState {
        created_uid: Some("u".into()),
        adopting: false,
    };
    let fresh = CallState::default();
    let terminated = Row::Terminated {
        summary: "exit code 2 (Error)".into(),
    };
    let divergent = Row::NeverStartedDivergent {
        condition: "c".into(),
    };
    for (row, st, from_watch) in [
        (Row::Started, &own, true),
        (terminated.clone(), &own, true),
        (Row::DeletionMarked, &fresh, true),
        (
            Row::NeverStartedRecoverable {
                condition: "c".into(),
            },
            &fresh,
            true,
        ),
        (terminated, &fresh, false),
        (divergent, &fresh, false),
        (Row::NoInstance, &fresh, false),
        (Row::NeedSecretRead { secret: "s".into() }, &fresh, false),
        (Row::NeedPayloadRead { secret: "s".into() }, &fresh, false),
    ] {
        let action = decide(row.clone(), Some("u"), st, "a");
        assert_eq!(action.decidable_from_watch(), from_watch, "{row:?} → {action:?}");
    }
}

#[test]
fn exit_meanings_follow_the_harness_table() {
    assert_eq!(
        exit_meaning(3).as_deref(),
        Some("identity refusal: the key, the relay URL or the owner is missing or malformed")
    );
    assert_eq!(
        exit_meaning(137).as_deref(),
        Some("killed by SIGKILL (often out of memory)")
    );
    assert_eq!(exit_meaning(129).as_deref(), Some("killed by signal 1"));
    assert_eq!(exit_meaning(42), None);
}

#[test]
fn payload_comparison_ignores_only_the_generation_token() {
    use std::collections::BTreeMap;
    let nonce = "BUZZ_MANAGED_AGENT_START_NONCE";
    let existing: BTreeMap<String, Vec<u8>> = [
        ("A".to_string(), b"1".to_vec()),
        (nonce.to_string(), b"old".to_vec()),
    ]
    .into();
    let same: BTreeMap<String, String> = [("A".into(), "1".into()), (nonce.into(), "new".into())].into();
    assert!(payload_matches(&existing, &same));
    let changed: BTreeMap<String, String> = [("A".into(), "2".into()), (nonce.into(), "new".into())].into();
    assert!(!payload_matches(&existing, &changed));
    let added: BTreeMap<String, String> = [
        ("A".into(), "1".into()),
        ("B".into(), "x".into()),
        (nonce.into(), "new".into()),
    ]
    .into();
    assert!(!payload_matches(&existing, &added));
}

/// The watch continues only through start-up progress of the same pod;
/// anything a user must hear about, or a decision, ends it.
#[test]
fn the_watch_continues_only_through_quiet_start_up_progress() {
    let uid = "u-1";
    let with_uid = |mut p: Pod| {
        p.metadata.uid = Some(uid.into());
        p
    };
    assert!(
        still_starting(&with_uid(base()), uid),
        "as created: no status yet"
    );
    for reason in ["ContainerCreating", "PodInitializing"] {
        assert!(
            still_starting(&with_uid(with_state(base(), "Pending", waiting(reason), 0)), uid),
            "{reason}"
        );
    }
    let ends = [
        ("running", with_state(base(), "Running", running(), 0)),
        ("terminated", with_state(base(), "Pending", terminated(1), 0)),
        (
            "image pull",
            with_state(base(), "Pending", waiting("ErrImagePull"), 0),
        ),
        (
            "config error",
            with_state(base(), "Pending", waiting("CreateContainerConfigError"), 0),
        ),
        (
            "restarted",
            with_state(base(), "Pending", waiting("ContainerCreating"), 1),
        ),
        (
            "failed phase",
            with_state(base(), "Failed", waiting("ContainerCreating"), 0),
        ),
    ];
    for (why, p) in ends {
        assert!(!still_starting(&with_uid(p), uid), "{why} must end the watch");
    }
    assert!(
        !still_starting(&base(), uid),
        "another pod at the name (UID differs)"
    );
    let mut deleting = with_uid(base());
    deleting.metadata.deletion_timestamp = Some(Time(Default::default()));
    assert!(!still_starting(&deleting, uid), "marked for deletion");
    assert!(
        !still_starting(&unschedulable(with_uid(base())), uid),
        "unschedulable is news"
    );
}
