//! `buzz-conformance`: the real-parts test environment and the conformance
//! suites for Buzz remote agents (spec `remote-agents.md` §Conformance).
//!
//! - [`testenv`]: a real kube-apiserver backed by a real etcd, built from pinned
//!   upstream modules, with a kubelet driver and a fault-injecting proxy; the
//!   driver can also run each pod's container for real, with podman; and a
//!   real node (kubelet, kube-scheduler, kube-controller-manager, containerd,
//!   CNI and a local registry) for the Start path.
//! - [`container`]: podman, the sprig image and its test layer.
//! - [`fake_model`]: a scripted fake model API (Anthropic, OpenAI Responses,
//!   Gemini) on loopback, for running the real ACP agents offline
//!   (`/work/shared/real-agents.md`); [`real_agents_support`] runs them
//!   behind the real harness.
//!
//! Suites live in `tests/`; each test binary shares one [`testenv::TestEnv`].

pub mod bench;
pub mod container;
pub mod fake_model;
pub mod harness_support;
pub mod launcher_support;
pub mod provider_support;
pub mod real_agents_support;
pub mod real_node_support;
pub mod ssh_server;
pub mod test_lanes;
pub mod testenv;
pub mod ui_support;

/// This package's directory in the checkout being tested: where cargo (and
/// the test-lanes runner) say at run time, else where it was at build time.
/// Never only the build-time path: cargo reuses a test binary built in
/// another checkout of the same sources (one shared `CARGO_TARGET_DIR`),
/// and that binary's compile-time path names a checkout that may be gone.
pub fn package_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
