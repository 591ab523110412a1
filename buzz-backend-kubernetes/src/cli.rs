//! The process entry point shared by the `buzz-backend-kubernetes` binary
//! (spec §Invocation; [L2] item 1).
//!
//! Exit code carries one bit: 0 whenever a response was written (`ok:false`
//! included), and the single code [`EXIT_CRASH`] on every crash path with
//! nothing on stdout ([L2]: non-zero values carry no structured meaning) —
//! the response is written in a single write at the very end, and a panic is
//! caught before it, so no half response can appear.
//!
//! The operation deadline is measured from process start: callers capture an
//! [`Instant`] first thing in `main` and pass it to [`run`].

use crate::protocol;
use buzz_contract::wire::MAX_REQUEST_BYTES;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Instant;

/// Setting this to `panic` makes the process panic after reading stdin (tests only).
pub const CRASH_TEST_ENV: &str = "BUZZ_K8S_CRASH_TEST";
/// The one exit code of every crash path (a caught panic, stdin or stdout failure).
pub const EXIT_CRASH: u8 = 1;

/// Exit code of a command line this binary does not take (nothing on stdout).
pub const EXIT_USAGE: u8 = 2;

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

/// `--help` and `--version` answer on stdout; any other argument is refused
/// on stderr with [`EXIT_USAGE`]; no argument (the protocol) returns `None`.
fn arguments(mut args: impl Iterator<Item = std::ffi::OsString>) -> Option<ExitCode> {
    let first = args.next()?;
    match first.to_str() {
        Some("--help" | "-h" | "help") => {
            print!("{}", help());
            Some(ExitCode::SUCCESS)
        }
        Some("--version" | "-V") => {
            println!("buzz-backend-kubernetes {}", crate::consts::VERSION);
            Some(ExitCode::SUCCESS)
        }
        _ => {
            eprintln!(
                "buzz-backend-kubernetes: unexpected argument {:?}; this provider takes no arguments and reads one JSON request on stdin (try --help)",
                first.to_string_lossy()
            );
            Some(ExitCode::from(EXIT_USAGE))
        }
    }
}

/// The whole process, timed from now; prefer [`run`] with an `Instant`
/// captured first thing in `main`.
pub fn main() -> ExitCode {
    run(Instant::now())
}

/// The whole process: read, handle, write once, exit. `started` is the
/// process start, the origin of the operation deadline.
pub fn run(started: Instant) -> ExitCode {
    if let Some(code) = arguments(std::env::args_os().skip(1)) {
        return code;
    }
    // The default hook prints the panic payload, which could hold input data.
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("buzz-backend-kubernetes: internal error{at}; no response was written");
    }));
    let mut input = Vec::new();
    let limit = (MAX_REQUEST_BYTES + 1) as u64;
    if let Err(e) = std::io::stdin().lock().take(limit).read_to_end(&mut input) {
        eprintln!("buzz-backend-kubernetes: could not read stdin: {e}");
        return ExitCode::from(EXIT_CRASH);
    }
    let response = match std::panic::catch_unwind(|| {
        // Test seam for the crash-path contract (a panic writes nothing to stdout).
        if std::env::var_os(CRASH_TEST_ENV).is_some_and(|v| v == "panic") {
            panic!("crash test requested");
        }
        protocol::handle(&input, started)
    }) {
        Ok(r) => r,
        Err(_) => return ExitCode::from(EXIT_CRASH),
    };
    let mut line = response.to_string();
    line.push('\n');
    let mut out = std::io::stdout().lock();
    if out.write_all(line.as_bytes()).and_then(|_| out.flush()).is_err() {
        return ExitCode::from(EXIT_CRASH);
    }
    ExitCode::SUCCESS
}
