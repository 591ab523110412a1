//! The preflight GC plan (spec §Garbage collection, §K8s Secrets lifecycle,
//! §Deploy State Machine auto-repair fence). Pure.
//!
//! - Deletes terminated pods that pass the full-pubkey annotation check and
//!   carry the management marker, together with their referenced Secrets.
//! - Deletes annotation-verified, marker-bearing orphan Secrets — referenced by
//!   no existing pod — only when older than 2 × the deploy deadline, where age
//!   is measured on the apiserver's clock: the `Date` header of the very list
//!   call that returned the Secrets, minus their `creationTimestamp`. No `Date`,
//!   no orphan GC on that pass (the same-clock rule).
//! - Deletes annotation-verified, marker-bearing Secrets whose owner pod
//!   (the ownerReference attached right after the pod create, issue 30
//!   item 5) is **proved gone**: doomed, not young, whatever their age. The
//!   proof is [`owners_to_check`] then a quorum GET of each owner's name
//!   made *after* the Secret list: absent, or another UID there, means that
//!   pod is gone for good (a UID never returns). An owner merely missing
//!   from the earlier pod list proves nothing: a pod created between the
//!   two lists (a concurrent Start) is live, and its Secret is not touched.
//!   The cluster's own garbage collector normally removes such a Secret
//!   first; this rule covers a cluster whose collector lags or is absent.
//! - Never touches the current generation, nor anything unmarked or unverified.
//!
//! Every planned delete is fenced on the UID and resourceVersion observed.

use crate::classify::referenced_secrets;
use crate::ownership::{Ownership, ownership};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::ObjectMeta;
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

/// One fenced delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
}

/// What a GC pass deletes and what it noticed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcPlan {
    pub pods: Vec<Fenced>,
    pub secrets: Vec<Fenced>,
    /// True when orphan-Secret GC was skipped because the list had no usable `Date`.
    pub orphan_gc_skipped: bool,
    /// Objects that match the selector but are not positively ours (reported, untouched).
    pub untouched: Vec<String>,
}

/// True when the object carries this agent's identity evidence and the
/// management marker — the same check the state machine makes.
pub fn verified_and_marked(meta: &ObjectMeta, pubkey: &str) -> bool {
    ownership(meta, pubkey) == Ownership::Ours
}

fn fenced(meta: &ObjectMeta) -> Option<Fenced> {
    Some(Fenced {
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        resource_version: meta.resource_version.clone()?,
    })
}

fn terminated(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The Secrets `pod` references that are provably this agent's, fenced: a
/// per-attempt Secret has no user but its pod, so it goes when the pod goes
/// (the rule [`plan`] applies to terminated pods, here for a pod the deploy
/// replaces; without it each replacement would leave a young Secret that
/// only the 2 × deadline age gate removes, and an `undeploy` right after
/// would have to leave it).
pub fn secrets_going_with(pod: &Pod, secrets: &[Secret], pubkey: &str) -> Vec<Fenced> {
    let refs: BTreeSet<String> = referenced_secrets(pod).into_iter().collect();
    secrets
        .iter()
        .filter(|s| s.metadata.name.as_ref().is_some_and(|n| refs.contains(n)))
        .filter(|s| verified_and_marked(&s.metadata, pubkey))
        .filter_map(|s| fenced(&s.metadata))
        .collect()
}

/// The owner pods, `(name, uid)`, of verified Secrets whose owner is not
/// among `pods` (the list taken before the Secrets): each must be read
/// again before its Secret may count as owner-gone ([`owner_gone`]).
pub fn owners_to_check(pubkey: &str, pods: &[Pod], secrets: &[Secret]) -> Vec<(String, String)> {
    let listed: BTreeSet<&str> = pods.iter().filter_map(|p| p.metadata.uid.as_deref()).collect();
    let mut out: Vec<(String, String)> = secrets
        .iter()
        .filter(|s| verified_and_marked(&s.metadata, pubkey))
        .filter_map(|s| crate::ownership::owner_pod(&s.metadata))
        .filter(|(_, uid)| !listed.contains(uid))
        .map(|(n, u)| (n.to_string(), u.to_string()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether a read of the owner's name, made after the Secret list, proves
/// the owner `uid` gone: no pod there, or another one.
pub fn proves_gone(found: Option<&Pod>, uid: &str) -> bool {
    found.is_none_or(|p| p.metadata.uid.as_deref() != Some(uid))
}

/// True when `s` names an owner pod whose UID is in `gone` (proved absent).
pub fn owner_gone(s: &Secret, gone: &BTreeSet<String>) -> bool {
    crate::ownership::owner_pod(&s.metadata).is_some_and(|(_, uid)| gone.contains(uid))
}

/// Plans one GC pass. `server_now` is the `Date` of the Secret list
/// response; `gone` holds the owner UIDs proved absent after it.
pub fn plan(
    pubkey: &str,
    pods: &[Pod],
    secrets: &[Secret],
    gone: &BTreeSet<String>,
    server_now: Option<SystemTime>,
    min_orphan_age: Duration,
) -> GcPlan {
    let mut out = GcPlan::default();
    let mut referenced: BTreeSet<String> = BTreeSet::new();
    let mut doomed_refs: BTreeSet<String> = BTreeSet::new();
    for pod in pods {
        let refs = referenced_secrets(pod);
        let ours = verified_and_marked(&pod.metadata, pubkey);
        if ours
            && terminated(pod)
            && pod.metadata.deletion_timestamp.is_none()
            && let Some(f) = fenced(&pod.metadata)
        {
            out.pods.push(f);
            doomed_refs.extend(refs);
            continue;
        }
        if !ours {
            out.untouched
                .push(format!("pod {}", pod.metadata.name.as_deref().unwrap_or("?")));
        }
        referenced.extend(refs);
    }
    for s in secrets {
        let name = s.metadata.name.clone().unwrap_or_default();
        if !verified_and_marked(&s.metadata, pubkey) {
            out.untouched.push(format!("secret {name}"));
            continue;
        }
        if referenced.contains(&name) {
            continue; // the current generation (or another existing pod's)
        }
        if doomed_refs.contains(&name) || owner_gone(s, gone) {
            out.secrets.extend(fenced(&s.metadata));
            continue;
        }
        let Some(now) = server_now else {
            out.orphan_gc_skipped = true;
            continue;
        };
        let Some(created) = s.metadata.creation_timestamp.as_ref() else {
            continue;
        };
        let created = SystemTime::from(created.0);
        if now.duration_since(created).is_ok_and(|age| age > min_orphan_age) {
            out.secrets.extend(fenced(&s.metadata));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    //! The GC cases, and the fixtures the undeploy plan's cases share: a
    //! marked pod and Secret as the API server returns them, and the two
    //! ways an object stops being the binding's own.
    use super::*;
    use crate::consts::*;
    use crate::podspec::{PodIntent, pod, secret};
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::collections::BTreeMap;

    const PK: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const GATE: Duration = Duration::from_secs(1200);

    fn intent() -> PodIntent {
        crate::podspec::sample_intent()
    }

    /// What the API server adds to an object it stores.
    fn stamp(mut meta: ObjectMeta, created: SystemTime) -> ObjectMeta {
        let n = meta.name.clone().unwrap();
        meta.uid = Some(format!("uid-{n}"));
        meta.resource_version = Some("7".into());
        meta.creation_timestamp = Some(Time(created.try_into().unwrap()));
        meta
    }

    /// `PK`'s Secret of `generation`, stored at `created`.
    pub(crate) fn sec(generation: &str, created: SystemTime) -> Secret {
        let mut s = secret(PK, generation, BTreeMap::new());
        s.metadata = stamp(s.metadata, created);
        s
    }

    /// `PK`'s pod of `generation` in `phase`, stored at `created`.
    pub(crate) fn pd(generation: &str, phase: &str, created: SystemTime) -> Pod {
        let mut p = pod(PK, &intent(), generation);
        p.metadata = stamp(p.metadata, created);
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        p
    }

    /// Generation `n` (32 hex).
    pub(crate) fn g(n: u8) -> String {
        format!("{n:02x}").repeat(16)
    }

    /// Drops `label`: the object is no longer (fully) marked as the binding's.
    pub(crate) fn unlabel(meta: &mut ObjectMeta, label: &str) {
        meta.labels.as_mut().unwrap().remove(label);
    }

    /// Claims the object for another agent's full pubkey.
    pub(crate) fn claim_for_another(meta: &mut ObjectMeta) {
        meta.annotations
            .as_mut()
            .unwrap()
            .insert(ANN_PUBKEY_FULL.into(), "f".repeat(64));
    }

    #[test]
    fn terminated_verified_marked_pods_go_with_their_secrets() {
        let now = SystemTime::now();
        let p = plan(
            PK,
            &[pd(&g(1), "Succeeded", now)],
            &[sec(&g(1), now)],
            &BTreeSet::new(),
            Some(now),
            GATE,
        );
        assert_eq!(p.pods.len(), 1);
        assert_eq!(
            p.secrets.len(),
            1,
            "a terminated pod's Secret goes with it regardless of age"
        );
    }

    #[test]
    fn current_generation_is_never_touched() {
        let old = SystemTime::now() - Duration::from_secs(100_000);
        let p = plan(
            PK,
            &[pd(&g(1), "Running", old)],
            &[sec(&g(1), old)],
            &BTreeSet::new(),
            Some(SystemTime::now()),
            GATE,
        );
        assert_eq!(p, GcPlan::default());
    }

    #[test]
    fn orphan_secret_age_gate_uses_the_server_clock() {
        let server_now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let young = sec(&g(2), server_now - Duration::from_secs(60));
        let old = sec(&g(3), server_now - Duration::from_secs(1201));
        let p = plan(PK, &[], &[young, old], &BTreeSet::new(), Some(server_now), GATE);
        assert_eq!(
            p.secrets.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
            vec![format!("buzz-agent-0123456789ab-{}", g(3))]
        );
    }

    #[test]
    fn no_date_header_means_no_orphan_gc() {
        let ancient = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
        let p = plan(PK, &[], &[sec(&g(2), ancient)], &BTreeSet::new(), None, GATE);
        assert!(p.secrets.is_empty() && p.orphan_gc_skipped);
    }

    #[test]
    fn unmarked_or_unverified_objects_are_never_gc_d() {
        let now = SystemTime::now();
        let ancient = now - Duration::from_secs(1_000_000);
        let mut unmarked = sec(&g(4), ancient);
        unlabel(&mut unmarked.metadata, LABEL_MANAGED_BY);
        let mut foreign = sec(&g(5), ancient);
        claim_for_another(&mut foreign.metadata);
        let mut unmarked_pod = pd(&g(6), "Failed", ancient);
        unlabel(&mut unmarked_pod.metadata, LABEL_BINDING_VERSION);
        let p = plan(
            PK,
            &[unmarked_pod],
            &[unmarked, foreign],
            &BTreeSet::new(),
            Some(now),
            GATE,
        );
        assert!(p.pods.is_empty() && p.secrets.is_empty());
        assert_eq!(p.untouched.len(), 3);
    }

    /// `s` owned by the pod `uid` (the post-create attachment).
    pub(crate) fn owned(mut s: Secret, uid: &str) -> Secret {
        s.metadata.owner_references = Some(vec![crate::ownership::owner_reference(
            "buzz-agent-0123456789ab",
            uid,
        )]);
        s
    }

    /// Issue 30 item 5: a young Secret whose owner pod is proved gone is
    /// doomed; one whose owner is merely not in the earlier pod list is
    /// checked again first, and one whose owner is live stays.
    #[test]
    fn a_secret_whose_owner_is_proved_gone_goes_whatever_its_age() {
        let now = SystemTime::now();
        let s = owned(sec(&g(2), now), "uid-gone");
        assert_eq!(
            owners_to_check(PK, &[], std::slice::from_ref(&s)),
            vec![("buzz-agent-0123456789ab".to_string(), "uid-gone".to_string())]
        );
        let unproved = plan(
            PK,
            &[],
            std::slice::from_ref(&s),
            &BTreeSet::new(),
            Some(now),
            GATE,
        );
        assert!(unproved.secrets.is_empty(), "not in the list is not proof");
        let gone = BTreeSet::from(["uid-gone".to_string()]);
        let p = plan(PK, &[], std::slice::from_ref(&s), &gone, Some(now), GATE);
        assert_eq!(p.secrets.len(), 1, "owner gone: doomed, not young");
        // A live owner in the pod list is not checked again.
        let live = pd(&g(2), "Running", now);
        let s = owned(sec(&g(2), now), "uid-buzz-agent-0123456789ab");
        assert!(owners_to_check(PK, std::slice::from_ref(&live), std::slice::from_ref(&s)).is_empty());
        // The read proves it gone only when the name is empty or another UID holds it.
        assert!(proves_gone(None, "u1"));
        assert!(proves_gone(Some(&live), "u1"));
        assert!(!proves_gone(Some(&live), "uid-buzz-agent-0123456789ab"));
        // An unverified Secret's owner is never even looked at.
        let mut foreign = owned(sec(&g(3), now), "uid-gone");
        claim_for_another(&mut foreign.metadata);
        assert!(owners_to_check(PK, &[], &[foreign.clone()]).is_empty());
        assert!(
            plan(PK, &[], &[foreign], &gone, Some(now), GATE)
                .secrets
                .is_empty()
        );
    }

    #[test]
    fn planned_deletes_are_fenced_on_the_observation() {
        let now = SystemTime::now();
        let p = plan(
            PK,
            &[pd(&g(1), "Failed", now)],
            &[],
            &BTreeSet::new(),
            Some(now),
            GATE,
        );
        assert_eq!(p.pods[0].uid, "uid-buzz-agent-0123456789ab");
        assert_eq!(p.pods[0].resource_version, "7");
    }
}
