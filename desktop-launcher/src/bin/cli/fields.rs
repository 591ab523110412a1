//! `agent create` / `agent edit` fields of `buzz-launcher` (issue 5
//! "Commands"; issue 24 item 3 "validate at create and edit"): the flags
//! and how they apply to a record. Split from the binary's main file by
//! concept; the rules themselves live where every front end finds them:
//!
//! - the relay URL: [`buzz_contract::relay_url::check`] (the Start page's
//!   rule too; the harness refuses the same URLs at start);
//! - the respond-to gate: [`buzz_contract::gate`] (the harness's parser and
//!   allowlist rule), its modes offered as clap's possible values;
//! - parallelism: 1..=[`buzz_contract::env::MAX_AGENTS`], the harness's bound;
//! - env keys: [`desktop_launcher::app::rules::check_key`] (see [`super::secret_env`]);
//! - a preset with a different custom command:
//!   [`rules::check_preset_and_command`] (the page's rule);
//! - config: the normaliser of the page and of `start`.
//!
//! Every refusal is a [`FieldError`]: it names the flag and the fix, and
//! the binary exits 2 for it, as for clap's own usage errors. The preset is
//! applied before `--arg`, so `--arg` replaces the preset's args.

use buzz_contract::env::MAX_AGENTS;
use buzz_contract::gate::{self, GateError, RespondTo};
use clap::Args;
use clap::builder::PossibleValuesParser;
use desktop_launcher::app::{self, AgentRecord, Backend, rules};
use std::path::PathBuf;

/// A refused flag value: the flag, and one sentence that says what to do
/// (never the value when it may be a secret). Exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{flag}: {message}")]
pub(crate) struct FieldError {
    pub(crate) flag: &'static str,
    message: String,
}

impl FieldError {
    pub(crate) fn new(flag: &'static str, message: impl std::fmt::Display) -> FieldError {
        FieldError {
            flag,
            message: message.to_string(),
        }
    }
}

#[derive(Args, Default)]
pub(crate) struct Fields {
    /// Relay WebSocket URL: wss://HOST[:PORT], or ws://HOST:PORT for a relay
    /// without TLS; no user:password@ (agents log in with their key). On
    /// create the default is this state dir's embedded relay.
    #[arg(long = "relay", alias = "relay-url", value_name = "URL")]
    pub(crate) relay: Option<String>,
    /// Where the agent runs: `local` (a harness on this machine) or
    /// `provider:<id>` (deployed by `buzz-backend-<id>`, see `providers`).
    #[arg(long, value_name = "local|provider:ID")]
    backend: Option<String>,
    /// Name shown for the agent (the session title derives from it); empty clears.
    #[arg(long, value_name = "TEXT")]
    display_name: Option<String>,
    /// Channel (`h` tag) that stop and chat messages are sent to; empty clears.
    #[arg(long, value_name = "CHANNEL")]
    channel: Option<String>,
    /// A custom ACP agent command instead of --agent: a name on the agent's
    /// PATH (for local agents also a host path); empty clears (default: goose).
    #[arg(long, value_name = "COMMAND")]
    command: Option<String>,
    /// One agent argument (repeatable; replaces the list; without any, the
    /// preset's args apply).
    #[arg(long = "arg", value_name = "ARG")]
    args: Vec<String>,
    /// A persona of settings.json (command, args, prompt, model and env
    /// under the agent's own); empty clears.
    #[arg(long, value_name = "NAME")]
    persona: Option<String>,
    /// System prompt handed to the agent session; empty clears.
    #[arg(long, value_name = "TEXT")]
    system_prompt: Option<String>,
    /// Model id handed to the agent (e.g. claude-sonnet-4-5); empty clears.
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// The agent's session mode id, set by the harness with `session/set_mode`
    /// (e.g. acceptEdits, bypassPermissions, full-access, yolo); empty clears.
    #[arg(long, value_name = "MODE")]
    permission_mode: Option<String>,
    /// How the harness answers permission requests: allow, reject or ask-owner; empty clears (the harness default: allow).
    #[arg(long, value_name = "allow|reject|ask-owner")]
    permission_policy: Option<String>,
    /// The same for mentions by anyone but the owner (authors `--respond-to` admits):
    /// allow, reject or ask-owner; empty clears (the harness default: reject).
    #[arg(long, value_name = "allow|reject|ask-owner")]
    permission_policy_others: Option<String>,
    /// The model provider the agent uses (e.g. anthropic, openai); empty clears.
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// Seconds one turn may take (sent to a provider as turn_timeout_seconds); 0 clears.
    #[arg(long, value_name = "SECONDS")]
    turn_timeout: Option<u64>,
    /// Seconds of agent silence allowed within a turn (harness default 900); 0 clears.
    #[arg(long, value_name = "SECONDS")]
    idle_timeout: Option<u64>,
    /// Hard cap on one turn, in seconds (harness default 7200); 0 clears.
    #[arg(long, value_name = "SECONDS")]
    max_turn_duration: Option<u64>,
    /// Stop after this many idle seconds, to sleep until a mention wakes it
    /// (0: never; `default`: 900 while a waker runs, else none locally and
    /// the provider's own).
    #[arg(long, value_name = "SECONDS|default", value_parser = parse_inactivity)]
    inactivity: Option<Inactivity>,
    /// Doze after this many idle seconds: the agent's processes end and the
    /// harness stays on the relay, presence `away`, answering the next
    /// mention by itself (0: never; `default`: 300).
    #[arg(long, value_name = "SECONDS|default", value_parser = parse_doze)]
    doze: Option<Inactivity>,
    /// Agent sessions run in parallel, 1 to 32 (harness default 1); 0 clears.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=MAX_AGENTS))]
    parallelism: Option<u64>,
    /// Who gets answers (the owner's control messages always pass):
    /// owner-only (default), allowlist (the owner and the --allow keys),
    /// anyone, nobody.
    #[arg(long, value_name = "MODE", value_parser = PossibleValuesParser::new(RespondTo::NAMES))]
    respond_to: Option<String>,
    /// A public key (64 hex) answered with --respond-to allowlist
    /// (repeatable; replaces the list; `--allow ''` clears it).
    #[arg(long = "allow", value_name = "HEX")]
    allow: Vec<String>,
    /// `KEY=VALUE` for the agent env layer (plain values; an empty value
    /// removes the key). Secret names (*_API_KEY, *_TOKEN, *SECRET*, a
    /// preset's key) are refused here: argv is visible to other processes;
    /// so are names the launcher sets itself (BUZZ_PRIVATE_KEY,
    /// BUZZ_RELAY_URL, … and PATH, HOME).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub(crate) env: Vec<String>,
    /// Read secret `KEY=VALUE` lines from a file (`-`: stdin), which group
    /// and others must not be able to read (chmod 600): blank lines and `#`
    /// comments skipped, one pair of quotes around a value removed, a bad
    /// line refused by its number. Stored beside the agent's key, not in the record.
    #[arg(long = "env-file", value_name = "FILE", conflicts_with = "env_stdin")]
    pub(crate) env_file: Option<PathBuf>,
    /// As --env-file, reading the lines from stdin.
    #[arg(long = "env-stdin")]
    pub(crate) env_stdin: bool,
    /// `key=value` for provider_config (repeatable; the provider's fields,
    /// e.g. namespace=… and image=… for kubernetes); an empty value clears the field.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    config: Vec<String>,
    /// Working directory of the local harness and of the provider (default:
    /// a private directory in the state dir).
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
    /// Send owner-encrypted telemetry frames to the relay: true or false.
    #[arg(long, value_name = "BOOL")]
    relay_observer: Option<bool>,
    /// An agent preset instead of --command: claude, codex, gemini, goose or
    /// echo (the built-in smoke-test agent). Fills in the command name; the
    /// preset's args apply unless --arg is given; never anything secret.
    #[arg(long, value_name = "PRESET")]
    pub(crate) agent: Option<String>,
}

impl Fields {
    /// True when the edit changes what runs or where (the warnings' cue).
    pub(crate) fn changes_runtime(&self) -> bool {
        self.agent.is_some() || self.command.is_some() || self.backend.is_some()
    }
}

/// The record as `agent show` prints it: env values masked (spec I2 "never
/// rendered") and URL credentials too; names stay visible; the preset and the permission knobs are
/// always shown beside the model (null when unset).
pub(crate) fn masked_record(rec: &AgentRecord) -> serde_json::Value {
    let mut v = serde_json::to_value(rec).unwrap_or_default();
    if let Some(env) = v.get_mut("env").and_then(|e| e.as_object_mut()) {
        for val in env.values_mut() {
            *val = serde_json::Value::String("********".into());
        }
    }
    if let Some(o) = v.as_object_mut() {
        // An old record may hold credentials in its URL (refused since).
        o.insert(
            "relay_url".into(),
            serde_json::json!(buzz_contract::redact::scrub_url_userinfo(&rec.relay_url)),
        );
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
        o.insert(
            "permission_policy_others".into(),
            serde_json::json!(rec.permission_policy_others),
        );
    }
    v
}

fn opt(v: &Option<String>) -> Option<Option<String>> {
    v.as_ref()
        .map(|s| if s.is_empty() { None } else { Some(s.clone()) })
}

/// The fix of a gate refusal, by flag.
fn gate_error(e: GateError) -> FieldError {
    match e {
        GateError::Mode => FieldError::new("--respond-to", e),
        GateError::Entry(_) => FieldError::new(
            "--allow",
            format!("{e}; give each --allow as the 64 hex characters of a public key"),
        ),
        GateError::EmptyAllowlist => FieldError::new(
            "--allow",
            format!("{e}; add the keys it answers with --allow HEX (repeatable)"),
        ),
    }
}

/// The respond-to mode and allowlist `rec` ends with, checked as the
/// harness checks them at start (run when either flag was given).
fn check_gate(rec: &mut AgentRecord, f: &Fields) -> Result<(), FieldError> {
    let mode = RespondTo::parse(&rec.respond_to).map_err(gate_error)?;
    if !f.allow.iter().all(String::is_empty) && mode != RespondTo::Allowlist {
        return Err(FieldError::new(
            "--allow",
            format!(
                "the allowlist applies only with --respond-to allowlist (this agent answers {}); add --respond-to allowlist or drop --allow",
                mode.as_str()
            ),
        ));
    }
    rec.respond_to_allowlist =
        gate::validate_allowlist(mode, &rec.respond_to_allowlist).map_err(gate_error)?;
    Ok(())
}

pub(crate) fn apply(rec: &mut AgentRecord, f: &Fields) -> Result<(), FieldError> {
    if let Some(u) = &f.relay {
        rec.relay_url = buzz_contract::relay_url::check(u).map_err(|e| FieldError::new("--relay", e))?;
    }
    if let Some(b) = &f.backend {
        rec.backend = match b.as_str() {
            "local" => Backend::Local,
            other => match other.strip_prefix("provider:") {
                Some(id) if rules::valid_provider_id(id) => {
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
                _ => {
                    return Err(FieldError::new(
                        "--backend",
                        "give `local` or `provider:<id>` with id [a-z0-9][a-z0-9_-]* (`buzz-launcher providers` lists the ids found)",
                    ));
                }
            },
        };
    }
    macro_rules! set_opt {
        ($($field:ident),*) => {$(
            if let Some(v) = opt(&f.$field) { rec.$field = v; }
        )*};
    }
    set_opt!(display_name, channel, persona, system_prompt, model, provider);
    match &f.agent {
        Some(a) => {
            let preset = rules::lookup_preset(a).map_err(|e| FieldError::new("--agent", e))?;
            if let Some(Some(c)) = opt(&f.command) {
                rules::check_preset_and_command(preset, &c)
                    .map_err(|e| FieldError::new("--command", format!("{e}; give --agent or --command")))?;
            }
            rules::apply_preset(rec, preset);
        }
        None => {
            if let Some(c) = opt(&f.command) {
                rec.agent_command = c;
            }
        }
    }
    if let Some(m) = opt(&f.permission_mode) {
        if let Some(m) = &m {
            rules::check_permission_mode(m.trim()).map_err(|e| FieldError::new("--permission-mode", e))?;
        }
        rec.permission_mode = m.map(|m| m.trim().to_string());
    }
    for (field, flag, value) in [
        (
            &mut rec.permission_policy,
            "--permission-policy",
            &f.permission_policy,
        ),
        (
            &mut rec.permission_policy_others,
            "--permission-policy-others",
            &f.permission_policy_others,
        ),
    ] {
        if let Some(p) = opt(value) {
            *field = match p {
                Some(p) => Some(
                    rules::permission_policy(&p)
                        .map_err(|e| FieldError::new(flag, e))?
                        .as_str()
                        .to_string(),
                ),
                None => None,
            };
        }
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
    if let Some(Inactivity(n)) = f.inactivity {
        rec.inactivity_seconds = n;
    }
    if let Some(Inactivity(n)) = f.doze {
        rec.doze_seconds = n;
    }
    if let Some(r) = &f.respond_to {
        rec.respond_to = RespondTo::parse(r).map_err(gate_error)?.as_str().to_string();
    }
    if !f.allow.is_empty() {
        rec.respond_to_allowlist = f.allow.iter().filter(|a| !a.is_empty()).cloned().collect();
    }
    if f.respond_to.is_some() || !f.allow.is_empty() {
        check_gate(rec, f)?;
    }
    if !f.config.is_empty() {
        let Backend::Provider { config, .. } = &mut rec.backend else {
            return Err(FieldError::new(
                "--config",
                "provider config applies to provider backends only; set --backend provider:<id> first",
            ));
        };
        for kv in &f.config {
            let (k, v) = super::secret_env::split_kv("--config", kv)?;
            app::set_config_field(config, k, v);
        }
        rules::normalize_provider_config(config, None).map_err(|e| FieldError::new("--config", e))?;
    }
    if let Some(w) = &f.workdir {
        rec.workdir = Some(w.clone());
    }
    if let Some(o) = f.relay_observer {
        rec.relay_observer = o;
    }
    Ok(())
}

/// `--inactivity` and `--doze`: seconds, or `default` (the record sets none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inactivity(Option<u64>);

fn parse_inactivity(s: &str) -> Result<Inactivity, String> {
    seconds_or_default(s, "never stop when idle")
}

/// `--doze`: seconds, or `default` (the record sets none).
fn parse_doze(s: &str) -> Result<Inactivity, String> {
    seconds_or_default(s, "never doze")
}

fn seconds_or_default(s: &str, zero: &str) -> Result<Inactivity, String> {
    match s.trim() {
        "default" => Ok(Inactivity(None)),
        n => n
            .parse()
            .map(|n| Inactivity(Some(n)))
            .map_err(|_| format!("a whole number of seconds (0: {zero}), or `default`")),
    }
}
