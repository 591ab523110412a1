//! The real node's configuration files, rendered from one [`Layout`] by pure
//! functions (no I/O), so every host-specific fix measured in
//! `../shared/kubelet.md` is in one place and a unit test pins it:
//!
//! - containerd: `restrict_oom_score_adj = true` (root on this machine kind
//!   lacks `CAP_SYS_RESOURCE`, so runc cannot lower `oom_score_adj` and every
//!   sandbox fails without it); every state path (shim sockets, runc root,
//!   netns mounts, CDI) under the run dir; registry hosts confined to
//!   loopback (`_default` answers every other registry from a dead port).
//! - kubelet: `failCgroupV1: false` (cgroup v1 host),
//!   `imagePullCredentialsVerificationPolicy: NeverVerify` (no surprise
//!   re-pull when one image ID arrives under two names),
//!   `makeIPTablesUtilChains: false`, every movable path under the run dir.
//! - CNI: a bridge the node creates itself (`cni0`), with `isGateway`,
//!   `ipMasq` and the default route all off, so `ip_forward` stays 0 and no
//!   pod packet can leave the machine.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The bridge the pods live on. Its name is machine-wide (one node at a time).
pub const BRIDGE: &str = "cni0";
/// The CNI network name (also the prefix of libcni's result cache files).
pub const NETWORK: &str = "buzz";
/// The pods' subnet: clear of podman's 10.88.0.0/16.
pub const SUBNET: &str = "10.213.0.0/24";
/// The host's address on the bridge: what pods reach the host at.
pub const HOST_ADDR: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
/// Prefix length of [`SUBNET`].
pub const PREFIX_LEN: u8 = 24;
/// The node's name; the apiserver dials `localhost:10250` (Hostname first).
pub const NODE_NAME: &str = "localhost";
/// The kubelet's ports (machine-wide, hence the machine lock).
pub const KUBELET_PORT: u16 = 10250;
pub const KUBELET_HEALTHZ_PORT: u16 = 10248;
/// The sandbox image, imported under this name before the kubelet starts.
pub const PAUSE_IMAGE: &str = "localhost/pause:local";
/// A loopback port nothing listens on: where every non-local registry goes.
pub const DEAD_REGISTRY: &str = "http://127.0.0.1:9";
/// The trimmed controller-manager: ServiceAccounts, the root CA ConfigMap
/// (the projected token volume needs it), namespace deletion and GC, and
/// the volume controllers a workspace claim needs (issue 32): the binder
/// that binds a claim to the volume a provisioner made, and the two
/// protection controllers that let a deleted claim (and its volume) go once
/// no pod uses it.
pub const CONTROLLERS: &str = "serviceaccount-controller,root-ca-certificate-publisher-controller,\
namespace-controller,garbage-collector-controller,pod-garbage-collector-controller,\
node-lifecycle-controller,taint-eviction-controller,persistentvolume-binder-controller,\
persistentvolumeclaim-protection-controller,persistentvolume-protection-controller";

/// Where one run of the node keeps everything it can keep to itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The run dir ([`super::host::create_run_dir`]). Short: the shim
    /// `socket_dir` may be at most 42 bytes.
    pub run: PathBuf,
    /// `/usr/sbin/runc` (Debian's).
    pub runc: PathBuf,
    /// Debian's CNI plugins.
    pub cni_bin: PathBuf,
    /// The local registry (`127.0.0.1:<port>`), if one runs.
    pub registry: Option<String>,
}

impl Layout {
    pub fn new(run: PathBuf) -> Layout {
        Layout {
            run,
            runc: PathBuf::from("/usr/sbin/runc"),
            cni_bin: PathBuf::from("/usr/lib/cni"),
            registry: None,
        }
    }
    fn p(&self, rel: &str) -> String {
        self.run.join(rel).display().to_string()
    }
    pub fn containerd_config(&self) -> PathBuf {
        self.run.join("etc/containerd.toml")
    }
    pub fn containerd_socket(&self) -> PathBuf {
        self.run.join("run/containerd/containerd.sock")
    }
    pub fn containerd_state(&self) -> PathBuf {
        self.run.join("run/containerd")
    }
    pub fn shim_socket_dir(&self) -> PathBuf {
        self.run.join("run/s")
    }
    pub fn hosts_dir(&self) -> PathBuf {
        self.run.join("etc/certs.d")
    }
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.run.join("cni/net.d")
    }
    pub fn kubelet_config(&self) -> PathBuf {
        self.run.join("etc/kubelet.yaml")
    }
    pub fn kubelet_root(&self) -> PathBuf {
        self.run.join("kubelet")
    }
    pub fn kubelet_kubeconfig(&self) -> PathBuf {
        self.run.join("etc/kubelet.kubeconfig")
    }
    pub fn resolv_conf(&self) -> PathBuf {
        self.run.join("etc/resolv.conf")
    }
    pub fn pod_logs(&self) -> PathBuf {
        self.run.join("pod-logs")
    }
    pub fn pki(&self, file: &str) -> PathBuf {
        self.run.join("pki").join(file)
    }
    pub fn volume_plugins(&self) -> PathBuf {
        self.run.join("kubelet/volume-plugins")
    }
}

/// containerd 2.3's config (version 3 is accepted and migrated).
pub fn containerd_toml(l: &Layout) -> String {
    format!(
        r#"version = 3
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"

[plugins]
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "{shims}"
  [plugins.'io.containerd.internal.v1.opt']
    path = "{opt}"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{pause}"
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "{hosts}"
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
    cdi_spec_dirs = ["{cdi}"]
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "{runc}"
          Root = "{runc_root}"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{cni_bin}"]
      conf_dir = "{cni_conf}"
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
"#,
        root = l.p("containerd/root"),
        state = l.containerd_state().display(),
        sock = l.containerd_socket().display(),
        shims = l.shim_socket_dir().display(),
        opt = l.p("containerd/opt"),
        pause = PAUSE_IMAGE,
        hosts = l.hosts_dir().display(),
        cdi = l.p("cdi"),
        runc = l.runc.display(),
        runc_root = l.p("run/runc"),
        cni_bin = l.cni_bin.display(),
        cni_conf = l.cni_conf_dir().display(),
    )
}

/// `hosts.toml` files under [`Layout::hosts_dir`]: `(relative dir, text)`.
/// `_default` sends every registry without its own dir to a dead loopback
/// port, so an unqualified or public image name can never cause traffic off
/// the machine; the local registry, when one runs, is served over plain HTTP.
pub fn registry_hosts(l: &Layout) -> Vec<(String, String)> {
    let mut out = vec![(
        "_default".to_string(),
        format!(
            "server = \"{DEAD_REGISTRY}\"\n\n[host.\"{DEAD_REGISTRY}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        ),
    )];
    if let Some(reg) = &l.registry {
        out.push((
            reg.clone(),
            format!("server = \"http://{reg}\"\n\n[host.\"http://{reg}\"]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n"),
        ));
    }
    out
}

/// The kubelet's `KubeletConfiguration`.
pub fn kubelet_yaml(l: &Layout) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://{sock}
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
tlsCertFile: {crt}
tlsPrivateKeyFile: {key}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: {ca}
authorization:
  mode: AlwaysAllow
resolvConf: {resolv}
podLogsDir: {logs}
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
volumePluginDir: {plugins}
makeIPTablesUtilChains: false
imagePullCredentialsVerificationPolicy: NeverVerify
"#,
        sock = l.containerd_socket().display(),
        port = KUBELET_PORT,
        healthz = KUBELET_HEALTHZ_PORT,
        crt = l.pki("kubelet.crt").display(),
        key = l.pki("kubelet.key").display(),
        ca = l.pki("ca.crt").display(),
        resolv = l.resolv_conf().display(),
        logs = l.pod_logs().display(),
        plugins = l.volume_plugins().display(),
    )
}

/// The CNI conflist: the bridge plugin on the pre-made [`BRIDGE`], no
/// gateway, no masquerade, host-local IPAM under the run dir.
pub fn cni_conflist(l: &Layout) -> String {
    format!(
        r#"{{
  "cniVersion": "1.0.0",
  "name": "{NETWORK}",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "{BRIDGE}",
      "isGateway": false,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {{
        "type": "host-local",
        "dataDir": "{ipam}",
        "ranges": [[{{"subnet": "{SUBNET}", "gateway": "{HOST_ADDR}"}}]]
      }}
    }}
  ]
}}
"#,
        ipam = l.p("cni/ipam"),
    )
}

/// The pods' resolv.conf: no DNS at all (a pod reaches the host by address).
pub fn resolv_conf() -> &'static str {
    "nameserver 127.0.0.1\noptions ndots:1\n"
}

/// Debian `docker-registry`'s config: storage under `data`, loopback only.
pub fn registry_yml(data: &Path, addr: &str) -> String {
    format!(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
        data.display()
    )
}

/// True for an image reference the test node may run: imported (`localhost/…`)
/// or from a registry on loopback (`127.0.0.1:<port>/…`, `localhost:<port>/…`).
/// Anything else would be resolved through a public registry.
pub fn is_local_image(reference: &str) -> bool {
    let Some((host, rest)) = reference.split_once('/') else {
        return false;
    };
    if rest.is_empty() {
        return false;
    }
    if host == "localhost" {
        return true;
    }
    match host.rsplit_once(':') {
        Some((h, port)) => {
            (h == "127.0.0.1" || h == "localhost")
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        let mut l = Layout::new(PathBuf::from("/run/buzz-real-node/n-1"));
        l.registry = Some("127.0.0.1:5123".into());
        l
    }

    #[test]
    fn the_shim_socket_dir_fits_containerds_bound() {
        // containerd refuses a socket_dir longer than 42 bytes (a shim's
        // socket is `<socket_dir>/<64 hex>`, within a unix socket's 108), and
        // every socket path must fit 108; the node's run dir
        // (`/run/buzz-real-node/n-<pid>`) leaves room for any u32 pid.
        let run = crate::testenv::real_node::host::run_dir_in(
            Path::new(crate::testenv::real_node::host::HOST_DIR),
            u32::MAX,
        );
        let l = Layout::new(run);
        let socket_dir = l.shim_socket_dir().as_os_str().len();
        assert!(
            socket_dir <= 42,
            "{socket_dir}: {}",
            l.shim_socket_dir().display()
        );
        assert!(socket_dir + 1 + 64 < 108);
        let ttrpc = l.containerd_socket().as_os_str().len() + ".ttrpc".len();
        assert!(ttrpc < 108, "{ttrpc}");
    }

    #[test]
    fn containerd_keeps_oom_score_adj_and_every_state_path_private() {
        let t = containerd_toml(&layout());
        assert!(t.contains("restrict_oom_score_adj = true"));
        assert!(t.contains("netns_mounts_under_state_dir = true"));
        assert!(t.contains("socket_dir = \"/run/buzz-real-node/n-1/run/s\""));
        assert!(t.contains("Root = \"/run/buzz-real-node/n-1/run/runc\""));
        assert!(t.contains("config_path = \"/run/buzz-real-node/n-1/etc/certs.d\""));
        assert!(t.contains("sandbox = \"localhost/pause:local\""));
        assert!(!t.contains("/run/containerd/s"), "{t}");
    }

    #[test]
    fn every_other_registry_goes_to_a_dead_loopback_port() {
        let hosts = registry_hosts(&layout());
        assert_eq!(hosts[0].0, "_default");
        assert!(hosts[0].1.starts_with("server = \"http://127.0.0.1:9\""));
        assert_eq!(hosts[1].0, "127.0.0.1:5123");
        assert!(hosts[1].1.contains("server = \"http://127.0.0.1:5123\""));
        assert_eq!(registry_hosts(&Layout::new("/tmp/x".into())).len(), 1);
    }

    #[test]
    fn the_kubelet_carries_the_host_fixes() {
        let y = kubelet_yaml(&layout());
        for line in [
            "failCgroupV1: false",
            "makeIPTablesUtilChains: false",
            "imagePullCredentialsVerificationPolicy: NeverVerify",
            "address: 127.0.0.1",
            "readOnlyPort: 0",
            "volumePluginDir: /run/buzz-real-node/n-1/kubelet/volume-plugins",
        ] {
            assert!(y.lines().any(|l| l == line), "{line} missing from\n{y}");
        }
    }

    #[test]
    fn the_pod_network_has_no_gateway_and_no_masquerade() {
        let v: serde_json::Value = serde_json::from_str(&cni_conflist(&layout())).unwrap();
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["bridge"], BRIDGE);
        assert_eq!(bridge["isGateway"], false);
        assert_eq!(bridge["isDefaultGateway"], false);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["ipam"]["ranges"][0][0]["gateway"], "10.213.0.1");
        assert_eq!(bridge["ipam"]["dataDir"], "/run/buzz-real-node/n-1/cni/ipam");
    }

    #[test]
    fn only_loopback_images_are_local() {
        for ok in [
            "localhost/buzz-sprig@sha256:00",
            "localhost/pause:local",
            "127.0.0.1:5000/buzz-sprig@sha256:00",
            "localhost:5000/x:y",
        ] {
            assert!(is_local_image(ok), "{ok}");
        }
        for bad in [
            "busybox",
            "docker.io/library/busybox",
            "ghcr.io/x/y:1",
            "127.0.0.2:5000/x",
            "127.0.0.1/x",
            "localhost.evil.example/x",
            "127.0.0.1:50a/x",
            "localhost/",
        ] {
            assert!(!is_local_image(bad), "{bad}");
        }
    }
}
