//! `buzz-backend-kubernetes`: one JSON request on stdin, one JSON response
//! line on stdout. See [`buzz_backend_kubernetes::cli`].

fn main() -> std::process::ExitCode {
    // First thing: the operation deadline is measured from process start.
    let started = std::time::Instant::now();
    buzz_backend_kubernetes::cli::run(started)
}
