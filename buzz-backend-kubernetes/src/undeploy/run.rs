//! The `undeploy` loop (issue 21 part 1): the imperative shell around the
//! pure [`plan`](super::plan). Each pass is a quorum list of this agent's
//! pods, then of its Secrets (that order: a pod created between the two
//! lists references a Secret the plan sees as young, hence untouched), a plan,
//! and the plan's fenced deletes. A `Conflict` (the object changed since it
//! was listed) abandons the pass and re-lists, so the changed object is
//! verified again; delete-of-absent is success and not counted. Pods marked
//! for deletion are waited on with a watch (bounded safety-net re-list). The
//! loop ends when a pass has nothing left to delete or wait for, or at the
//! bound ([`UNDEPLOY_DEADLINE`] from process start, less the stop margin).
//!
//! The workspace claims are listed third ([`super::plan_claims`], rule 5):
//! deleted in the pass that lists no pod, then waited on like a Secret
//! being finalized (the claim goes once the cluster's protection controller
//! sees no pod using it). With `keep_workspace` they are listed only to be
//! named in the answer.
//!
//! A running pod so costs 12 requests: three lists, the pod and Secret
//! deletes; three lists and a watch while the pod stops; the three lists that
//! show it gone (and a claim's delete and re-list when there is one). A second
//! undeploy costs the three lists and one namespace GET.

use super::{Plan, Target, UndeployError, plan};
use crate::cluster::{Cluster, ClusterError, Deleted, classify_error};
use crate::consts::*;
use crate::diag;
use crate::podspec;
use crate::timing::Timing;
use buzz_contract::wire::Removed;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::Instant;

/// Whether the namespace exists: `None` when the user may not ask.
#[allow(async_fn_in_trait)]
pub trait NamespaceProbe {
    async fn namespace_exists(&self) -> Result<Option<bool>, ClusterError>;
}

/// The real probe: a GET of the namespace.
pub struct KubeNamespace {
    pub client: kube::Client,
    pub namespace: String,
}

impl NamespaceProbe for KubeNamespace {
    async fn namespace_exists(&self) -> Result<Option<bool>, ClusterError> {
        match kube::Api::<Namespace>::all(self.client.clone())
            .get_metadata_opt(&self.namespace)
            .await
        {
            Ok(found) => Ok(Some(found.is_some())),
            Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
            Err(e) => Err(classify_error(e)),
        }
    }
}

/// The bound of one undeploy from `started`: [`UNDEPLOY_DEADLINE`] or
/// [`UNDEPLOY_DEADLINE_ENV`] (tests), with the deploy's stop margin rule.
pub fn timing(started: std::time::Instant) -> Timing {
    let mut t = Timing::from_env(started);
    t.deadline = std::env::var(UNDEPLOY_DEADLINE_ENV)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(UNDEPLOY_DEADLINE);
    t
}

struct Run<'a, C: Cluster, N: NamespaceProbe> {
    cluster: &'a C,
    ns: &'a N,
    target: &'a Target,
    timing: Timing,
    until: Instant,
    removed: Removed,
    /// The claims kept (`keep_workspace`), by name.
    kept: Vec<String>,
    /// Said once: the user may not list claims and asked for none.
    claims_unlisted: bool,
    /// Said once: the user may not list NetworkPolicies and asked for none.
    policies_unlisted: bool,
}

/// A finished undeploy: what went, and what was kept on request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Undeployed {
    pub removed: Removed,
    /// The workspace claims left by `keep_workspace`.
    pub kept: Vec<String>,
}

impl<C: Cluster, N: NamespaceProbe> Run<'_, C, N> {
    fn namespace(&self) -> String {
        self.target.config.namespace.clone()
    }

    fn err(&self, verb: &'static str, resource: &'static str, e: ClusterError) -> UndeployError {
        match e {
            ClusterError::Api {
                code: 403, message, ..
            } => UndeployError::Forbidden {
                verb,
                resource,
                namespace: self.namespace(),
                message,
                removed: self.removed,
            },
            other => UndeployError::Cluster {
                name: self.target.name.clone(),
                action: match (verb, resource) {
                    ("list", "pods") => "list the agent's pods",
                    ("list", "secrets") => "list the agent's Secrets",
                    ("get", "pods") => "read the pod that owns a Secret",
                    ("delete", "pods") => "delete the agent's pod",
                    ("delete", "secrets") => "delete the agent's Secret",
                    ("list", "persistentvolumeclaims") => "list the agent's workspace claims",
                    ("delete", "persistentvolumeclaims") => "delete the agent's workspace claim",
                    ("list", "networkpolicies") => "list the agent's NetworkPolicies",
                    ("delete", "networkpolicies") => "delete the agent's NetworkPolicy",
                    ("watch", _) => "watch the agent's pod stop",
                    _ => "read the namespace",
                },
                namespace: self.namespace(),
                cause: other.to_string(),
                removed: self.removed,
            },
        }
    }

    /// One call, retrying transient failures with backoff until the bound.
    async fn call<T, F, Fut>(
        &self,
        verb: &'static str,
        resource: &'static str,
        mut f: F,
    ) -> Result<T, UndeployError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClusterError>>,
    {
        let mut backoff = Duration::from_millis(100);
        loop {
            let answer = match tokio::time::timeout_at(self.until, f()).await {
                Ok(a) => a,
                Err(_) => Err(ClusterError::OutOfTime),
            };
            match answer {
                Err(ClusterError::Transient(m))
                    if self.until.saturating_duration_since(Instant::now()) > backoff =>
                {
                    diag::line(&format!("retrying after a transient API error: {m}"));
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                other => return other.map_err(|e| self.err(verb, resource, e)),
            }
        }
    }

    /// This agent's claims. A user without claim rights who asked for no
    /// workspace is told once and has none listed; one who asked for a
    /// workspace gets the Forbidden error.
    async fn list_claims(&mut self, sel: &str) -> Result<Vec<PersistentVolumeClaim>, UndeployError> {
        if self.claims_unlisted {
            return Ok(Vec::new());
        }
        match self
            .call("list", "persistentvolumeclaims", || self.cluster.list_claims(sel))
            .await
        {
            Err(UndeployError::Forbidden { .. }) if self.target.config.workspace.is_none() => {
                diag::line(
                    "undeploy: may not list persistentvolumeclaims here; a workspace claim of this agent, if there is one, is left (deploy/kubernetes/provider-rbac.yaml grants it)",
                );
                self.claims_unlisted = true;
                Ok(Vec::new())
            }
            other => other,
        }
    }

    /// This agent's NetworkPolicies, by the claims' rule: a user without
    /// policy rights who asked for none (`network_policy: none`) is told
    /// once and has none listed.
    async fn list_policies(&mut self, sel: &str) -> Result<Vec<NetworkPolicy>, UndeployError> {
        if self.policies_unlisted {
            return Ok(Vec::new());
        }
        match self
            .call("list", "networkpolicies", || self.cluster.list_policies(sel, 0))
            .await
        {
            Err(UndeployError::Forbidden { .. }) if self.target.config.egress.is_none() => {
                diag::line(
                    "undeploy: may not list networkpolicies here; a NetworkPolicy of this agent, if there is one, is left (deploy/kubernetes/provider-rbac.yaml grants it)",
                );
                self.policies_unlisted = true;
                Ok(Vec::new())
            }
            other => other,
        }
    }

    async fn observe(&mut self, doomed: &BTreeSet<String>) -> Result<(Plan, bool), UndeployError> {
        let sel = podspec::selector(&self.target.pubkey);
        let pods = self.call("list", "pods", || self.cluster.list_pods(&sel)).await?;
        let (secrets, date) = self
            .call("list", "secrets", || self.cluster.list_secrets_dated(&sel))
            .await?;
        let claims = self.list_claims(&sel).await?;
        let policies = self.list_policies(&sel).await?;
        let empty = pods.is_empty() && secrets.is_empty() && claims.is_empty() && policies.is_empty();
        // Owners read after the Secret list: only such a read proves one gone.
        let mut gone = BTreeSet::new();
        for (name, uid) in crate::gc::owners_to_check(&self.target.pubkey, &pods, &secrets) {
            let found = self.call("get", "pods", || self.cluster.get_pod(&name)).await?;
            if crate::gc::proves_gone(found.as_ref(), &uid) {
                gone.insert(uid);
            }
        }
        let mut p = plan(
            &self.target.pubkey,
            &pods,
            &secrets,
            doomed,
            &gone,
            date,
            self.timing.orphan_min_age,
        );
        if self.target.keep_workspace {
            self.kept = claims
                .iter()
                .filter(|c| {
                    crate::ownership::ownership(&c.metadata, &self.target.pubkey)
                        == crate::ownership::Ownership::Ours
                })
                .filter_map(|c| c.metadata.name.clone())
                .collect();
        } else {
            super::plan_claims(&mut p, &self.target.pubkey, &pods, &claims);
        }
        super::plan_policies(&mut p, &self.target.pubkey, &pods, &policies);
        Ok((p, empty))
    }

    fn out_of_time(&self, p: &Plan) -> UndeployError {
        let mut waiting: Vec<String> = p
            .terminating
            .iter()
            .map(|t| format!("pod {} (stopping)", t.name))
            .collect();
        waiting.extend(p.pods.iter().map(|f| format!("pod {}", f.name)));
        waiting.extend(p.secrets.iter().map(|f| format!("Secret {}", f.name)));
        if p.secrets_terminating > 0 {
            waiting.push(format!("{} Secret(s) being finalized", p.secrets_terminating));
        }
        waiting.extend(p.claims.iter().map(|f| format!("workspace claim {}", f.name)));
        if p.claims_terminating > 0 {
            waiting.push(format!(
                "{} workspace claim(s) being deleted (a claim goes once no pod uses it)",
                p.claims_terminating
            ));
        }
        waiting.extend(p.policies.iter().map(|f| format!("NetworkPolicy {}", f.name)));
        UndeployError::OutOfTime {
            name: self.target.name.clone(),
            namespace: self.namespace(),
            removed: self.removed,
            waiting,
            bound_secs: self.timing.deadline.as_secs(),
        }
    }

    async fn run(&mut self) -> Result<Undeployed, UndeployError> {
        let mut doomed = BTreeSet::new();
        let mut first = true;
        loop {
            let (p, empty) = self.observe(&doomed).await?;
            if first
                && empty
                && self
                    .ns
                    .namespace_exists()
                    .await
                    .map_err(|e| self.err("get", "namespaces", e))?
                    == Some(false)
            {
                return Err(UndeployError::NamespaceMissing {
                    namespace: self.namespace(),
                    name: self.target.name.clone(),
                });
            }
            first = false;
            doomed.clone_from(&p.doomed);
            if p.settled() {
                if p.left.is_empty() {
                    return Ok(Undeployed {
                        removed: self.removed,
                        kept: std::mem::take(&mut self.kept),
                    });
                }
                return Err(UndeployError::Left {
                    name: self.target.name.clone(),
                    namespace: self.namespace(),
                    removed: self.removed,
                    left: p.left,
                });
            }
            if Instant::now() >= self.until {
                return Err(self.out_of_time(&p));
            }
            let mut changed = false;
            for f in &p.pods {
                match self.call("delete", "pods", || self.cluster.delete_pod(f)).await? {
                    Deleted::Deleted => {
                        self.removed.pods += 1;
                        diag::line(&format!("undeploy: pod {} deleted (graceful stop)", f.name));
                    }
                    Deleted::NotFound => {}
                    Deleted::Conflict => {
                        diag::line(&format!(
                            "undeploy: pod {} changed since it was read; re-reading",
                            f.name
                        ));
                        changed = true;
                    }
                }
            }
            // Secrets only once every pod delete of the pass was accepted:
            // a changed pod is verified again before its Secret goes.
            if !changed {
                for f in &p.secrets {
                    match self
                        .call("delete", "secrets", || self.cluster.delete_secret(f))
                        .await?
                    {
                        Deleted::Deleted => {
                            self.removed.secrets += 1;
                            diag::line(&format!("undeploy: Secret {} deleted", f.name));
                        }
                        Deleted::NotFound | Deleted::Conflict => {}
                    }
                }
                for f in &p.claims {
                    match self
                        .call("delete", "persistentvolumeclaims", || {
                            self.cluster.delete_claim(f)
                        })
                        .await?
                    {
                        Deleted::Deleted => {
                            self.removed.workspaces += 1;
                            diag::line(&format!(
                                "undeploy: workspace claim {} deleted (its files go with it)",
                                f.name
                            ));
                        }
                        Deleted::NotFound | Deleted::Conflict => {}
                    }
                }
                for f in &p.policies {
                    match self
                        .call("delete", "networkpolicies", || self.cluster.delete_policy(f))
                        .await?
                    {
                        Deleted::Deleted => {
                            *self.removed.network_policies.get_or_insert(0) += 1;
                            diag::line(&format!("undeploy: NetworkPolicy {} deleted", f.name));
                        }
                        Deleted::NotFound | Deleted::Conflict => {}
                    }
                }
            }
            // One pod name per agent key (spec §Kubernetes Binding), so at
            // most one pod of the agent is terminating: waiting on the first
            // waits on it. Were there more, the next round of the loop would
            // find the rest and wait on each in turn.
            let nothing_to_delete =
                p.pods.is_empty() && p.secrets.is_empty() && p.claims.is_empty() && p.policies.is_empty();
            if nothing_to_delete && let Some(t) = p.terminating.first() {
                diag::line(&format!("undeploy: waiting for pod {} to stop", t.name));
                let wait = self
                    .timing
                    .safety_net
                    .min(self.until.saturating_duration_since(Instant::now()));
                self.call("watch", "pods", || {
                    self.cluster
                        .wait_for_change(&t.name, t.resource_version.as_deref(), wait, &|_| true)
                })
                .await?;
            } else if nothing_to_delete {
                // Secrets or claims being finalized: a short re-list interval.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Runs one undeploy to a stable outcome or the bound.
pub async fn undeploy<C: Cluster, N: NamespaceProbe>(
    cluster: &C,
    ns: &N,
    target: &Target,
    timing: Timing,
) -> Result<Undeployed, UndeployError> {
    let mut r = Run {
        cluster,
        ns,
        target,
        timing,
        until: Instant::from_std(timing.act_until()),
        removed: Removed {
            network_policies: Some(0),
            ..Default::default()
        },
        kept: Vec::new(),
        claims_unlisted: false,
        policies_unlisted: false,
    };
    r.run().await
}

async fn undeploy_request(
    agent: &serde_json::Value,
    provider_config: &serde_json::Value,
    keep_workspace: bool,
    started: std::time::Instant,
) -> Result<Undeployed, UndeployError> {
    let target = super::parse(
        agent,
        provider_config,
        keep_workspace,
        crate::config::default_image().as_deref(),
    )?;
    let context = target.config.context.clone();
    let connected = crate::kubeconfig::connect(context.as_deref()).await?;
    let client = connected.client;
    let namespace = target.config.namespace.clone();
    let cluster = crate::cluster::KubeCluster::new(client.clone(), &namespace);
    let probe = KubeNamespace { client, namespace };
    undeploy(&cluster, &probe, &target, timing(started))
        .await
        .map_err(|e| match e {
            UndeployError::Invalid(d) => UndeployError::Invalid(crate::kubeconfig::name_endpoint(
                crate::kubeconfig::name_exec_plugin(d, context.as_deref()),
                &connected.endpoint,
            )),
            other => other,
        })
}

/// Handles an `undeploy` request:
/// `{"ok":true,"removed":{"pods":N,"secrets":M,"workspaces":W}}`, with
/// `"kept":{"workspaces":[…]}` when `keep_workspace` left one, or the in-band
/// failure. A stray secret in the request is redacted from every output (it
/// is never read otherwise).
pub fn handle(
    agent: &serde_json::Value,
    provider_config: &serde_json::Value,
    keep_workspace: bool,
    started: std::time::Instant,
) -> serde_json::Value {
    let redactor = crate::protocol::output_redactor(agent);
    diag::set_redactor(redactor.clone());
    crate::protocol::augment_path();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return crate::protocol::failure(&format!("could not start the async runtime: {e}")),
    };
    match rt.block_on(undeploy_request(agent, provider_config, keep_workspace, started)) {
        Ok(u) if u.kept.is_empty() => serde_json::json!({ "ok": true, "removed": u.removed }),
        Ok(u) => serde_json::json!({ "ok": true, "removed": u.removed, "kept": { "workspaces": u.kept } }),
        Err(e) => crate::protocol::failure(&redactor.scrub(&e.to_string())),
    }
}
