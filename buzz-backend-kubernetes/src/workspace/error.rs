//! Why a deploy could not use the agent's workspace claim
//! ([`super`], issue 32 item 2): one sentence each, naming the claim and the
//! way out. Typed by kind; callers match on the variant, never the text.

use crate::consts::*;

/// A workspace claim failure, in-band.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceError {
    /// A claim at the agent's name that is not this agent's.
    #[error(
        "PersistentVolumeClaim {claim} exists in namespace {namespace} but is not this agent's workspace ({why}); nothing was changed: rename or delete it, or use another namespace"
    )]
    NotOurs {
        claim: String,
        namespace: String,
        why: &'static str,
    },
    /// This agent's identity without the management marker.
    #[error(
        "PersistentVolumeClaim {claim} in namespace {namespace} carries this agent's identity but not the label {LABEL_MANAGED_BY}={MANAGED_BY}, so this provider did not create it and will not mount it; nothing was changed: delete it yourself if it is stale, or add the label if it is meant to be this agent's workspace"
    )]
    Unmarked { claim: String, namespace: String },
    /// The claim is marked for deletion.
    #[error(
        "the workspace PersistentVolumeClaim {claim} in namespace {namespace} is being deleted (it goes once no pod uses it); undeploy the agent, which waits for it to go, then Start again for a new, empty workspace; nothing was changed"
    )]
    Terminating { claim: String, namespace: String },
    /// The claim asks for less than `workspace_size`.
    #[error(
        "the workspace PersistentVolumeClaim {claim} in namespace {namespace} asks for {has}, less than provider_config.workspace_size {wants}, and this provider never resizes a claim; set workspace_size to {has}, grow the claim yourself where its StorageClass allows expansion (kubectl patch pvc {claim} -n {namespace} --type merge -p '{{\"spec\":{{\"resources\":{{\"requests\":{{\"storage\":\"{wants}\"}}}}}}}}'), or undeploy the agent (which deletes its files) and Start again; nothing was changed"
    )]
    TooSmall {
        claim: String,
        namespace: String,
        has: String,
        wants: String,
    },
    /// The claim names another StorageClass.
    #[error(
        "the workspace PersistentVolumeClaim {claim} in namespace {namespace} uses StorageClass {has}, not provider_config.workspace_storage_class {wants}, and a claim's class cannot change; clear workspace_storage_class or set it to {has} to keep the files, or undeploy the agent (which deletes them) and Start again; nothing was changed",
        has = .has.as_deref().unwrap_or("(none)")
    )]
    OtherClass {
        claim: String,
        namespace: String,
        has: Option<String>,
        wants: String,
    },
    /// The claim was filled from another object, not created empty.
    #[error(
        "the workspace PersistentVolumeClaim {claim} in namespace {namespace} is filled from {source_object} (spec.dataSource or spec.dataSourceRef), which this provider never sets, so its files were not this agent's and it is not mounted; nothing was changed: undeploy the agent (which deletes the claim) or kubectl delete pvc {claim} -n {namespace}, then Start again for a new, empty workspace"
    )]
    Prefilled {
        claim: String,
        namespace: String,
        source_object: String,
    },
    /// The claim named its volume when it was created.
    #[error(
        "the workspace PersistentVolumeClaim {claim} in namespace {namespace} was created bound to PersistentVolume {volume} (spec.volumeName), which this provider never sets, so its files were not this agent's and it is not mounted; nothing was changed: undeploy the agent (which deletes the claim) or kubectl delete pvc {claim} -n {namespace}, then Start again for a new, empty workspace"
    )]
    PreBound {
        claim: String,
        namespace: String,
        volume: String,
    },
    /// `workspace_storage_class` names a class the cluster does not have.
    #[error(
        "provider_config.workspace_storage_class: StorageClass {class} does not exist in this cluster ({message}); ask a cluster admin which classes exist (kubectl get storageclass) or clear it for the cluster's default. Nothing was created"
    )]
    UnknownClass { class: String, message: String },
    /// The apiserver refused the claim's create (quota, a policy, validation).
    #[error(
        "the apiserver refused the workspace PersistentVolumeClaim {claim} in namespace {namespace}: {message}. Nothing was created"
    )]
    Refused {
        claim: String,
        namespace: String,
        message: String,
    },
    /// RBAC refused a verb on claims.
    #[error(
        "your kubeconfig user may not {verb} persistentvolumeclaims in namespace {namespace} ({message}), which a workspace_size needs; ask a cluster admin to apply the current deploy/kubernetes/provider-rbac.yaml (persistentvolumeclaims: get, list, create, delete), or clear workspace_size for a workspace that lives with the pod. Nothing was created"
    )]
    Forbidden {
        verb: &'static str,
        namespace: String,
        message: String,
    },
    /// Still not bound when the pod had waited [`WORKSPACE_BIND_BOUND`] for it.
    #[error(
        "the workspace PersistentVolumeClaim {claim} in namespace {namespace} is still not bound after {after_secs} s ({cause}); the claim and the pod are kept, and a Start adopts both once the cluster provides the storage (or undeploy to remove them)",
        cause = .cause.as_deref().unwrap_or("no event names a cause: is there a provisioner for its StorageClass, or a default StorageClass? kubectl get storageclass")
    )]
    NotBound {
        claim: String,
        namespace: String,
        after_secs: u64,
        cause: Option<String>,
    },
}
