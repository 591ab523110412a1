//! `cargo run --release -p buzz-conformance --bin bench -- <provider|harness|launcher>`
//! prints one JSON object of figures for that component.

fn main() -> anyhow::Result<()> {
    let which = std::env::args().nth(1).unwrap_or_default();
    let figures = match which.as_str() {
        "provider" => buzz_conformance::bench::provider::run()?,
        "harness" => buzz_conformance::bench::harness::run()?,
        "launcher" => buzz_conformance::bench::launcher::run()?,
        other => anyhow::bail!("usage: bench <provider|harness|launcher> (got {other:?})"),
    };
    println!("{figures}");
    Ok(())
}
