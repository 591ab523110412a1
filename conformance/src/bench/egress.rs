//! `bench real-node --egress [--fleet N,N…]` (issue 53 Figures): what
//! containing the agents costs, on the real node. For each N (default 1
//! and 20), two fleets of the echo agent on the embedded relay, each as
//! [`super::fleet`] runs one: first with `network_policy: none` and no
//! enforcer, then with the provider's default policy and kube-router's
//! firewall beside the kubelet ([`crate::testenv::real_node::enforcer`]).
//! Printed side by side: Start → `online` (p50, p95) and the all-online
//! time, and kube-router's CPU seconds over the Starts and at rest (the
//! fleet's minute at rest, its chat, stop and undeploy included: the whole
//! batch) with its resident memory after. Figures, never asserted.

use super::fleet::{Batch, RelayKind, prepare, round2};
use crate::testenv::RealNode;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::time::Instant;

/// The sizes the issue asks for.
pub const SIZES: [usize; 2] = [1, 20];

/// What to run, from the command line after `real-node`.
pub struct Plan {
    sizes: Vec<usize>,
}

/// `--egress` with an optional `--fleet N,N…`; `None` without `--egress`.
pub fn plan(args: &[String]) -> anyhow::Result<Option<Plan>> {
    if !args.iter().any(|a| a == "--egress") {
        return Ok(None);
    }
    let mut sizes = SIZES.to_vec();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--egress" => {}
            "--fleet" => {
                sizes = it
                    .next()
                    .context("--fleet needs N,N…")?
                    .split(',')
                    .map(|n| n.trim().parse::<usize>().ok().filter(|n| *n > 0))
                    .collect::<Option<_>>()
                    .context("--fleet takes positive counts, N,N…")?;
            }
            other => bail!("unknown option {other:?} (bench real-node --egress [--fleet N,N…])"),
        }
    }
    Ok(Some(Plan { sizes }))
}

fn figures(b: &Value) -> Value {
    json!({
        "start_to_online_ms": b["start_to_online_ms"],
        "all_online_ms": b["all_online_ms"],
        "start_returned_ms": b["start_returned_ms"],
    })
}

pub fn run(plan: Plan) -> anyhow::Result<Value> {
    let (rt, pinned, provider, launcher) = prepare()?;
    let bins = (pinned.as_str(), provider.as_path(), launcher.as_path());
    let node = RealNode::shared();
    let mut rows = Vec::new();
    for &n in &plan.sizes {
        let open = Batch::new(RelayKind::Embedded, n, &rt, bins, Some("none"))?
            .run()
            .with_context(|| format!("fleet of {n} without a policy"))?;
        let enforcer = node.start_enforcer()?;
        let pid = enforcer.pid();
        let (cpu0, t0) = (super::cpu_s(pid)?, Instant::now());
        let contained = Batch::new(RelayKind::Embedded, n, &rt, bins, None)?
            .run()
            .with_context(|| format!("fleet of {n} with the policy and the enforcer"))?;
        let (cpu, wall) = (super::cpu_s(pid)? - cpu0, t0.elapsed().as_secs_f64());
        let row = json!({
            "agents": n,
            "without_policy": figures(&open),
            "with_policy_and_enforcer": figures(&contained),
            "enforcer": {
                "cpu_s_over_the_batch": round2(cpu),
                "batch_wall_s": round2(wall),
                "share_of_a_core": round2(cpu / wall.max(0.001)),
                "rss_mb_after": round2(super::rss_mb(pid)?),
                "peak_rss_mb": round2(super::hwm_mb(pid)?),
            },
        });
        eprintln!("egress, fleet of {n}: {row}");
        rows.push(row);
        drop(enforcer);
    }
    Ok(json!({
        "egress": rows,
        "cores": std::thread::available_parallelism().map_or(1, |c| c.get()),
        "enforcer": "kube-router v2.10.0, firewall only, iptables mode",
    }))
}
