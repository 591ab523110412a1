//! The `image-agents` benchmark: figures for the agent variants of the
//! sprig image (`scripts/image-build.sh --agent claude|codex|gemini`),
//! printed, never asserted.
//!
//! Keys: `base_mb` (the sprig image, uncompressed), and per agent:
//! - `image_mb` (uncompressed, as podman stores it), `image_archive_mb` (the
//!   OCI archive, gzip-compressed layers: close to what a registry stores),
//!   `over_base_mb` (the variant's one layer: Node.js and the npm package);
//! - `node`, `npm`, `digest`: what the image holds and its pin;
//! - `warm_build_s`: a run of `image-build.sh --agent` with every cache warm
//!   (the static build included);
//! - `initialize_ms` (median of 3): `podman run` of the variant, the agent
//!   started by its command name, as the pod's user, no network → its
//!   `initialize` response.

use crate::container::Podman;
use crate::container::agent_images::{build_agent, build_base, initialize};
use anyhow::Context;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const AGENTS: [&str; 3] = ["claude", "codex", "gemini"];

fn mb(bytes: u64) -> f64 {
    (bytes as f64 / 1_048_576.0 * 10.0).round() / 10.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs the benchmark; one JSON object.
pub fn run() -> anyhow::Result<Value> {
    let podman = Podman::from_env();
    let base = build_base()?;
    let base_size: u64 = podman
        .inspect(&base.reference, "{{.Size}}")?
        .parse()
        .context("base size")?;
    let mut figures = json!({ "base": base.pinned(), "base_mb": mb(base_size) });
    for agent in AGENTS {
        // The first run builds what is missing; the second is the warm figure.
        build_agent(agent)?;
        let t0 = Instant::now();
        let img = build_agent(agent)?;
        let warm = t0.elapsed().as_secs_f64();
        let preset = buzz_contract::agents::preset(agent).context("no such preset")?;
        let mut argv = vec![preset.command];
        argv.extend_from_slice(preset.args);
        let mut inits = Vec::new();
        for _ in 0..3 {
            let got = initialize(&podman, &img.reference, &argv, Duration::from_secs(120))?;
            inits.push((got.elapsed.as_secs_f64() * 10_000.0).round() / 10.0);
        }
        figures[agent] = json!({
            "image": img.pinned(),
            "npm": img.npm,
            "node": img.node,
            "image_mb": mb(img.size),
            "image_archive_mb": mb(img.archive_size),
            "over_base_mb": mb(img.size.saturating_sub(base_size)),
            "warm_build_s": (warm * 10.0).round() / 10.0,
            "initialize_ms": median(inits),
        });
    }
    Ok(figures)
}
