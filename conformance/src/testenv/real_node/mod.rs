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
pub mod enforcer;
pub mod host;
pub mod images;
mod launch;
mod observe;
pub mod storage;

pub use enforcer::Enforcer;
pub use launch::klog_errors;
pub use observe::FrozenKubelet;

use super::{TestEnv, TestEnvConfig, TestEnvError, process};
use config::Layout;
use host::{HostState, MachineLock};
use images::{Ctr, LocalRegistry};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Child;
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
    #[error("the kubelet could not be signalled: {0}")]
    Signal(std::io::Error),
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
        require(
            &bins.join("local-path-provisioner"),
            "local-path-provisioner",
            "scripts/testenv-build.sh",
        )?;
        require(
            &bins.join("volume-helper.oci.tar"),
            "the volume helper image",
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

        let run = host::create_run_dir()?;
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
        handle.block_on(async { super::runtime_class::ensure(node.env.admin_client().await?).await })?;
        handle.block_on(node.start_storage())?;
        node.started_in = t0.elapsed();
        Ok(node)
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
        launch::tail(&self.layout.run.join(format!("{component}.log")), lines)
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
    }
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
