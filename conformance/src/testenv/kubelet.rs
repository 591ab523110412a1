//! `KubeletDriver`: the test plays scheduler and kubelet through the real API,
//! and only through it — `pods/binding`, the `status` subresource, and the
//! grace-0 delete that finalises a graceful deletion. Nothing here reaches into
//! etcd or fakes a response; the apiserver validates every write exactly as it
//! would a real kubelet's.
//!
//! Two ways to use it:
//! - primitives ([`KubeletDriver::bind`], [`KubeletDriver::set_running`], …) for
//!   step-by-step tests;
//! - [`KubeletDriver::automate`] runs a scripted [`Behavior`] for every pod of a
//!   namespace, like a kubelet would, until the returned [`PodAutomation`] drops.

use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde_json::{Value, json};
use sha2_free::fake_digest;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{NODE_NAME, TestEnvError};

type Result<T, E = TestEnvError> = std::result::Result<T, E>;

/// What the simulated kubelet does with each pod of an automated namespace.
#[derive(Clone, Debug)]
pub enum Behavior {
    /// Bind, report `ContainerCreating`, then run after the delay.
    StartAfter(Duration),
    /// Bind and stay waiting forever with this reason (e.g. `ImagePullBackOff`).
    NeverStart { reason: String, message: String },
    /// Never bind; report `PodScheduled=False` / `Unschedulable`.
    Unschedulable,
    /// Bind; run only if every `envFrom` Secret exists, else wait with
    /// `CreateContainerConfigError` — re-checked every tick, as a kubelet retries.
    Faithful,
    /// Run, then exit with `code` after `after`.
    RunThenExit { after: Duration, code: i32 },
    /// Start and die with `code` / `reason` / `message` at once; under
    /// `restartPolicy: OnFailure` the pod crash-loops, otherwise it fails.
    FailStartup {
        code: i32,
        reason: String,
        message: String,
    },
    /// Leave the pod alone (manual control through the primitives).
    Manual,
}

impl Behavior {
    /// `NeverStart` with this waiting reason and no message.
    pub fn never_start(reason: &str) -> Behavior {
        Behavior::NeverStart {
            reason: reason.into(),
            message: String::new(),
        }
    }
}

/// Polls `name` until `pred` holds (30 s deadline, 50 ms interval); panics
/// naming `what` on timeout. For tests.
pub async fn wait_for_pod(pods: &Api<Pod>, name: &str, what: &str, pred: impl Fn(&Pod) -> bool) -> Pod {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(p)) = pods.get_opt(name).await
            && pred(&p)
        {
            return p;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {name}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Handle for an automated namespace; dropping it stops the automation.
pub struct PodAutomation {
    behavior: Arc<Mutex<Behavior>>,
    finalize_delay: Arc<Mutex<Duration>>,
    task: tokio::task::AbortHandle,
}

impl PodAutomation {
    /// Switches the behaviour for pods that have not yet reached a final state
    /// (e.g. an `Unschedulable` namespace whose capacity arrives).
    pub fn set_behavior(&self, b: Behavior) {
        *self.behavior.lock().unwrap_or_else(|p| p.into_inner()) = b;
    }
    /// How long a graceful deletion of a bound pod takes before the driver
    /// finalises it with a grace-0 delete (default 300 ms).
    pub fn set_finalize_delay(&self, d: Duration) {
        *self.finalize_delay.lock().unwrap_or_else(|p| p.into_inner()) = d;
    }
}

impl Drop for PodAutomation {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Scheduler + kubelet stand-in bound to one Node.
#[derive(Clone)]
pub struct KubeletDriver {
    client: Client,
    handle: tokio::runtime::Handle,
}

mod sha2_free {
    /// A stable, fake `sha256:` image digest derived from the image reference
    /// (FNV-1a stretched to 64 hex), so resolved image IDs are deterministic.
    pub fn fake_digest(image: &str) -> String {
        let mut out = String::with_capacity(64);
        let mut h: u64 = 0xcbf29ce484222325;
        for round in 0u8..4 {
            for b in image.bytes().chain([round]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x100000001b3);
            }
            out.push_str(&format!("{h:016x}"));
        }
        out
    }
}

/// The imageID a kubelet would report for `image`.
pub fn resolved_image_id(image: &str) -> String {
    if image.contains("@sha256:") {
        return image.to_string();
    }
    let repo = match image.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => image,
    };
    format!("{repo}@sha256:{}", fake_digest(image))
}

fn now_time() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl KubeletDriver {
    /// Registers the Node (idempotent) and returns the driver.
    pub async fn new(client: Client, handle: tokio::runtime::Handle) -> Result<Self> {
        let nodes: Api<Node> = Api::all(client.clone());
        let node = Node {
            metadata: ObjectMeta {
                name: Some(NODE_NAME.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.reason == "AlreadyExists" => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Self { client, handle })
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// The client this driver writes with (the container node shares it).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The env's runtime, where automation loops run.
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// Binds the pod to the Node through `pods/binding`, as a scheduler does.
    pub async fn bind(&self, ns: &str, pod: &str) -> Result<()> {
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(pod.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                name: Some(NODE_NAME.into()),
                ..Default::default()
            },
        };
        self.pods(ns)
            .create_subresource::<Binding, Value>("binding", pod, &PostParams::default(), &binding)
            .await?;
        Ok(())
    }

    pub(crate) async fn patch_status(&self, ns: &str, pod: &str, status: Value) -> Result<Pod> {
        Ok(self
            .pods(ns)
            .patch_status(
                pod,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await?)
    }

    fn container_status(pod: &Pod, state: Value, restart_count: i32, last_state: Option<Value>) -> Value {
        let image = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .map(|c| c.name.clone())
            .unwrap_or_else(|| "agent".into());
        let running = state.get("running").is_some();
        let started = state.get("running").is_some() || state.get("terminated").is_some();
        let mut cs = json!({
            "name": name,
            "image": image,
            "imageID": if started { resolved_image_id(&image) } else { String::new() },
            "ready": running,
            "started": running,
            "restartCount": restart_count,
            "state": state,
        });
        if let Some(last) = last_state {
            cs["lastState"] = last;
        }
        cs
    }

    async fn get(&self, ns: &str, pod: &str) -> Result<Pod> {
        Ok(self.pods(ns).get(pod).await?)
    }

    /// Container waiting with `reason` / `message`; phase `Pending`.
    pub async fn set_waiting(&self, ns: &str, pod: &str, reason: &str, message: &str) -> Result<Pod> {
        let p = self.get(ns, pod).await?;
        let restarts = restart_count(&p);
        let cs = Self::container_status(
            &p,
            json!({ "waiting": { "reason": reason, "message": message } }),
            restarts,
            None,
        );
        self.patch_status(
            ns,
            pod,
            json!({
                "phase": "Pending",
                "startTime": now_time(),
                "conditions": [cond("PodScheduled", "True", None), cond("Ready", "False", Some("ContainersNotReady"))],
                "containerStatuses": [cs],
            }),
        )
        .await
    }

    /// Container running since now (`startedAt`), with a restart count; phase `Running`.
    pub async fn set_running(&self, ns: &str, pod: &str, restart_count: i32) -> Result<Pod> {
        let p = self.get(ns, pod).await?;
        let cs = Self::container_status(
            &p,
            json!({ "running": { "startedAt": now_time() } }),
            restart_count,
            None,
        );
        self.patch_status(
            ns,
            pod,
            json!({
                "phase": "Running",
                "startTime": now_time(),
                "conditions": [cond("PodScheduled", "True", None), cond("Initialized", "True", None),
                               cond("ContainersReady", "True", None), cond("Ready", "True", None)],
                "containerStatuses": [cs],
            }),
        )
        .await
    }

    /// Container terminated with `code` / `reason` / `message`; phase
    /// `Succeeded` for 0 and `Failed` otherwise (the `restartPolicy: Never` outcome).
    pub async fn set_terminated(
        &self,
        ns: &str,
        pod: &str,
        code: i32,
        reason: &str,
        message: &str,
    ) -> Result<Pod> {
        let p = self.get(ns, pod).await?;
        let restarts = restart_count(&p);
        let cs = Self::container_status(&p, terminated(code, reason, message), restarts, None);
        self.patch_status(
            ns,
            pod,
            json!({
                "phase": if code == 0 { "Succeeded" } else { "Failed" },
                "conditions": [cond("PodScheduled", "True", None), cond("Ready", "False", Some("PodCompleted"))],
                "containerStatuses": [cs],
            }),
        )
        .await
    }

    /// The real kubelet's moment between the container's exit and the pod's
    /// phase: the container terminated with `code`, the phase still `Running`.
    pub async fn set_container_exited(&self, ns: &str, pod: &str, code: i32) -> Result<Pod> {
        let p = self.get(ns, pod).await?;
        let restarts = restart_count(&p);
        let cs = Self::container_status(&p, terminated(code, "Completed", ""), restarts, None);
        self.patch_status(ns, pod, json!({ "phase": "Running", "containerStatuses": [cs] }))
            .await
    }

    /// The `restartPolicy: OnFailure` crash loop: waiting `CrashLoopBackOff`,
    /// `restartCount` incremented, last state terminated with `code`; phase `Running`.
    pub async fn set_crash_loop(&self, ns: &str, pod: &str, code: i32, reason: &str) -> Result<Pod> {
        let p = self.get(ns, pod).await?;
        let restarts = restart_count(&p) + 1;
        let cs = Self::container_status(
            &p,
            json!({ "waiting": { "reason": "CrashLoopBackOff", "message": "back-off restarting failed container" } }),
            restarts,
            Some(terminated(code, reason, "")),
        );
        self.patch_status(
            ns,
            pod,
            json!({
                "phase": "Running",
                "conditions": [cond("PodScheduled", "True", None), cond("Ready", "False", Some("ContainersNotReady"))],
                "containerStatuses": [cs],
            }),
        )
        .await
    }

    /// Sets one pod condition (e.g. `PodScheduled=False`, reason `Unschedulable`).
    pub async fn set_condition(
        &self,
        ns: &str,
        pod: &str,
        type_: &str,
        status: &str,
        reason: &str,
        message: &str,
    ) -> Result<Pod> {
        let mut c = cond(type_, status, Some(reason));
        c["message"] = message.into();
        self.patch_status(ns, pod, json!({ "phase": "Pending", "conditions": [c] }))
            .await
    }

    /// Finalises a graceful deletion the way a kubelet does once containers
    /// have stopped: a grace-0 DELETE fenced on the pod's UID. Not-found is success.
    pub async fn finalize_deletion(&self, ns: &str, pod: &str) -> Result<()> {
        let Some(p) = self.pods(ns).get_opt(pod).await? else {
            return Ok(());
        };
        self.finalize_deletion_of(ns, pod, p.metadata.uid.as_deref().unwrap_or_default())
            .await
    }

    /// [`KubeletDriver::finalize_deletion`] for the pod with this `uid` only:
    /// a kubelet finalises the pod it ran, never a successor that took its
    /// name meanwhile (not-found and a UID mismatch are both success).
    pub async fn finalize_deletion_of(&self, ns: &str, pod: &str, uid: &str) -> Result<()> {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self.pods(ns).delete(pod, &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Runs `behavior` for every pod in `ns` until the handle drops.
    pub fn automate(&self, ns: &str, behavior: Behavior) -> PodAutomation {
        let behavior = Arc::new(Mutex::new(behavior));
        let finalize_delay = Arc::new(Mutex::new(Duration::from_millis(300)));
        let driver = self.clone();
        let ns = ns.to_string();
        let (b, f) = (behavior.clone(), finalize_delay.clone());
        let task = self
            .handle
            .spawn(async move { driver.automation_loop(ns, b, f).await });
        PodAutomation {
            behavior,
            finalize_delay,
            task: task.abort_handle(),
        }
    }

    async fn automation_loop(
        self,
        ns: String,
        behavior: Arc<Mutex<Behavior>>,
        finalize_delay: Arc<Mutex<Duration>>,
    ) {
        let mut state: HashMap<String, Track> = HashMap::new();
        loop {
            if let Ok(list) = self.pods(&ns).list(&ListParams::default()).await {
                let b = behavior.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let fd = *finalize_delay.lock().unwrap_or_else(|p| p.into_inner());
                for pod in list.items {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    let track = state.entry(uid).or_insert_with(Track::new);
                    // Errors are transient here (a pod deleted mid-step, a conflict);
                    // the next tick observes the new state.
                    let _ = self.step(&ns, &pod, &b, fd, track).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }

    async fn step(
        &self,
        ns: &str,
        pod: &Pod,
        b: &Behavior,
        finalize_delay: Duration,
        t: &mut Track,
    ) -> Result<()> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            if bound {
                let since = *t.deletion_seen.get_or_insert_with(Instant::now);
                if since.elapsed() >= finalize_delay {
                    if phase != "Succeeded" && phase != "Failed" && is_running(pod) {
                        // The harness got SIGTERM and exited through its graceful path.
                        let _ = self.set_terminated(ns, &name, 0, "Completed", "").await;
                    }
                    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                    self.finalize_deletion_of(ns, &name, uid).await?;
                }
            }
            return Ok(());
        }
        if phase == "Succeeded" || phase == "Failed" || matches!(b, Behavior::Manual) {
            return Ok(());
        }
        if matches!(b, Behavior::Unschedulable) {
            if !bound && !t.unschedulable_reported {
                self.set_condition(
                    ns,
                    &name,
                    "PodScheduled",
                    "False",
                    "Unschedulable",
                    "0/1 nodes are available: 1 Insufficient memory.",
                )
                .await?;
                t.unschedulable_reported = true;
            }
            return Ok(());
        }
        if !bound {
            self.bind(ns, &name).await?;
            t.bound_at = Some(Instant::now());
            return Ok(());
        }
        let bound_at = *t.bound_at.get_or_insert_with(Instant::now);
        let on_failure = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("OnFailure");
        match b {
            Behavior::Manual | Behavior::Unschedulable => {}
            Behavior::StartAfter(d) => {
                if is_running(pod) {
                } else if bound_at.elapsed() >= *d {
                    self.set_running(ns, &name, 0).await?;
                } else if waiting_reason(pod).as_deref() != Some("ContainerCreating") {
                    self.set_waiting(ns, &name, "ContainerCreating", "").await?;
                }
            }
            Behavior::NeverStart { reason, message } => {
                if waiting_reason(pod).as_deref() != Some(reason.as_str()) {
                    self.set_waiting(ns, &name, reason, message).await?;
                }
            }
            Behavior::Faithful => {
                if is_running(pod) {
                    return Ok(());
                }
                let missing = self.first_missing_secret(ns, pod).await?;
                match missing {
                    None => {
                        self.set_running(ns, &name, 0).await?;
                    }
                    Some(secret) => {
                        if waiting_reason(pod).as_deref() != Some("CreateContainerConfigError") {
                            self.set_waiting(
                                ns,
                                &name,
                                "CreateContainerConfigError",
                                &format!("secret \"{secret}\" not found"),
                            )
                            .await?;
                        }
                    }
                }
            }
            Behavior::RunThenExit { after, code } => {
                if !is_running(pod) && t.running_at.is_none() {
                    self.set_running(ns, &name, 0).await?;
                    t.running_at = Some(Instant::now());
                } else if t.running_at.is_some_and(|r| r.elapsed() >= *after) {
                    let reason = if *code == 0 { "Completed" } else { "Error" };
                    if on_failure && *code != 0 {
                        self.set_crash_loop(ns, &name, *code, reason).await?;
                    } else {
                        self.set_terminated(ns, &name, *code, reason, "").await?;
                    }
                }
            }
            Behavior::FailStartup {
                code,
                reason,
                message,
            } => {
                if on_failure {
                    if waiting_reason(pod).as_deref() != Some("CrashLoopBackOff") {
                        self.set_crash_loop(ns, &name, *code, reason).await?;
                    }
                } else {
                    self.set_terminated(ns, &name, *code, reason, message).await?;
                }
            }
        }
        Ok(())
    }

    pub(crate) async fn first_missing_secret(&self, ns: &str, pod: &Pod) -> Result<Option<String>> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        let names: Vec<String> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.env_from.iter().flatten())
            .filter_map(|e| e.secret_ref.as_ref().map(|r| r.name.clone()))
            .collect();
        for n in names {
            if secrets.get_opt(&n).await?.is_none() {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }
}

struct Track {
    bound_at: Option<Instant>,
    running_at: Option<Instant>,
    deletion_seen: Option<Instant>,
    unschedulable_reported: bool,
}

impl Track {
    fn new() -> Self {
        Self {
            bound_at: None,
            running_at: None,
            deletion_seen: None,
            unschedulable_reported: false,
        }
    }
}

pub(crate) fn cond(type_: &str, status: &str, reason: Option<&str>) -> Value {
    let mut c = json!({ "type": type_, "status": status, "lastTransitionTime": now_time() });
    if let Some(r) = reason {
        c["reason"] = r.into();
    }
    c
}

fn terminated(code: i32, reason: &str, message: &str) -> Value {
    json!({ "terminated": { "exitCode": code, "reason": reason, "message": message,
                            "startedAt": now_time(), "finishedAt": now_time() } })
}

fn first_status(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

fn restart_count(pod: &Pod) -> i32 {
    first_status(pod).map(|c| c.restart_count).unwrap_or(0)
}

fn is_running(pod: &Pod) -> bool {
    first_status(pod)
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.running.as_ref())
        .is_some()
}

fn waiting_reason(pod: &Pod) -> Option<String> {
    first_status(pod)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}
