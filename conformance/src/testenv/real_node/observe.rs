//! What tests read and do on a running real node: images, namespaces, a
//! container's host PID, the kubelet's own start-up metric, and the
//! graceful stop.

use super::config;
use super::{NodeError, RealNode, Result, exit_state, host, io_at};
use crate::testenv::TestEnvError;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

impl RealNode {
    /// Imports an OCI archive as `repo`; returns `repo@<manifest digest>`.
    pub fn import(&self, archive: &Path, repo: &str) -> Result<String> {
        Ok(self.ctr.import(archive, repo)?)
    }

    /// Creates a namespace `<prefix>-<random>` with `labels`, and waits for its
    /// `default` ServiceAccount and `kube-root-ca.crt`.
    pub async fn create_namespace(&self, prefix: &str, labels: &[(&str, &str)]) -> Result<String> {
        let name = crate::testenv::unique_name(prefix);
        self.create_namespace_named(&name, labels).await?;
        Ok(name)
    }

    /// Creates the namespace `name` with `labels` (an existing one is kept),
    /// and waits for its `default` ServiceAccount and `kube-root-ca.crt`.
    pub async fn create_namespace_named(&self, name: &str, labels: &[(&str, &str)]) -> Result<()> {
        let client = self.env.admin_client().await?;
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        labels: Some(labels),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .or_else(|e| match e {
                kube::Error::Api(s) if s.reason == "AlreadyExists" => Ok(Namespace::default()),
                e => Err(TestEnvError::from(e)),
            })?;
        self.wait_namespace_ready(&client, name, Instant::now() + Duration::from_secs(30))
            .await
    }

    /// The host PID of a pod's first container's process, from containerd's
    /// task state (`containerID` is `containerd://<id>`).
    pub fn container_pid(&self, pod: &Pod) -> Option<i32> {
        let id = pod
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .first()?
            .container_id
            .as_deref()?
            .strip_prefix("containerd://")?
            .to_string();
        let path = self
            .layout
            .containerd_state()
            .join("io.containerd.runtime.v2.task/k8s.io")
            .join(id)
            .join("init.pid");
        fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    /// Every image any pod of the cluster names that is not local: always
    /// empty in a correct suite (tests assert it).
    pub async fn foreign_images(&self) -> Result<Vec<String>> {
        let client = self.env.admin_client().await?;
        let pods = Api::<Pod>::all(client)
            .list(&ListParams::default())
            .await
            .map_err(TestEnvError::from)?;
        Ok(pods
            .items
            .iter()
            .filter_map(|p| p.spec.as_ref())
            .flat_map(|s| s.containers.iter().filter_map(|c| c.image.clone()))
            .filter(|i| !config::is_local_image(i))
            .collect())
    }

    /// The kubelet's `kubelet_pod_start_sli_duration_seconds` histogram
    /// (sum and count), read from the kubelet's own `/metrics` with the
    /// apiserver's kubelet client certificate (the apiserver's node proxy
    /// refuses loopback node addresses).
    pub async fn pod_start_sli(&self) -> Result<(f64, u64)> {
        let dir = self.env.dir();
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "--fail", "--max-time", "10", "--cacert"])
            .arg(dir.join("ca.crt"))
            .arg("--cert")
            .arg(dir.join("kubelet-client.crt"))
            .arg("--key")
            .arg(dir.join("kubelet-client.key"))
            .arg(format!("https://localhost:{}/metrics", config::KUBELET_PORT))
            .output()
            .await
            .map_err(io_at(Path::new("curl")))?;
        if !out.status.success() {
            return Err(NodeError::Io {
                path: "kubelet /metrics".into(),
                source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            });
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let value = |line: &str| {
            line.rsplit(' ')
                .next()
                .and_then(|x| x.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let mut sum = 0.0;
        let mut count = 0;
        for line in text.lines() {
            if line.starts_with("kubelet_pod_start_sli_duration_seconds_sum") {
                sum += value(line);
            } else if line.starts_with("kubelet_pod_start_sli_duration_seconds_count") {
                count += value(line) as u64;
            }
        }
        Ok((sum, count))
    }

    /// Every process of the node with its name (containerd, kubelet,
    /// scheduler, controller-manager, provisioner; then the apiserver and
    /// etcd): for benchmarks' CPU accounting.
    pub fn component_pids(&self) -> Vec<(&'static str, u32)> {
        let children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<(&'static str, u32)> = children.iter().map(|(n, c)| (*n, c.id())).collect();
        out.push(("kube-apiserver", self.env.apiserver_pid()));
        out.push(("etcd", self.env.etcd_pid()));
        out
    }

    /// Stops the kubelet process (SIGSTOP) until the guard is dropped
    /// (SIGCONT): containers keep running and exiting under containerd,
    /// but nothing reports it to the apiserver meanwhile — a node whose
    /// status reports lag, as a loaded kubelet's do.
    pub fn freeze_kubelet(&self) -> Result<FrozenKubelet> {
        let children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        let pid = children
            .iter()
            .find(|(name, _)| *name == "kubelet")
            .map(|(_, c)| c.id() as libc::pid_t)
            .ok_or_else(|| NodeError::Signal(std::io::Error::other("no kubelet runs")))?;
        // SAFETY: kill(2) on our own child's pid.
        if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
            return Err(NodeError::Signal(std::io::Error::last_os_error()));
        }
        Ok(FrozenKubelet { pid })
    }

    /// Graceful stop: pods deleted through the API (so the kubelet runs CNI
    /// DEL), then the kubelet, the scheduler, the controller-manager and
    /// containerd, then the host teardown.
    pub fn stop(&self) {
        let handle = self.env.handle().clone();
        let _ = handle.block_on(async {
            let client = self.env.admin_client().await?;
            let pods: Api<Pod> = Api::all(client.clone());
            if let Ok(list) = pods.list(&ListParams::default()).await {
                for p in list.items {
                    let (Some(ns), Some(name)) = (p.metadata.namespace, p.metadata.name) else {
                        continue;
                    };
                    let dp = kube::api::DeleteParams {
                        grace_period_seconds: Some(1),
                        ..Default::default()
                    };
                    let _ = Api::<Pod>::namespaced(client.clone(), &ns)
                        .delete(&name, &dp)
                        .await;
                }
            }
            let end = Instant::now() + Duration::from_secs(20);
            while Instant::now() < end {
                match pods.list(&ListParams::default()).await {
                    Ok(l) if l.items.is_empty() => break,
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
            Ok::<_, TestEnvError>(())
        });
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        // The kubelet first (it must not restart what is being stopped), containerd last.
        children.sort_by_key(|(name, _)| usize::from(*name == "containerd"));
        for (_, c) in children.iter_mut() {
            super::launch::terminate(c, Duration::from_secs(10));
        }
        children.clear();
        drop(children);
        if let Some(state) = exit_state().lock().unwrap_or_else(|p| p.into_inner()).take() {
            for e in host::teardown(&state) {
                eprintln!("real node teardown: {e}");
            }
        }
    }
}

/// A stopped kubelet ([`RealNode::freeze_kubelet`]); dropping it lets the
/// kubelet go on.
#[must_use = "the kubelet runs again when this is dropped"]
pub struct FrozenKubelet {
    pid: libc::pid_t,
}

impl Drop for FrozenKubelet {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the kubelet we stopped, still our child.
        unsafe { libc::kill(self.pid, libc::SIGCONT) };
    }
}
