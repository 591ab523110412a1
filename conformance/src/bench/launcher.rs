//! The `launcher` benchmark.

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<serde_json::Value> {
    anyhow::bail!("the launcher benchmark is not implemented yet")
}
