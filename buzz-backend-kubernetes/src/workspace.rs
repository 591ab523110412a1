//! The agent's workspace volume (issue 32 item 2). Spec §Pod shape
//! "Workspace" gives every pod an `emptyDir`, gone with the pod, and names a
//! PVC "a deferred knob"; this is that knob. With `workspace_size` set, the
//! workspace (`HOME` and the working directory, [`HOME`]) is one
//! PersistentVolumeClaim per agent key, so the agent's files, its own
//! transcripts (`~/.claude/projects/…`, `~/.codex/…`) and the harness's
//! conversation receipts survive every pod replacement. Pure: the claim
//! this provider would create, and the judgement of a claim it found. The
//! shell is `reconcile::workspace`; `undeploy` removes the claim unless
//! asked to keep it.
//!
//! ## Rules
//! - **One claim per agent key**, named [`claim_name`] and carrying the
//!   same identity and marker as the pod: the truncated pubkey label, the
//!   full-pubkey annotation and the management marker ([`crate::ownership`],
//!   the one check). A claim at that name is adopted only when it is
//!   [`Ownership::Ours`]; anything else is refused in-band, naming it.
//! - **Created before the Secret and the pod**, so the pod never references
//!   a claim that does not exist. A create that meets `AlreadyExists` reads
//!   the winner and judges it like any found claim.
//! - **Adopted as it is.** A claim cannot shrink, and growing one needs a
//!   StorageClass that allows expansion, which this provider does not
//!   assume: a claim that asks for less than `workspace_size`, or names
//!   another StorageClass than `workspace_storage_class`, is refused with the
//!   way out (`undeploy`, which deletes it, then Start). A claim that asks
//!   for more is used: more room is never a failure.
//! - **Created empty, by the provider** (review afa2bf1 finding 9). The
//!   identity and the marker are metadata, which anyone who may write
//!   claims in the namespace can copy (the spec puts a hostile admin out of
//!   scope, §Deploy State Machine), but where a claim's files come from is
//!   cheap to check: a claim with `spec.dataSource` or `spec.dataSourceRef`
//!   (filled from a snapshot or another claim) or created with
//!   `spec.volumeName` (bound to a chosen volume: set, but not by the PV
//!   controller, whose [`ANN_BOUND_BY_CONTROLLER`] says it chose it) would
//!   start the agent's pod with files, dotfiles included, that it never
//!   wrote. It is refused with the way out (`undeploy`, which deletes it,
//!   or deleting it by hand, then Start), never mounted.
//! - **Being deleted** (a `deletionTimestamp`; the claim goes once no pod
//!   uses it) is refused: an `undeploy` waits for it to go, then Start
//!   creates a new one.
//! - **Not bound** after [`WORKSPACE_BIND_BOUND`] while the pod waits for
//!   it fails the Start, with the claim's latest event (no provisioner, an
//!   unknown class); the claim and the pod stay, and the next Start adopts
//!   both once storage is there.
//! - `ReadWriteOnce`, `Filesystem`: one pod at a time uses it, which the
//!   one-pod-per-key rule already guarantees.

use crate::config::is_dns_subdomain;
use crate::consts::*;
use crate::error::{ConfigError, ConfigErrorKind as K, DeployError};
use crate::ownership::{Mismatch, Ownership, ownership};
use crate::quantity::Quantity;
use k8s_openapi::api::core::v1::{
    Event, PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use kube::api::ObjectMeta;
use std::collections::BTreeMap;

pub mod error;
pub use error::WorkspaceError;

/// The smallest workspace accepted: less is a typo (`1` meaning 1 byte).
pub const MIN_WORKSPACE_BYTES: f64 = 1024.0 * 1024.0;

/// What `provider_config` asks of the workspace volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceSpec {
    /// The claim's `resources.requests.storage`, as the user wrote it.
    pub size: String,
    /// `storageClassName`; `None` = the cluster's default StorageClass.
    pub storage_class: Option<String>,
}

fn bad(kind: K, field: &str, msg: String) -> DeployError {
    ConfigError::new(kind, Some(field), msg).into()
}

impl WorkspaceSpec {
    /// Validates the two fields: `None` when no size is asked (the
    /// workspace stays an `emptyDir`).
    pub fn parse(size: Option<String>, storage_class: Option<String>) -> Result<Option<Self>, DeployError> {
        if let Some(class) = &storage_class
            && !is_dns_subdomain(class)
        {
            return Err(bad(
                K::Invalid,
                "workspace_storage_class",
                format!(
                    "provider_config.workspace_storage_class `{class}` is not a StorageClass name (lowercase RFC 1123 subdomain, for example local-path or gp3)"
                ),
            ));
        }
        let Some(size) = size else {
            return match storage_class {
                Some(class) => Err(bad(
                    K::Conflict,
                    "workspace_storage_class",
                    format!(
                        "provider_config.workspace_storage_class is {class} but workspace_size is empty; set workspace_size (for example 10Gi) for a workspace that survives the pod, or clear workspace_storage_class"
                    ),
                )),
                None => Ok(None),
            };
        };
        let q = Quantity::parse(&size).ok_or_else(|| {
            bad(
                K::Invalid,
                "workspace_size",
                format!("provider_config.workspace_size `{size}` is not a Kubernetes quantity (for example 10Gi or 500Mi)"),
            )
        })?;
        if q.value() < MIN_WORKSPACE_BYTES || q.value().fract() != 0.0 {
            return Err(bad(
                K::Invalid,
                "workspace_size",
                format!(
                    "provider_config.workspace_size `{size}` is not a whole number of bytes of at least 1Mi (for example 10Gi or 500Mi)"
                ),
            ));
        }
        Ok(Some(WorkspaceSpec { size, storage_class }))
    }
}

/// `buzz-agent-<first 12 hex>-workspace`: one claim per agent key.
pub fn claim_name(pubkey: &str) -> String {
    format!("{NAME_PREFIX}{}-workspace", &pubkey[..12])
}

/// The claim this provider creates for `pubkey`.
pub fn claim(pubkey: &str, spec: &WorkspaceSpec) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(pubkey)),
            labels: Some(crate::podspec::labels(pubkey)),
            annotations: Some(BTreeMap::from([
                (ANN_PUBKEY_FULL.to_string(), pubkey.to_string()),
                (ANN_PROVIDER_VERSION.to_string(), VERSION.to_string()),
            ])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            volume_mode: Some("Filesystem".into()),
            storage_class_name: spec.storage_class.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(spec.size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// What a claim found at [`claim_name`] means for this deploy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Nothing there: create it.
    Absent,
    /// This agent's and fit for the spec: use it.
    Usable {
        bound: bool,
    },
    /// Not this agent's, or not this provider's: never touched.
    NotOurs(Mismatch),
    Unmarked,
    /// Marked for deletion.
    Terminating,
    /// It asks for less storage than `workspace_size`.
    TooSmall {
        has: String,
    },
    /// Another StorageClass than `workspace_storage_class`.
    OtherClass {
        has: Option<String>,
    },
    /// Filled from another object (`spec.dataSource` or
    /// `spec.dataSourceRef`): `kind name` of the source.
    Prefilled {
        source: String,
    },
    /// Named its volume at creation (`spec.volumeName` without the PV
    /// controller's [`ANN_BOUND_BY_CONTROLLER`]).
    PreBound {
        volume: String,
    },
}

/// The storage a claim asks for.
pub fn requested(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|q| q.0.clone())
}

/// A name read from the cluster as a message shows it: control characters
/// as spaces, at most a DNS subdomain's 253 characters.
fn shown(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(253)
        .collect()
}

/// Where the claim's first files came from, when not from an empty volume
/// this provider asked for: its data source (`kind name`, or `kind
/// namespace/name` across namespaces), else the volume it was created
/// bound to.
fn provenance(pvc: &PersistentVolumeClaim) -> Option<Judgement> {
    let spec = pvc.spec.as_ref()?;
    let from_ref = spec.data_source_ref.as_ref().map(|r| match &r.namespace {
        Some(ns) => format!("{} {}/{}", r.kind, ns, r.name),
        None => format!("{} {}", r.kind, r.name),
    });
    let from_source = spec
        .data_source
        .as_ref()
        .map(|s| format!("{} {}", s.kind, s.name));
    if let Some(source) = from_source.or(from_ref) {
        return Some(Judgement::Prefilled {
            source: shown(&source),
        });
    }
    let volume = spec.volume_name.as_deref().filter(|v| !v.is_empty())?;
    let by_controller = pvc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_BOUND_BY_CONTROLLER))
        .is_some_and(|v| v == "yes");
    (!by_controller).then(|| Judgement::PreBound {
        volume: shown(volume),
    })
}

/// Judges the claim at this agent's name against `spec`. The order is the
/// rules': identity first, then the deletion mark, then where its files
/// came from, then fitness.
pub fn judge(found: Option<&PersistentVolumeClaim>, pubkey: &str, spec: &WorkspaceSpec) -> Judgement {
    let Some(pvc) = found else {
        return Judgement::Absent;
    };
    match ownership(&pvc.metadata, pubkey) {
        Ownership::NotOurs(m) => return Judgement::NotOurs(m),
        Ownership::Unmarked => return Judgement::Unmarked,
        Ownership::Ours => {}
    }
    if pvc.metadata.deletion_timestamp.is_some() {
        return Judgement::Terminating;
    }
    if let Some(refused) = provenance(pvc) {
        return refused;
    }
    let class = pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone());
    if let Some(wants) = &spec.storage_class
        && class.as_ref() != Some(wants)
    {
        return Judgement::OtherClass { has: class };
    }
    let has = requested(pvc);
    let fits = match (
        has.as_deref().and_then(Quantity::parse),
        Quantity::parse(&spec.size),
    ) {
        (Some(h), Some(w)) => h >= w,
        _ => false,
    };
    if !fits {
        return Judgement::TooSmall {
            has: has.unwrap_or_else(|| "no size".into()),
        };
    }
    Judgement::Usable { bound: is_bound(pvc) }
}

/// The claim's `status.phase` is `Bound`.
pub fn is_bound(pvc: &PersistentVolumeClaim) -> bool {
    pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// Why a claim is not bound, from its events: the latest Warning
/// (`reason: message`), else the latest event of any type, else `None`.
/// The PV controller and the provisioners write the cause there
/// (`ProvisioningFailed`, `FailedBinding`, `ExternalProvisioning`).
pub fn pending_cause(events: &[Event], redactor: &buzz_contract::redact::Literals) -> Option<String> {
    let latest = |warning_only: bool| {
        events
            .iter()
            .filter(|e| !warning_only || e.type_.as_deref() == Some("Warning"))
            .max_by_key(|e| crate::events::event_millis(e).unwrap_or(i64::MIN))
    };
    let e = latest(true).or_else(|| latest(false))?;
    let text = format!(
        "{}: {}",
        e.reason.as_deref().unwrap_or("Event"),
        e.message.as_deref().unwrap_or_default()
    );
    Some(crate::events::sanitize(&text, redactor))
}

#[cfg(test)]
mod tests;
