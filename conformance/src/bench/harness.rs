//! The `harness` benchmark.

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<serde_json::Value> {
    anyhow::bail!("the harness benchmark is not implemented yet")
}
