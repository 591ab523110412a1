//! A real Kubernetes node on this machine (`../shared/kubelet.md`): the
//! pinned kubelet, kube-scheduler and a trimmed kube-controller-manager
//! (same `k8s.io/kubernetes` module as the apiserver), containerd 2.3 from Go
//! modules with Debian's runc and CNI plugins, and a local registry, against
//! a [`TestEnv`] whose apiserver runs `Node,RBAC` with NodeRestriction.
//!
//! This is what the Start path is proven on (spec §Kubernetes Binding,
//! §Conformance [L3]): real image pulls by digest, the pod network, real
//! restarts with a fresh writable layer, `CrashLoopBackOff`, probes,
//! resource limits with the kernel's OOM killer, PodSecurity admission, and
//! the kubelet's own `envFrom`, grace periods and projected token. The
//! scripted [`KubeletDriver`](super::KubeletDriver) and the container node
//! stay only where a test must produce a fault on demand.
//!
//! - **One node per machine** ([`host::MachineLock`]); tests that need it
//!   share one per test binary ([`RealNode::shared`]), each in its own
//!   namespace.
//! - **Network**: pods live on the bridge `cni0` (10.213.0.0/24) with no
//!   default route, no masquerade and no forwarding; they reach the host at
//!   [`RealNode::host_addr`], where the test relay binds. Nothing leaves
//!   the machine.
//! - **Images**: imported into containerd under their manifest-digest name
//!   ([`RealNode::import`]), or pulled from the local registry
//!   ([`RealNode::registry`]); containerd's registry config sends every other
//!   registry to a dead loopback port.
//! - **Teardown** is complete on every path (drop, the exit hook, and the
//!   next run's sweep after a SIGKILL): see [`host`].

pub mod config;
pub mod host;
pub mod images;

use super::{TestEnv, TestEnvConfig, TestEnvError, process};
use config::Layout;
use host::{HostState, MachineLock};
use images::{Ctr, LocalRegistry};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The local registry's port: fixed, so a provider baked with a default
/// image pinned to this registry stays valid across runs (the machine lock
/// makes it ours).
pub const REGISTRY_PORT: u16 = 5213;
/// How long [`RealNode::start`] waits for another node to end.
const LOCK_WAIT: Duration = Duration::from_secs(180);
/// How long the node has to become Ready.
const READY_WAIT: Duration = Duration::from_secs(90);

/// Errors while starting or using the real node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Host(#[from] host::HostError),
    #[error(transparent)]
    Image(#[from] images::ImageError),
    #[error(transparent)]
    Env(#[from] TestEnvError),
    #[error("real node I/O on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("a prerequisite is missing: {what}. fix: {fix}")]
    Missing { what: String, fix: String },
    #[error("{what}; the kubelet's last error lines:\n{kubelet}")]
    NotReady { what: String, kubelet: String },
    #[error("{0} exited during start-up; log tail:\n{1}")]
    Exited(&'static str, String),
}

type Result<T, E = NodeError> = std::result::Result<T, E>;

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> NodeError + '_ {
    move |source| NodeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A running real node and its control plane.
pub struct RealNode {
    env: TestEnv,
    layout: Layout,
    bins: PathBuf,
    ctr: Ctr,
    registry: LocalRegistry,
    children: Mutex<Vec<(&'static str, Child)>>,
    state: HostState,
    started_in: Duration,
    _lock: MachineLock,
}

/// The node the exit hook tears down (a `static` is never dropped).
fn exit_state() -> &'static Mutex<Option<HostState>> {
    static S: OnceLock<Mutex<Option<HostState>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(None))
}

extern "C" fn teardown_at_exit() {
    let state = exit_state().lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(state) = state {
        for e in host::teardown(&state) {
            eprintln!("real node teardown: {e}");
        }
    }
}

fn require(path: &Path, what: &str, fix: &str) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    Err(NodeError::Missing {
        what: format!("{what} ({})", path.display()),
        fix: fix.into(),
    })
}

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
    /// The one node of this test binary, started on first use.
    pub fn shared() -> &'static RealNode {
        static NODE: OnceLock<RealNode> = OnceLock::new();
        NODE.get_or_init(|| match RealNode::start() {
            Ok(n) => n,
            Err(e) => panic!("cannot start the real node: {e}"),
        })
    }

    /// Tears down what a node that died without its teardown left behind
    /// (its state record names it); returns its run dir, or `None` when
    /// there was nothing. Fails while a live node holds the machine.
    pub fn sweep() -> Result<Option<PathBuf>> {
        let _lock = MachineLock::take(Duration::ZERO)?;
        let Some(stale) = HostState::load() else {
            return Ok(None);
        };
        let errors = host::teardown(&stale);
        if errors.is_empty() {
            Ok(Some(stale.run))
        } else {
            Err(NodeError::Io {
                path: stale.run,
                source: std::io::Error::other(errors.join("; ")),
            })
        }
    }

    /// Starts the node: machine lock, stale sweep, bridge, containerd and the
    /// pause image, the control plane (in parallel), then the kubelet, the
    /// scheduler and the controller-manager; returns once the node is Ready
    /// and the restricted namespace has its `default` ServiceAccount and
    /// `kube-root-ca.crt`. Blocking.
    pub fn start() -> Result<RealNode> {
        let t0 = Instant::now();
        // Test binaries run one after another and wait for the lock; a
        // developer tool asks at once (`BUZZ_REAL_NODE_LOCK_WAIT_SECS=0`).
        let wait = std::env::var("BUZZ_REAL_NODE_LOCK_WAIT_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(LOCK_WAIT, Duration::from_secs);
        let lock = MachineLock::take(wait)?;
        if let Some(stale) = HostState::load() {
            eprintln!(
                "real node: cleaning up after a node that did not tear down ({})",
                stale.run.display()
            );
            for e in host::teardown(&stale) {
                eprintln!("real node: stale teardown: {e}");
            }
        }
        host::check_no_foreign_kubelet()?;
        let bins = super::binary_dir()?;
        for b in [
            "kubelet",
            "kube-scheduler",
            "kube-controller-manager",
            "containerd",
            "containerd-shim-runc-v2",
            "ctr",
        ] {
            require(&bins.join(b), b, "scripts/testenv-build.sh")?;
        }
        require(
            &bins.join("pause.oci.tar"),
            "the pause image",
            "scripts/testenv-build.sh",
        )?;
        let apt = "apt-get update && apt-get install -y runc containernetworking-plugins iptables docker-registry skopeo";
        require(Path::new("/usr/sbin/runc"), "Debian's runc", apt)?;
        require(Path::new("/usr/lib/cni/bridge"), "Debian's CNI plugins", apt)?;
        require(
            Path::new("/usr/bin/docker-registry"),
            "Debian's docker-registry",
            apt,
        )?;
        require(Path::new("/usr/bin/skopeo"), "skopeo", apt)?;
        require(
            Path::new("/usr/sbin/ip"),
            "iproute2",
            "apt-get install -y iproute2",
        )?;

        let run = PathBuf::from(format!("/tmp/bn-{}", std::process::id()));
        let _ = fs::remove_dir_all(&run);
        fs::create_dir_all(&run).map_err(io_at(&run))?;
        let state = HostState::capture(run.clone())?;
        state.save()?;
        *exit_state().lock().unwrap_or_else(|p| p.into_inner()) = Some(state.clone());
        install_exit_hook();

        match Self::launch(&bins, &run, state.clone(), lock, t0) {
            Ok(node) => Ok(node),
            Err(e) => {
                if let Some(state) = exit_state().lock().unwrap_or_else(|p| p.into_inner()).take() {
                    for err in host::teardown(&state) {
                        eprintln!("real node teardown: {err}");
                    }
                }
                Err(e)
            }
        }
    }

    fn launch(bins: &Path, run: &Path, state: HostState, lock: MachineLock, t0: Instant) -> Result<RealNode> {
        let mut layout = Layout::new(run.to_path_buf());
        layout.registry = Some(format!("127.0.0.1:{REGISTRY_PORT}"));
        // The control plane starts while the node side is prepared.
        let env_thread = std::thread::spawn(|| {
            TestEnv::start(TestEnvConfig {
                real_node: true,
                ..TestEnvConfig::default()
            })
        });
        let mut children = Vec::new();
        let prepared = Self::prepare_node(bins, &layout, &mut children);
        let env = env_thread
            .join()
            .map_err(|_| NodeError::Exited("the control plane's launch thread", String::new()))?;
        let kill_all = |children: &mut Vec<(&'static str, Child)>| {
            for (_, c) in children.iter_mut() {
                process::kill_owned(c);
            }
        };
        let (ctr, registry) = match prepared {
            Ok(p) => p,
            Err(e) => {
                kill_all(&mut children);
                return Err(e);
            }
        };
        let env = match env {
            Ok(env) => env,
            Err(e) => {
                kill_all(&mut children);
                return Err(e.into());
            }
        };
        let mut node = RealNode {
            env,
            layout,
            bins: bins.to_path_buf(),
            ctr,
            registry,
            children: Mutex::new(children),
            state,
            started_in: Duration::ZERO,
            _lock: lock,
        };
        node.start_components()?;
        let handle = node.env.handle().clone();
        handle.block_on(node.wait_ready())?;
        node.started_in = t0.elapsed();
        Ok(node)
    }

    /// The bridge, the config files, containerd, the pause image and the registry.
    fn prepare_node(
        bins: &Path,
        l: &Layout,
        children: &mut Vec<(&'static str, Child)>,
    ) -> Result<(Ctr, LocalRegistry)> {
        host::create_bridge()?;
        let write = |path: PathBuf, text: &str| -> Result<()> {
            if let Some(d) = path.parent() {
                fs::create_dir_all(d).map_err(io_at(d))?;
            }
            fs::write(&path, text).map_err(io_at(&path))
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
            fs::create_dir_all(&d).map_err(io_at(&d))?;
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
        let reg_dir = l.run.join("registry");
        let registry = LocalRegistry::start(Path::new("/usr/bin/docker-registry"), &reg_dir, REGISTRY_PORT)?;
        Ok((ctr, registry))
    }

    /// The kubelet, the scheduler and the controller-manager.
    fn start_components(&self) -> Result<()> {
        let l = &self.layout;
        let env = &self.env;
        let kubelet_cert = env
            .ca()
            .issue_serving("localhost", &[])
            .map_err(TestEnvError::from)?;
        let pki = l.pki("");
        fs::create_dir_all(&pki).map_err(io_at(&pki))?;
        super::write_private(&l.pki("kubelet.crt"), kubelet_cert.cert_pem.as_bytes()).map_err(io_at(&pki))?;
        super::write_private(&l.pki("kubelet.key"), kubelet_cert.key_pem.as_bytes()).map_err(io_at(&pki))?;
        super::write_private(&l.pki("ca.crt"), env.ca_pem().as_bytes()).map_err(io_at(&pki))?;
        fs::write(l.kubelet_config(), config::kubelet_yaml(l)).map_err(io_at(&l.kubelet_config()))?;

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

    async fn wait_ready(&self) -> Result<()> {
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
    async fn wait_namespace_ready(&self, client: &Client, ns: &str, end: Instant) -> Result<()> {
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

    fn check_alive(&self) -> Result<()> {
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

    fn not_ready(&self, what: String) -> NodeError {
        NodeError::NotReady {
            what,
            kubelet: klog_errors(
                &fs::read_to_string(self.layout.run.join("kubelet.log")).unwrap_or_default(),
                20,
            ),
        }
    }

    /// The control plane this node belongs to.
    pub fn env(&self) -> &TestEnv {
        &self.env
    }
    /// The host's address on the pod bridge: test servers a pod must reach bind it.
    pub fn host_addr(&self) -> Ipv4Addr {
        config::HOST_ADDR
    }
    /// The local registry (`127.0.0.1:`[`REGISTRY_PORT`]).
    pub fn registry(&self) -> &LocalRegistry {
        &self.registry
    }
    /// `ctr` against this node's containerd.
    pub fn ctr(&self) -> &Ctr {
        &self.ctr
    }
    /// The run dir (configs, logs, containerd's root).
    pub fn run_dir(&self) -> &Path {
        &self.layout.run
    }
    /// From the start of [`RealNode::start`] to node Ready with the
    /// restricted namespace's ServiceAccount (`real_node_cold_start_ms`).
    pub fn started_in(&self) -> Duration {
        self.started_in
    }
    /// The host state this node recorded (what teardown restores).
    pub fn host_state(&self) -> &HostState {
        &self.state
    }
    /// The tail of a component's log (`kubelet`, `containerd`, …).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        tail(&self.layout.run.join(format!("{component}.log")), lines)
    }

    /// Imports an OCI archive as `repo`; returns `repo@<manifest digest>`.
    pub fn import(&self, archive: &Path, repo: &str) -> Result<String> {
        Ok(self.ctr.import(archive, repo)?)
    }

    /// Creates a namespace `<prefix>-<random>` with `labels`, and waits for its
    /// `default` ServiceAccount and `kube-root-ca.crt`.
    pub async fn create_namespace(&self, prefix: &str, labels: &[(&str, &str)]) -> Result<String> {
        let name = super::unique_name(prefix);
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
            terminate(c, Duration::from_secs(10));
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

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
    }
}

fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn install_exit_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a plain extern "C" fn with atexit is sound.
        unsafe {
            libc::atexit(teardown_at_exit);
        }
    });
}

/// Spawns a component owned by this process, its output in `log`, with the
/// binary dir first on `PATH` (containerd finds its shim there).
fn spawn_logged(mut cmd: Command, bins: &Path, log: &Path) -> Result<Child> {
    let file = fs::File::create(log).map_err(io_at(log))?;
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
fn terminate(c: &mut Child, grace: Duration) {
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

fn tail(path: &Path, n: usize) -> String {
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
