//! The one ownership check (spec §Deploy State Machine step 1 and the
//! auto-repair fence; §Pod shape naming/labeling; §K8s GC). Pure.
//!
//! Identity evidence — the truncated pubkey label, then the load-bearing
//! full-pubkey annotation — proves "this agent's"; the management marker
//! (`managed-by` + binding version) proves "created by this provider". The
//! state machine and the GC pass both ask this one function, so a change to
//! either rule reaches both.

use crate::consts::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;

/// What an object's metadata proves about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// This agent's, and carries the management marker.
    Ours,
    /// This agent's identity, but no management marker: never touched.
    Unmarked,
    /// Not this agent's.
    NotOurs(Mismatch),
}

/// Which identity evidence failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    Label,
    Annotation,
}

impl Mismatch {
    /// A phrase for the collision sentence.
    pub fn describe(self) -> &'static str {
        match self {
            Mismatch::Label => "its identity label does not match this agent",
            Mismatch::Annotation => "its full-pubkey annotation does not match this agent",
        }
    }
}

/// Checks identity (label, then full annotation) and then the marker.
/// `pubkey` is the derived 64-hex key.
pub fn ownership(meta: &ObjectMeta, pubkey: &str) -> Ownership {
    let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k)).map(String::as_str);
    let annotation = |k: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(String::as_str)
    };
    let short = pubkey.get(..32);
    if short.is_none() || label(LABEL_PUBKEY) != short {
        return Ownership::NotOurs(Mismatch::Label);
    }
    if annotation(ANN_PUBKEY_FULL) != Some(pubkey) {
        return Ownership::NotOurs(Mismatch::Annotation);
    }
    if label(LABEL_MANAGED_BY) != Some(MANAGED_BY) || label(LABEL_BINDING_VERSION) != Some(BINDING_VERSION) {
        return Ownership::Unmarked;
    }
    Ownership::Ours
}

/// The ownerReference a per-attempt Secret gets once its pod exists (issue
/// 30 item 5; spec §K8s GC "Alternative considered", whose conditions it
/// follows): the cluster's garbage collector then removes the Secret with
/// its pod, whoever deletes the pod (a drain, an eviction, `kubectl delete
/// pod`). Owner and dependent share the namespace by construction;
/// `blockOwnerDeletion: false` explicitly (true would need `update` on
/// `pods/finalizers`, and a Secret must never delay its pod's deletion);
/// not a controller reference.
pub fn owner_reference(pod_name: &str, pod_uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod_name.into(),
        uid: pod_uid.into(),
        block_owner_deletion: Some(false),
        controller: Some(false),
    }
}

/// The pod an object names as its owner: `(name, uid)` of its first
/// `v1` `Pod` ownerReference.
pub fn owner_pod(meta: &ObjectMeta) -> Option<(&str, &str)> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.api_version == "v1" && o.kind == "Pod")
        .map(|o| (o.name.as_str(), o.uid.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const PK: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn meta(labels: &[(&str, &str)], ann: &[(&str, &str)]) -> ObjectMeta {
        let m = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        ObjectMeta {
            labels: m(labels),
            annotations: m(ann),
            ..Default::default()
        }
    }

    #[test]
    fn the_owner_reference_names_the_pod_and_never_blocks_its_deletion() {
        let r = owner_reference("buzz-agent-0123456789ab", "uid-1");
        assert_eq!((r.kind.as_str(), r.api_version.as_str()), ("Pod", "v1"));
        assert_eq!((r.block_owner_deletion, r.controller), (Some(false), Some(false)));
        let m = ObjectMeta {
            owner_references: Some(vec![r]),
            ..Default::default()
        };
        assert_eq!(owner_pod(&m), Some(("buzz-agent-0123456789ab", "uid-1")));
        assert_eq!(owner_pod(&ObjectMeta::default()), None);
    }

    #[test]
    fn every_rule_decides_its_own_outcome() {
        let short = &PK[..32];
        let marked = [
            (LABEL_PUBKEY, short),
            (LABEL_MANAGED_BY, MANAGED_BY),
            (LABEL_BINDING_VERSION, BINDING_VERSION),
        ];
        let full = [(ANN_PUBKEY_FULL, PK)];
        assert_eq!(ownership(&meta(&marked, &full), PK), Ownership::Ours);
        assert_eq!(ownership(&meta(&marked[..1], &full), PK), Ownership::Unmarked);
        assert_eq!(
            ownership(&meta(&marked[..2], &full), PK),
            Ownership::Unmarked,
            "the binding version is part of the marker"
        );
        assert_eq!(
            ownership(&meta(&marked, &[(ANN_PUBKEY_FULL, &"f".repeat(64))]), PK),
            Ownership::NotOurs(Mismatch::Annotation)
        );
        assert_eq!(
            ownership(&meta(&marked[1..], &full), PK),
            Ownership::NotOurs(Mismatch::Label)
        );
        assert_eq!(
            ownership(&meta(&marked, &full), "short"),
            Ownership::NotOurs(Mismatch::Label)
        );
    }
}
