//! The real node's NetworkPolicy enforcer (issue 53; `../shared/egress.md`):
//! kube-router's firewall alone, as k3s embeds it, run as a host process
//! beside the kubelet in iptables mode (Debian's `ipset`), with
//! `--run-router=false --run-service-proxy=false`. Its chains
//! (`KUBE-ROUTER-INPUT`, `-FORWARD`, `-OUTPUT`) filter pod → host traffic
//! too, the path this node's pods take to everything they reach (the
//! bridge has no forwarding, so every destination is the host's address),
//! and the bridge's pod → pod traffic (`bridge-nf-call-iptables`).
//!
//! Started on demand by a test binary ([`RealNode::start_enforcer`]): the
//! node is one per test binary, so only that binary's pods are confined.
//! Its rules and ipsets go when the [`Enforcer`] drops (`kube-router
//! --cleanup-config`) and, after a crash, with the node's teardown (a
//! marker in the run dir names the binary, [`cleanup_after`]).

use super::launch::{spawn_logged, tail, terminate};
use super::{NodeError, RealNode, Result, config, io_at};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The marker a started enforcer leaves in the run dir: the binary that
/// cleans up after it.
pub const MARKER: &str = "kube-router.cleanup";

/// kube-router's firewall, running.
pub struct Enforcer {
    child: Mutex<Child>,
    bin: PathBuf,
    log: PathBuf,
    marker: PathBuf,
}

/// How many enforcers this process started: each names its files by it.
static STARTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl RealNode {
    /// Starts kube-router's firewall for this node and waits until it has
    /// written its top-level chains. Fails when the binary or `ipset` is
    /// missing, with the fix.
    pub fn start_enforcer(&self) -> Result<Enforcer> {
        let bin = self.bins.join("kube-router");
        if !bin.exists() {
            return Err(NodeError::Missing {
                what: format!("kube-router ({})", bin.display()),
                fix: "scripts/testenv-build.sh".into(),
            });
        }
        if !Path::new("/usr/sbin/ipset").exists() {
            return Err(NodeError::Missing {
                what: "Debian's ipset (kube-router's iptables mode drives it)".into(),
                fix: "apt-get install -y ipset".into(),
            });
        }
        let run = self.run_dir();
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The kubeconfig under the run dir: the teardown's rule for what is
        // the node's own process (an argument naming the run dir) holds.
        let kubeconfig = run.join(format!("kube-router-{n}.kubeconfig"));
        std::fs::copy(self.env().admin_kubeconfig(), &kubeconfig).map_err(io_at(&kubeconfig))?;
        let marker = run.join(MARKER);
        super::host::write_new(&marker, bin.as_os_str().as_encoded_bytes(), 0o600).map_err(io_at(&marker))?;
        let log = run.join(format!("kube-router-{n}.log"));
        let mut cmd = Command::new(&bin);
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--hostname-override={}", config::NODE_NAME))
            .args([
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                "--metrics-port=0",
                "--health-port=0",
                "--v=1",
            ]);
        let child = spawn_logged(cmd, &self.bins, &log)?;
        let e = Enforcer {
            child: Mutex::new(child),
            bin,
            log,
            marker,
        };
        let end = Instant::now() + Duration::from_secs(60);
        while !chain_exists("KUBE-ROUTER-INPUT") {
            if let Ok(Some(_)) = e.child.lock().unwrap_or_else(|p| p.into_inner()).try_wait() {
                return Err(NodeError::Exited("kube-router", tail(&e.log, 30)));
            }
            if Instant::now() > end {
                return Err(NodeError::Exited(
                    "kube-router (no chains after 60 s)",
                    tail(&e.log, 30),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(e)
    }
}

impl Enforcer {
    /// Whether the enforcer has `ip` in one of its ipsets: it has taken in
    /// the pod of that address and the policies that select it.
    pub fn knows(&self, ip: &str) -> bool {
        Command::new("ipset")
            .args(["list", "-o", "plain"])
            .output()
            .is_ok_and(|o| {
                // A member's line is its address, then its options (`timeout 0`).
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(ip))
            })
    }

    /// Waits until [`Enforcer::knows`] `ip`, bounded.
    pub fn wait_knows(&self, ip: &str, within: Duration) -> bool {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if self.knows(ip) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// The process's id (for the bench's CPU and memory).
    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap_or_else(|p| p.into_inner()).id()
    }

    /// The last lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }
}

impl Drop for Enforcer {
    fn drop(&mut self) {
        terminate(
            &mut self.child.lock().unwrap_or_else(|p| p.into_inner()),
            Duration::from_secs(5),
        );
        match cleanup(&self.bin) {
            // Nothing left for the teardown to clean: the next start may
            // write its marker.
            Ok(()) => {
                let _ = std::fs::remove_file(&self.marker);
            }
            Err(e) => eprintln!("kube-router cleanup: {e}"),
        }
    }
}

fn chain_exists(chain: &str) -> bool {
    Command::new("iptables")
        .args(["-n", "-L", chain])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `kube-router --cleanup-config`: its chains and ipsets go.
fn cleanup(bin: &Path) -> std::result::Result<(), String> {
    let out = Command::new(bin)
        .arg("--cleanup-config")
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() && !chain_exists("KUBE-ROUTER-INPUT") {
        return Ok(());
    }
    Err(format!(
        "exit {:?}, chains left: {}; {}",
        out.status.code(),
        chain_exists("KUBE-ROUTER-INPUT"),
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or_default()
    ))
}

/// The teardown's step: when the run dir holds the marker, the enforcer's
/// rules are removed with the binary it names.
pub fn cleanup_after(run: &Path) -> Option<String> {
    let bin = std::fs::read(run.join(MARKER)).ok()?;
    let bin = PathBuf::from(String::from_utf8_lossy(&bin).into_owned());
    cleanup(&bin).err()
}
