//! `undeploy` on a server over SSH (issue 51 item 3; spec §Stop and
//! Delete): every unit of the agent's key stopped and disabled, its env
//! file and run files removed, and unless `keep_workspace` its working
//! directory and its conversation receipts; the template unit goes with
//! the user's last agent. No secret crosses: the request names the agent
//! by its public key. Answered as
//! `{"ok":true,"removed":{"pods":0,"secrets":0,"units":U,"env_files":E,"workspaces":W}}`.
//! Run under the agent's lock, so it never interleaves with a deploy of
//! the same key.

use crate::config::SshConfig;
use crate::deploy::{call, deadline, read};
use crate::error::SshError;
use crate::outcome::{HostFailure, Outcome};
use crate::script;
use buzz_contract::wire::Removed;
use buzz_provider::diag;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The undeploy's budget in seconds, from the process start.
pub const DEADLINE_ENV: &str = "BUZZ_SSH_UNDEPLOY_DEADLINE_SECS";
/// The default budget: the harness's 60 s stop and a margin.
pub const UNDEPLOY_DEADLINE: Duration = Duration::from_secs(150);

/// An undeploy, end to end. `started` is the process start.
pub fn undeploy(
    agent: &Value,
    config: &Value,
    keep_workspace: bool,
    started: Instant,
) -> Result<Removed, SshError> {
    let target = buzz_provider::request::undeploy_target(agent)?;
    let cfg = SshConfig::parse(config)?;
    let until = started + deadline(DEADLINE_ENV, UNDEPLOY_DEADLINE);
    diag::line(&format!("removing {}'s units from {}", target.name, cfg.host));
    let out = call(
        &cfg,
        "sh -s",
        script::undeploy(&target.pubkey, keep_workspace).as_bytes(),
        until,
    )?;
    match read(&cfg, &out)? {
        Outcome::Removed {
            units,
            env_files,
            workspaces,
        } => Ok(Removed {
            pods: 0,
            secrets: 0,
            workspaces,
            units: Some(units),
            env_files: Some(env_files),
            network_policies: None,
        }),
        Outcome::Failed(failure) => Err(SshError::Host {
            host: cfg.host.to_string(),
            failure,
        }),
        other => Err(SshError::Host {
            host: cfg.host.to_string(),
            failure: HostFailure::Other {
                code: "unexpected".into(),
                detail: format!("{other:?}"),
            },
        }),
    }
}

/// The answer of a successful undeploy.
pub fn success(r: &Removed) -> Value {
    json!({ "ok": true, "removed": r })
}
