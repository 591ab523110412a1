//! In-band `undeploy` failures (issue 21 part 1): each names what is left and
//! why, and none carries secret material (spec L2 item 5). Typed by kind;
//! callers match on the variant, never on the text.

use crate::consts::*;
use crate::error::DeployError;
use buzz_contract::wire::Removed;
use std::fmt;
use std::time::SystemTime;

/// Kind of a Kubernetes object left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pod,
    Secret,
    /// The workspace PersistentVolumeClaim ([`crate::workspace`]).
    Claim,
    /// The agent's NetworkPolicy ([`crate::egress`]).
    NetworkPolicy,
}

/// Why an object that carries the agent label was not removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftWhy {
    /// This agent's identity, but no management marker: not this provider's output.
    Unmarked,
    /// The label matches, the full-pubkey annotation does not: another agent's.
    ForeignAnnotation,
    /// The identity label itself does not match (never selected in practice).
    ForeignLabel,
    /// A Secret a pod this undeploy may not touch still references.
    ReferencedByUntouchedPod,
    /// Referenced by no pod and younger than the orphan age gate: it may
    /// belong to a Start between its Secret create and its pod create.
    YoungUnreferenced,
    /// Referenced by no pod, and the Secret list had no usable `Date`.
    AgeUnknown,
    /// Without UID or resourceVersion it cannot be deleted fenced.
    Unfenceable,
}

impl LeftWhy {
    /// True when the object is this provider's own for this agent (it is
    /// left for its age, its users or its fence, not for its ownership):
    /// the answer never calls such an object "not ours" (issue 30 item 5).
    pub fn is_ours(self) -> bool {
        match self {
            LeftWhy::Unmarked | LeftWhy::ForeignAnnotation | LeftWhy::ForeignLabel => false,
            LeftWhy::ReferencedByUntouchedPod
            | LeftWhy::YoungUnreferenced
            | LeftWhy::AgeUnknown
            | LeftWhy::Unfenceable => true,
        }
    }
}

/// One object left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    pub kind: Kind,
    pub name: String,
    pub why: LeftWhy,
    /// For a young Secret: when it passes the age gate on the apiserver's
    /// clock, so a retry from then on removes it.
    pub removable_at: Option<SystemTime>,
}

impl Left {
    pub fn of(kind: Kind, name: String, why: LeftWhy) -> Left {
        Left {
            kind,
            name,
            why,
            removable_at: None,
        }
    }
    pub fn pod(name: String, why: LeftWhy) -> Left {
        Left::of(Kind::Pod, name, why)
    }
    pub fn claim(name: String, why: LeftWhy) -> Left {
        Left::of(Kind::Claim, name, why)
    }
    pub fn secret(name: String, why: LeftWhy) -> Left {
        Left::of(Kind::Secret, name, why)
    }
    /// A young unreferenced Secret, removable from `at` on.
    pub fn young(name: String, at: Option<SystemTime>) -> Left {
        Left {
            removable_at: at,
            ..Left::secret(name, LeftWhy::YoungUnreferenced)
        }
    }
}

impl fmt::Display for Left {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Pod => "pod",
            Kind::Secret => "Secret",
            Kind::Claim => "PersistentVolumeClaim",
            Kind::NetworkPolicy => "NetworkPolicy",
        };
        let why = match self.why {
            LeftWhy::Unmarked => format!(
                "it carries this agent's identity but not the marker {LABEL_MANAGED_BY}={MANAGED_BY}, {LABEL_BINDING_VERSION}={BINDING_VERSION}, so this provider did not create it"
            ),
            LeftWhy::ForeignAnnotation => {
                format!("it carries the agent label but its {ANN_PUBKEY_FULL} annotation names another key")
            }
            LeftWhy::ForeignLabel => "its identity label does not match this agent".into(),
            LeftWhy::ReferencedByUntouchedPod => "a pod this provider may not touch still uses it".into(),
            LeftWhy::YoungUnreferenced => format!(
                "this agent's, young: no pod uses it and it is younger than {} s on the apiserver's clock, so it may belong to a Start in progress; an undeploy {}removes it",
                crate::timing::ORPHAN_MIN_AGE.as_secs(),
                match self.removable_at {
                    Some(at) => format!("after {} (apiserver clock) ", httpdate::fmt_http_date(at)),
                    None => "once that Start has finished ".into(),
                }
            ),
            LeftWhy::AgeUnknown => {
                "no pod uses it and the apiserver's answer carried no Date header, so its age is unknown"
                    .into()
            }
            LeftWhy::Unfenceable => "it has no UID or resourceVersion to fence a delete on".into(),
        };
        write!(f, "{kind} {} ({why})", self.name)
    }
}

fn counts(r: &Removed) -> String {
    buzz_contract::wire::removed_text(r)
}

fn list(items: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut s = items.iter().take(SHOWN).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > SHOWN {
        s.push_str(&format!("; and {} more", items.len() - SHOWN));
    }
    s
}

/// What to do about what is left: retry for this provider's own objects,
/// delete by hand only for those it may not touch.
fn advice(left: &[Left], namespace: &str) -> String {
    let mut out = String::new();
    if left.iter().any(|l| l.why.is_ours()) {
        out.push_str(" Undeploy again to remove this agent's own objects once the reason given has passed");
        out.push('.');
    }
    if left.iter().any(|l| !l.why.is_ours()) {
        out.push_str(&format!(
            " The others are not provably this provider's objects for this agent; delete them yourself if they are stale (kubectl delete pod|secret|pvc <name> -n {namespace})."
        ));
    }
    out
}

/// Why an undeploy did not finish with nothing of the agent left.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UndeployError {
    /// The request or `provider_config` is invalid, or the cluster could not be used.
    #[error(transparent)]
    Invalid(#[from] DeployError),
    /// RBAC refused a verb the undeploy needs.
    #[error(
        "your kubeconfig user may not {verb} {resource} in namespace {namespace} ({message}); removed {removed} so far. Ask a cluster admin to apply deploy/kubernetes/provider-rbac.yaml for namespace {namespace}, or to run `kubectl create role buzz-provider -n {namespace} --verb=get,list,watch,create,delete,patch --resource=pods,secrets,persistentvolumeclaims` and `kubectl create rolebinding buzz-provider -n {namespace} --role=buzz-provider --user=<you>`; check with `kubectl auth can-i {verb} {resource} -n {namespace}`",
        removed = counts(.removed)
    )]
    Forbidden {
        verb: &'static str,
        resource: &'static str,
        namespace: String,
        message: String,
        removed: Removed,
    },
    /// The namespace does not exist: nothing of the agent can be there.
    #[error(
        "namespace {namespace} does not exist, so agent {name} has no pod or Secret there; nothing was deleted (check provider_config.namespace and context)"
    )]
    NamespaceMissing { namespace: String, name: String },
    /// Objects with the agent's label that this undeploy did not remove:
    /// each says why, and only those that are not this provider's own are
    /// called so (issue 30 item 5).
    #[error(
        "undeploy of agent {name} in namespace {namespace} removed {removed}; left: {n} object(s) untouched: {items}.{advice}",
        removed = counts(.removed),
        n = .left.len(),
        items = list(&.left.iter().map(|l| l.to_string()).collect::<Vec<_>>()),
        advice = advice(.left, .namespace)
    )]
    Left {
        name: String,
        namespace: String,
        removed: Removed,
        left: Vec<Left>,
    },
    /// The bound ran out while objects were still disappearing.
    #[error(
        "undeploy of agent {name} in namespace {namespace} removed {removed}, but after {bound_secs} s these still exist: {items}; their deletion was accepted and Kubernetes finishes it after the pod's graceful stop — undeploy again to confirm",
        removed = counts(.removed),
        items = list(.waiting)
    )]
    OutOfTime {
        name: String,
        namespace: String,
        removed: Removed,
        waiting: Vec<String>,
        bound_secs: u64,
    },
    /// Any other cluster failure.
    #[error("undeploy of agent {name} could not {action} in namespace {namespace}: {cause}; removed {removed} so far", removed = counts(.removed))]
    Cluster {
        name: String,
        action: &'static str,
        namespace: String,
        cause: String,
        removed: Removed,
    },
}
