//! The one boundary to the cluster (DESIGN.md Decision 1): a narrow trait the
//! reconciler drives, and its single real implementation over `kube`.
//!
//! Semantics the spec pins here (§Deploy State Machine "Destructive decisions
//! come from views you control", "The 409 discriminator"; §K8s GC same-clock rule):
//! - every read is a quorum read (`resourceVersion` unset) — `kube`'s `get`
//!   and `list` with default params send none;
//! - every DELETE carries UID + resourceVersion preconditions and the object's
//!   own grace period (never `0`);
//! - 409 is told apart by `Status.reason`: `Conflict` vs `AlreadyExists`;
//! - the Secret list returns the response's `Date` header for the GC age gate;
//! - failures are classified by HTTP code and `Status.reason`/`details.kind`;
//!   the one condition the apiserver states only in text (which ServiceAccount
//!   admission could not find) is read by [`missing_service_account`] alone;
//! - request-build and decode failures are not transient: retrying cannot fix them.

use crate::gc::Fenced;
use futures::StreamExt;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, Secret};
use kube::api::{
    DeleteParams, ListParams, ObjectList, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
    WatchEvent, WatchParams,
};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// A cluster error, classified for the loop.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClusterError {
    /// The API answered with a status the loop does not handle.
    #[error("{message} (HTTP {code} {reason})")]
    Api {
        code: u16,
        reason: String,
        message: String,
    },
    /// Worth retrying within the deadline: 5xx, 429, a dropped connection.
    #[error("{0}")]
    Transient(String),
    /// Credentials could not be obtained (kubeconfig exec plugin and the like).
    #[error("{0}")]
    Auth(String),
    /// The cluster was never reached (a wrong server address or a down cluster).
    #[error("{0}")]
    Unreachable(String),
    /// The request could not be built: a bug or a bad name, never transient.
    #[error("the request could not be built: {0}")]
    Request(String),
    /// The response could not be decoded: never transient.
    #[error("the apiserver's response could not be decoded: {0}")]
    Decode(String),
    /// The call was still unanswered when the operation budget ran out.
    #[error("no answer before the deploy deadline")]
    OutOfTime,
}

/// Outcome of a create.
#[derive(Debug, Clone)]
pub enum Created<T> {
    Created(T),
    /// 409 with `Status.reason` = `AlreadyExists`.
    AlreadyExists,
    /// ServiceAccount admission could not find the named ServiceAccount.
    ServiceAccountMissing {
        name: String,
    },
    /// The namespace does not exist.
    NamespaceMissing,
    /// RuntimeClass admission could not find the pod's `runtimeClassName`.
    RuntimeClassMissing {
        name: String,
    },
}

/// Outcome of a fenced delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    /// Delete-of-absent is success.
    NotFound,
    /// 409 with `Status.reason` = `Conflict`: the precondition failed; re-enter.
    Conflict,
}

/// Outcome of creating the namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceCreate {
    Created,
    Exists,
    Forbidden,
}

mod claims;
mod policies;
pub use claims::Claims;
pub use policies::{Policies, Replaced};

/// What the reconciler needs from a cluster, scoped to one namespace; the
/// workspace claim's part is [`Claims`], the NetworkPolicy's [`Policies`].
#[allow(async_fn_in_trait)]
pub trait Cluster: Claims + Policies {
    async fn get_pod(&self, name: &str) -> Result<Option<Pod>, ClusterError>;
    async fn list_pods(&self, selector: &str) -> Result<Vec<Pod>, ClusterError>;
    /// Lists Secrets and returns the response's `Date` (None when absent or unparseable).
    async fn list_secrets_dated(
        &self,
        selector: &str,
    ) -> Result<(Vec<Secret>, Option<SystemTime>), ClusterError>;
    async fn secret_exists(&self, name: &str) -> Result<bool, ClusterError>;
    /// A quorum read of a Secret's metadata (`None` when the Secret is absent).
    async fn secret_meta(&self, name: &str) -> Result<Option<ObjectMeta>, ClusterError>;
    /// A quorum read of a Secret's data (`None` when the Secret is absent).
    async fn secret_data(&self, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, ClusterError>;
    async fn create_secret(&self, s: &Secret) -> Result<Created<Secret>, ClusterError>;
    async fn create_pod(&self, p: &Pod) -> Result<Created<Pod>, ClusterError>;
    async fn delete_pod(&self, f: &Fenced) -> Result<Deleted, ClusterError>;
    async fn delete_secret(&self, f: &Fenced) -> Result<Deleted, ClusterError>;
    async fn create_namespace(&self) -> Result<NamespaceCreate, ClusterError>;
    /// Returns at the first change to the named pod after `since` (a watch),
    /// or after `max` at the latest (the bounded safety net).
    /// Watches the pod from `since` until an event that `keep_watching`
    /// does not accept, an error, or `max`. Returns the pod an added or
    /// modified event carried when that event ended the watch; `None` when
    /// a deletion, an error or the bound ended it (the caller re-reads).
    async fn wait_for_change(
        &self,
        name: &str,
        since: Option<&str>,
        max: Duration,
        keep_watching: &(dyn Fn(&Pod) -> bool + Sync),
    ) -> Result<Option<Pod>, ClusterError>;
    async fn annotate_pod(&self, name: &str, key: &str, value: &str) -> Result<(), ClusterError>;
    /// Sets the Secret's ownerReferences to `owner` (a merge patch of its
    /// metadata: an immutable Secret's metadata stays patchable).
    async fn set_secret_owner(
        &self,
        secret: &str,
        owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    ) -> Result<(), ClusterError>;
    /// Watches the events of the pod `uid` (field selector
    /// `involvedObject.uid`), calling `seen` with each.
    ///
    /// - `since` is the resourceVersion of the pod's create response, when
    ///   this call created it: its events all come after it, so the watch
    ///   opens there and the apiserver streams them from its watch cache
    ///   without reading the namespace's existing events (their cost grows
    ///   with the namespace: issue 22 §4, `bench scale`).
    /// - Without it (a pod this call found), the first watch has no
    ///   resourceVersion, so the apiserver opens it with the events that
    ///   already exist (as synthetic ADDED events, in no particular order)
    ///   and then streams new ones: one request instead of a list and a
    ///   watch.
    ///
    /// A watch that ends is resumed from the last resourceVersion seen; an
    /// expired one (410) starts afresh without one. Returns only with the
    /// error that stopped it (403: not visible).
    async fn follow_pod_events(
        &self,
        uid: &str,
        since: Option<&str>,
        seen: &mut (dyn FnMut(&Event) + Send),
    ) -> ClusterError;
}

/// The real cluster.
pub struct KubeCluster {
    client: Client,
    namespace: String,
    pods: Api<Pod>,
    secrets: Api<Secret>,
    claims: Api<PersistentVolumeClaim>,
    policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy>,
}

impl KubeCluster {
    pub fn new(client: Client, namespace: &str) -> Self {
        KubeCluster {
            pods: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client.clone(), namespace),
            claims: Api::namespaced(client.clone(), namespace),
            policies: Api::namespaced(client.clone(), namespace),
            namespace: namespace.to_string(),
            client,
        }
    }
}

/// The parts of an apiserver `Status` the loop decides on.
struct StatusParts {
    code: u16,
    reason: String,
    message: String,
    kind: Option<String>,
}

fn status_of(e: &kube::Error) -> Option<StatusParts> {
    match e {
        kube::Error::Api(s) => Some(StatusParts {
            code: s.code,
            reason: s.reason.clone(),
            message: s.message.clone(),
            kind: s.details.as_ref().map(|d| d.kind.clone()),
        }),
        _ => None,
    }
}

/// Classifies a kube error for the loop.
pub fn classify_error(e: kube::Error) -> ClusterError {
    match e {
        kube::Error::Api(s) if s.code >= 500 || s.code == 429 => {
            ClusterError::Transient(format!("{} (HTTP {})", s.message, s.code))
        }
        kube::Error::Api(s) => ClusterError::Api {
            code: s.code,
            reason: s.reason.clone(),
            message: s.message.clone(),
        },
        kube::Error::Auth(a) => ClusterError::Auth(a.to_string()),
        kube::Error::SerdeError(e) => ClusterError::Decode(e.to_string()),
        e @ kube::Error::FromUtf8(_) => ClusterError::Decode(e.to_string()),
        kube::Error::BuildRequest(e) => ClusterError::Request(e.to_string()),
        kube::Error::HttpError(e) => ClusterError::Request(e.to_string()),
        other => ClusterError::Transient(with_sources(&other)),
    }
}

/// An error and its causes, `outer: inner: …`, each said once: a transport
/// error's own text ("client error (Connect)") names no reason; its sources
/// do ("Connection refused (os error 111)").
pub fn with_sources(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// `NotFound` on a namespaced create whose details name the namespace itself.
fn is_namespace_missing(s: &StatusParts) -> bool {
    s.code == 404 && s.reason == "NotFound" && s.kind.as_deref() == Some("namespaces")
}

/// The ServiceAccount that admission could not find, if that is what a
/// `Forbidden` says. The apiserver states this only in text, so this is the
/// one place that reads it; kube-apiserver v1.36 words it
/// `pods "<pod>" is forbidden: error looking up service account <ns>/<sa>: serviceaccount "<sa>" not found`.
pub fn missing_service_account(code: u16, reason: &str, message: &str) -> Option<String> {
    if code != 403 || reason != "Forbidden" {
        return None;
    }
    let rest = message.split_once("error looking up service account ")?.1;
    let (qualified, tail) = rest.split_once(": ")?;
    let name = qualified.rsplit_once('/')?.1;
    let quoted = format!("serviceaccount \"{name}\" not found");
    (!name.is_empty() && tail.contains(&quoted)).then(|| name.to_string())
}

/// The RuntimeClass that admission could not find, if that is what a
/// `Forbidden` says (stated only in text, read here alone); kube-apiserver
/// v1.36's RuntimeClass admission words it
/// `pods "<pod>" is forbidden: pod rejected: RuntimeClass "<name>" not found`.
pub fn missing_runtime_class(code: u16, reason: &str, message: &str) -> Option<String> {
    if code != 403 || reason != "Forbidden" {
        return None;
    }
    let rest = message.split_once("pod rejected: RuntimeClass \"")?.1;
    let (name, tail) = rest.split_once('"')?;
    (!name.is_empty() && tail.starts_with(" not found")).then(|| name.to_string())
}

fn create_outcome<T>(r: Result<T, kube::Error>) -> Result<Created<T>, ClusterError> {
    match r {
        Ok(t) => Ok(Created::Created(t)),
        Err(e) => match status_of(&e) {
            Some(s) if s.code == 409 && s.reason == "AlreadyExists" => Ok(Created::AlreadyExists),
            Some(s) if is_namespace_missing(&s) => Ok(Created::NamespaceMissing),
            Some(s) => match (
                missing_service_account(s.code, &s.reason, &s.message),
                missing_runtime_class(s.code, &s.reason, &s.message),
            ) {
                (Some(name), _) => Ok(Created::ServiceAccountMissing { name }),
                (None, Some(name)) => Ok(Created::RuntimeClassMissing { name }),
                (None, None) => Err(classify_error(e)),
            },
            None => Err(classify_error(e)),
        },
    }
}

fn fenced_params(f: &Fenced) -> DeleteParams {
    DeleteParams {
        // The object's own grace period: never 0 (that would be a force-kill).
        grace_period_seconds: None,
        preconditions: Some(Preconditions {
            uid: Some(f.uid.clone()),
            resource_version: Some(f.resource_version.clone()),
        }),
        ..Default::default()
    }
}

fn delete_outcome<T>(r: Result<T, kube::Error>) -> Result<Deleted, ClusterError> {
    match r {
        Ok(_) => Ok(Deleted::Deleted),
        Err(e) => match status_of(&e) {
            Some(s) if s.code == 404 => Ok(Deleted::NotFound),
            Some(s) if s.code == 409 && s.reason == "Conflict" => Ok(Deleted::Conflict),
            _ => Err(classify_error(e)),
        },
    }
}

impl Cluster for KubeCluster {
    async fn get_pod(&self, name: &str) -> Result<Option<Pod>, ClusterError> {
        self.pods.get_opt(name).await.map_err(classify_error)
    }

    async fn list_pods(&self, selector: &str) -> Result<Vec<Pod>, ClusterError> {
        Ok(self
            .pods
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(classify_error)?
            .items)
    }

    async fn list_secrets_dated(
        &self,
        selector: &str,
    ) -> Result<(Vec<Secret>, Option<SystemTime>), ClusterError> {
        let url = format!("/api/v1/namespaces/{}/secrets", self.namespace);
        let req = kube::core::Request::new(url)
            .list(&ListParams::default().labels(selector))
            .map_err(|e| ClusterError::Request(e.to_string()))?;
        let resp = self
            .client
            .send(req.map(kube::client::Body::from))
            .await
            .map_err(classify_error)?;
        let status = resp.status();
        let date = resp
            .headers()
            .get(http::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|d| httpdate::parse_http_date(d).ok());
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ClusterError::Transient(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            let s: Option<kube::core::Status> = serde_json::from_slice(&body).ok();
            let (reason, message) = s.map(|s| (s.reason, s.message)).unwrap_or_default();
            let code = status.as_u16();
            return Err(if code >= 500 || code == 429 {
                ClusterError::Transient(format!("{message} (HTTP {code})"))
            } else {
                ClusterError::Api {
                    code,
                    reason,
                    message,
                }
            });
        }
        let list: ObjectList<Secret> =
            serde_json::from_slice(&body).map_err(|e| ClusterError::Decode(format!("secret list: {e}")))?;
        Ok((list.items, date))
    }

    async fn secret_exists(&self, name: &str) -> Result<bool, ClusterError> {
        Ok(self
            .secrets
            .get_metadata_opt(name)
            .await
            .map_err(classify_error)?
            .is_some())
    }

    async fn secret_meta(&self, name: &str) -> Result<Option<ObjectMeta>, ClusterError> {
        Ok(self
            .secrets
            .get_metadata_opt(name)
            .await
            .map_err(classify_error)?
            .map(|m| m.metadata))
    }

    async fn secret_data(&self, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, ClusterError> {
        let secret = self.secrets.get_opt(name).await.map_err(classify_error)?;
        Ok(secret.map(|s| {
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect()
        }))
    }

    async fn create_secret(&self, s: &Secret) -> Result<Created<Secret>, ClusterError> {
        create_outcome(self.secrets.create(&PostParams::default(), s).await)
    }

    async fn create_pod(&self, p: &Pod) -> Result<Created<Pod>, ClusterError> {
        create_outcome(self.pods.create(&PostParams::default(), p).await)
    }

    async fn delete_pod(&self, f: &Fenced) -> Result<Deleted, ClusterError> {
        delete_outcome(self.pods.delete(&f.name, &fenced_params(f)).await)
    }

    async fn delete_secret(&self, f: &Fenced) -> Result<Deleted, ClusterError> {
        delete_outcome(self.secrets.delete(&f.name, &fenced_params(f)).await)
    }

    async fn create_namespace(&self) -> Result<NamespaceCreate, ClusterError> {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(self.namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => Ok(NamespaceCreate::Created),
            Err(e) => match status_of(&e) {
                Some(s) if s.code == 409 && s.reason == "AlreadyExists" => Ok(NamespaceCreate::Exists),
                Some(s) if s.code == 403 => Ok(NamespaceCreate::Forbidden),
                _ => Err(classify_error(e)),
            },
        }
    }

    async fn wait_for_change(
        &self,
        name: &str,
        since: Option<&str>,
        max: Duration,
        keep_watching: &(dyn Fn(&Pod) -> bool + Sync),
    ) -> Result<Option<Pod>, ClusterError> {
        let Some(rv) = since else {
            tokio::time::sleep(max.min(Duration::from_millis(200))).await;
            return Ok(None);
        };
        let secs = max.as_secs().clamp(1, 290) as u32;
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(secs);
        let watch = async {
            let mut stream = self.pods.watch(&wp, rv).await.map_err(classify_error)?.boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Bookmark(_)) => continue,
                    Ok(WatchEvent::Modified(p)) if keep_watching(&p) => continue,
                    Ok(WatchEvent::Modified(p) | WatchEvent::Added(p)) => return Ok(Some(p)),
                    // A deletion, an expired resourceVersion or a stream error: re-read.
                    _ => return Ok(None),
                }
            }
            Ok(None)
        };
        match tokio::time::timeout(max, watch).await {
            Ok(r) => r,
            Err(_) => Ok(None),
        }
    }

    async fn annotate_pod(&self, name: &str, key: &str, value: &str) -> Result<(), ClusterError> {
        let patch = serde_json::json!({ "metadata": { "annotations": { key: value } } });
        self.pods
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(classify_error)
    }

    async fn set_secret_owner(
        &self,
        secret: &str,
        owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    ) -> Result<(), ClusterError> {
        let patch = serde_json::json!({ "metadata": { "ownerReferences": [owner] } });
        self.secrets
            .patch_metadata(secret, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(classify_error)
    }

    async fn follow_pod_events(
        &self,
        uid: &str,
        since: Option<&str>,
        seen: &mut (dyn FnMut(&Event) + Send),
    ) -> ClusterError {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let fields = format!("involvedObject.uid={uid}");
        // Empty: "the current state, then changes" (the apiserver treats an
        // empty resourceVersion as unset).
        let mut rv = since.unwrap_or_default().to_string();
        loop {
            // A watch the server ends at once is not resumed in a hot loop.
            let opened = std::time::Instant::now();
            let wp = WatchParams::default().fields(&fields).timeout(290);
            let mut stream = match events.watch(&wp, &rv).await {
                Ok(s) => s.boxed(),
                Err(e) => return classify_error(e),
            };
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Added(e) | WatchEvent::Modified(e)) => {
                        if let Some(v) = &e.metadata.resource_version {
                            rv = v.clone();
                        }
                        seen(&e);
                    }
                    Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                    Ok(WatchEvent::Deleted(_)) => {}
                    Ok(WatchEvent::Error(s)) if s.code == 410 => {
                        rv.clear();
                        break;
                    }
                    Ok(WatchEvent::Error(s)) => return classify_error(kube::Error::Api(s)),
                    Err(e) => return classify_error(e),
                }
            }
            if opened.elapsed() < Duration::from_secs(1) {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-apiserver v1.36 (the version the conformance suite runs), verbatim.
    #[test]
    fn missing_service_account_kube_apiserver_v1_36() {
        let default = r#"pods "buzz-agent-0123456789ab" is forbidden: error looking up service account buzz-agents-abc123/default: serviceaccount "default" not found"#;
        assert_eq!(
            missing_service_account(403, "Forbidden", default),
            Some("default".into())
        );
        let named = r#"pods "buzz-agent-0123456789ab" is forbidden: error looking up service account ns/agents.runner: serviceaccount "agents.runner" not found"#;
        assert_eq!(
            missing_service_account(403, "Forbidden", named),
            Some("agents.runner".into())
        );
    }

    #[test]
    fn missing_runtime_class_kube_apiserver_v1_36() {
        let m =
            r#"pods "buzz-agent-0123456789ab" is forbidden: pod rejected: RuntimeClass "gvisor" not found"#;
        assert_eq!(missing_runtime_class(403, "Forbidden", m), Some("gvisor".into()));
        assert_eq!(missing_runtime_class(404, "NotFound", m), None);
        let rbac = r#"pods is forbidden: User "u" cannot create resource "pods" in API group "" in the namespace "ns""#;
        assert_eq!(missing_runtime_class(403, "Forbidden", rbac), None);
        assert_eq!(missing_service_account(403, "Forbidden", m), None);
    }

    #[test]
    fn other_forbidden_answers_are_not_a_missing_service_account() {
        let rbac = r#"pods is forbidden: User "u" cannot create resource "pods" in API group "" in the namespace "ns""#;
        assert_eq!(missing_service_account(403, "Forbidden", rbac), None);
        let default = r#"pods "p" is forbidden: error looking up service account ns/default: serviceaccount "default" not found"#;
        assert_eq!(
            missing_service_account(404, "NotFound", default),
            None,
            "code and reason first"
        );
        let mismatch =
            r#"pods "p" is forbidden: error looking up service account ns/a: serviceaccount "b" not found"#;
        assert_eq!(missing_service_account(403, "Forbidden", mismatch), None);
    }
}
