//! The `provider` benchmark (issue 3 "Benchmark"): figures, never asserted.
//!
//! Runs against a private real `TestEnv`, the kubelet driver and the fault
//! proxy; the provider is the sibling `provider-under-test` (the provider's
//! own `main`, which takes no arguments).
//! - `info_ms_median`, `info_ms_max`: wall time of `info` (process spawn to exit), 25 runs;
//! - `deploy_after_running_ms_median`: from the driver's status write that makes
//!   the container run to the deploy process exiting, 10 fresh agents;
//! - `requests_fresh_deploy`, `requests_noop_deploy`: API requests per deploy
//!   of a digest-pinned image (as the default image is), counted at the proxy
//!   (goal ≤ 7, issue 22; the upstream provider: 7);
//! - `requests_fresh_deploy_tag`: the same for a tag, which adds the PATCH
//!   recording the resolved image ID;
//! - `peak_rss_mb`: the largest peak RSS of any provider process (`RUSAGE_CHILDREN`).

use crate::provider_support::{TestAgent, config, deploy_request};
use crate::testenv::{Behavior, TestEnv, TestEnvConfig};
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn run_provider(kubeconfig: &Path, input: &Value) -> anyhow::Result<(Value, Duration)> {
    let provider = super::harness::sibling("provider-under-test")?;
    let start = Instant::now();
    let mut child = Command::new(provider)
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(input.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    let elapsed = start.elapsed();
    Ok((serde_json::from_slice(&out.stdout)?, elapsed))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 100.0).round() / 100.0
}

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<Value> {
    let env = TestEnv::start(TestEnvConfig::default())?;
    let infos: Vec<f64> = (0..25)
        .map(|_| run_provider(env.admin_kubeconfig(), &json!({"op": "info"})).map(|(_, d)| ms(d)))
        .collect::<anyhow::Result<_>>()?;
    let handle = env.handle().clone();
    let (after_running, fresh, noop, fresh_tag) = handle.block_on(async {
        let ns = env.create_namespace("bench").await?;
        let kubelet = env.kubelet().await?;
        let _auto = kubelet.automate(&ns, Behavior::Manual);
        let client = env.admin_client().await?;
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        let mut after = Vec::new();
        for _ in 0..10 {
            let agent = TestAgent::new();
            let req = deploy_request(&agent.payload(), config(&ns));
            let kc = env.admin_kubeconfig().to_path_buf();
            let deploy = tokio::task::spawn_blocking(move || {
                let r = run_provider(&kc, &req);
                (r, Instant::now())
            });
            let name = agent.pod_name();
            let deadline = Instant::now() + Duration::from_secs(30);
            while pods.get_opt(&name).await?.is_none() {
                if Instant::now() > deadline {
                    bail!("the provider never created {name}");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            kubelet.bind(&ns, &name).await?;
            kubelet.set_running(&ns, &name, 0).await?;
            let running_at = Instant::now();
            let (result, returned_at) = deploy.await?;
            let (resp, _) = result?;
            if resp["ok"] != true {
                bail!("deploy failed: {resp}");
            }
            after.push(ms(returned_at.saturating_duration_since(running_at)));
        }

        let proxy = env.start_proxy().await?;
        let _auto = kubelet.automate(&ns, Behavior::StartAfter(Duration::from_millis(0)));
        let kc = proxy.admin_kubeconfig().to_path_buf();
        let pinned = crate::testenv::resolved_image_id(crate::provider_support::IMAGE);
        // Requests of one deploy of `agent` with `image`, counted at the proxy.
        let counted = |agent: &TestAgent, image: Option<&str>, what: &'static str| {
            let mut cfg = config(&ns);
            if let Some(image) = image {
                cfg.insert("image".into(), json!(image));
            }
            let req = deploy_request(&agent.payload(), cfg);
            let (kc, proxy) = (kc.clone(), &proxy);
            async move {
                proxy.reset_counts();
                let r = tokio::task::spawn_blocking(move || run_provider(&kc, &req)).await??;
                if r.0["ok"] != true {
                    bail!("{what} deploy failed: {}", r.0);
                }
                Ok::<_, anyhow::Error>(proxy.total())
            }
        };
        let agent = TestAgent::new();
        let fresh = counted(&agent, Some(&pinned), "fresh").await?;
        let noop = counted(&agent, Some(&pinned), "no-op").await?;
        let fresh_tag = counted(&TestAgent::new(), None, "fresh tag").await?;
        Ok::<_, anyhow::Error>((after, fresh, noop, fresh_tag))
    })?;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let peak_rss_mb = (usage.ru_maxrss as f64 / 1024.0 * 10.0).round() / 10.0;
    Ok(json!({
        "info_ms_median": median(infos.clone()),
        "info_ms_max": infos.iter().cloned().fold(0.0, f64::max),
        "deploy_after_running_ms_median": median(after_running),
        "requests_fresh_deploy": fresh,
        "requests_noop_deploy": noop,
        "requests_fresh_deploy_tag": fresh_tag,
        "peak_rss_mb": peak_rss_mb,
    }))
}
