//! A node that runs real containers: the [`KubeletDriver`] plays scheduler
//! and kubelet through the API, as in its scripted modes, but each bound
//! pod's container really runs, with podman, from the pod spec and the
//! Secret its `envFrom` names (spec §Pod shape, §K8s Secrets, [L3] item 3).
//!
//! What it is faithful to, because the suites depend on it:
//! - a missing `envFrom` Secret leaves the container waiting with
//!   `CreateContainerConfigError`, re-checked every tick as a kubelet retries;
//! - every state is read from the real container: `running` with its real
//!   `startedAt`, `terminated` with its real `exitCode` and times, `imageID`
//!   from the image the container runs;
//! - `restartPolicy`: `Never` never restarts (phase `Succeeded` on 0, else
//!   `Failed`); `OnFailure` restarts a non-zero exit after a doubling back-off
//!   (waiting `CrashLoopBackOff`, `restartCount` raised, `lastState` holding
//!   the real termination) and completes the pod on 0;
//! - a restart is a **new container** from the same spec, as a kubelet makes
//!   one: a fresh writable layer (whatever the last run wrote outside its
//!   volumes is gone) with the pod's volumes kept (review b30b1a0 #7: a
//!   restart in place kept `/tmp` and hid a spool lost on a real node). The
//!   dead container stays, as a kubelet keeps it for `--previous` logs, until
//!   the node is dropped; exit events of an earlier container are ignored;
//! - the container's `command` replaces the image's entrypoint and `args`
//!   its cmd;
//! - the env a kubelet builds: `envFrom` Secrets first, then `env` over them
//!   (an entry without a value sets the empty string, review b30b1a0 #6),
//!   with the Downward API fields `metadata.name`, `metadata.namespace`,
//!   `metadata.uid` and `spec.nodeName` resolved;
//! - a graceful delete sends SIGTERM to the container's PID 1, waits up to
//!   the pod's grace period, then SIGKILL (`podman stop -t`), reports the real
//!   termination and finalises the deletion with a grace-0 delete.
//!
//! What it does not emulate: image pulls (images must already be in the
//! project's podman storage; a missing one reports `ErrImageNeverPull`),
//! probes, resource limits (requests and limits are recorded by the API but
//! not enforced), the pod network (containers use the host network, so they
//! reach the test relay on 127.0.0.1), volumes other than the workspace
//! `emptyDir` at the container's first mount, and multi-container pods (the
//! first container runs).

use super::TestEnvError;
use super::kubelet::{KubeletDriver, cond};
use crate::container::{Podman, RunSpec, prepare_volume};
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

type Result<T, E = TestEnvError> = std::result::Result<T, E>;

/// Settings of the container node.
#[derive(Debug, Clone)]
pub struct ContainerNodeConfig {
    /// The first `OnFailure` restart back-off; it doubles up to `max_backoff`.
    /// A real kubelet starts at 10 s; tests shorten it.
    pub restart_backoff: Duration,
    /// The back-off cap (a real kubelet: 5 min).
    pub max_backoff: Duration,
}

impl ContainerNodeConfig {
    /// The back-off the end-to-end suites run with: 1 s doubling to 4 s, so
    /// a crash restart is seen within a test's patience.
    pub fn quick() -> Self {
        Self {
            restart_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(4),
        }
    }
}

impl Default for ContainerNodeConfig {
    fn default() -> Self {
        Self {
            restart_backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(300),
        }
    }
}

/// Handle for a namespace run by the container node. Dropping it stops the
/// node and removes every container it started.
pub struct ContainerAutomation {
    task: tokio::task::AbortHandle,
    containers: Arc<Mutex<Vec<String>>>,
    podman: Podman,
    _volumes: tempfile::TempDir,
}

impl ContainerAutomation {
    /// Host pid of the PID 1 of the container now running for `pod_uid`, if any.
    pub fn container_pid(&self, container_id: &str) -> Option<i32> {
        self.podman
            .state(container_id)
            .ok()
            .filter(|s| s.running)
            .map(|s| s.pid)
    }

    /// Ids of every container this node started, oldest first.
    pub fn containers(&self) -> Vec<String> {
        self.containers.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The podman this node runs.
    pub fn podman(&self) -> &Podman {
        &self.podman
    }
}

impl Drop for ContainerAutomation {
    fn drop(&mut self) {
        self.task.abort();
        for id in self.containers() {
            self.podman.remove(&id);
        }
    }
}

/// Per-pod state of the node.
struct PodRun {
    container: Option<String>,
    volume: PathBuf,
    restart_count: i32,
    backoff: Duration,
    restart_at: Option<Instant>,
    last_termination: Option<Value>,
    stopping: bool,
    waiting_reported: Option<String>,
}

enum NodeEvent {
    /// The container of this pod (uid) exited.
    Exited { uid: String, container: String },
    /// A graceful stop of this pod's container finished.
    Stopped { uid: String, container: String },
}

fn now_time() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The Downward API `fieldRef` values a kubelet resolves that this node
/// supports (the ones the provider uses); `None` for any other path.
fn downward_field(pod: &Pod, path: &str) -> Option<String> {
    match path {
        "metadata.name" => pod.metadata.name.clone(),
        "metadata.namespace" => pod.metadata.namespace.clone(),
        "metadata.uid" => pod.metadata.uid.clone(),
        "spec.nodeName" => pod.spec.as_ref()?.node_name.clone(),
        _ => None,
    }
}

fn first_container(pod: &Pod) -> Option<&Container> {
    pod.spec.as_ref()?.containers.first()
}

fn terminated_state(s: &crate::container::ContainerState) -> Value {
    let reason = if s.oom_killed {
        "OOMKilled"
    } else if s.exit_code == 0 {
        "Completed"
    } else {
        "Error"
    };
    json!({ "terminated": { "exitCode": s.exit_code, "reason": reason,
                            "startedAt": s.started_at, "finishedAt": s.finished_at } })
}

/// A container status as a kubelet writes it.
fn container_status(pod: &Pod, run: &PodRun, state: Value, image_id: &str) -> Value {
    let c = first_container(pod);
    let running = state.get("running").is_some();
    let mut cs = json!({
        "name": c.map(|c| c.name.clone()).unwrap_or_else(|| "agent".into()),
        "image": c.and_then(|c| c.image.clone()).unwrap_or_default(),
        "imageID": image_id,
        "ready": running,
        "started": running,
        "restartCount": run.restart_count,
        "state": state,
    });
    if let Some(last) = &run.last_termination {
        cs["lastState"] = last.clone();
    }
    cs
}

impl KubeletDriver {
    /// Runs every pod of `ns` as a real container, like a node would, until
    /// the returned handle drops.
    pub fn run_containers(&self, ns: &str, config: ContainerNodeConfig) -> Result<ContainerAutomation> {
        let podman = Podman::from_env();
        let volumes = tempfile::Builder::new().prefix("buzz-node-").tempdir()?;
        let containers: Arc<Mutex<Vec<String>>> = Arc::default();
        let node = Node {
            driver: self.clone(),
            ns: ns.to_string(),
            podman: podman.clone(),
            config,
            volumes: volumes.path().to_path_buf(),
            containers: containers.clone(),
            pods: HashMap::new(),
        };
        let task = self.handle().spawn(node.run());
        Ok(ContainerAutomation {
            task: task.abort_handle(),
            containers,
            podman,
            _volumes: volumes,
        })
    }
}

struct Node {
    driver: KubeletDriver,
    ns: String,
    podman: Podman,
    config: ContainerNodeConfig,
    volumes: PathBuf,
    containers: Arc<Mutex<Vec<String>>>,
    pods: HashMap<String, PodRun>,
}

impl Node {
    fn api(&self) -> Api<Pod> {
        Api::namespaced(self.driver.client().clone(), &self.ns)
    }

    async fn run(mut self) {
        let (tx, mut rx) = mpsc::unbounded_channel::<NodeEvent>();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Ok(list) = self.api().list(&ListParams::default()).await {
                        for pod in list.items {
                            // Errors are transient (a pod deleted mid-step, a
                            // conflict): the next tick observes the new state.
                            let _ = self.step(&pod, &tx).await;
                        }
                    }
                }
                Some(ev) = rx.recv() => {
                    let _ = self.on_event(ev, &tx).await;
                }
            }
        }
    }

    async fn report(&self, pod: &str, phase: &str, ready: bool, container_status: Value) -> Result<()> {
        let conditions = if ready {
            json!([
                cond("PodScheduled", "True", None),
                cond("Initialized", "True", None),
                cond("ContainersReady", "True", None),
                cond("Ready", "True", None)
            ])
        } else {
            json!([
                cond("PodScheduled", "True", None),
                cond("Ready", "False", Some("ContainersNotReady"))
            ])
        };
        self.driver
            .patch_status(
                &self.ns,
                pod,
                json!({ "phase": phase, "startTime": now_time(), "conditions": conditions,
                        "containerStatuses": [container_status] }),
            )
            .await?;
        Ok(())
    }

    async fn report_waiting(&mut self, pod: &Pod, reason: &str, message: &str) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(run) = self.pods.get(&uid) else {
            return Ok(());
        };
        if run.waiting_reported.as_deref() == Some(reason) {
            return Ok(());
        }
        let cs = container_status(
            pod,
            run,
            json!({ "waiting": { "reason": reason, "message": message } }),
            "",
        );
        let phase = if run.restart_count > 0 {
            "Running"
        } else {
            "Pending"
        };
        self.report(&name, phase, false, cs).await?;
        if let Some(run) = self.pods.get_mut(&uid) {
            run.waiting_reported = Some(reason.to_string());
        }
        Ok(())
    }

    /// `repo@sha256:…` of the image the container runs, as a kubelet reports it.
    fn image_id(&self, pod: &Pod, container: &str) -> String {
        let image = first_container(pod)
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        let repo = image.split('@').next().unwrap_or(&image);
        let last_slash = repo.rfind('/').map(|i| i + 1).unwrap_or(0);
        let repo = match repo[last_slash..].rfind(':') {
            Some(i) => &repo[..last_slash + i],
            None => repo,
        };
        // A pod that pins a digest the running image answers to gets that
        // digest, as a kubelet reports the reference it resolved (one image
        // ID may carry several digests: podman's own and the OCI archive's).
        if let Some((_, wanted)) = image.split_once('@') {
            let running = self.podman.inspect(container, "{{.Image}}").unwrap_or_default();
            let pinned = self.podman.inspect(&image, "{{.Id}}").unwrap_or_default();
            if !running.is_empty() && running.trim() == pinned.trim() {
                return format!("{repo}@{wanted}");
            }
        }
        match self.podman.inspect(container, "{{.ImageDigest}}") {
            Ok(d) if d.starts_with("sha256:") => format!("{repo}@{d}"),
            _ => String::new(),
        }
    }

    async fn report_running(&mut self, pod: &Pod, container: &str) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let state = self
            .podman
            .state(container)
            .map_err(|e| TestEnvError::Start(e.to_string()))?;
        let image_id = self.image_id(pod, container);
        let Some(run) = self.pods.get(&uid) else {
            return Ok(());
        };
        let cs = container_status(
            pod,
            run,
            json!({ "running": { "startedAt": state.started_at } }),
            &image_id,
        );
        self.report(&name, "Running", true, cs).await?;
        if let Some(run) = self.pods.get_mut(&uid) {
            run.waiting_reported = None;
        }
        Ok(())
    }

    fn watch_exit(&self, uid: &str, container: &str, tx: &mpsc::UnboundedSender<NodeEvent>) {
        let mut wait = self.podman.tokio_command();
        wait.args(["wait", container])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let (uid, container, tx) = (uid.to_string(), container.to_string(), tx.clone());
        tokio::spawn(async move {
            let _ = wait.status().await;
            let _ = tx.send(NodeEvent::Exited { uid, container });
        });
    }

    async fn create(&mut self, pod: &Pod, tx: &mpsc::UnboundedSender<NodeEvent>) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(c) = first_container(pod).cloned() else {
            return Ok(());
        };
        // The env a kubelet builds: envFrom Secrets first, then literal env.
        let secrets: Api<Secret> = Api::namespaced(self.driver.client().clone(), &self.ns);
        let mut env: Vec<(String, String)> = Vec::new();
        for r in c.env_from.iter().flatten().filter_map(|e| e.secret_ref.as_ref()) {
            let Some(s) = secrets.get_opt(&r.name).await? else {
                return Ok(());
            };
            for (k, v) in s.data.unwrap_or_default() {
                env.push((k, String::from_utf8_lossy(&v.0).into_owned()));
            }
        }
        for e in c.env.iter().flatten() {
            // As a kubelet: an entry without a value is the empty string, and
            // it overrides envFrom; the Downward API fields the provider uses
            // are resolved from the pod.
            let value = match e.value_from.as_ref().and_then(|f| f.field_ref.as_ref()) {
                Some(f) => match downward_field(pod, &f.field_path) {
                    Some(v) => v,
                    None => continue,
                },
                None if e.value_from.is_some() => continue,
                None => e.value.clone().unwrap_or_default(),
            };
            env.retain(|(k, _)| k != &e.name);
            env.push((e.name.clone(), value));
        }
        let sc = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.clone())
            .unwrap_or_default();
        let uid_n = sc.run_as_user.unwrap_or(0) as u32;
        let gid_n = sc.run_as_group.unwrap_or(0) as u32;
        let Some(run) = self.pods.get(&uid) else {
            return Ok(());
        };
        let volume = run.volume.clone();
        let attempt = run.restart_count;
        prepare_volume(&volume, uid_n, gid_n)?;
        let image = c.image.clone().unwrap_or_default();
        if !self.podman.image_exists(&image) {
            return self
                .report_waiting(
                    pod,
                    "ErrImageNeverPull",
                    &format!("image \"{image}\" is not present on the node"),
                )
                .await;
        }
        let grace = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        let spec = RunSpec {
            image,
            // One container per attempt, as a kubelet names them.
            name: format!(
                "k8s-{}-{}-{attempt}",
                pod.metadata.name.clone().unwrap_or_default(),
                &uid[..8.min(uid.len())]
            ),
            user: (uid_n, gid_n),
            env,
            env_file: None,
            volume,
            mount_at: c
                .volume_mounts
                .iter()
                .flatten()
                .next()
                .map(|m| m.mount_path.clone())
                .unwrap_or_else(|| "/home/agent".into()),
            workdir: c.working_dir.clone(),
            stop_timeout: grace.max(0) as u32,
            labels: vec![("io.kubernetes.pod.uid".into(), uid.clone())],
        };
        match spec.start_as(&self.podman, c.command.as_deref(), c.args.as_deref()) {
            Ok(id) => {
                self.containers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(id.clone());
                if let Some(run) = self.pods.get_mut(&uid) {
                    run.container = Some(id.clone());
                }
                self.watch_exit(&uid, &id, tx);
                self.report_running(pod, &id).await
            }
            Err(e) => {
                self.report_waiting(pod, "CreateContainerError", &e.to_string())
                    .await
            }
        }
    }

    async fn step(&mut self, pod: &Pod, tx: &mpsc::UnboundedSender<NodeEvent>) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let volumes = self.volumes.clone();
        let backoff = self.config.restart_backoff;
        let run = self.pods.entry(uid.clone()).or_insert_with(|| PodRun {
            container: None,
            volume: volumes.join(&uid),
            restart_count: 0,
            backoff,
            restart_at: None,
            last_termination: None,
            stopping: false,
            waiting_reported: None,
        });
        if pod.metadata.deletion_timestamp.is_some() {
            if !bound || run.stopping {
                return Ok(());
            }
            let running = run
                .container
                .as_deref()
                .is_some_and(|id| self.podman.state(id).is_ok_and(|s| s.running));
            match run.container.clone() {
                Some(id) if running => {
                    // SIGTERM to PID 1, SIGKILL after the pod's grace period.
                    run.stopping = true;
                    let grace = pod
                        .metadata
                        .deletion_grace_period_seconds
                        .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
                        .unwrap_or(30)
                        .max(0);
                    let mut stop = self.podman.tokio_command();
                    stop.args(["stop", "-t", &grace.to_string(), &id])
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null());
                    let (uid, tx) = (uid.clone(), tx.clone());
                    tokio::spawn(async move {
                        let _ = stop.status().await;
                        let _ = tx.send(NodeEvent::Stopped { uid, container: id });
                    });
                }
                _ => {
                    run.stopping = true;
                    self.driver.finalize_deletion_of(&self.ns, &name, &uid).await?;
                }
            }
            return Ok(());
        }
        if phase == "Succeeded" || phase == "Failed" {
            return Ok(());
        }
        if !bound {
            return self.driver.bind(&self.ns, &name).await;
        }
        if run.container.is_none() {
            if let Some(secret) = self.driver.first_missing_secret(&self.ns, pod).await? {
                return self
                    .report_waiting(
                        pod,
                        "CreateContainerConfigError",
                        &format!("secret \"{secret}\" not found"),
                    )
                    .await;
            }
            return self.create(pod, tx).await;
        }
        if let Some(at) = run.restart_at
            && Instant::now() >= at
        {
            // A new container: a fresh writable layer, the same volume. Until
            // it exists (its Secret may be gone meanwhile) the pod has none,
            // and the next tick reports why.
            run.restart_at = None;
            run.container = None;
            return self.create(pod, tx).await;
        }
        Ok(())
    }

    async fn on_event(&mut self, ev: NodeEvent, _tx: &mpsc::UnboundedSender<NodeEvent>) -> Result<()> {
        let (uid, container, stopped) = match ev {
            NodeEvent::Exited { uid, container } => (uid, container, false),
            NodeEvent::Stopped { uid, container } => (uid, container, true),
        };
        let Some(pod) = self
            .api()
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
        else {
            return Ok(());
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let state = self
            .podman
            .state(&container)
            .map_err(|e| TestEnvError::Start(e.to_string()))?;
        if state.running {
            return Ok(()); // a stale wait: the container was restarted since
        }
        if self.pods.get(&uid).and_then(|r| r.container.as_deref()) != Some(container.as_str()) {
            return Ok(()); // an earlier attempt's container
        }
        let image_id = self.image_id(&pod, &container);
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let on_failure = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("OnFailure");
        let Some(run) = self.pods.get_mut(&uid) else {
            return Ok(());
        };
        let term = terminated_state(&state);
        if deleting || stopped || !on_failure || state.exit_code == 0 {
            // Final: the pod completes, or its deletion is finalised.
            let cs = container_status(&pod, run, term, &image_id);
            let phase = if state.exit_code == 0 {
                "Succeeded"
            } else {
                "Failed"
            };
            self.report(&name, phase, false, cs).await?;
            if deleting || stopped {
                self.driver.finalize_deletion_of(&self.ns, &name, &uid).await?;
            }
            return Ok(());
        }
        // OnFailure and a non-zero exit: back off, then restart in place.
        run.restart_count += 1;
        run.last_termination = Some(term);
        run.restart_at = Some(Instant::now() + run.backoff);
        run.backoff = (run.backoff * 2).min(self.config.max_backoff);
        run.waiting_reported = None;
        self.report_waiting(&pod, "CrashLoopBackOff", "back-off restarting failed container")
            .await
    }
}
