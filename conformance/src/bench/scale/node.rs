//! `bench scale`'s node stand-in: scheduler and kubelet for one namespace
//! through the real API ([`KubeletDriver::bind`], [`KubeletDriver::set_running`]),
//! each new pod bound and run as soon as the namespace's pod watch shows it,
//! concurrently per pod ([`CONCURRENCY`] at a time), as a real kubelet's pod
//! workers are. Three requests per pod (binding, GET, status PATCH) plus one
//! watch per namespace, straight to the apiserver (not through the proxy).

use super::CONCURRENCY;
use crate::testenv::KubeletDriver;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The node stand-in of one namespace; stops when dropped.
pub(super) struct Node {
    task: tokio::task::AbortHandle,
    running: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Node {
    pub(super) fn start(
        handle: &tokio::runtime::Handle,
        kubelet: &KubeletDriver,
        pods: Api<Pod>,
        ns: &str,
    ) -> Node {
        let running: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let task = handle.spawn(node_loop(kubelet.clone(), pods, ns.to_string(), running.clone()));
        Node {
            task: task.abort_handle(),
            running,
        }
    }
    pub(super) fn running_at(&self, pod: &str) -> Option<Instant> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(pod)
            .copied()
    }
    pub(super) fn running_count(&self) -> usize {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Watches the namespace's pods; binds and runs each new unbound pod in its own task.
async fn node_loop(
    kubelet: KubeletDriver,
    pods: Api<Pod>,
    ns: String,
    running: Arc<Mutex<HashMap<String, Instant>>>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut started = HashSet::new();
    // Empty: the current state, then changes.
    let mut rv = String::new();
    loop {
        let Ok(stream) = pods.watch(&WatchParams::default().timeout(60), &rv).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut stream = stream.boxed();
        while let Some(ev) = stream.next().await {
            let p = match ev {
                Ok(WatchEvent::Added(p) | WatchEvent::Modified(p)) => p,
                Ok(WatchEvent::Bookmark(b)) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                Ok(WatchEvent::Error(s)) if s.code == 410 => {
                    rv.clear();
                    break;
                }
                _ => continue,
            };
            rv = p.metadata.resource_version.clone().unwrap_or_default();
            let name = p.metadata.name.clone().unwrap_or_default();
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            if bound || p.metadata.deletion_timestamp.is_some() || !started.insert(name.clone()) {
                continue;
            }
            let (kubelet, ns, running, permits) =
                (kubelet.clone(), ns.clone(), running.clone(), permits.clone());
            tokio::spawn(async move {
                let Ok(_permit) = permits.acquire().await else {
                    return;
                };
                if kubelet.bind(&ns, &name).await.is_ok() && kubelet.set_running(&ns, &name, 0).await.is_ok()
                {
                    running
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(name, Instant::now());
                }
            });
        }
    }
}
