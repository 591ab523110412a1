//! In-band deploy errors: each renders as one sentence a person at a
//! terminal can act on, and none carries secret material (spec L2 item 5).
//!
//! Errors are typed by kind, with the fields the sentence is built from; code
//! that needs to tell failures apart matches on the kind, never on the text.

/// Why a request or deploy failed, by the stage that refused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeployError {
    /// The request itself is malformed.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// `provider_config` is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The payload is refused before any mutation (identity, owner, relay, env).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Kubeconfig or cluster access failed.
    #[error(transparent)]
    Cluster(#[from] ClusterFailure),
    /// An object at our name is not positively ours (§Deploy State Machine step 1).
    #[error(transparent)]
    Collision(#[from] Collision),
    /// The attempt this call made (or the pod it found) failed deterministically.
    #[error(transparent)]
    StartupFailed(#[from] StartupFailure),
    /// The workspace claim could not be used ([`crate::workspace`]).
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    /// The agent's NetworkPolicy could not be made sure of ([`crate::egress`]).
    #[error(transparent)]
    Egress(#[from] crate::egress::EgressError),
    /// The deadline expired while startup was still progressing; nothing was cleaned up.
    #[error(
        "startup of pod {agent_id} was not confirmed within {deadline_secs} s (latest: {latest}); nothing was cleaned up, and a later Start adopts the pod once it runs"
    )]
    StartupNotConfirmed {
        agent_id: String,
        deadline_secs: u64,
        latest: String,
    },
    /// A failed or unconfirmed startup, with the pod's last Warning event
    /// (redacted and bounded; issue 21, [`crate::events`]).
    #[error("{error}; last warning event: {event}")]
    WithLastWarning { error: Box<DeployError>, event: String },
    /// The pod names a ServiceAccount that does not exist (and is not the
    /// namespace-`default` admission race).
    #[error(
        "ServiceAccount {name} does not exist in namespace {namespace}; create it (kubectl create serviceaccount {name} -n {namespace}) or clear service_account to use the namespace default. Nothing was left behind"
    )]
    ServiceAccountMissing { namespace: String, name: String },
    /// The pod names a RuntimeClass the cluster does not have
    /// (`provider_config.runtime_class_name`; RuntimeClass admission).
    #[error(
        "provider_config.runtime_class_name: RuntimeClass {name} does not exist in this cluster, so the apiserver refused the pod; ask a cluster admin which classes exist (kubectl get runtimeclass) or clear runtime_class_name for the default runtime. Nothing was left behind"
    )]
    RuntimeClassMissing { name: String },
    /// The operation budget ran out before the pod could be created; this
    /// call's own Secret (if any) was removed.
    #[error(
        "the deploy reached its {deadline_secs} s deadline while it was trying to {doing}; no pod was created by this call and nothing was left behind; press Start again"
    )]
    OutOfTime { doing: String, deadline_secs: u64 },
}

/// What is wrong with the request object itself (spec §Invocation): the
/// one parse of every provider ([`buzz_provider::request`]).
pub use buzz_provider::request::{RequestError, RequestErrorKind};

/// What is wrong with `provider_config`, and a payload refused before any
/// mutation: the typed refusals every provider shares
/// ([`buzz_provider::refusal`]).
pub use buzz_provider::refusal::{ConfigError, ConfigErrorKind, Refusal, RefusalRule};

/// Why the pod at our name may not be touched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Collision {
    /// Identity evidence does not match this agent.
    #[error(
        "pod {agent_id} exists but is not this agent's ({why}); nothing was changed — remove or rename it, or use another namespace"
    )]
    NotOurs { agent_id: String, why: String },
    /// This agent's identity, but no management marker.
    #[error(
        "pod {agent_id} carries this agent's identity but not the label {}={}, so it was not created by this provider; nothing was changed — delete it yourself if it is stale",
        crate::consts::LABEL_MANAGED_BY,
        crate::consts::MANAGED_BY
    )]
    Unmarked { agent_id: String },
}

/// How a startup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartupFailure {
    /// The pod vanished under this call.
    #[error("pod {agent_id} disappeared before its container was confirmed running; press Start again")]
    Disappeared { agent_id: String },
    /// This call's attempt terminated before it ran.
    #[error(
        "the harness in pod {agent_id} exited before it was confirmed running: {summary}; the pod is kept for its logs and the next Start replaces it"
    )]
    Exited { agent_id: String, summary: String },
    /// The pod is crash-looping (`restartPolicy: OnFailure`).
    #[error(
        "pod {agent_id} is crash-looping (last: {summary}); Kubernetes keeps restarting it and nothing was deleted — fix the agent settings or provider_config and Start again (a changed one replaces the pod)"
    )]
    CrashLooping { agent_id: String, summary: String },
    /// This call's attempt can provably never start.
    #[error("pod {agent_id} cannot start: {cause}")]
    CannotStart { agent_id: String, cause: String },
}

/// Kubeconfig and cluster-access failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterFailure {
    /// The kubeconfig could not be loaded.
    /// `cause` names the file ($KUBECONFIG's, else ~/.kube/config).
    #[error("could not load your kubeconfig{}: {cause}", context_note(.context))]
    Kubeconfig { context: Option<String>, cause: String },
    /// A client could not be built from a loaded kubeconfig.
    #[error("could not build a cluster client from your kubeconfig: {cause}")]
    Client { cause: String },
    /// The kubeconfig's `exec` credential plugin failed (§K8s Auth: name it).
    #[error(
        "your kubeconfig's exec credential plugin `{command}` failed (is it installed and on PATH? /opt/homebrew/bin, /usr/local/bin and ~/.local/bin are searched too): {cause}"
    )]
    ExecPlugin { command: String, cause: String },
    /// Credentials could not be obtained, with no exec plugin to blame.
    #[error("could not get cluster credentials from your kubeconfig: {cause}")]
    Credentials { cause: String },
    /// HTTP 403 on an action.
    #[error("your kubeconfig user may not {action} in namespace {namespace}: {message}")]
    Forbidden {
        action: String,
        namespace: String,
        message: String,
    },
    /// HTTP 401.
    #[error(
        "the cluster rejected your kubeconfig credentials while trying to {action}; refresh them (for example log in again) and retry"
    )]
    Unauthorized { action: String },
    /// The cluster was never reached; `endpoint` names its server and the
    /// kubeconfig context ([`crate::kubeconfig::name_endpoint`]).
    #[error(
        "could not {action} in namespace {namespace}: {} could not be reached: {cause}; check the server and the context (`kubectl config current-context`, or provider_config.context)",
        endpoint.as_deref().unwrap_or("the cluster")
    )]
    Unreachable {
        action: String,
        namespace: String,
        cause: String,
        endpoint: Option<String>,
    },
    /// Any other API failure.
    #[error("could not {action} in namespace {namespace}: {cause}")]
    Failed {
        action: String,
        namespace: String,
        cause: String,
    },
    /// Listing pods is forbidden in a namespace that exists.
    #[error(
        "your kubeconfig user may not list pods in namespace {namespace}: {message}; ask for pod and secret rights (create, get, list, watch, delete) there"
    )]
    ListForbidden { namespace: String, message: String },
    /// The namespace is unusable and may not be created.
    #[error(
        "your kubeconfig user may not use namespace {namespace} and may not create namespaces; if {namespace} does not exist, ask a cluster admin to run `kubectl create namespace {namespace}`, otherwise ask for pod and secret rights in it"
    )]
    NamespaceUnusable { namespace: String },
    /// The namespace does not exist and may not be created.
    #[error(
        "namespace {namespace} does not exist and your kubeconfig user may not create it; ask a cluster admin to run `kubectl create namespace {namespace}` (or choose a namespace you can use)"
    )]
    NamespaceMissing { namespace: String },
    /// The default ServiceAccount (or the namespace) never appeared.
    #[error(
        "the pod could not be created in namespace {namespace}: its default ServiceAccount (or the namespace) did not appear in time; check that the namespace is active"
    )]
    DefaultServiceAccountLate { namespace: String },
    /// A freshly generated Secret name was taken: practically impossible.
    #[error("a Secret with a freshly generated name already exists; retry")]
    GenerationTaken,
    /// A state the loop cannot reach by construction.
    #[error("internal: {what}")]
    Internal { what: String },
}

fn context_note(context: &Option<String>) -> String {
    context
        .as_deref()
        .map(|c| format!(" with context {c}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_carry_their_fields() {
        let e = DeployError::ServiceAccountMissing {
            namespace: "ns1".into(),
            name: "runner".into(),
        };
        assert_eq!(
            e.to_string(),
            "ServiceAccount runner does not exist in namespace ns1; create it (kubectl create serviceaccount runner -n ns1) or clear service_account to use the namespace default. Nothing was left behind"
        );
        let e = DeployError::Cluster(ClusterFailure::Kubeconfig {
            context: Some("prod".into()),
            cause: "no such file".into(),
        });
        assert_eq!(
            e.to_string(),
            "could not load your kubeconfig with context prod: no such file"
        );
        let e = DeployError::StartupNotConfirmed {
            agent_id: "buzz-agent-0123456789ab".into(),
            deadline_secs: 5,
            latest: "Unschedulable".into(),
        };
        assert!(e.to_string().starts_with(
            "startup of pod buzz-agent-0123456789ab was not confirmed within 5 s (latest: Unschedulable)"
        ));
    }
}
