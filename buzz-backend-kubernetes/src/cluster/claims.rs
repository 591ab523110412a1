//! The workspace claim's part of the cluster boundary ([`crate::workspace`],
//! issue 32 item 2), with the same semantics as the rest of [`super`]:
//! quorum reads, fenced deletes, 409 told apart by `Status.reason`.

use super::{
    ClusterError, Created, Deleted, KubeCluster, classify_error, create_outcome, delete_outcome,
    fenced_params,
};
use crate::gc::Fenced;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{ListParams, PostParams};

/// What the deploy and undeploy need of the agent's workspace claim.
#[allow(async_fn_in_trait)]
pub trait Claims {
    /// A quorum read of the claim at `name`.
    async fn get_claim(&self, name: &str) -> Result<Option<PersistentVolumeClaim>, ClusterError>;
    async fn list_claims(&self, selector: &str) -> Result<Vec<PersistentVolumeClaim>, ClusterError>;
    async fn create_claim(
        &self,
        c: &PersistentVolumeClaim,
    ) -> Result<Created<PersistentVolumeClaim>, ClusterError>;
    async fn delete_claim(&self, f: &Fenced) -> Result<Deleted, ClusterError>;
    /// Whether the cluster has StorageClass `name`: `Err(Api 404)` is
    /// turned into `Ok(Some(false))`; `Ok(None)` when the user may not read
    /// StorageClasses (cluster-scoped; the optional ClusterRole of
    /// deploy/kubernetes/provider-rbac.yaml grants it).
    async fn storage_class_exists(&self, name: &str) -> Result<Option<bool>, ClusterError>;
    /// The events of the object `uid` (a list, `involvedObject.uid`).
    async fn events_of(&self, uid: &str) -> Result<Vec<Event>, ClusterError>;
}

impl Claims for KubeCluster {
    async fn get_claim(&self, name: &str) -> Result<Option<PersistentVolumeClaim>, ClusterError> {
        self.claims.get_opt(name).await.map_err(classify_error)
    }

    async fn list_claims(&self, selector: &str) -> Result<Vec<PersistentVolumeClaim>, ClusterError> {
        Ok(self
            .claims
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(classify_error)?
            .items)
    }

    async fn create_claim(
        &self,
        c: &PersistentVolumeClaim,
    ) -> Result<Created<PersistentVolumeClaim>, ClusterError> {
        create_outcome(self.claims.create(&PostParams::default(), c).await)
    }

    async fn delete_claim(&self, f: &Fenced) -> Result<Deleted, ClusterError> {
        delete_outcome(self.claims.delete(&f.name, &fenced_params(f)).await)
    }

    async fn storage_class_exists(&self, name: &str) -> Result<Option<bool>, ClusterError> {
        match Api::<StorageClass>::all(self.client.clone())
            .get_metadata_opt(name)
            .await
        {
            Ok(found) => Ok(Some(found.is_some())),
            Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
            Err(e) => Err(classify_error(e)),
        }
    }

    async fn events_of(&self, uid: &str) -> Result<Vec<Event>, ClusterError> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(events
            .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
            .await
            .map_err(classify_error)?
            .items)
    }
}
