//! `buzz-backend-kubernetes`: one JSON request on stdin, one JSON response
//! line on stdout. See [`buzz_backend_kubernetes::cli`].

fn main() -> std::process::ExitCode {
    buzz_backend_kubernetes::cli::main()
}
