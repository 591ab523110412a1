//! Stand-in for the ServiceAccount controller of kube-controller-manager,
//! which the `TestEnv` does not run: it creates each namespace's `default`
//! ServiceAccount after a configurable delay, counted from when it first sees
//! the namespace. The delay reproduces the real race right after namespace
//! creation, where the ServiceAccount admission plugin rejects pods.

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Per-namespace delays with a default.
pub struct Delays {
    default: Duration,
    overrides: Mutex<HashMap<String, Duration>>,
}

impl Delays {
    pub fn new(default: Duration) -> Self {
        Self {
            default,
            overrides: Mutex::new(HashMap::new()),
        }
    }
    pub fn set(&self, namespace: &str, delay: Duration) {
        self.overrides
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(namespace.to_string(), delay);
    }
    fn get(&self, namespace: &str) -> Duration {
        self.overrides
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(namespace)
            .copied()
            .unwrap_or(self.default)
    }
}

/// Runs forever on the env's runtime.
pub async fn run(client: Client, delays: Arc<Delays>) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut first_seen: HashMap<String, Instant> = HashMap::new();
    let mut done: HashSet<String> = HashSet::new();
    loop {
        if let Ok(list) = namespaces.list(&ListParams::default()).await {
            let now = Instant::now();
            for ns in list.items {
                let Some(name) = ns.metadata.name else { continue };
                if done.contains(&name) || ns.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let seen = *first_seen.entry(name.clone()).or_insert(now);
                if now < seen + delays.get(&name) {
                    continue;
                }
                let sa = ServiceAccount {
                    metadata: ObjectMeta {
                        name: Some("default".into()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                match Api::<ServiceAccount>::namespaced(client.clone(), &name)
                    .create(&PostParams::default(), &sa)
                    .await
                {
                    Ok(_) => {
                        done.insert(name);
                    }
                    Err(kube::Error::Api(s)) if s.reason == "AlreadyExists" => {
                        done.insert(name);
                    }
                    Err(_) => {}
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `namespace` has its `default` ServiceAccount.
pub async fn wait_default(
    client: &Client,
    namespace: &str,
    timeout: Duration,
) -> Result<(), super::TestEnvError> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + timeout;
    loop {
        if api.get_opt("default").await?.is_some() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(super::TestEnvError::Start(format!(
                "namespace {namespace} got no default ServiceAccount within {timeout:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
