//! `agent create` / `agent edit` fields of `buzz-launcher` (issue 5
//! "Commands"): the flags and how they apply to a record. Split from the
//! binary's main file by concept; the rules themselves live in the library
//! (the store refuses secret-shaped names, the normaliser checks config,
//! [`desktop_launcher::presets`] fills a record from an agent preset).
//!
//! `--agent` and `--command` exclude each other (clap refuses both); the
//! preset is applied before `--arg`, so `--arg` replaces the preset's args.
//! Env flags are read by [`super::secret_env`] (the env values' channels).

use anyhow::{Result, bail};
use clap::Args;
use desktop_launcher::app;
use desktop_launcher::discovery;
use desktop_launcher::presets;
use desktop_launcher::record::{AgentRecord, Backend};
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
    /// A custom ACP agent command (a name on PATH; a host path for local agents only).
    #[arg(long, conflicts_with = "agent")]
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
    /// The agent's session mode id, set by the harness with `session/set_mode`
    /// (e.g. acceptEdits, bypassPermissions, full-access, yolo); empty clears.
    #[arg(long)]
    permission_mode: Option<String>,
    /// How the harness answers permission requests: allow, reject or ask-owner; empty clears (the harness default: allow).
    #[arg(long)]
    permission_policy: Option<String>,
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
    /// `KEY=VALUE` for the agent env layer (plain values; an empty value
    /// removes the key). Secret names (*_API_KEY, *_TOKEN, *SECRET*, a
    /// preset's key) are refused here: argv is visible to other processes.
    #[arg(long = "env")]
    pub(crate) env: Vec<String>,
    /// Read secret `KEY=VALUE` lines from a file (`-`: stdin): blank lines and
    /// `#` comments skipped, one pair of quotes around a value removed, a bad
    /// line refused by its number. Stored beside the agent's key, not in the record.
    #[arg(long = "env-file", conflicts_with = "env_stdin")]
    pub(crate) env_file: Option<PathBuf>,
    /// As --env-file, reading the lines from stdin.
    #[arg(long = "env-stdin")]
    pub(crate) env_stdin: bool,
    /// `key=value` for provider_config; an empty value clears the field.
    #[arg(long = "config")]
    config: Vec<String>,
    #[arg(long)]
    workdir: Option<PathBuf>,
    #[arg(long)]
    relay_observer: Option<bool>,
    /// An agent preset instead of --command: claude, codex, gemini, goose or
    /// echo (the built-in smoke-test agent). Fills in the command name; the
    /// preset's args apply unless --arg is given; never anything secret.
    #[arg(long)]
    pub(crate) agent: Option<String>,
}

impl Fields {
    /// True when the edit changes what runs or where (the warnings' cue).
    pub(crate) fn changes_runtime(&self) -> bool {
        self.agent.is_some() || self.command.is_some() || self.backend.is_some()
    }
}

/// The record as `agent show` prints it: env values masked (spec I2 "never
/// rendered"); names stay visible; the preset and the permission knobs are
/// always shown beside the model (null when unset).
pub(crate) fn masked_record(rec: &AgentRecord) -> serde_json::Value {
    let mut v = serde_json::to_value(rec).unwrap_or_default();
    if let Some(env) = v.get_mut("env").and_then(|e| e.as_object_mut()) {
        for val in env.values_mut() {
            *val = serde_json::Value::String("********".into());
        }
    }
    if let Some(o) = v.as_object_mut() {
        let preset = rec
            .agent_command
            .as_deref()
            .and_then(buzz_contract::agents::preset_for_command)
            .map(|p| p.name);
        o.insert("agent_preset".into(), serde_json::json!(preset));
        o.insert("permission_mode".into(), serde_json::json!(rec.permission_mode));
        o.insert(
            "permission_policy".into(),
            serde_json::json!(rec.permission_policy),
        );
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
    if let Some(a) = &f.agent {
        presets::apply(rec, presets::lookup(a)?);
    }
    if let Some(m) = opt(&f.permission_mode) {
        if let Some(m) = &m {
            presets::check_permission_mode(m.trim())?;
        }
        rec.permission_mode = m.map(|m| m.trim().to_string());
    }
    if let Some(p) = opt(&f.permission_policy) {
        rec.permission_policy = match p {
            Some(p) => Some(presets::permission_policy(&p)?.as_str().to_string()),
            None => None,
        };
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
    if !f.config.is_empty() {
        let Backend::Provider { config, .. } = &mut rec.backend else {
            bail!("--config applies to provider backends only; set --backend provider:<id> first");
        };
        for kv in &f.config {
            let (k, v) = super::secret_env::split_kv(kv)?;
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
    Ok(())
}
