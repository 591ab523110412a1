//! The process entry point shared by the `buzz-backend-kubernetes` binary
//! (spec §Invocation; [L2] item 1): this binding's name, help and handler
//! on the one provider process of every binding
//! ([`buzz_provider::envelope`]: one JSON object in, one JSON line out in a
//! single write, exit 0 whenever a response was written, [`EXIT_CRASH`]
//! with nothing on stdout on every crash path).
//!
//! The operation deadline is measured from process start: callers capture an
//! [`Instant`] first thing in `main` and pass it to [`run`].

use buzz_provider::envelope::Provider;
use std::process::ExitCode;
use std::time::Instant;

pub use buzz_provider::envelope::{EXIT_CRASH, EXIT_USAGE};

/// Setting this to `panic` makes the process panic after reading stdin (tests only).
pub const CRASH_TEST_ENV: &str = "BUZZ_K8S_CRASH_TEST";

/// This binding on the provider process.
pub static PROVIDER: Provider = Provider {
    name: "buzz-backend-kubernetes",
    version: crate::consts::VERSION,
    help,
    handle: crate::protocol::handle,
    crash_test_env: CRASH_TEST_ENV,
};

/// What `--help` prints: the protocol, with examples a person can paste.
fn help() -> String {
    format!(
        "buzz-backend-kubernetes {version}: the Buzz provider that runs an agent as a Kubernetes pod.

It takes no arguments: one JSON request on stdin, one JSON response line on
stdout (exit 0 whenever a response was written, ok:false included), progress
on stderr.

Operations:
  {{\"op\":\"info\"}}
      the provider's name, protocol_version, operations and default image
  {{\"op\":\"deploy\",\"agent\":{{...}},\"provider_config\":{{...}}}}
      at most one live pod for the agent's key; answers {{\"ok\":true,\"agent_id\":...}}
      only once the harness container runs
  {{\"op\":\"undeploy\",\"agent\":{{\"pubkey\":\"<64 hex>\"}},\"provider_config\":{{...}}}}
      removes the agent's pods and Secrets, fenced and graceful

provider_config fields: {fields}
  namespace (required), image (a tag or @sha256 digest; never :latest),
  context (kubeconfig context; default: the current one),
  cpu_request ({cpu_req}), memory_request ({mem_req}), cpu_limit ({cpu_lim}), memory_limit ({mem_lim}):
  Kubernetes quantities, defaults in brackets;
  inactivity_seconds (0 = never stop on inactivity), doze_seconds (0 = no doze), service_account,
  telemetry_url (https://).

Example:
  echo '{{\"op\":\"info\"}}' | buzz-backend-kubernetes

Environment:
  KUBECONFIG                       kubeconfig file(s), `:`-separated (default ~/.kube/config)
  {deadline}     deploy budget in seconds (default {deploy_secs})
  {undeploy}   undeploy budget in seconds (default {undeploy_secs})
",
        version = crate::consts::VERSION,
        fields = crate::config::FIELDS.join(", "),
        cpu_req = crate::consts::DEFAULT_CPU_REQUEST,
        mem_req = crate::consts::DEFAULT_MEMORY_REQUEST,
        cpu_lim = crate::consts::DEFAULT_CPU_LIMIT,
        mem_lim = crate::consts::DEFAULT_MEMORY_LIMIT,
        deadline = crate::consts::DEADLINE_ENV,
        deploy_secs = crate::consts::DEPLOY_DEADLINE.as_secs(),
        undeploy = crate::consts::UNDEPLOY_DEADLINE_ENV,
        undeploy_secs = crate::consts::UNDEPLOY_DEADLINE.as_secs(),
    )
}

/// The whole process, timed from now; prefer [`run`] with an `Instant`
/// captured first thing in `main`.
pub fn main() -> ExitCode {
    run(Instant::now())
}

/// The whole process: read, handle, write once, exit. `started` is the
/// process start, the origin of the operation deadline.
pub fn run(started: Instant) -> ExitCode {
    buzz_provider::envelope::run(&PROVIDER, started)
}
