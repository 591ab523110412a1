//! `buzz-backend-ssh`: one JSON request on stdin, one JSON response on
//! stdout (see `--help`).

fn main() -> std::process::ExitCode {
    let started = std::time::Instant::now();
    buzz_backend_ssh::cli::run(started)
}
