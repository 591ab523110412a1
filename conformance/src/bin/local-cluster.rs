//! `local-cluster DIR NAMESPACE`: the Kubernetes path on one machine, a
//! developer tool in the spirit of `kind` (issue 10 item 5), run by
//! `scripts/local-cluster.sh`. It is the test control plane, not product
//! code: the pinned kube-apiserver with etcd, and the container node that
//! really runs each pod of NAMESPACE with podman (host network, the pod's
//! security context, its Secret as env). It writes `DIR/kubeconfig` (admin)
//! and `DIR/ready` once both run, then serves until SIGTERM or SIGINT, when
//! it removes every container it started and stops the control plane.
//!
//! Needs `BUZZ_TESTENV_BIN_DIR` (scripts/testenv-build.sh) and the podman
//! settings of `~/.cache/buzz-image/image.env` (scripts/image-build.sh).

use anyhow::{Context, Result, bail};
use buzz_conformance::testenv::{ContainerNodeConfig, TestEnv, TestEnvConfig};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use std::path::PathBuf;
use std::time::Duration;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(ns)) = (args.next(), args.next()) else {
        bail!("usage: local-cluster DIR NAMESPACE");
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let _ = std::fs::remove_file(dir.join("ready"));
    let env = TestEnv::start(TestEnvConfig::default()).context("cannot start the control plane")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let node = rt.block_on(async {
        let client = env.admin_client().await?;
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client)
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("cannot create namespace {ns}"))?;
        let kubelet = env.kubelet().await?;
        let node = kubelet.run_containers(
            &ns,
            ContainerNodeConfig {
                restart_backoff: Duration::from_secs(2),
                max_backoff: Duration::from_secs(30),
            },
        )?;
        anyhow::Ok((kubelet, node))
    })?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::copy(env.admin_kubeconfig(), &kubeconfig).context("cannot write the kubeconfig")?;
    std::fs::write(dir.join("ready"), format!("{ns}\n")).context("cannot write the ready file")?;
    println!("kubeconfig {}", kubeconfig.display());
    println!("namespace {ns}");
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        anyhow::Ok(())
    })?;
    let _ = std::fs::remove_file(dir.join("ready"));
    drop(node);
    drop(env);
    println!("local cluster stopped");
    Ok(())
}
