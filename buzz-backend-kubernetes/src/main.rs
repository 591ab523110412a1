//! `buzz-backend-kubernetes`: one JSON request on stdin, one JSON response
//! line on stdout. See [`buzz_backend_kubernetes::cli`].

fn main() -> std::process::ExitCode {
    // First thing: the operation deadline is measured from process start.
    let started = std::time::Instant::now();
    // The digest-pinned default image of a release build (spec §Image).
    buzz_backend_kubernetes::config::bake_default_image(option_env!("BUZZ_K8S_DEFAULT_IMAGE"));
    buzz_backend_kubernetes::cli::run(started)
}
