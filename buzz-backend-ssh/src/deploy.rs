//! `deploy` on a server over SSH (issue 51 item 3; spec §deploy, I1, I4):
//! at most one live harness per agent key on the host, the same request a
//! no-op, a changed one stop-then-start, and success only once the harness
//! passed its startup checks.
//!
//! 1. Every check before anything is run: `provider_config`
//!    ([`crate::config`]), the payload ([`buzz_provider::payload`]), the
//!    env file's values ([`crate::unit::env_file`]), the harness binary
//!    here ([`crate::harness`]).
//! 2. One ssh call runs the deploy script ([`crate::script::deploy`]); a
//!    host without the harness (or with another build of it) answers
//!    `need-harness`, the binary is installed by a second call and the
//!    script runs again: one round trip when the host is current, three
//!    when it is not.
//! 3. The answer: `{"ok":true,"agent_id":"buzz-acp@<instance>.service",
//!    "generation":<the run's start nonce>}`; the launcher tells a fresh
//!    run by its presence `run` tag, which is that nonce.
//!
//! The budget: [`DEADLINE_ENV`] seconds from the process start (default
//! [`DEPLOY_DEADLINE`]), inside the launcher's own.

use crate::config::SshConfig;
use crate::error::SshError;
use crate::outcome::{self, Outcome};
use crate::script::{self, DeployScript};
use crate::unit;
use crate::{harness, ssh};
use buzz_provider::diag;
use buzz_provider::payload::{self, Settings};
use buzz_provider::refusal::{Refusal, RefusalRule};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The deploy's budget in seconds, from the process start.
pub const DEADLINE_ENV: &str = "BUZZ_SSH_DEPLOY_DEADLINE_SECS";
/// The default budget.
pub const DEPLOY_DEADLINE: Duration = Duration::from_secs(300);

/// A deploy that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployed {
    pub agent_id: String,
    /// The running run's start nonce.
    pub generation: String,
    /// ssh calls made.
    pub round_trips: u32,
}

/// The answer of a successful deploy.
pub fn success(d: &Deployed) -> Value {
    json!({ "ok": true, "agent_id": d.agent_id, "generation": d.generation })
}

/// The budget in force: [`DEADLINE_ENV`] or the default.
pub fn deadline(var: &str, default: Duration) -> Duration {
    std::env::var(var)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(default, Duration::from_secs)
}

/// A fresh start nonce: 32 lowercase hex.
fn fresh_generation() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// Runs `args` with `input`; ssh's own failures become errors.
pub fn call(cfg: &SshConfig, remote: &str, input: &[u8], until: Instant) -> Result<ssh::Output, SshError> {
    let out = ssh::run(&ssh::argv(cfg, remote), input, until).map_err(|e| SshError::Local(e.to_string()))?;
    match ssh::classify(cfg, &out) {
        Some(f) => Err(f.into()),
        None => Ok(out),
    }
}

/// What a script's output says, or why it said nothing.
pub fn read(cfg: &SshConfig, out: &ssh::Output) -> Result<Outcome, SshError> {
    for note in outcome::notes(&out.stdout) {
        diag::line(&note);
    }
    outcome::parse(&out.stdout).ok_or_else(|| SshError::NoAnswer {
        host: cfg.host.to_string(),
        status: out.status.map_or("none".into(), |s| s.to_string()),
        detail: match out.stderr.trim() {
            "" => String::new(),
            e => format!(
                ": {}",
                e.lines()
                    .last()
                    .unwrap_or_default()
                    .chars()
                    .take(300)
                    .collect::<String>()
            ),
        },
    })
}

/// A deploy, end to end. `started` is the process start.
pub fn deploy(agent_v: &Value, config_v: &Value, started: Instant) -> Result<Deployed, SshError> {
    let cfg = SshConfig::parse(config_v)?;
    let generation = fresh_generation();
    let checked = payload::check(
        agent_v,
        Settings {
            inactivity_seconds: cfg.inactivity_seconds,
            doze_seconds: cfg.doze_seconds,
            generation: &generation,
            mcp_command: None,
            command_resolved: "on the host (on the unit's PATH: ~/.local/bin, ~/bin, /usr/local/bin, /usr/bin, /bin)",
        },
    )?;
    let mut env = checked.env;
    // The nonce is in the run file, so one request writes one env file.
    env.remove(buzz_contract::env::START_NONCE);
    let env_text = unit::env_file(&env).map_err(|e| Refusal::new(RefusalRule::Env, e.to_string()))?;
    let instance = unit::instance(&checked.agent.name, &checked.pubkey);
    // Keyed by the key alone, so a renamed agent keeps its files.
    let workdir = cfg
        .workdir
        .clone()
        .unwrap_or_else(|| format!("~/buzz-agents/{}", unit::key12(&checked.pubkey)));
    let harness = harness::locate(cfg.harness_path.as_deref()).map_err(SshError::Harness)?;
    let template = unit::template();
    let run = unit::run_file(&generation);
    let text = script::deploy(&DeployScript {
        instance: &instance,
        pubkey: &checked.pubkey,
        workdir: &workdir,
        env: &env_text,
        run: &run,
        template: &template,
        harness_digest: &harness.digest,
        arch: &harness.arch,
    });
    let until = started + deadline(DEADLINE_ENV, DEPLOY_DEADLINE);
    let host = cfg.host.to_string();
    let agent_id = unit::unit_name(&instance);
    let mut round_trips = 0;
    let mut installed = false;
    loop {
        diag::line(&format!("deploying on {host}"));
        let out = call(&cfg, "sh -s", text.as_bytes(), until)?;
        round_trips += 1;
        match read(&cfg, &out)? {
            Outcome::Started => {
                return Ok(Deployed {
                    agent_id,
                    generation,
                    round_trips,
                });
            }
            Outcome::Unchanged { generation } => {
                diag::line(&format!(
                    "{agent_id} already runs this request on {host}; nothing changed"
                ));
                return Ok(Deployed {
                    agent_id,
                    generation,
                    round_trips,
                });
            }
            Outcome::NeedHarness if !installed => {
                diag::line(&format!(
                    "installing the harness ({}) on {host}",
                    harness.path.display()
                ));
                let bytes = std::fs::read(&harness.path).map_err(|e| {
                    SshError::Harness(format!("{} cannot be read: {e}", harness.path.display()))
                })?;
                let out = call(&cfg, &script::install(&harness.digest), &bytes, until)?;
                round_trips += 1;
                match read(&cfg, &out)? {
                    Outcome::Installed => installed = true,
                    Outcome::Failed(failure) => return Err(SshError::Host { host, failure }),
                    other => return Err(unexpected(&host, &other)),
                }
            }
            Outcome::Failed(failure) => return Err(SshError::Host { host, failure }),
            other => return Err(unexpected(&host, &other)),
        }
    }
}

fn unexpected(host: &str, o: &Outcome) -> SshError {
    SshError::Host {
        host: host.into(),
        failure: crate::outcome::HostFailure::Other {
            code: "unexpected".into(),
            detail: format!("{o:?}"),
        },
    }
}
