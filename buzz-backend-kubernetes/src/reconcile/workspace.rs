//! The workspace claim's step of the deploy (issue 32 item 2): the shell
//! around the pure [`crate::workspace`]. Runs after the preflight GC and
//! before the attempt, so the pod never references a claim that is not
//! there: read the claim at the agent's name (quorum), judge it, and create
//! it when absent. A create that loses to a concurrent deploy reads the
//! winner and judges it. A StorageClass named in the config is checked
//! first, when the user may read StorageClasses, so a typo is named at once
//! instead of as a claim that never binds. While the pod waits, a claim
//! still unbound after [`bind_bound`] fails the Start with its latest event.

use super::Loop;
use crate::cluster::{Cluster, ClusterError, Created};
use crate::consts::*;
use crate::diag;
use crate::error::DeployError;
use crate::workspace::{self, Judgement, WorkspaceError, WorkspaceSpec};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use std::time::Duration;
use tokio::time::Instant;

/// The claim this deploy uses.
#[derive(Debug, Clone)]
pub(super) struct Claim {
    pub name: String,
    pub uid: String,
    pub bound: bool,
    /// When this call made sure of it: the bind bound counts from here.
    pub since: Instant,
}

/// [`WORKSPACE_BIND_BOUND`], or [`WORKSPACE_BIND_ENV`] seconds (tests).
pub fn bind_bound() -> Duration {
    std::env::var(WORKSPACE_BIND_ENV)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(WORKSPACE_BIND_BOUND)
}

impl<C: Cluster> Loop<'_, C> {
    fn claim_err(&self, verb: &'static str, e: ClusterError) -> DeployError {
        let namespace = self.plan.namespace.clone();
        match e {
            // A ResourceQuota refuses with 403 too, and says so.
            ClusterError::Api {
                code: 403, message, ..
            } if !message.contains("exceeded quota") => WorkspaceError::Forbidden {
                verb,
                namespace,
                message,
            }
            .into(),
            ClusterError::Api { code, message, .. } if verb == "create" && (400..500).contains(&code) => {
                WorkspaceError::Refused {
                    claim: workspace::claim_name(&self.plan.pubkey),
                    namespace,
                    message,
                }
                .into()
            }
            other => self.cluster_err(&format!("{verb} the workspace claim"), other),
        }
    }

    async fn read_claim(&self, name: &str) -> Result<Option<PersistentVolumeClaim>, DeployError> {
        self.retry_until(self.act_until, || self.cluster.get_claim(name))
            .await
            .map_err(|e| self.claim_err("get", e))
    }

    /// Creates or adopts the agent's claim; `None` without `workspace_size`.
    pub(super) async fn ensure_workspace(&self) -> Result<Option<Claim>, DeployError> {
        let Some(spec) = &self.plan.workspace else {
            return Ok(None);
        };
        let name = workspace::claim_name(&self.plan.pubkey);
        let mut found = self.read_claim(&name).await?;
        // Absent, then lost a create race: the winner is judged once more.
        for _ in 0..2 {
            match workspace::judge(found.as_ref(), &self.plan.pubkey, spec) {
                Judgement::Absent => {}
                Judgement::Usable { bound } => {
                    let pvc = found.as_ref().expect("judged usable, so found");
                    diag::line(&format!(
                        "workspace: using claim {name} ({})",
                        if bound { "bound" } else { "not bound yet" }
                    ));
                    return Ok(Some(claim_of(pvc, &name, bound)));
                }
                other => return Err(self.refusal(&name, spec, other).into()),
            }
            self.check_class(spec).await?;
            let wanted = workspace::claim(&self.plan.pubkey, spec);
            let created = self
                .retry_until(self.act_until, || self.cluster.create_claim(&wanted))
                .await
                .map_err(|e| self.claim_err("create", e))?;
            match created {
                Created::Created(pvc) => {
                    diag::line(&format!(
                        "workspace: created claim {name} ({}, StorageClass {})",
                        spec.size,
                        spec.storage_class.as_deref().unwrap_or("the cluster's default")
                    ));
                    let bound = workspace::is_bound(&pvc);
                    return Ok(Some(claim_of(&pvc, &name, bound)));
                }
                Created::AlreadyExists => found = self.read_claim(&name).await?,
                Created::NamespaceMissing
                | Created::ServiceAccountMissing { .. }
                | Created::RuntimeClassMissing { .. } => {
                    return Err(WorkspaceError::Refused {
                        claim: name,
                        namespace: self.plan.namespace.clone(),
                        message: "the apiserver answered that the namespace does not exist".into(),
                    }
                    .into());
                }
            }
        }
        Err(self.cluster_err(
            "create the workspace claim",
            ClusterError::Transient("it was created and deleted again by someone else".into()),
        ))
    }

    /// A named StorageClass must exist, when the user may ask.
    async fn check_class(&self, spec: &WorkspaceSpec) -> Result<(), DeployError> {
        let Some(class) = &spec.storage_class else {
            return Ok(());
        };
        let exists = self
            .retry_until(self.act_until, || self.cluster.storage_class_exists(class))
            .await
            .map_err(|e| self.cluster_err("read the StorageClass", e))?;
        match exists {
            Some(true) => Ok(()),
            Some(false) => Err(WorkspaceError::UnknownClass {
                class: class.clone(),
                message: format!("storageclasses.storage.k8s.io \"{class}\" not found"),
            }
            .into()),
            None => {
                diag::line(&format!(
                    "workspace: may not read StorageClass {class} (cluster-scoped); a class that does not exist shows as a claim that does not bind"
                ));
                Ok(())
            }
        }
    }

    fn refusal(&self, claim: &str, spec: &WorkspaceSpec, j: Judgement) -> WorkspaceError {
        let (claim, namespace) = (claim.to_string(), self.plan.namespace.clone());
        match j {
            Judgement::NotOurs(m) => WorkspaceError::NotOurs {
                claim,
                namespace,
                why: m.describe(),
            },
            Judgement::Unmarked => WorkspaceError::Unmarked { claim, namespace },
            Judgement::Terminating => WorkspaceError::Terminating { claim, namespace },
            Judgement::TooSmall { has } => WorkspaceError::TooSmall {
                claim,
                namespace,
                has,
                wants: spec.size.clone(),
            },
            Judgement::OtherClass { has } => WorkspaceError::OtherClass {
                claim,
                namespace,
                has,
                wants: spec.storage_class.clone().unwrap_or_default(),
            },
            Judgement::Prefilled { source } => WorkspaceError::Prefilled {
                claim,
                namespace,
                source_object: source,
            },
            Judgement::PreBound { volume } => WorkspaceError::PreBound {
                claim,
                namespace,
                volume,
            },
            Judgement::Absent | Judgement::Usable { .. } => unreachable!("not a refusal"),
        }
    }

    /// While the pod waits: a claim unbound past [`bind_bound`] fails the
    /// Start with its latest event. Reads nothing before the bound, nor
    /// once the claim was seen bound.
    pub(super) async fn check_bound(&self, claim: &mut Claim) -> Result<(), DeployError> {
        let bound = bind_bound();
        if claim.bound || claim.since.elapsed() < bound {
            return Ok(());
        }
        let found = self.read_claim(&claim.name).await?;
        if found.as_ref().is_some_and(workspace::is_bound) {
            claim.bound = true;
            return Ok(());
        }
        let events = self
            .retry_until(self.act_until, || self.cluster.events_of(&claim.uid))
            .await
            .unwrap_or_default();
        Err(WorkspaceError::NotBound {
            claim: claim.name.clone(),
            namespace: self.plan.namespace.clone(),
            after_secs: claim.since.elapsed().as_secs(),
            cause: workspace::pending_cause(&events, &diag::redactor()),
        }
        .into())
    }
}

fn claim_of(pvc: &PersistentVolumeClaim, name: &str, bound: bool) -> Claim {
    Claim {
        name: name.to_string(),
        uid: pvc.metadata.uid.clone().unwrap_or_default(),
        bound,
        since: Instant::now(),
    }
}
