//! The `provider` benchmark.

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<serde_json::Value> {
    anyhow::bail!("the provider benchmark is not implemented yet")
}
