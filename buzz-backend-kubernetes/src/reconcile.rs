//! The deploy reconciliation loop (spec §Deploy State Machine, §K8s GC,
//! §K8s Namespace; [L2] item 4, [L3] item 1). The imperative shell around the
//! pure [`classify`](crate::classify) and [`gc`](crate::gc) cores:
//!
//! 1. preflight GC, once;
//! 2. observe (quorum GET) → classify → decide → act, until a stable outcome
//!    or the deadline. Waiting uses a watch on the pod with a bounded
//!    safety-net re-read, not fixed polling.
//!
//! One create attempt per call; the create loser deletes only its own Secret
//! and adopts the winner; deadline expiry reports "startup not confirmed"
//! with the latest condition and cleans up nothing.

use crate::classify::{Action, CallState, Context, classify, decide};
use crate::cluster::{Cluster, ClusterError, Created, Deleted, NamespaceCreate};
use crate::consts::*;
use crate::diag;
use crate::envtiers::{self, Authoritative};
use crate::error::DeployError;
use crate::gc::{self, Fenced};
use crate::podspec::{self, PodIntent};
use buzz_contract::wire::AgentPayload;
use std::time::Duration;
use tokio::time::Instant;

/// Everything a deploy needs, validated before any cluster contact.
#[derive(Debug, Clone)]
pub struct Plan {
    pub namespace: String,
    /// Derived pubkey, 64 lowercase hex.
    pub pubkey: String,
    /// Pod name, returned as `agent_id`.
    pub agent_id: String,
    pub intent: PodIntent,
    pub fingerprint: String,
    pub agent: AgentPayload,
    /// Tier-3 values; `generation` is filled per attempt.
    pub authoritative: Authoritative,
}

/// Loop timing knobs.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub deadline: Duration,
    pub safety_net: Duration,
}

impl Timing {
    /// Orphan Secrets must be older than twice the deadline (§K8s GC).
    pub fn orphan_min_age(&self) -> Duration {
        self.deadline * 2
    }
}

struct Loop<'a, C: Cluster> {
    cluster: &'a C,
    plan: &'a Plan,
    timing: Timing,
    deadline: Instant,
    /// Set once any API call succeeded in this deploy.
    contacted: std::cell::Cell<bool>,
}

fn cluster_err(what: &str, ns: &str, e: ClusterError) -> DeployError {
    match e {
        ClusterError::Api {
            code: 403, message, ..
        } => DeployError::Cluster(format!(
            "your kubeconfig user may not {what} in namespace {ns}: {message}"
        )),
        ClusterError::Api { code: 401, .. } => DeployError::Cluster(format!(
            "the cluster rejected your kubeconfig credentials while trying to {what}; refresh them (for example log in again) and retry"
        )),
        ClusterError::Auth(m) => DeployError::Cluster(format!(
            "could not get cluster credentials from your kubeconfig: {m}"
        )),
        other => DeployError::Cluster(format!("could not {what} in namespace {ns}: {other}")),
    }
}

impl<'a, C: Cluster> Loop<'a, C> {
    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Retries transient failures (5xx, 429, dropped connections) with backoff until the deadline.
    async fn retry<T, F, Fut>(&self, what: &str, f: F) -> Result<T, DeployError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClusterError>>,
    {
        self.retry_raw(f)
            .await
            .map_err(|e| cluster_err(what, &self.plan.namespace, e))
    }

    async fn retry_raw<T, F, Fut>(&self, mut f: F) -> Result<T, ClusterError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClusterError>>,
    {
        let mut backoff = Duration::from_millis(100);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            match f().await {
                Ok(t) => {
                    self.contacted.set(true);
                    return Ok(t);
                }
                // A cluster never reached is a wrong kubeconfig or a down cluster, not a
                // blip: fail fast instead of retrying for the whole deadline.
                Err(ClusterError::Transient(m)) if !self.contacted.get() && attempts >= 4 => {
                    return Err(ClusterError::Transient(format!(
                        "the cluster could not be reached: {m}"
                    )));
                }
                Err(ClusterError::Transient(m)) if self.remaining() > backoff => {
                    diag::line(&format!("retrying after a transient API error: {m}"));
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                other => return other,
            }
        }
    }

    /// Lists this agent's pods. A Forbidden here may mean the namespace does not
    /// exist for a namespace-scoped user (RBAC grants nothing in a namespace that
    /// is not there), so it is settled by trying to create the namespace.
    async fn list_own_pods(&self, sel: &str) -> Result<Vec<k8s_openapi::api::core::v1::Pod>, DeployError> {
        match self.retry_raw(|| self.cluster.list_pods(sel)).await {
            Ok(pods) => Ok(pods),
            Err(ClusterError::Api {
                code: 403, message, ..
            }) => {
                let ns = &self.plan.namespace;
                match self.create_namespace().await? {
                    NamespaceCreate::Created => self.retry("list pods", || self.cluster.list_pods(sel)).await,
                    NamespaceCreate::Exists => Err(DeployError::Cluster(format!(
                        "your kubeconfig user may not list pods in namespace {ns}: {message}; ask for pod and secret rights (create, get, list, watch, delete) there"
                    ))),
                    NamespaceCreate::Forbidden => Err(DeployError::Cluster(format!(
                        "your kubeconfig user may not use namespace {ns} and may not create namespaces; if {ns} does not exist, ask a cluster admin to run `kubectl create namespace {ns}`, otherwise ask for pod and secret rights in it"
                    ))),
                }
            }
            Err(e) => Err(cluster_err("list pods", &self.plan.namespace, e)),
        }
    }

    async fn create_namespace(&self) -> Result<NamespaceCreate, DeployError> {
        let outcome = self
            .retry("create the namespace", || self.cluster.create_namespace())
            .await?;
        if outcome == NamespaceCreate::Created {
            diag::line(&format!("created namespace {}", self.plan.namespace));
        }
        Ok(outcome)
    }

    async fn preflight_gc(&self) -> Result<(), DeployError> {
        let sel = podspec::selector(&self.plan.pubkey);
        let pods = self.list_own_pods(&sel).await?;
        let (secrets, date) = self
            .retry("list secrets", || self.cluster.list_secrets_dated(&sel))
            .await?;
        let plan = gc::plan(
            &self.plan.pubkey,
            &pods,
            &secrets,
            date,
            self.timing.orphan_min_age(),
        );
        if plan.orphan_gc_skipped {
            diag::line("the Secret list carried no usable Date header; orphan-Secret GC skipped this pass");
        }
        for u in &plan.untouched {
            diag::line(&format!("left untouched (not positively this provider's): {u}"));
        }
        for p in &plan.pods {
            let outcome = self
                .retry("delete a terminated pod", || self.cluster.delete_pod(p))
                .await?;
            diag::line(&format!(
                "gc: terminated pod {} {}",
                p.name,
                outcome_word(outcome)
            ));
        }
        for s in &plan.secrets {
            let outcome = self
                .retry("delete an old Secret", || self.cluster.delete_secret(s))
                .await?;
            diag::line(&format!("gc: Secret {} {}", s.name, outcome_word(outcome)));
        }
        Ok(())
    }

    /// Creates the namespace a namespaced create found missing.
    async fn ensure_namespace(&self) -> Result<(), DeployError> {
        let ns = &self.plan.namespace;
        match self.create_namespace().await? {
            NamespaceCreate::Created | NamespaceCreate::Exists => Ok(()),
            NamespaceCreate::Forbidden => Err(DeployError::Cluster(format!(
                "namespace {ns} does not exist and your kubeconfig user may not create it; ask a cluster admin to run `kubectl create namespace {ns}` (or choose a namespace you can use)"
            ))),
        }
    }

    /// Mints a generation, writes its Secret, creates the pod.
    async fn create_attempt(&self, st: &mut CallState) -> Result<(), DeployError> {
        let generation = podspec::new_generation();
        let mut auth = self.plan.authoritative.clone();
        auth.generation = generation.clone();
        let env = envtiers::assemble(&self.plan.agent, &auth)?;
        let secret = podspec::secret(&self.plan.pubkey, &generation, env);
        let created = loop {
            match self
                .retry("create the agent Secret", || self.cluster.create_secret(&secret))
                .await?
            {
                Created::Created(s) => break s,
                Created::NamespaceMissing => self.ensure_namespace().await?,
                Created::AlreadyExists => {
                    return Err(DeployError::Cluster(
                        "a Secret with a freshly generated name already exists; retry".into(),
                    ));
                }
                Created::ServiceAccountMissing => {
                    return Err(DeployError::Cluster(
                        "unexpected ServiceAccount error creating a Secret; retry".into(),
                    ));
                }
            }
        };
        let own_secret = Fenced {
            name: created.metadata.name.clone().unwrap_or_default(),
            uid: created.metadata.uid.clone().unwrap_or_default(),
            resource_version: created.metadata.resource_version.clone().unwrap_or_default(),
        };
        let pod = podspec::pod(&self.plan.pubkey, &self.plan.intent, &generation);
        let mut announced = false;
        loop {
            let outcome = match self
                .retry("create the agent pod", || self.cluster.create_pod(&pod))
                .await
            {
                Ok(o) => o,
                Err(e) => {
                    self.drop_own_secret(&own_secret).await;
                    return Err(e);
                }
            };
            match outcome {
                Created::Created(p) => {
                    st.created_uid = p.metadata.uid;
                    diag::line(&format!(
                        "created pod {} (generation {generation})",
                        self.plan.agent_id
                    ));
                    return Ok(());
                }
                Created::AlreadyExists => {
                    // Lost the race: clean up only our own Secret and adopt the winner.
                    self.drop_own_secret(&own_secret).await;
                    st.adopting = true;
                    diag::line(&format!(
                        "another deploy created {} first; adopting it",
                        self.plan.agent_id
                    ));
                    return Ok(());
                }
                Created::ServiceAccountMissing if self.remaining() > Duration::from_millis(300) => {
                    if !announced {
                        diag::line(&format!(
                            "waiting for the default ServiceAccount of namespace {}",
                            self.plan.namespace
                        ));
                        announced = true;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Created::ServiceAccountMissing | Created::NamespaceMissing => {
                    self.drop_own_secret(&own_secret).await;
                    return Err(DeployError::Cluster(format!(
                        "the pod could not be created in namespace {}: its default ServiceAccount (or the namespace) did not appear in time; check that the namespace is active",
                        self.plan.namespace
                    )));
                }
            }
        }
    }

    async fn drop_own_secret(&self, s: &Fenced) {
        match self.cluster.delete_secret(s).await {
            Ok(_) => {}
            Err(e) => diag::line(&format!(
                "could not delete this attempt's Secret {}: {e}; GC reaps it later",
                s.name
            )),
        }
    }

    async fn run(&self) -> Result<String, DeployError> {
        self.preflight_gc().await?;
        let id = &self.plan.agent_id;
        let mut st = CallState::default();
        let mut latest = String::from("no observation yet");
        loop {
            if self.remaining().is_zero() {
                return Err(DeployError::StartupNotConfirmed(format!(
                    "startup of pod {id} was not confirmed within {} s (latest: {latest}); nothing was cleaned up, and a later Start adopts the pod once it runs",
                    self.timing.deadline.as_secs()
                )));
            }
            let pod = self
                .retry("read the agent pod", || self.cluster.get_pod(id))
                .await?;
            let uid = pod.as_ref().and_then(|p| p.metadata.uid.clone());
            let rv = pod.as_ref().and_then(|p| p.metadata.resource_version.clone());
            let mut ctx = Context {
                pubkey: &self.plan.pubkey,
                fingerprint: &self.plan.fingerprint,
                secret_present: None,
            };
            let mut action = decide(classify(pod.as_ref(), ctx), uid.as_deref(), &st, id);
            if let Action::ReadSecret(name) = &action {
                ctx.secret_present = Some(
                    self.retry("read the agent Secret", || self.cluster.secret_exists(name))
                        .await?,
                );
                action = decide(classify(pod.as_ref(), ctx), uid.as_deref(), &st, id);
            }
            let wait = self.timing.safety_net.min(self.remaining());
            match action {
                Action::Fail(e) => return Err(e),
                Action::Succeed { record_image } => {
                    if record_image && let Some(p) = &pod {
                        self.record_image_id(p).await;
                    }
                    return Ok(id.clone());
                }
                Action::WaitGone => {
                    latest = "the previous pod is still terminating".into();
                    diag::line(&format!("waiting for {id} to finish terminating"));
                    self.retry("watch the agent pod", || {
                        self.cluster.wait_for_change(id, rv.as_deref(), wait)
                    })
                    .await?;
                }
                Action::Create => self.create_attempt(&mut st).await?,
                Action::Replace { why } => {
                    let f = Fenced {
                        name: id.clone(),
                        uid: uid.unwrap_or_default(),
                        resource_version: rv.unwrap_or_default(),
                    };
                    diag::line(&format!("replacing {id}: {why}"));
                    match self
                        .retry("delete the agent pod", || self.cluster.delete_pod(&f))
                        .await?
                    {
                        Deleted::Conflict => {
                            diag::line(&format!("{id} changed since it was read; re-reading"))
                        }
                        Deleted::Deleted | Deleted::NotFound => {}
                    }
                }
                Action::Observe { condition } => {
                    diag::line(&format!("waiting for {id}: {condition}"));
                    latest = condition;
                    self.retry("watch the agent pod", || {
                        self.cluster.wait_for_change(id, rv.as_deref(), wait)
                    })
                    .await?;
                }
                Action::ReadSecret(_) => {
                    return Err(DeployError::Cluster(
                        "internal: classification asked for the Secret twice".into(),
                    ));
                }
            }
        }
    }

    /// Best effort: the restricted RBAC of many users lacks `patch`.
    async fn record_image_id(&self, pod: &k8s_openapi::api::core::v1::Pod) {
        let image_id = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.iter().find(|c| c.name == CONTAINER))
            .map(|c| c.image_id.clone())
            .unwrap_or_default();
        if image_id.is_empty() {
            return;
        }
        if let Err(e) = self
            .cluster
            .annotate_pod(&self.plan.agent_id, ANN_IMAGE, &image_id)
            .await
        {
            diag::line(&format!(
                "could not record the resolved image ID on {}: {e}",
                self.plan.agent_id
            ));
        }
    }
}

fn outcome_word(d: Deleted) -> &'static str {
    match d {
        Deleted::Deleted => "deleted",
        Deleted::NotFound => "already gone",
        Deleted::Conflict => "changed since it was read; left for the next pass",
    }
}

/// Runs one deploy to a stable outcome: `Ok(agent_id)` only once the harness container is running.
pub async fn deploy<C: Cluster>(cluster: &C, plan: &Plan, timing: Timing) -> Result<String, DeployError> {
    let l = Loop {
        cluster,
        plan,
        timing,
        deadline: Instant::now() + timing.deadline,
        contacted: Default::default(),
    };
    l.run().await
}
