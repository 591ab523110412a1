//! `buzz-conformance`: the real-parts test environment and the conformance
//! suites for Buzz remote agents (spec `remote-agents.md` §Conformance).
//!
//! - [`testenv`]: a real kube-apiserver backed by a real etcd, built from pinned
//!   upstream modules, with a kubelet driver and a fault-injecting proxy; the
//!   driver can also run each pod's container for real, with podman; and a
//!   real node (kubelet, kube-scheduler, kube-controller-manager, containerd,
//!   CNI and a local registry) for the Start path.
//! - [`container`]: podman, the sprig image and its test layer.
//!
//! Suites live in `tests/`; each test binary shares one [`testenv::TestEnv`].

pub mod bench;
pub mod container;
pub mod harness_support;
pub mod launcher_support;
pub mod provider_support;
pub mod real_node_support;
pub mod testenv;
pub mod ui_support;
