//! The process entry point of the `buzz-backend-ssh` binary (spec
//! §Invocation; [L2] item 1): this binding's name, help and handler on the
//! one provider process of every binding ([`buzz_provider::envelope`]).

use buzz_provider::envelope::Provider;
use buzz_provider::request::{Request, failure};
use buzz_provider::{diag, redact};
use serde_json::Value;
use std::process::ExitCode;
use std::time::Instant;

/// Setting this to `panic` makes the process panic after reading stdin (tests only).
pub const CRASH_TEST_ENV: &str = "BUZZ_SSH_CRASH_TEST";

/// This binding on the provider process.
pub static PROVIDER: Provider = Provider {
    name: "buzz-backend-ssh",
    version: env!("CARGO_PKG_VERSION"),
    help,
    handle,
    crash_test_env: CRASH_TEST_ENV,
};

fn help() -> String {
    format!(
        "buzz-backend-ssh {version}: the Buzz provider that runs an agent on your own server over SSH.

It takes no arguments: one JSON request on stdin, one JSON response line on
stdout (exit 0 whenever a response was written, ok:false included), progress
on stderr.

Operations:
  {{\"op\":\"info\"}}
      the provider's name, protocol_version, operations and config schema
  {{\"op\":\"deploy\",\"agent\":{{...}},\"provider_config\":{{\"host\":\"agent@vps.example.com\"}}}}
      one systemd --user unit per agent key on the host (buzz-acp@<name>-<key>);
      answers {{\"ok\":true,\"agent_id\":...}} once the harness passed its startup checks
  {{\"op\":\"undeploy\",\"agent\":{{\"name\":\"...\",\"pubkey\":\"<64 hex>\"}},\"provider_config\":{{...}}}}
      stops and removes the agent's units, env file and (unless keep_workspace) working directory

provider_config fields: {fields}

The host needs systemd, and lingering for the login (sudo loginctl enable-linger <user>).
ssh runs with BatchMode=yes and StrictHostKeyChecking=yes: add the host's key first.

Example:
  echo '{{\"op\":\"info\"}}' | buzz-backend-ssh

Environment:
  {deploy}   deploy budget in seconds (default {deploy_secs})
  {undeploy} undeploy budget in seconds (default {undeploy_secs})
",
        version = env!("CARGO_PKG_VERSION"),
        fields = crate::config::FIELDS.join(", "),
        deploy = crate::deploy::DEADLINE_ENV,
        deploy_secs = crate::deploy::DEPLOY_DEADLINE.as_secs(),
        undeploy = crate::undeploy::DEADLINE_ENV,
        undeploy_secs = crate::undeploy::UNDEPLOY_DEADLINE.as_secs(),
    )
}

/// Handles one request (never panics on input).
pub fn handle(bytes: &[u8], started: Instant) -> Value {
    let request = match buzz_provider::request::parse(bytes) {
        Ok(r) => r,
        Err(e) => return failure(&e.to_string()),
    };
    match request {
        Request::Info => crate::info::response(),
        Request::Deploy {
            agent,
            provider_config,
        } => {
            let r = redact::redactor_for(&agent);
            diag::set_redactor(r.clone());
            match crate::deploy::deploy(&agent, &provider_config, started) {
                Ok(d) => crate::deploy::success(&d),
                Err(e) => failure(&r.scrub(&e.to_string())),
            }
        }
        Request::Undeploy {
            agent,
            provider_config,
            keep_workspace,
        } => {
            let r = redact::redactor_for(&agent);
            diag::set_redactor(r.clone());
            match crate::undeploy::undeploy(&agent, &provider_config, keep_workspace, started) {
                Ok(removed) => crate::undeploy::success(&removed),
                Err(e) => failure(&r.scrub(&e.to_string())),
            }
        }
    }
}

/// The whole process, timed from `started` (the process start).
pub fn run(started: Instant) -> ExitCode {
    buzz_provider::envelope::run(&PROVIDER, started)
}
