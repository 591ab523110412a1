//! Benchmarks that print figures (never asserted in tests). Each prints one
//! JSON object with the keys its issue fixes; see the README for results.

pub mod agents;
pub mod collector;
pub mod harness;
pub mod image;
pub mod image_agents;
pub mod launcher;
pub mod provider;
pub mod real_node;
pub mod relay;
pub mod scale;
pub mod wake;

/// The resident set of process `pid` (its `VmRSS`), MiB.
pub(crate) fn rss_mb(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for pid {pid}"))?;
    Ok(kb / 1024.0)
}
