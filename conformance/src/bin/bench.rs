//! `cargo run --release -p buzz-conformance --bin bench -- <provider|harness|launcher|image|image-agents|collector|relay|real-node|agents|scale|wake|doze|ssh|records|observer|history|presence>`
//! prints one JSON object of figures for that component (`real-node
//! --egress [--fleet N,N…]`: contained agents, issue 53); `real-node --fleet
//! N,N… [--relay embedded|nostr-rs-relay|both]` runs the fleet instead
//! (`bench::fleet`); `presence [--agents N] [--every S] [--relay R]` runs
//! simulated harnesses through each relay (`bench::presence`).
//!
//! `bench __provider` makes this binary act as the provider (the same
//! `buzz_backend_kubernetes::cli::main` the real binary runs), so the provider
//! benchmark measures release-built provider code without a second build.

use std::process::ExitCode;

fn main() -> ExitCode {
    let which = std::env::args().nth(1).unwrap_or_default();
    let figures = match which.as_str() {
        "provider" => buzz_conformance::bench::provider::run(),
        "harness" => buzz_conformance::bench::harness::run(),
        "launcher" => buzz_conformance::bench::launcher::run(),
        "image" => buzz_conformance::bench::image::run(),
        "image-agents" => buzz_conformance::bench::image_agents::run(),
        "collector" => buzz_conformance::bench::collector::run(),
        "relay" => buzz_conformance::bench::relay::run(),
        "real-node" => {
            let rest: Vec<String> = std::env::args().skip(2).collect();
            match buzz_conformance::bench::egress::plan(&rest) {
                Ok(Some(plan)) => buzz_conformance::bench::egress::run(plan),
                Err(e) => Err(e),
                Ok(None) => match buzz_conformance::bench::fleet::plan(&rest) {
                    Ok(Some(plan)) => buzz_conformance::bench::fleet::run(plan),
                    Ok(None) => buzz_conformance::bench::real_node::run(),
                    Err(e) => Err(e),
                },
            }
        }
        "agents" => buzz_conformance::bench::agents::run(),
        "presence" => {
            let rest: Vec<String> = std::env::args().skip(2).collect();
            buzz_conformance::bench::presence::plan(&rest).and_then(buzz_conformance::bench::presence::run)
        }
        "scale" => buzz_conformance::bench::scale::run(),
        "wake" => buzz_conformance::bench::wake::run(),
        "doze" => buzz_conformance::bench::doze::run(),
        "ssh" => buzz_conformance::bench::ssh::run(),
        "records" => buzz_conformance::bench::records::run(),
        "observer" => buzz_conformance::bench::observer::run(),
        "history" => buzz_conformance::bench::history::run(),
        other => Err(anyhow::anyhow!(
            "usage: bench <provider|harness|launcher|image|image-agents|collector|relay|real-node|agents|scale|wake|doze|ssh|records|observer|history|presence> (got {other:?})"
        )),
    };
    match figures {
        Ok(f) => {
            println!("{f}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
