//! Bringing the real node up: the bridge and config files, containerd and
//! the pause image, the registry, then the kubelet, the scheduler and the
//! controller-manager, and the waits that end [`RealNode::start`]
//! (`../shared/kubelet.md`, "What a test harness must do").

use super::config::{self, Layout};
use super::images::{Ctr, LocalRegistry};
use super::{NodeError, READY_WAIT, RealNode, Result, host, io_at};
use crate::testenv::{TestEnvError, process};
use k8s_openapi::api::core::v1::{ConfigMap, Node, ServiceAccount};
use kube::{Api, Client};
use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The last error lines of a klog log (`E…` lines), else its last lines.
pub fn klog_errors(text: &str, n: usize) -> String {
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with('E')).collect();
    let pick = if errors.is_empty() {
        text.lines().collect::<Vec<_>>()
    } else {
        errors
    };
    pick[pick.len().saturating_sub(n)..].join("\n")
}

impl RealNode {
    /// The bridge, the config files, containerd, the pause image and the registry.
    pub(super) fn prepare_node(
        bins: &Path,
        l: &Layout,
        children: &mut Vec<(&'static str, Child)>,
    ) -> Result<(Ctr, LocalRegistry)> {
        host::create_bridge()?;
        // Every file new in the fresh run dir (never through a planted link).
        let write = |path: PathBuf, text: &str| -> Result<()> {
            host::write_new(&path, text.as_bytes(), 0o600).map_err(io_at(&path))
        };
        write(l.containerd_config(), &config::containerd_toml(l))?;
        for (dir, text) in config::registry_hosts(l) {
            write(l.hosts_dir().join(dir).join("hosts.toml"), &text)?;
        }
        write(
            l.cni_conf_dir().join("10-buzz.conflist"),
            &config::cni_conflist(l),
        )?;
        write(l.resolv_conf(), config::resolv_conf())?;
        for d in [
            l.pod_logs(),
            l.volume_plugins(),
            l.run.join("cdi"),
            l.shim_socket_dir(),
        ] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .map_err(io_at(&d))?;
        }

        let log = l.run.join("containerd.log");
        let mut cmd = Command::new(bins.join("containerd"));
        cmd.arg("--config").arg(l.containerd_config());
        children.push(("containerd", spawn_logged(cmd, bins, &log)?));
        let sock = l.containerd_socket();
        let end = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            if Instant::now() > end {
                return Err(NodeError::Exited("containerd", tail(&log, 30)));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let ctr = Ctr {
            bin: bins.join("ctr"),
            socket: sock,
        };
        ctr.import(&bins.join("pause.oci.tar"), "localhost/pause")?;
        // `localhost/pause:local` comes from the archive's ref name; check it.
        if !ctr.image_names()?.iter().any(|n| n == config::PAUSE_IMAGE) {
            return Err(NodeError::Missing {
                what: format!("{} after importing the pause archive", config::PAUSE_IMAGE),
                fix: "rebuild it: rm the pause.oci.tar in the testenv cache and run scripts/testenv-build.sh"
                    .into(),
            });
        }
        Self::import_helper(&ctr, bins)?;
        let reg_dir = l.run.join("registry");
        let registry = LocalRegistry::start(
            Path::new("/usr/bin/docker-registry"),
            &reg_dir,
            super::REGISTRY_PORT,
        )?;
        Ok((ctr, registry))
    }

    /// The kubelet, the scheduler and the controller-manager.
    pub(super) fn start_components(&self) -> Result<()> {
        let l = &self.layout;
        let env = &self.env;
        let kubelet_cert = env
            .ca()
            .issue_serving("localhost", &[])
            .map_err(TestEnvError::from)?;
        for (path, data) in [
            (l.pki("kubelet.crt"), kubelet_cert.cert_pem.as_bytes()),
            (l.pki("kubelet.key"), kubelet_cert.key_pem.as_bytes()),
            (l.pki("ca.crt"), env.ca_pem().as_bytes()),
            (l.kubelet_config(), config::kubelet_yaml(l).as_bytes()),
        ] {
            host::write_new(&path, data, 0o600).map_err(io_at(&path))?;
        }

        let mut kubelet = Command::new(self.bins.join("kubelet"));
        kubelet
            .arg(format!("--config={}", l.kubelet_config().display()))
            .arg(format!(
                "--kubeconfig={}",
                env.node_kubeconfig("system:node:localhost").display()
            ))
            .arg(format!("--root-dir={}", l.kubelet_root().display()))
            .arg(format!("--hostname-override={}", config::NODE_NAME))
            .arg("--v=2");
        let mut scheduler = Command::new(self.bins.join("kube-scheduler"));
        scheduler
            .arg(format!(
                "--kubeconfig={}",
                env.node_kubeconfig("system:kube-scheduler").display()
            ))
            .arg("--secure-port=0")
            .arg("--leader-elect=false");
        let mut kcm = Command::new(self.bins.join("kube-controller-manager"));
        kcm.arg(format!(
            "--kubeconfig={}",
            env.node_kubeconfig("system:kube-controller-manager").display()
        ))
        .arg(format!("--controllers={}", config::CONTROLLERS))
        .arg(format!("--root-ca-file={}", l.pki("ca.crt").display()))
        .arg(format!(
            "--flex-volume-plugin-dir={}",
            l.volume_plugins().display()
        ))
        // Each controller under its own ServiceAccount and bootstrap role
        // (the node-lifecycle controller needs `nodes`, which the
        // controller-manager's own user may not touch).
        .arg("--use-service-account-credentials")
        .arg("--secure-port=0")
        .arg("--leader-elect=false");
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        for (name, cmd) in [
            ("kubelet", kubelet),
            ("kube-scheduler", scheduler),
            ("kube-controller-manager", kcm),
        ] {
            let log = l.run.join(format!("{name}.log"));
            children.push((name, spawn_logged(cmd, &self.bins, &log)?));
        }
        Ok(())
    }

    pub(super) async fn wait_ready(&self) -> Result<()> {
        let client = self.env.admin_client().await?;
        let nodes: Api<Node> = Api::all(client.clone());
        let end = Instant::now() + READY_WAIT;
        loop {
            if let Ok(Some(n)) = nodes.get_opt(config::NODE_NAME).await
                && node_ready(&n)
            {
                break;
            }
            self.check_alive()?;
            if Instant::now() > end {
                return Err(self.not_ready(format!(
                    "node {} not Ready within {READY_WAIT:?}",
                    config::NODE_NAME
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ns = self.env.restricted_namespace().to_string();
        self.wait_namespace_ready(&client, &ns, end).await
    }

    /// Waits for a namespace's `default` ServiceAccount and `kube-root-ca.crt`
    /// (the projected token volume needs both).
    pub(super) async fn wait_namespace_ready(&self, client: &Client, ns: &str, end: Instant) -> Result<()> {
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        loop {
            if sas.get_opt("default").await.ok().flatten().is_some()
                && cms.get_opt("kube-root-ca.crt").await.ok().flatten().is_some()
            {
                return Ok(());
            }
            self.check_alive()?;
            if Instant::now() > end {
                return Err(self.not_ready(format!(
                    "namespace {ns} got no default ServiceAccount or kube-root-ca.crt from the controller-manager; its log:\n{}",
                    tail(&self.layout.run.join("kube-controller-manager.log"), 15)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(super) fn check_alive(&self) -> Result<()> {
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        for (name, c) in children.iter_mut() {
            if let Ok(Some(_)) = c.try_wait() {
                return Err(NodeError::Exited(
                    name,
                    tail(&self.layout.run.join(format!("{name}.log")), 30),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn not_ready(&self, what: String) -> NodeError {
        NodeError::NotReady {
            what,
            kubelet: klog_errors(
                &fs::read_to_string(self.layout.run.join("kubelet.log")).unwrap_or_default(),
                20,
            ),
        }
    }
}

pub(super) fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Spawns a component owned by this process, its output in `log`, with the
/// binary dir first on `PATH` (containerd finds its shim there).
pub(super) fn spawn_logged(mut cmd: Command, bins: &Path, log: &Path) -> Result<Child> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(log)
        .map_err(io_at(log))?;
    let err = file.try_clone().map_err(io_at(log))?;
    cmd.env(
        "PATH",
        format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bins.display()),
    )
    .stdin(Stdio::null())
    .stdout(file)
    .stderr(err);
    process::spawn_owned(cmd).map_err(io_at(log))
}

/// SIGTERM, then SIGKILL after `grace`, and reap.
pub(super) fn terminate(c: &mut Child, grace: Duration) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(c.id() as i32, libc::SIGTERM);
    }
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if let Ok(Some(_)) = c.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    process::kill_owned(c);
}

pub(super) fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_not_ready_report_carries_the_kubelets_error_lines() {
        let log = "I1201 a\nE1201 first failure\nI1201 b\nE1201 second failure\nW1201 c\n";
        assert_eq!(klog_errors(log, 20), "E1201 first failure\nE1201 second failure");
        assert_eq!(klog_errors(log, 1), "E1201 second failure");
        assert_eq!(klog_errors("I only\nI info\n", 1), "I info");
    }
}
