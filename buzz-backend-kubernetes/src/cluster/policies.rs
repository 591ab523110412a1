//! The agent's NetworkPolicy's part of the cluster boundary
//! ([`crate::egress`], issue 53), with the same semantics as the rest of
//! [`super`]: quorum reads, fenced deletes, 409 told apart by
//! `Status.reason`, and a replace fenced by the resourceVersion it read.

use super::{
    ClusterError, Created, Deleted, KubeCluster, classify_error, create_outcome, delete_outcome,
    fenced_params, status_of,
};
use crate::gc::Fenced;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{ListParams, PostParams};

/// Outcome of a fenced replace.
#[derive(Debug, Clone)]
pub enum Replaced {
    Replaced,
    /// 409 `Conflict` (changed since the read) or 404 (gone): read again.
    Moved,
}

/// What the deploy and undeploy need of the agent's NetworkPolicy.
#[allow(async_fn_in_trait)]
pub trait Policies {
    /// A quorum read of the policy at `name`.
    async fn get_policy(&self, name: &str) -> Result<Option<NetworkPolicy>, ClusterError>;
    /// The policies matching `selector`, at most `limit` (0 = all).
    async fn list_policies(&self, selector: &str, limit: u32) -> Result<Vec<NetworkPolicy>, ClusterError>;
    async fn create_policy(&self, p: &NetworkPolicy) -> Result<Created<NetworkPolicy>, ClusterError>;
    /// Replaces the policy `p` names, fenced by `p`'s resourceVersion.
    async fn replace_policy(&self, p: &NetworkPolicy) -> Result<Replaced, ClusterError>;
    async fn delete_policy(&self, f: &Fenced) -> Result<Deleted, ClusterError>;
}

impl Policies for KubeCluster {
    async fn get_policy(&self, name: &str) -> Result<Option<NetworkPolicy>, ClusterError> {
        self.policies.get_opt(name).await.map_err(classify_error)
    }

    async fn list_policies(&self, selector: &str, limit: u32) -> Result<Vec<NetworkPolicy>, ClusterError> {
        let mut params = ListParams::default().labels(selector);
        if limit > 0 {
            params = params.limit(limit);
        }
        Ok(self.policies.list(&params).await.map_err(classify_error)?.items)
    }

    async fn create_policy(&self, p: &NetworkPolicy) -> Result<Created<NetworkPolicy>, ClusterError> {
        create_outcome(self.policies.create(&PostParams::default(), p).await)
    }

    async fn replace_policy(&self, p: &NetworkPolicy) -> Result<Replaced, ClusterError> {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        match self.policies.replace(name, &PostParams::default(), p).await {
            Ok(_) => Ok(Replaced::Replaced),
            Err(e) => match status_of(&e) {
                Some(s) if s.code == 404 || (s.code == 409 && s.reason == "Conflict") => Ok(Replaced::Moved),
                _ => Err(classify_error(e)),
            },
        }
    }

    async fn delete_policy(&self, f: &Fenced) -> Result<Deleted, ClusterError> {
        delete_outcome(self.policies.delete(&f.name, &fenced_params(f)).await)
    }
}
