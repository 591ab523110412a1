//! `local-cluster DIR NAMESPACE [ARCHIVE]`: a real single-node Kubernetes on
//! this machine, a developer tool in the spirit of `kind` and Kubernetes'
//! own `hack/local-up-cluster.sh`, run by `scripts/local-cluster.sh`. It is
//! the test control plane's [`RealNode`], not product code: the pinned
//! kube-apiserver with etcd, kubelet, kube-scheduler and a trimmed
//! kube-controller-manager, containerd with runc and the CNI bridge, and a
//! local registry on 127.0.0.1 into which the sprig image (ARCHIVE, an OCI
//! archive) is pushed so pods pull it by digest, and kube-router's firewall,
//! which enforces the agents' NetworkPolicies (issue 53): a pod there is
//! contained as on a cluster whose network plugin enforces policies.
//!
//! It writes `DIR/kubeconfig` (admin), `DIR/env` (the exports) and then
//! `DIR/ready`, and serves until SIGTERM or SIGINT, when it deletes every
//! pod, stops every component and leaves the machine as it found it
//! (`RealNode::stop`). Exit codes: 0 after a clean stop, 1 on a start
//! failure, 3 when another real node holds the machine (nothing changed).
//!
//! `local-cluster --sweep` tears down what a node that died without its
//! teardown (SIGKILL, a crash mid-start) left on the machine, and exits.

use anyhow::{Context, Result};
use buzz_conformance::testenv::RealNode;
use buzz_conformance::testenv::real_node::{NodeError, host::HostError};
use std::path::PathBuf;

fn main() {
    match run() {
        Ok(()) => {}
        Err(e) => {
            let busy = e
                .downcast_ref::<NodeError>()
                .is_some_and(|n| matches!(n, NodeError::Host(HostError::Busy { .. })));
            eprintln!("local-cluster: {e:#}");
            std::process::exit(if busy { 3 } else { 1 });
        }
    }
}

fn run() -> Result<()> {
    if std::env::args().nth(1).as_deref() == Some("--sweep") {
        match RealNode::sweep()? {
            Some(run) => eprintln!(
                "local-cluster: removed what the node of {} left behind",
                run.display()
            ),
            None => eprintln!("local-cluster: nothing to sweep"),
        }
        return Ok(());
    }
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(ns)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: local-cluster DIR NAMESPACE [SPRIG_OCI_ARCHIVE]");
    };
    let archive = args.next().map(PathBuf::from);
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let _ = std::fs::remove_file(dir.join("ready"));
    let node = RealNode::start()?;
    let enforcer = node.start_enforcer()?;
    let image = match &archive {
        Some(a) => {
            let tag = a
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.strip_suffix(".oci"))
                .and_then(|s| s.rsplit('-').next())
                .unwrap_or("local")
                .to_string();
            Some(node.registry().push_archive(a, "buzz-sprig", &tag)?)
        }
        None => None,
    };
    let rt = node.env().handle().clone();
    rt.block_on(node.create_namespace_named(&ns, &[("pod-security.kubernetes.io/enforce", "restricted")]))
        .with_context(|| format!("cannot create namespace {ns}"))?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::copy(node.env().admin_kubeconfig(), &kubeconfig).context("cannot write the kubeconfig")?;
    let host = node.host_addr();
    let mut env = format!(
        "export KUBECONFIG={}\nexport BUZZ_LOCAL_CLUSTER_NAMESPACE={ns}\nexport BUZZ_POD_HOST_ADDR={host}\nexport BUZZ_EMBEDDED_RELAY_HOST={host}\n",
        kubeconfig.display()
    );
    if let Some(image) = &image {
        env.push_str(&format!("export BUZZ_SPRIG_IMAGE={image}\n"));
    }
    std::fs::write(dir.join("env"), &env).context("cannot write the env file")?;
    std::fs::write(dir.join("ready"), format!("{}\n", std::process::id()))
        .context("cannot write the ready file")?;
    eprintln!(
        "local-cluster: node {} Ready in {:.1} s; namespace {ns}; pods reach the host at {host}; NetworkPolicies enforced (kube-router)",
        buzz_conformance::testenv::real_node::config::NODE_NAME,
        node.started_in().as_secs_f64()
    );
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        anyhow::Ok(())
    })?;
    let _ = std::fs::remove_file(dir.join("ready"));
    // Its chains and ipsets go first (kube-router --cleanup-config).
    drop(enforcer);
    node.stop();
    eprintln!("local-cluster: stopped; the machine is as it was");
    Ok(())
}
