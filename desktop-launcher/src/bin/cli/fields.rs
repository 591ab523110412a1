//! `agent create` / `agent edit` fields of `buzz-launcher` (issue 5
//! "Commands"): the flags and how they apply to a record. Split from the
//! binary's main file by concept; the rules themselves live in the library
//! (the store refuses secret-shaped names, the normaliser checks config).

use anyhow::{Context, Result, bail};
use clap::Args;
use desktop_launcher::app;
use desktop_launcher::discovery;
use desktop_launcher::record::{AgentRecord, Backend};
use std::io::Read;
use std::path::PathBuf;

#[derive(Args, Default)]
pub(crate) struct Fields {
    #[arg(long)]
    relay_url: Option<String>,
    /// `local` or `provider:<id>`.
    #[arg(long)]
    backend: Option<String>,
    #[arg(long)]
    display_name: Option<String>,
    #[arg(long)]
    channel: Option<String>,
    #[arg(long)]
    command: Option<String>,
    /// Agent args (repeatable; replaces the list).
    #[arg(long = "arg")]
    args: Vec<String>,
    #[arg(long)]
    persona: Option<String>,
    #[arg(long)]
    system_prompt: Option<String>,
    #[arg(long)]
    model: Option<String>,
    #[arg(long)]
    provider: Option<String>,
    #[arg(long)]
    turn_timeout: Option<u64>,
    #[arg(long)]
    idle_timeout: Option<u64>,
    #[arg(long)]
    max_turn_duration: Option<u64>,
    #[arg(long)]
    parallelism: Option<u64>,
    #[arg(long)]
    respond_to: Option<String>,
    /// Allowlist entry (repeatable; replaces the list).
    #[arg(long = "allow")]
    allow: Vec<String>,
    /// `KEY=VALUE` for the agent env layer; an empty value removes the key.
    /// Prefer `--env-file` for secret values (argv is visible to other processes).
    #[arg(long = "env")]
    env: Vec<String>,
    /// Read `KEY=VALUE` lines for the agent env layer from a file, or from
    /// stdin with `-` (blank lines and `#` comments are skipped).
    #[arg(long = "env-file")]
    env_file: Option<PathBuf>,
    /// `key=value` for provider_config; an empty value clears the field.
    #[arg(long = "config")]
    config: Vec<String>,
    #[arg(long)]
    workdir: Option<PathBuf>,
    #[arg(long)]
    relay_observer: Option<bool>,
    /// A built-in agent instead of --command: `echo` (a smoke test that
    /// answers each prompt with its text; never for real work).
    #[arg(long)]
    agent: Option<String>,
}

/// Splits `KEY=VALUE`. The error never echoes the argument: it may be a
/// secret typed without its key (spec I2: env values are never rendered).
fn split_kv(s: &str) -> Result<(&str, &str)> {
    match s.split_once('=') {
        Some(kv) => Ok(kv),
        None => bail!("expected KEY=VALUE (the argument is not shown: it may hold a secret)"),
    }
}

/// The `KEY=VALUE` lines of an env file (`-` = stdin).
fn read_env_file(path: &std::path::Path) -> Result<Vec<String>> {
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read the env file from stdin")?;
        s
    } else {
        std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the env file {}", path.display()))?
    };
    Ok(text
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(str::to_string)
        .collect())
}

/// The record as `agent show` prints it: env values masked (spec I2 "never
/// rendered"); names stay visible.
pub(crate) fn masked_record(rec: &AgentRecord) -> serde_json::Value {
    let mut v = serde_json::to_value(rec).unwrap_or_default();
    if let Some(env) = v.get_mut("env").and_then(|e| e.as_object_mut()) {
        for val in env.values_mut() {
            *val = serde_json::Value::String("********".into());
        }
    }
    v
}

fn opt(v: &Option<String>) -> Option<Option<String>> {
    v.as_ref()
        .map(|s| if s.is_empty() { None } else { Some(s.clone()) })
}

pub(crate) fn apply(rec: &mut AgentRecord, f: &Fields) -> Result<()> {
    if let Some(u) = &f.relay_url {
        rec.relay_url = u.clone();
    }
    if let Some(b) = &f.backend {
        rec.backend = match b.as_str() {
            "local" => Backend::Local,
            other => match other.strip_prefix("provider:") {
                Some(id) if discovery::valid_id(id) => {
                    let config = match &rec.backend {
                        Backend::Provider { config, .. } => config.clone(),
                        Backend::Local => Default::default(),
                    };
                    Backend::Provider {
                        id: id.to_string(),
                        config,
                        path_cache: None,
                    }
                }
                _ => bail!("--backend must be `local` or `provider:<id>` with id [a-z0-9][a-z0-9_-]*"),
            },
        };
    }
    macro_rules! set_opt {
        ($($field:ident),*) => {$(
            if let Some(v) = opt(&f.$field) { rec.$field = v; }
        )*};
    }
    set_opt!(display_name, channel, persona, system_prompt, model, provider);
    if let Some(c) = opt(&f.command) {
        rec.agent_command = c;
    }
    if !f.args.is_empty() {
        rec.agent_args = f.args.iter().filter(|a| !a.is_empty()).cloned().collect();
    }
    for (field, v) in [
        (&mut rec.turn_timeout_seconds, f.turn_timeout),
        (&mut rec.idle_timeout_seconds, f.idle_timeout),
        (&mut rec.max_turn_duration_seconds, f.max_turn_duration),
        (&mut rec.parallelism, f.parallelism),
    ] {
        if let Some(n) = v {
            *field = if n == 0 { None } else { Some(n) };
        }
    }
    if let Some(r) = &f.respond_to {
        rec.respond_to = r.clone();
    }
    if !f.allow.is_empty() {
        rec.respond_to_allowlist = f.allow.iter().filter(|a| !a.is_empty()).cloned().collect();
    }
    let from_file = match &f.env_file {
        Some(p) => read_env_file(p)?,
        None => Vec::new(),
    };
    for kv in from_file.iter().chain(&f.env) {
        let (k, v) = split_kv(kv)?;
        if v.is_empty() {
            rec.env.remove(k);
        } else {
            rec.env.insert(k.to_string(), v.to_string());
        }
    }
    if !f.config.is_empty() {
        let Backend::Provider { config, .. } = &mut rec.backend else {
            bail!("--config applies to provider backends only; set --backend provider:<id> first");
        };
        for kv in &f.config {
            let (k, v) = split_kv(kv)?;
            app::set_config_field(config, k, v);
        }
        desktop_launcher::payload::normalize_provider_config(config, None)?;
    }
    if let Some(w) = &f.workdir {
        rec.workdir = Some(w.clone());
    }
    if let Some(o) = f.relay_observer {
        rec.relay_observer = o;
    }
    if let Some(a) = &f.agent {
        match a.as_str() {
            "echo" => {
                rec.agent_command = Some(buzz_contract::env::BUILTIN_ECHO_AGENT.to_string());
                rec.agent_args.clear();
            }
            _ => bail!(
                "--agent knows only `echo` (the built-in smoke-test agent); use --command for a real ACP agent"
            ),
        }
    }
    Ok(())
}
