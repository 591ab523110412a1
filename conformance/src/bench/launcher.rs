//! The `launcher` benchmark (issue 5 "Benchmark"): figures, never asserted.
//!
//! - `stage_digest_20mb_ms`: copy a 20 MB binary into the gate's
//!   sealed in-memory copy, seal it and hash the sealed bytes (`gate::stage`, the
//!   exact object `info` and `deploy` execute), median of 7 runs (goal ≤ 40);
//! - `gate_overhead_ms`: the gate's total overhead before `deploy` — stage,
//!   `info` on the staged file, version check — measured up to the moment the
//!   real gate asks for the deploy request, median of 7 runs;
//! - `discovery_500_path_ms`: discovery over 500 search directories, median of 7 runs.

use desktop_launcher::discovery::{self, Resolution};
use desktop_launcher::gate::{self, GateConfig};
use desktop_launcher::payload::{ConfigError, PayloadError};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

const RUNS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v[v.len() / 2];
    (m * 100.0).round() / 100.0
}

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// The provider the gate benchmark runs: the suite's fake provider when it was
/// built next to this binary, else a minimal shell provider.
fn provider(dir: &Path) -> anyhow::Result<PathBuf> {
    let dest = dir.join("buzz-backend-ok");
    let beside = std::env::current_exe()?
        .parent()
        .map(|p| p.join("fake-provider"))
        .filter(|p| p.is_file());
    match beside {
        Some(fake) => {
            std::fs::copy(fake, &dest)?;
        }
        None => std::fs::write(
            &dest,
            "#!/bin/sh\ncat >/dev/null\necho '{\"ok\":true,\"name\":\"bench\",\"version\":\"0\",\"protocol_version\":1,\"config_schema\":{}}'\n",
        )?,
    }
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755))?;
    Ok(dest)
}

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<serde_json::Value> {
    let tmp = tempfile::tempdir()?;
    let staging = tmp.path().join("staging");

    // Stage + digest of a 20 MB binary.
    let big = tmp.path().join("buzz-backend-big");
    let bytes: Vec<u8> = (0..20_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(&big, &bytes)?;
    drop(bytes);
    let mut stage_ms = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let staged = gate::stage(&big)?;
        stage_ms.push(ms(t));
        drop(staged);
    }

    // The gate's overhead before deploy: the real gate, stopped when it asks for the request.
    let pdir = tmp.path().join("providers");
    std::fs::create_dir_all(&pdir)?;
    let path = provider(&pdir)?;
    let resolution = Resolution {
        id: "ok".into(),
        path,
        cache_overridden: None,
    };
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work)?;
    let mut gate_ms = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let mut reached = None;
        let _ = gate::deploy(
            &resolution,
            &staging,
            &work,
            &GateConfig::default(),
            |_| {
                reached = Some(ms(t));
                Err(PayloadError::Config(ConfigError::NotNumber("bench".into())))
            },
            &mut |_| {},
        );
        gate_ms.push(reached.ok_or_else(|| anyhow::anyhow!("the gate never reached the deploy step"))?);
    }

    // Discovery over 500 directories, a few files each, providers in some.
    let mut dirs = Vec::new();
    for i in 0..500 {
        let d = tmp.path().join(format!("path{i:03}"));
        std::fs::create_dir_all(&d)?;
        for f in ["tool-a", "tool-b", "tool-c"] {
            std::fs::write(d.join(f), "x")?;
        }
        if i % 50 == 0 {
            let p = d.join(format!("buzz-backend-p{}", i % 100));
            std::fs::write(&p, "x")?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
        }
        dirs.push(d);
    }
    let mut disc_ms = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let d = discovery::discover(&dirs);
        disc_ms.push(ms(t));
        anyhow::ensure!(!d.selected.is_empty(), "discovery found nothing");
    }

    Ok(serde_json::json!({
        "stage_digest_20mb_ms": median(stage_ms),
        "gate_overhead_ms": median(gate_ms),
        "discovery_500_path_ms": median(disc_ms),
    }))
}
