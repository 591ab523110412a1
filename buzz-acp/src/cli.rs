//! Every harness knob as a clap argument with its env name and default
//! (wire-facts §5), plus test-oriented knobs (presence interval, shutdown
//! budget, reaper check interval, backoffs).
//!
//! Secret-bearing values (`BUZZ_PRIVATE_KEY`, `BUZZ_AUTH_TAG`) are plain
//! strings here so that clap never parses, echoes or shows them
//! (`hide_env_values`); validation happens in [`crate::config`] with errors
//! that carry no input text.

use buzz_contract::env;
use clap::Parser;

/// Parses a boolean env/flag value: `1/true/yes/on` or `0/false/no/off/""`.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    if env::is_truthy(s) {
        return Ok(true);
    }
    match s.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("expected one of 1, 0, true, false, yes, no, on, off".to_string()),
    }
}

/// The raw command line / environment of `buzz-acp`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "buzz-acp",
    version,
    about = "Buzz agent harness: relay ↔ ACP agent bridge"
)]
pub struct Cli {
    /// Relay WebSocket URL (required).
    #[arg(long, env = env::RELAY_URL)]
    pub relay_url: Option<String>,
    /// Agent private key, nsec or 64 hex (required; never logged).
    #[arg(long, env = env::PRIVATE_KEY, hide_env_values = true)]
    pub private_key: Option<String>,
    /// NIP-OA owner attestation (JSON array; never logged).
    #[arg(long, env = env::AUTH_TAG, hide_env_values = true)]
    pub auth_tag: Option<String>,
    /// 64-hex owner fallback when no auth tag verifies.
    #[arg(long, env = env::AGENT_OWNER)]
    pub agent_owner: Option<String>,
    /// ACP agent command name.
    #[arg(long, env = env::AGENT_COMMAND, default_value = "goose")]
    pub agent_command: String,
    /// Comma-separated ACP agent args (unset: the preset's args, else `acp`).
    #[arg(long, env = env::AGENT_ARGS)]
    pub agent_args: Option<String>,
    /// Parallel agent slots (1..=32).
    #[arg(long, env = env::AGENTS, default_value_t = 1)]
    pub agents: u32,
    /// Seconds of ACP silence allowed within a turn.
    #[arg(long, env = env::IDLE_TIMEOUT, default_value_t = 900)]
    pub idle_timeout: u64,
    /// Hard cap on one turn, seconds.
    #[arg(long, env = env::MAX_TURN_DURATION, default_value_t = 7200)]
    pub max_turn_duration: u64,
    /// System prompt passed to the agent session.
    #[arg(long, env = env::SYSTEM_PROMPT, hide_env_values = true)]
    pub system_prompt: Option<String>,
    /// Model: applied with `session/set_model` or the `model` config option
    /// when the agent advertises them, else passed as session `_meta.model`.
    #[arg(long, env = env::MODEL)]
    pub model: Option<String>,
    /// The agent's session mode id, applied with `session/set_mode`
    /// (e.g. `acceptEdits`, `full-access`, `yolo`).
    #[arg(long, env = env::PERMISSION_MODE)]
    pub permission_mode: Option<String>,
    /// How permission requests of the owner's turns are answered: allow
    /// (once, never always), reject, ask-owner.
    #[arg(long, env = env::PERMISSION_POLICY, default_value = "allow")]
    pub permission_policy: String,
    /// How permission requests of anyone else's turns are answered (an
    /// allowlisted author, or anyone under `--respond-to anyone`): reject,
    /// ask-owner, allow.
    #[arg(long, env = env::PERMISSION_POLICY_OTHERS, default_value = "reject")]
    pub permission_policy_others: String,
    /// Seconds `ask-owner` waits for the owner's `!allow` / `!deny`.
    #[arg(long, env = env::PERMISSION_TIMEOUT, default_value_t = 120)]
    pub permission_timeout_secs: u64,
    /// Inbound author gate: owner-only, allowlist, anyone, nobody.
    #[arg(long, env = env::RESPOND_TO, default_value = "owner-only")]
    pub respond_to: String,
    /// Comma-separated 64-hex allowlist.
    #[arg(long, env = env::RESPOND_TO_ALLOWLIST, default_value = "")]
    pub respond_to_allowlist: String,
    /// Spawn agents only when work arrives.
    #[arg(long, env = env::LAZY_POOL, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub lazy_pool: bool,
    /// I5 self-stop bound in seconds (0 = disabled).
    #[arg(long, env = env::EXIT_AFTER_INACTIVITY, default_value_t = 0)]
    pub exit_after_inactivity: u64,
    /// Doze bound in seconds (0 = disabled): with no turn for this long, end
    /// the agent processes and stay on the relay, presence `away`.
    #[arg(long, env = env::DOZE, default_value_t = 0)]
    pub doze: u64,
    /// The mentions that woke this harness (issue 33): event ids, comma-separated.
    #[arg(long, env = buzz_contract::wake::EVENTS_ENV, default_value = "")]
    pub wake_events: String,
    /// Unix seconds: a woken harness handles nothing created before it.
    #[arg(long, env = buzz_contract::wake::SINCE_ENV)]
    pub wake_since: Option<String>,
    /// Suppress presence (never set for a remote agent, I3).
    #[arg(long, env = env::NO_PRESENCE, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub no_presence: bool,
    /// MCP server command handed to the agent session.
    #[arg(long, env = env::MCP_COMMAND, default_value = "")]
    pub mcp_command: String,
    /// Session title (control characters dropped, at most 80 chars).
    #[arg(long, env = env::SESSION_TITLE)]
    pub session_title: Option<String>,
    /// Extra team instructions appended to the system prompt.
    #[arg(long, env = env::TEAM_INSTRUCTIONS, hide_env_values = true)]
    pub team_instructions: Option<String>,
    /// Owner-encrypted telemetry frames (accepted; not implemented by this harness).
    #[arg(long, env = env::RELAY_OBSERVER, default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub relay_observer: bool,
    /// Queueing policy (this harness always queues: one turn in flight per channel).
    #[arg(long, env = env::DEDUP, default_value = "queue")]
    pub dedup: String,
    /// Multiple-event handling policy (accepted; mentions queue per channel).
    #[arg(long, env = env::MULTIPLE_EVENT_HANDLING, default_value = "steer")]
    pub multiple_event_handling: String,
    /// Launch generation, 32 lowercase hex; becomes the presence `run` tag.
    #[arg(long, env = env::START_NONCE)]
    pub start_nonce: Option<String>,

    /// Comma-separated channel ids to scope the subscription (`#h`); empty = all.
    #[arg(long, env = env::CHANNELS, default_value = "")]
    pub channels: String,
    /// Publish the agent's final text as a kind 9 reply (off for agents that post their own).
    #[arg(long, env = "BUZZ_ACP_REPLY", default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub reply: bool,
    /// p-tag the asker in replies.
    #[arg(long, env = "BUZZ_ACP_REPLY_P_TAG", default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub reply_p_tag: bool,
    /// Publish a kind 20002 typing indicator every 3 s while a turn runs.
    #[arg(long, env = "BUZZ_ACP_TYPING", default_value = "false", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub typing: bool,
    /// React `👀` (kind 7) to each mention accepted into the queue (wire-facts §4).
    #[arg(long, env = "BUZZ_ACP_REACT_QUEUED", default_value = "true", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub react_queued: bool,
    /// Presence republish interval, seconds (wire-facts §3: 60).
    #[arg(long, env = "BUZZ_ACP_PRESENCE_INTERVAL_SECS", default_value_t = 60)]
    pub presence_interval_secs: u64,
    /// Total shutdown budget in seconds, including the 7 s finalization slice.
    #[arg(long, env = "BUZZ_ACP_SHUTDOWN_BUDGET_SECS", default_value_t = 60)]
    pub shutdown_budget_secs: u64,
    /// Longest drain of in-flight turns after cancel, seconds (further capped by the budget).
    #[arg(long, env = "BUZZ_ACP_SHUTDOWN_DRAIN_SECS", default_value_t = 30)]
    pub shutdown_drain_secs: u64,
    /// Wait between SIGTERM and SIGKILL of an agent process group, milliseconds.
    #[arg(long, env = "BUZZ_ACP_KILL_GRACE_MS", default_value_t = 5000)]
    pub kill_grace_ms: u64,
    /// Inactivity reaper check interval, milliseconds (effective bound [T, T+interval)).
    #[arg(long, env = "BUZZ_ACP_REAPER_CHECK_MS", default_value_t = 1000)]
    pub reaper_check_ms: u64,
    /// Wait for a cancelled turn to end before the agent is killed and respawned, milliseconds.
    #[arg(long, env = "BUZZ_ACP_CANCEL_GRACE_MS", default_value_t = 10_000)]
    pub cancel_grace_ms: u64,
    /// First respawn delay of a crashed agent, milliseconds (doubles, capped at 30 s).
    #[arg(long, env = "BUZZ_ACP_RESPAWN_BACKOFF_MS", default_value_t = 1000)]
    pub respawn_backoff_ms: u64,
    /// Consecutive deaths after which a slot counts as dead.
    #[arg(long, env = "BUZZ_ACP_MAX_AGENT_FAILURES", default_value_t = 5)]
    pub max_agent_failures: u32,
    /// Exit with "relay lost" after this many seconds without a live relay (0 = retry forever).
    #[arg(long, env = "BUZZ_ACP_RELAY_LOST_AFTER_SECS", default_value_t = 0)]
    pub relay_lost_after_secs: u64,
    /// First reconnect delay, milliseconds (wire-facts §2: 1000; doubles to 16x, ±20 % jitter).
    #[arg(long, env = "BUZZ_ACP_RECONNECT_BASE_MS", default_value_t = 1000)]
    pub reconnect_base_ms: u64,
    /// Deadline for a connected socket's subscription to go live (EOSE), milliseconds; then reconnect.
    #[arg(long, env = "BUZZ_ACP_SUBSCRIBE_TIMEOUT_MS", default_value_t = 15_000)]
    pub subscribe_timeout_ms: u64,
    /// Validate the configuration and identity, then exit (0, 2 or 3) without connecting.
    #[arg(long)]
    pub check_config: bool,
    /// Where the reason of a failed start or stop is written, if that file
    /// exists (Kubernetes creates it in every container; never created here).
    #[arg(long, env = env::TERMINATION_LOG, default_value = "/dev/termination-log")]
    pub termination_log: std::path::PathBuf,
    /// Working directory handed to agent sessions (default: the current directory).
    #[arg(long, env = env::SESSION_CWD)]
    pub cwd: Option<std::path::PathBuf>,
    /// Where the probe endpoint listens (`ip:port`), once the startup checks
    /// passed: `/startz` and `/readyz` (`buzz_contract::probe`; unset: nowhere).
    #[arg(long, env = buzz_contract::probe::PROBE_ADDR_ENV)]
    pub probe_addr: Option<String>,
    /// Where the receipts of the agent's conversations are kept, so that a
    /// restart brings them back (default: $XDG_STATE_HOME/buzz-acp/<agent
    /// pubkey>, else ~/.local/state/buzz-acp/<agent pubkey>).
    #[arg(long, env = crate::receipts::store::STATE_DIR_ENV)]
    pub state_dir: Option<std::path::PathBuf>,
}
