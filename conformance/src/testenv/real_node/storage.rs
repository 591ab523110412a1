//! The real node's storage (issue 32 item 3): a dynamic provisioner, so a
//! workspace claim binds here as it does on kind and k3s. It is rancher's
//! local-path-provisioner (the one both ship), built from its Go module by
//! `scripts/testenv-build.sh`, running as a host process with the admin
//! kubeconfig like the other control-plane parts, and its default
//! StorageClass [`STORAGE_CLASS`] (`WaitForFirstConsumer`, reclaim
//! `Delete`).
//!
//! Each volume is a directory under the run dir's [`VOLUMES`], made and
//! removed by the provisioner's helper pods. Their image is this node's own
//! ([`HELPER_IMAGE`], from `conformance/images/volume-helper/helper.c`,
//! imported offline like the pause image), run as `setupCommand` and
//! `teardownCommand`, so no shell image is pulled. The volumes go with the
//! run dir at teardown (`down` on `scripts/local-cluster.sh`).
//!
//! The controller-manager runs the volume controllers a claim needs
//! ([`super::config::CONTROLLERS`]).

use super::launch::{spawn_logged, tail};
use super::{NodeError, RealNode, Result, host, io_at};
use crate::testenv::TestEnvError;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::PostParams;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The default StorageClass.
pub const STORAGE_CLASS: &str = "local-path";
/// Its provisioner's name.
pub const PROVISIONER: &str = "rancher.io/local-path";
/// The helper pods' image, imported into containerd at start.
pub const HELPER_IMAGE: &str = "localhost/volume-helper:local";
/// Where the provisioner and its helper pods run.
pub const NAMESPACE: &str = "local-path-storage";
/// The volumes' root, under the run dir.
pub const VOLUMES: &str = "volumes";

/// The provisioner's config: every node's volumes under `root`, made and
/// removed by the helper image's `/helper` (its `-a create|delete`).
pub fn provisioner_config(root: &Path) -> String {
    serde_json::json!({
        "nodePathMap": [{
            "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
            "paths": [root.display().to_string()],
        }],
        "setupCommand": "/helper",
        "teardownCommand": "/helper",
        "cmdTimeoutSeconds": 60,
    })
    .to_string()
}

/// The helper pod the provisioner copies for each volume (it adds the
/// command, the volume's host path and the node): JSON, which is YAML.
pub fn helper_pod() -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {
            "containers": [{
                "name": "helper-pod",
                "image": HELPER_IMAGE,
                "imagePullPolicy": "Never",
            }],
        },
    })
    .to_string()
}

fn storage_class() -> StorageClass {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }))
    .expect("a StorageClass")
}

impl RealNode {
    /// Imports the helper image (in [`RealNode::prepare_node`]'s order,
    /// after the pause image).
    pub(super) fn import_helper(ctr: &super::images::Ctr, bins: &Path) -> Result<()> {
        ctr.import(&bins.join("volume-helper.oci.tar"), "localhost/volume-helper")?;
        if !ctr.image_names()?.iter().any(|n| n == HELPER_IMAGE) {
            return Err(NodeError::Missing {
                what: format!("{HELPER_IMAGE} after importing the volume helper archive"),
                fix: "rebuild it: rm the volume-helper-*.oci.tar in the testenv cache and run scripts/testenv-build.sh"
                    .into(),
            });
        }
        Ok(())
    }

    /// The provisioner's namespace, config and StorageClass, then the
    /// provisioner itself; once the node is Ready.
    pub(super) async fn start_storage(&self) -> Result<()> {
        let l = &self.layout;
        let client = self.env.admin_client().await?;
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}}))
            .expect("a Namespace");
        let pp = PostParams::default();
        Api::<Namespace>::all(client.clone())
            .create(&pp, &ns)
            .await
            .map_err(TestEnvError::from)?;
        Api::<StorageClass>::all(client.clone())
            .create(&pp, &storage_class())
            .await
            .map_err(TestEnvError::from)?;
        let dir = l.run.join("local-path");
        let volumes = l.run.join(VOLUMES);
        for d in [&dir, &volumes] {
            std::fs::create_dir(d).map_err(io_at(d))?;
        }
        let (config, pod) = (dir.join("config.json"), dir.join("helper-pod.json"));
        host::write_new(&config, provisioner_config(&volumes).as_bytes(), 0o600).map_err(io_at(&config))?;
        host::write_new(&pod, helper_pod().as_bytes(), 0o600).map_err(io_at(&pod))?;
        // The helper pods run under the namespace's default ServiceAccount.
        let end = Instant::now() + super::READY_WAIT;
        self.wait_namespace_ready(&client, NAMESPACE, end).await?;
        let mut cmd = Command::new(self.bins.join("local-path-provisioner"));
        cmd.arg("--debug")
            .arg("start")
            .arg("--config")
            .arg(&config)
            .arg("--helper-pod-file")
            .arg(&pod)
            .arg("--kubeconfig")
            .arg(self.env.admin_kubeconfig())
            .args(["--provisioner-name", PROVISIONER])
            .args(["--namespace", NAMESPACE])
            .args(["--helper-image", HELPER_IMAGE])
            .args(["--configmap-name", "local-path-config"])
            .args(["--service-account-name", "default"]);
        let log = l.run.join("local-path-provisioner.log");
        let child = spawn_logged(cmd, &self.bins, &log)?;
        self.children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(("local-path-provisioner", child));
        // It lists its StorageClass's claims once it runs: give it a moment
        // to fail on its config before the node is called ready.
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.check_alive()
            .map_err(|_| NodeError::Exited("local-path-provisioner", tail(&log, 30)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provisioner_makes_volumes_under_the_run_dir_with_the_node_s_own_helper() {
        let c: serde_json::Value =
            serde_json::from_str(&provisioner_config(Path::new("/run/buzz-real-node/n-1/volumes"))).unwrap();
        assert_eq!(c["nodePathMap"][0]["paths"][0], "/run/buzz-real-node/n-1/volumes");
        assert_eq!(
            (c["setupCommand"].as_str(), c["teardownCommand"].as_str()),
            (Some("/helper"), Some("/helper"))
        );
        let p: serde_json::Value = serde_json::from_str(&helper_pod()).unwrap();
        assert_eq!(p["spec"]["containers"][0]["image"], HELPER_IMAGE);
        assert_eq!(
            p["spec"]["containers"][0]["imagePullPolicy"], "Never",
            "nothing is pulled"
        );
        let sc = storage_class();
        assert_eq!(sc.volume_binding_mode.as_deref(), Some("WaitForFirstConsumer"));
        assert_eq!(
            sc.metadata.annotations.unwrap()["storageclass.kubernetes.io/is-default-class"],
            "true"
        );
    }
}
