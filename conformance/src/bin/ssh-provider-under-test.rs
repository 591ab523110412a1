//! The SSH provider binary as the conformance suites run it: the same entry
//! point as `buzz-backend-ssh`'s own `main`, built as a binary of this
//! package so `cargo test -p buzz-conformance` always runs the current code.

fn main() -> std::process::ExitCode {
    let started = std::time::Instant::now();
    buzz_backend_ssh::cli::run(started)
}
