//! The deploy reconciliation loop (spec §Deploy State Machine, §K8s GC,
//! §K8s Namespace; [L2] item 4, [L3] item 1). The imperative shell around the
//! pure [`classify`](crate::classify) and [`gc`](crate::gc) cores:
//!
//! 1. preflight GC, once;
//! 2. observe (quorum GET) → classify → decide → act, until a stable outcome
//!    or the deadline. Waiting uses a watch on the pod with a bounded
//!    safety-net re-read, not fixed polling; the watch runs on through quiet
//!    start-up progress of the same pod ([`still_starting`]) and ends at
//!    anything that needs a decision or a new condition to report. Two
//!    observations are not a GET. The pod this call just created: the
//!    apiserver's answer to the create is the stored object, and the Secret
//!    it references was created by this call a moment before (the GC never
//!    removes a referenced or young Secret), so that classification neither
//!    re-reads the pod nor the Secret. And the pod the watch event that
//!    ended a wait carried (issue 49 item 3): a committed revision, so it
//!    may end the call (success, a failure) or keep it watching, but never
//!    authorize a delete or a create, which still come from a quorum GET
//!    ([`Action::decidable_from_watch`]; spec §Destructive decisions come
//!    from views you control). Nor does the first pass re-read a pod the
//!    preflight list (a quorum read of this agent's pods) showed is not
//!    there. Every fence still carries the UID and resourceVersion of the
//!    object it acts on.
//!
//! **When the deploy answers.** The container runs `buzz-acp started` as its
//! `postStart` hook ([`crate::podspec`]): the kubelet reports the container
//! `running` only once the hook ended, which is once the harness passed its
//! startup checks (identity, configuration, the agent command), and it kills
//! the container when the hook fails, which it does when the harness exits
//! at startup: the container then reads terminated with the harness's own
//! exit code and termination message. So `running` is success, with no wait
//! after it (issue 49 item 1, replacing issue 30's 3 s startup settle). Of
//! the mechanisms a pod offers, a startup probe answers at its period
//! (1 s at the least) and a readiness gate needs a controller to set it;
//! the hook answers as soon as the harness does.
//!
//! **Requests.** A fresh deploy of a digest-pinned image (the default) costs
//! 7: the two preflight lists, the Secret and pod creates, the Secret's
//! ownerReference PATCH ([`attempt`], issue 30 item 5), one pod watch from
//! the create to the event that shows the container running, and one watch
//! of the pod's events ([`progress`], the status lines of issue 21; opened
//! at the create's resourceVersion). A tag costs one more, the best-effort
//! PATCH that records the image ID the kubelet resolved (spec §Image),
//! skipped when the pin already names it
//! ([`crate::image::resolution_adds_attribution`]). None of the 7 can go
//! without weakening a rule: the lists are the preflight GC, the creates
//! are the attempt, the PATCH lets the cluster's GC take the Secret with
//! its pod, the watch is the wait, and the events are the Start progress a
//! user sees.
//!
//! With `workspace_size` set, the agent's claim is created or adopted after
//! the preflight GC and before the attempt ([`workspace`], issue 32 item 2):
//! one GET, and one create the first time. Then the agent's NetworkPolicy
//! ([`egress`], issue 53), once the first observation shows no collision
//! and before the first create, replace or adoption: one GET, and the
//! first time a list of this
//! provider's policies in the namespace (whether to say that enforcement
//! is the cluster's) and a create; a replace when the rules changed. So a
//! fresh deploy with the default policy costs 10 requests, and every
//! deploy one GET more than before; with `network_policy: none` the GET
//! finds the policy an earlier Start made, if any, to delete it (8).
//!
//! One create attempt per call ([`attempt`]); the create loser deletes only
//! its own Secret and adopts the winner, while a create whose committed
//! reply was lost recognises its own object; deadline expiry reports
//! "startup not confirmed" with the latest condition and cleans up nothing.
//!
//! The budget is measured from process start ([`crate::timing`]): acting stops
//! a margin before the deadline; an attempt caught between its Secret create
//! and its pod create drops its own Secret in the first half of the margin.

use crate::classify::{Action, CallState, Context, classify, decide, payload_matches, still_starting};
use crate::cluster::{Cluster, ClusterError, Deleted, NamespaceCreate};
use crate::consts::*;
use crate::diag;
use crate::envtiers::{self, Authoritative};
use crate::error::{ClusterFailure, DeployError};
use crate::gc::{self, Fenced};
use crate::podspec::{self, PodIntent};
pub use crate::timing::Timing;
use buzz_contract::wire::AgentPayload;
use k8s_openapi::api::core::v1::Pod;
use std::cell::Cell;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

mod attempt;
mod egress;
pub mod progress;
mod workspace;
pub use workspace::bind_bound;

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
    /// The workspace claim asked for ([`crate::workspace`]); `None` = `emptyDir`.
    pub workspace: Option<crate::workspace::WorkspaceSpec>,
    /// The agent's NetworkPolicy ([`crate::egress`]); `None` = none.
    pub egress: Option<crate::egress::EgressSpec>,
}

/// A local clock further than this from the apiserver's is reported.
const SKEW_REPORT: Duration = Duration::from_secs(30);

struct Loop<'a, C: Cluster> {
    cluster: &'a C,
    plan: &'a Plan,
    timing: Timing,
    /// Nothing new is attempted from here on.
    act_until: Instant,
    /// This call's own Secret must be gone by here; then only the answer is written.
    cleanup_until: Instant,
    /// Set once any API call succeeded in this deploy.
    contacted: Cell<bool>,
    /// When this call created the namespace, if it did.
    namespace_created: Cell<Option<Instant>>,
    /// The pod whose events become status lines ([`progress`]).
    progress: &'a progress::Progress,
    /// The preflight list of this agent's Secrets: a replaced pod's Secret
    /// is deleted with it ([`gc::secrets_going_with`]).
    secrets: std::cell::RefCell<Vec<k8s_openapi::api::core::v1::Secret>>,
}

impl<'a, C: Cluster> Loop<'a, C> {
    fn remaining(&self) -> Duration {
        self.act_until.saturating_duration_since(Instant::now())
    }

    fn deadline_secs(&self) -> u64 {
        self.timing.deadline.as_secs()
    }

    fn out_of_time(&self, doing: &str) -> DeployError {
        DeployError::OutOfTime {
            doing: doing.to_string(),
            deadline_secs: self.deadline_secs(),
        }
    }

    fn not_confirmed(&self, latest: &str) -> DeployError {
        DeployError::StartupNotConfirmed {
            agent_id: self.plan.agent_id.clone(),
            deadline_secs: self.deadline_secs(),
            latest: latest.to_string(),
        }
    }

    /// Maps a cluster error on `action` to the user's sentence.
    fn cluster_err(&self, action: &str, e: ClusterError) -> DeployError {
        let namespace = self.plan.namespace.clone();
        let action = action.to_string();
        match e {
            ClusterError::OutOfTime => self.out_of_time(&action),
            ClusterError::Api {
                code: 403, message, ..
            } => ClusterFailure::Forbidden {
                action,
                namespace,
                message,
            }
            .into(),
            ClusterError::Api { code: 401, .. } => ClusterFailure::Unauthorized { action }.into(),
            ClusterError::Auth(cause) => ClusterFailure::Credentials { cause }.into(),
            ClusterError::Unreachable(cause) => ClusterFailure::Unreachable {
                action,
                namespace,
                cause,
                endpoint: None,
            }
            .into(),
            other => ClusterFailure::Failed {
                action,
                namespace,
                cause: other.to_string(),
            }
            .into(),
        }
    }

    /// Retries transient failures (5xx, 429, dropped connections) with
    /// backoff; no call outlives the point where acting stops.
    async fn retry<T, F, Fut>(&self, what: &str, f: F) -> Result<T, DeployError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClusterError>>,
    {
        self.retry_until(self.act_until, f)
            .await
            .map_err(|e| self.cluster_err(what, e))
    }

    async fn retry_until<T, F, Fut>(&self, until: Instant, mut f: F) -> Result<T, ClusterError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClusterError>>,
    {
        let mut backoff = Duration::from_millis(100);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let answer = match tokio::time::timeout_at(until, f()).await {
                Ok(answer) => answer,
                Err(_) => return Err(ClusterError::OutOfTime),
            };
            match answer {
                Ok(t) => {
                    self.contacted.set(true);
                    return Ok(t);
                }
                // A cluster never reached is a wrong kubeconfig or a down cluster, not a
                // blip: fail fast instead of retrying for the whole deadline.
                Err(ClusterError::Transient(m)) if !self.contacted.get() && attempts >= 4 => {
                    return Err(ClusterError::Unreachable(m));
                }
                Err(ClusterError::Transient(m))
                    if until.saturating_duration_since(Instant::now()) > backoff =>
                {
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
        match self
            .retry_until(self.act_until, || self.cluster.list_pods(sel))
            .await
        {
            Ok(pods) => Ok(pods),
            Err(ClusterError::Api {
                code: 403, message, ..
            }) => {
                let namespace = self.plan.namespace.clone();
                match self.create_namespace().await? {
                    NamespaceCreate::Created => self.retry("list pods", || self.cluster.list_pods(sel)).await,
                    NamespaceCreate::Exists => {
                        Err(ClusterFailure::ListForbidden { namespace, message }.into())
                    }
                    NamespaceCreate::Forbidden => Err(ClusterFailure::NamespaceUnusable { namespace }.into()),
                }
            }
            Err(e) => Err(self.cluster_err("list pods", e)),
        }
    }

    async fn create_namespace(&self) -> Result<NamespaceCreate, DeployError> {
        let outcome = self
            .retry("create the namespace", || self.cluster.create_namespace())
            .await?;
        if outcome == NamespaceCreate::Created {
            self.namespace_created.set(Some(Instant::now()));
            diag::line(&format!("created namespace {}", self.plan.namespace));
        }
        Ok(outcome)
    }

    /// Returns whether the (quorum) pod list showed the agent's pod by name:
    /// when it did not, the loop's first observation needs no GET.
    async fn preflight_gc(&self) -> Result<Listed, DeployError> {
        let sel = podspec::selector(&self.plan.pubkey);
        let pods = self.list_own_pods(&sel).await?;
        let listed = if pods
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(self.plan.agent_id.as_str()))
        {
            Listed::Present
        } else {
            Listed::Absent
        };
        let (secrets, date) = self
            .retry("list secrets", || self.cluster.list_secrets_dated(&sel))
            .await?;
        if let Some(server_now) = date {
            report_skew(SystemTime::now(), server_now);
        }
        let mut gone = std::collections::BTreeSet::new();
        for (name, uid) in gc::owners_to_check(&self.plan.pubkey, &pods, &secrets) {
            let found = self
                .retry("read the pod that owns a Secret", || self.cluster.get_pod(&name))
                .await?;
            if gc::proves_gone(found.as_ref(), &uid) {
                gone.insert(uid);
            }
        }
        let plan = gc::plan(
            &self.plan.pubkey,
            &pods,
            &secrets,
            &gone,
            date,
            self.timing.orphan_min_age,
        );
        *self.secrets.borrow_mut() = secrets;
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
        Ok(listed)
    }

    /// A read or watch of the pod; running out of time ends observation.
    async fn observe<T, F, Fut>(&self, what: &str, latest: &str, f: F) -> Result<T, DeployError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClusterError>>,
    {
        match self.retry_until(self.act_until, f).await {
            Ok(t) => Ok(t),
            Err(ClusterError::OutOfTime) => Err(self.not_confirmed(latest)),
            Err(e) => Err(self.cluster_err(what, e)),
        }
    }

    async fn run(&self) -> Result<Started, DeployError> {
        let listed = self.preflight_gc().await?;
        // Before the attempt: the pod never names a claim that is not there.
        let mut claim = self.ensure_workspace().await?;
        // The NetworkPolicy is made sure of once the first observation
        // holds no collision (no mutation on one, spec §Deploy State
        // Machine step 1), before anything is created, replaced or
        // adopted: the pod never runs unconfined where policies are
        // enforced.
        let mut contained = false;
        let id = &self.plan.agent_id;
        let mut st = CallState::default();
        let mut latest = String::from("no observation yet");
        // The next observation when it needs no GET: the create's answer,
        // or the pod the watch event that ended a wait carried.
        let mut next: Option<(Pod, Seen)> = None;
        // The preflight list is a quorum read of this agent's pods: when it
        // held no pod of this name, that is the first observation. A pod of
        // this name without the agent's labels still surfaces, as the
        // create's conflict ([`attempt`]), which re-reads it with a GET.
        let mut listed_absent = listed == Listed::Absent;
        loop {
            if self.remaining().is_zero() {
                return Err(self.not_confirmed(&latest));
            }
            let (pod, seen) = match next.take() {
                Some((p, seen)) => (Some(p), seen),
                None if std::mem::take(&mut listed_absent) => (None, Seen::Read),
                None => {
                    let p = self
                        .observe("read the agent pod", &latest, || self.cluster.get_pod(id))
                        .await?;
                    (p, Seen::Read)
                }
            };
            let created_by_this_call = seen == Seen::Created;
            let uid = pod.as_ref().and_then(|p| p.metadata.uid.clone());
            let rv = pod.as_ref().and_then(|p| p.metadata.resource_version.clone());
            // The create's answer references the Secret this call created a
            // moment before (the GC never removes a referenced or young one).
            // A later observation of the same pod does not: someone else may
            // have deleted it since, and only a quorum read can say so.
            let mut ctx = Context {
                pubkey: &self.plan.pubkey,
                fingerprint: &self.plan.fingerprint,
                secret_present: created_by_this_call.then_some(true),
                payload_matches: None,
            };
            let mut action = decide(classify(pod.as_ref(), ctx), uid.as_deref(), &st, id);
            if seen == Seen::Watched && !action.decidable_from_watch() {
                // Deletes, creates and what could authorize them come from a
                // quorum GET (spec §Destructive decisions come from views you control).
                continue;
            }
            if let Action::ReadSecret(name) = &action {
                ctx.secret_present = Some(
                    self.observe("read the agent Secret", &latest, || {
                        self.cluster.secret_exists(name)
                    })
                    .await?,
                );
                action = decide(classify(pod.as_ref(), ctx), uid.as_deref(), &st, id);
            }
            if let Action::ReadPayload(name) = &action {
                let data = self
                    .observe("read the agent Secret", &latest, || {
                        self.cluster.secret_data(name)
                    })
                    .await?;
                let desired = envtiers::assemble(&self.plan.agent, &self.plan.authoritative)?;
                ctx.payload_matches = Some(data.is_some_and(|d| payload_matches(&d, &desired)));
                action = decide(classify(pod.as_ref(), ctx), uid.as_deref(), &st, id);
            }
            if !contained && !matches!(action, Action::Fail(_)) {
                self.ensure_policy().await?;
                contained = true;
            }
            let wait = self.timing.safety_net.min(self.remaining());
            match action {
                Action::Fail(e) => return Err(e),
                Action::Succeed { record_image } => {
                    if record_image && let Some(p) = &pod {
                        self.record_image_id(p).await;
                    }
                    return Ok(Started {
                        agent_id: id.clone(),
                        generation: pod.as_ref().and_then(generation_of),
                    });
                }
                Action::WaitGone => {
                    latest = "the previous pod is still terminating".into();
                    diag::line(&format!("waiting for {id} to finish terminating"));
                    next = self
                        .observe("watch the agent pod", &latest, || {
                            self.cluster.wait_for_change(id, rv.as_deref(), wait, &|_| false)
                        })
                        .await?
                        .map(|p| (p, Seen::Watched));
                }
                Action::Create => next = self.create_attempt(&mut st).await?.map(|p| (p, Seen::Created)),
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
                        Deleted::Deleted | Deleted::NotFound => {
                            if let Some(p) = &pod {
                                self.delete_secrets_of(p).await?;
                            }
                        }
                    }
                }
                Action::Observe { condition } => {
                    if let Some(c) = claim.as_mut() {
                        self.check_bound(c).await?;
                    }
                    diag::line(&format!("waiting for {id}: {condition}"));
                    latest = condition;
                    let uid = uid.unwrap_or_default();
                    // The pod this call just created has no event before
                    // its create response: its events watch opens there.
                    let since = rv.as_deref().filter(|_| created_by_this_call);
                    self.progress.follow(&uid, since);
                    // Progress seen on the watch still updates what a
                    // "not confirmed" answer reports.
                    let quiet_seen = std::sync::Mutex::new(None::<String>);
                    let quiet = |p: &Pod| {
                        let quiet = still_starting(p, &uid);
                        if quiet && let Ok(mut s) = quiet_seen.lock() {
                            *s = Some(crate::classify::condition(p));
                        }
                        quiet
                    };
                    let watched = self
                        .observe("watch the agent pod", &latest, || {
                            self.cluster.wait_for_change(id, rv.as_deref(), wait, &quiet)
                        })
                        .await;
                    if let Some(c) = quiet_seen.into_inner().ok().flatten() {
                        latest = c;
                    }
                    next = watched?.map(|p| (p, Seen::Watched));
                }
                Action::ReadSecret(_) | Action::ReadPayload(_) => {
                    return Err(ClusterFailure::Internal {
                        what: "classification asked for the Secret twice".into(),
                    }
                    .into());
                }
            }
        }
    }

    /// Deletes the Secrets of a pod this call just deleted (fenced; a
    /// Secret the preflight list did not hold is left to a later GC).
    async fn delete_secrets_of(&self, pod: &Pod) -> Result<(), DeployError> {
        let going = gc::secrets_going_with(pod, &self.secrets.borrow(), &self.plan.pubkey);
        for s in &going {
            let outcome = self
                .retry("delete the replaced pod's Secret", || {
                    self.cluster.delete_secret(s)
                })
                .await?;
            diag::line(&format!(
                "Secret {} of the replaced pod {}",
                s.name,
                outcome_word(outcome)
            ));
        }
        Ok(())
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
        if !crate::image::resolution_adds_attribution(&self.plan.intent.image, &image_id) {
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

/// Where an observation of the pod came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// A quorum GET (or the preflight list's quorum answer).
    Read,
    /// The apiserver's answer to this call's create: the stored object.
    Created,
    /// The event that ended a watch: decides only what deletes nothing
    /// ([`Action::decidable_from_watch`]).
    Watched,
}

/// What the preflight pod list said about the agent's pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listed {
    Present,
    Absent,
}

fn outcome_word(d: Deleted) -> &'static str {
    match d {
        Deleted::Deleted => "deleted",
        Deleted::NotFound => "already gone",
        Deleted::Conflict => "changed since it was read; left for the next pass",
    }
}

/// Reports a local clock far from the apiserver's (the GC never uses it).
fn report_skew(local: SystemTime, server: SystemTime) {
    let (ahead, by) = match local.duration_since(server) {
        Ok(d) => (true, d),
        Err(e) => (false, e.duration()),
    };
    if by > SKEW_REPORT {
        diag::line(&format!(
            "the local clock is {} s {} the apiserver's; GC ages use the apiserver's clock",
            by.as_secs(),
            if ahead { "ahead of" } else { "behind" }
        ));
    }
}

/// A deploy's success: the pod whose harness container runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The pod's name (`buzz-agent-<12 hex>`), the protocol's `agent_id`.
    pub agent_id: String,
    /// The running pod's generation token (its `buzz.block.xyz/generation`
    /// annotation: its Secret's and its harness's run tag), when it has one.
    /// A launcher that saw this run stop can tell a pod still reported
    /// running after its harness exited from a fresh one.
    pub generation: Option<String>,
}

/// The generation annotation of `pod`.
fn generation_of(pod: &Pod) -> Option<String> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(crate::consts::ANN_GENERATION)
        .cloned()
}

/// Runs one deploy to a stable outcome: `Ok` only once the harness
/// container is running. `timing.started` is the process start: the budget
/// already spent reading stdin and building the client counts.
///
/// Beside the loop, in the same task, the pod's events become status lines
/// ([`progress`]); that watch ends with this call. A success waits up to
/// [`progress::STARTED_DRAIN`] for the kubelet's `Started` event it has not
/// seen yet; a failure names the last Warning event.
pub async fn deploy<C: Cluster>(cluster: &C, plan: &Plan, timing: Timing) -> Result<Started, DeployError> {
    let progress = progress::Progress::new(&plan.namespace);
    let l = Loop {
        cluster,
        plan,
        timing,
        act_until: Instant::from_std(timing.act_until()),
        cleanup_until: Instant::from_std(timing.cleanup_until()),
        contacted: Default::default(),
        namespace_created: Default::default(),
        progress: &progress,
        secrets: Default::default(),
    };
    let events = progress::run(cluster, &progress);
    tokio::pin!(events);
    let run = l.run();
    tokio::pin!(run);
    let result = tokio::select! {
        biased;
        r = &mut run => r,
        // The watch never ends on its own; should it, the loop goes on alone.
        () = &mut events => run.await,
    };
    if result.is_ok() && progress.awaiting_started() {
        let until = (Instant::now() + progress::STARTED_DRAIN).min(l.cleanup_until);
        let started = async {
            while progress.awaiting_started() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let _ = tokio::time::timeout_at(until, async {
            tokio::select! { () = started => {}, () = &mut events => {} }
        })
        .await;
    }
    result.map_err(|e| progress.annotate(e))
}
