//! The provider binary as the conformance suites run it: the same entry point
//! as `buzz-backend-kubernetes`'s own `main` (a one-line wrapper), built as a
//! binary of this package so `cargo test -p buzz-conformance` always runs the
//! current provider code, never a stale build.

fn main() -> std::process::ExitCode {
    // First thing: the operation deadline is measured from process start.
    let started = std::time::Instant::now();
    buzz_backend_kubernetes::cli::run(started)
}
