//! Validated configuration and identity resolution (spec I1, §Launch data
//! owner rule, §Auto-Stop; wire-facts §1, §3, §4, §5).
//!
//! Pure: [`Config::from_cli`] turns the raw [`Cli`] into a [`Config`] or a
//! typed refusal, before any connection. Errors never contain a secret value.
//! The module is split by concept:
//!
//! - `identity`: who the agent is and who owns it — the key, a relay URL, then
//!   the verifying NIP-OA auth tag or the owner fallback, refused in that order
//!   ([`resolve_identity`]; I1, §Launch data owner rule, wire-facts §1).
//! - `error`: the typed refusals and the exit reason each maps to
//!   ([`StartupError::exit`]; §Conformance \[L1\] exit codes).
//! - Here: the validated [`Config`] and its pure checks on the other settings —
//!   the relay URL scheme, the agent slots, the inbound gate, the start nonce,
//!   the settings that must not be zero, the presence interval bound, the
//!   shutdown budget over the finalization reserve, the channels and the
//!   session cwd (§Auto-Stop; wire-facts §3, §4, §5, §6).

use crate::args::normalize_agent_args;
use crate::budget::FINALIZATION_RESERVE;
use crate::cli::Cli;
use buzz_contract::agents::PermissionPolicy;
use buzz_contract::gate::{self, RespondTo};
use buzz_contract::keys;
use buzz_contract::relay_url::RelayUrlError;
use nostr_sdk::prelude::RelayUrl;
use std::path::PathBuf;
use std::time::Duration;

mod error;
mod identity;

pub use error::{ConfigError, IdentityError, InternalError, StartupError};
pub use identity::{Identity, TagRejection, resolve_identity};

/// Most agent slots (wire-facts §5).
pub const MAX_AGENTS: u32 = 32;
/// Longest session title (wire-facts §5).
pub const SESSION_TITLE_MAX: usize = 80;
/// Longest presence republish interval. Relays expire presence after 180 s
/// (wire-facts §3); at most 90 s leaves room for one lost republish, so no
/// setting can make presence lapse while the agent serves (I3).
pub const MAX_PRESENCE_INTERVAL_SECS: u64 = 90;

/// The validated configuration. Each field is the matching [`Cli`] argument
/// after validation (durations as [`Duration`], `0` spelled as `None` where
/// it means "off").
#[derive(Debug, Clone)]
pub struct Config {
    pub identity: Identity,
    pub relay_url: RelayUrl,
    pub agent_command: String,
    pub agent_args: Vec<String>,
    pub agents: usize,
    pub idle_timeout: Duration,
    pub max_turn_duration: Duration,
    pub system_prompt: Option<String>,
    pub model: Option<String>,
    /// The agent's session mode to apply (`session/set_mode`).
    pub permission_mode: Option<String>,
    pub permission_policy: PermissionPolicy,
    /// The policy of turns asked by anyone but the owner.
    pub permission_policy_others: PermissionPolicy,
    /// How long `ask-owner` waits for the owner.
    pub permission_timeout: Duration,
    pub respond_to: RespondTo,
    pub allowlist: Vec<String>,
    pub lazy_pool: bool,
    /// `None` = reaper disabled.
    pub exit_after_inactivity: Option<Duration>,
    /// `None` = no doze ([`crate::schedule::doze_due`]).
    pub doze: Option<Duration>,
    /// The mentions a launcher's waker handed over (issue 33), if woken.
    pub wake: Option<Wake>,
    pub presence: bool,
    pub mcp_command: Option<String>,
    pub session_title: Option<String>,
    pub team_instructions: Option<String>,
    pub relay_observer: bool,
    /// Presence `run` tag (32 lowercase hex).
    pub run_nonce: String,
    pub channels: Vec<String>,
    pub reply: bool,
    pub reply_p_tag: bool,
    pub typing: bool,
    pub react_queued: bool,
    pub presence_interval: Duration,
    pub shutdown_budget: Duration,
    pub shutdown_drain: Duration,
    pub kill_grace: Duration,
    pub reaper_check: Duration,
    pub cancel_grace: Duration,
    pub respawn_backoff: Duration,
    pub max_agent_failures: u32,
    pub relay_lost_after: Option<Duration>,
    pub reconnect_base: Duration,
    pub subscribe_timeout: Duration,
    pub cwd: PathBuf,
    /// `--state-dir` / `BUZZ_ACP_STATE_DIR`, if given (the receipts' home).
    pub state_dir: Option<PathBuf>,
    /// Where the probe endpoint listens once the startup checks passed
    /// ([`crate::probe`], issue 49); `None`: nowhere.
    pub probe_addr: Option<std::net::SocketAddr>,
}

/// Drops control characters and keeps at most 80 characters (wire-facts §5).
pub fn sanitize_session_title(raw: &str) -> Option<String> {
    let t: String = raw
        .chars()
        .filter(|c| !c.is_control())
        .take(SESSION_TITLE_MAX)
        .collect();
    let t = t.trim().to_string();
    (!t.is_empty()).then_some(t)
}

fn non_empty(s: Option<&String>) -> Option<String> {
    s.map(|v| v.trim()).filter(|v| !v.is_empty()).map(str::to_string)
}

/// What validation needs from the environment besides the [`Cli`], passed
/// in so that [`Config::from_cli`] stays pure.
#[derive(Debug, Clone)]
pub struct Ambient {
    /// Unix seconds now (NIP-OA time conditions).
    pub now_secs: u64,
    /// The current directory, if it can be read.
    pub cwd: Option<PathBuf>,
}

impl Ambient {
    /// The real clock and current directory.
    pub fn current() -> Ambient {
        Ambient {
            now_secs: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            cwd: std::env::current_dir().ok(),
        }
    }
}

impl Config {
    /// Validates everything. `fresh_nonce` is used when no start nonce is set
    /// (randomness comes in as an argument, DESIGN.md Decision 1).
    pub fn from_cli(
        cli: &Cli,
        ambient: &Ambient,
        fresh_nonce: impl FnOnce() -> String,
    ) -> Result<Config, StartupError> {
        let identity = resolve_identity(cli, ambient.now_secs)?;
        // The rule every front end applies (buzz_contract::relay_url; issue 24 item 3).
        let relay_checked = buzz_contract::relay_url::check(cli.relay_url.as_deref().unwrap_or_default())
            .map_err(ConfigError::RelayUrl)?;
        let relay_url = RelayUrl::parse(&relay_checked)
            .map_err(|e| ConfigError::RelayUrl(RelayUrlError::Malformed(e.to_string())))?;
        if cli.agents == 0 || cli.agents > MAX_AGENTS {
            return Err(ConfigError::Agents.into());
        }
        let agent_command = cli.agent_command.trim().to_string();
        if agent_command.is_empty() {
            return Err(ConfigError::Command.into());
        }
        let respond_to = RespondTo::parse(&cli.respond_to).map_err(ConfigError::from)?;
        let allowlist =
            gate::validate_allowlist(respond_to, &gate::split_allowlist(&cli.respond_to_allowlist))
                .map_err(ConfigError::from)?;
        let permission_policy =
            PermissionPolicy::parse(&cli.permission_policy).ok_or(ConfigError::PermissionPolicy)?;
        let permission_policy_others = PermissionPolicy::parse(&cli.permission_policy_others)
            .ok_or(ConfigError::PermissionPolicyOthers)?;
        let run_nonce = match cli.start_nonce.as_deref() {
            Some(n) if !keys::is_hex32_lower(n) => return Err(ConfigError::Nonce.into()),
            Some(n) => n.to_string(),
            None => fresh_nonce(),
        };
        for (name, v) in [
            ("BUZZ_ACP_IDLE_TIMEOUT", cli.idle_timeout),
            ("BUZZ_ACP_MAX_TURN_DURATION", cli.max_turn_duration),
            ("BUZZ_ACP_PRESENCE_INTERVAL_SECS", cli.presence_interval_secs),
            ("BUZZ_ACP_REAPER_CHECK_MS", cli.reaper_check_ms),
            ("BUZZ_ACP_RECONNECT_BASE_MS", cli.reconnect_base_ms),
            ("BUZZ_ACP_SUBSCRIBE_TIMEOUT_MS", cli.subscribe_timeout_ms),
            ("BUZZ_ACP_MAX_AGENT_FAILURES", u64::from(cli.max_agent_failures)),
            ("BUZZ_ACP_PERMISSION_TIMEOUT_SECS", cli.permission_timeout_secs),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name).into());
            }
        }
        if cli.presence_interval_secs > MAX_PRESENCE_INTERVAL_SECS {
            return Err(ConfigError::PresenceInterval.into());
        }
        let shutdown_budget = Duration::from_secs(cli.shutdown_budget_secs);
        if shutdown_budget <= FINALIZATION_RESERVE {
            return Err(ConfigError::Budget.into());
        }
        let mut channels = Vec::new();
        for (i, c) in cli.channels.split(',').enumerate() {
            let c = c.trim();
            if c.is_empty() {
                if cli.channels.trim().is_empty() {
                    break;
                }
                return Err(ConfigError::Channel(i).into());
            }
            if c.chars().any(char::is_whitespace) {
                return Err(ConfigError::Channel(i).into());
            }
            channels.push(c.to_string());
        }
        // ACP requires an absolute session cwd (wire-facts §6).
        let cwd = match (cli.cwd.clone(), ambient.cwd.clone()) {
            (Some(p), _) if p.is_absolute() => p,
            (Some(p), Some(here)) => here.join(p),
            (None, Some(here)) => here,
            (_, None) => return Err(InternalError::Cwd.into()),
        };
        Ok(Config {
            identity,
            relay_url,
            agent_args: normalize_agent_args(&agent_command, cli.agent_args.as_deref()),
            agent_command,
            agents: cli.agents as usize,
            idle_timeout: Duration::from_secs(cli.idle_timeout),
            max_turn_duration: Duration::from_secs(cli.max_turn_duration),
            system_prompt: non_empty(cli.system_prompt.as_ref()),
            model: non_empty(cli.model.as_ref()),
            permission_mode: non_empty(cli.permission_mode.as_ref()),
            permission_policy,
            permission_policy_others,
            permission_timeout: Duration::from_secs(cli.permission_timeout_secs),
            respond_to,
            allowlist,
            lazy_pool: cli.lazy_pool,
            exit_after_inactivity: (cli.exit_after_inactivity > 0)
                .then(|| Duration::from_secs(cli.exit_after_inactivity)),
            doze: (cli.doze > 0).then(|| Duration::from_secs(cli.doze)),
            wake: wake_of(&cli.wake_events, cli.wake_since.as_deref())?,
            presence: !cli.no_presence,
            mcp_command: non_empty(Some(&cli.mcp_command)),
            session_title: cli.session_title.as_deref().and_then(sanitize_session_title),
            team_instructions: non_empty(cli.team_instructions.as_ref()),
            relay_observer: cli.relay_observer,
            run_nonce,
            channels,
            reply: cli.reply,
            reply_p_tag: cli.reply_p_tag,
            typing: cli.typing,
            react_queued: cli.react_queued,
            presence_interval: Duration::from_secs(cli.presence_interval_secs),
            shutdown_budget,
            shutdown_drain: Duration::from_secs(cli.shutdown_drain_secs),
            kill_grace: Duration::from_millis(cli.kill_grace_ms),
            reaper_check: Duration::from_millis(cli.reaper_check_ms),
            cancel_grace: Duration::from_millis(cli.cancel_grace_ms),
            respawn_backoff: Duration::from_millis(cli.respawn_backoff_ms.max(1)),
            max_agent_failures: cli.max_agent_failures,
            relay_lost_after: (cli.relay_lost_after_secs > 0)
                .then(|| Duration::from_secs(cli.relay_lost_after_secs)),
            reconnect_base: Duration::from_millis(cli.reconnect_base_ms),
            subscribe_timeout: Duration::from_millis(cli.subscribe_timeout_ms),
            cwd,
            state_dir: cli.state_dir.clone().filter(|d| !d.as_os_str().is_empty()),
            probe_addr: match cli.probe_addr.as_deref().filter(|a| !a.trim().is_empty()) {
                Some(a) => Some(crate::probe::parse_addr(a).map_err(|e| ConfigError::Probe(e.to_string()))?),
                None => None,
            },
        })
    }
}

/// What a woken harness was handed (issue 33, [`buzz_contract::wake`]):
/// the mentions to fetch and answer, and the floor below which nothing is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake {
    /// Event ids, hex, in the waker's order, at most `wake::MAX_EVENTS`.
    pub events: Vec<String>,
    /// Unix seconds: when the waker looked; the run's floor.
    pub since: u64,
}

/// The wake env: ids need the waker's look (`since`), which places the
/// run's floor; a look without ids is a wake whose mentions all came while
/// the agent was started.
fn wake_of(events: &str, since: Option<&str>) -> Result<Option<Wake>, ConfigError> {
    use buzz_contract::wake;
    let events = wake::parse_events(events).map_err(ConfigError::Wake)?;
    match (events.is_empty(), since.map(str::trim).filter(|s| !s.is_empty())) {
        (true, None) => Ok(None),
        (false, None) => Err(ConfigError::Wake(wake::WakeError::NotSeconds)),
        (_, Some(s)) => Ok(Some(Wake {
            events,
            since: wake::parse_since(s).map_err(ConfigError::Wake)?,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::Exit;
    use clap::Parser;
    use nostr_sdk::prelude::Keys;

    pub(super) fn cli(args: &[&str]) -> Cli {
        let mut v = vec!["buzz-acp"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).unwrap()
    }

    pub(super) fn nonce() -> String {
        "0".repeat(32)
    }

    pub(super) const NOW: u64 = 1_800_000_000;

    pub(super) fn amb() -> Ambient {
        Ambient {
            now_secs: NOW,
            cwd: Some(PathBuf::from("/work")),
        }
    }

    /// `args` as the harness's command line, validated at [`amb`].
    pub(super) fn config(args: &[&str]) -> Result<Config, StartupError> {
        Config::from_cli(&cli(args), &amb(), nonce)
    }

    /// The shortest valid command line: a key, a relay and an owner.
    pub(super) fn owned<'a>(key: &'a str, owner: &'a str) -> Vec<&'a str> {
        vec![
            "--private-key",
            key,
            "--relay-url",
            "ws://r",
            "--agent-owner",
            owner,
        ]
    }

    #[test]
    fn config_errors() {
        let hex = Keys::generate().secret_key().to_secret_hex();
        let owner = Keys::generate().public_key().to_hex();
        let base = owned(&hex, &owner);
        let err = |extra: &[&str]| {
            let mut a = base.clone();
            a.extend_from_slice(extra);
            config(&a).unwrap_err()
        };
        assert_eq!(err(&["--agents", "0"]).exit(), Exit::Config);
        assert_eq!(err(&["--agents", "33"]).exit(), Exit::Config);
        assert_eq!(err(&["--respond-to", "Anyone"]).exit(), Exit::Config);
        assert_eq!(err(&["--respond-to", "allowlist"]).exit(), Exit::Config);
        assert_eq!(err(&["--start-nonce", &"A".repeat(32)]).exit(), Exit::Config);
        assert_eq!(err(&["--start-nonce", &"a".repeat(31)]).exit(), Exit::Config);
        assert_eq!(err(&["--shutdown-budget-secs", "7"]).exit(), Exit::Config);
        let mut a = base.clone();
        a[3] = "http://r";
        assert_eq!(config(&a).unwrap_err().exit(), Exit::Config);
        // The shared relay-URL rule: credentials are refused, never quoted.
        let mut a = base.clone();
        a[3] = "wss://user:hunter2@r";
        let e = config(&a).unwrap_err();
        assert_eq!(e.exit(), Exit::Config);
        assert!(
            e.to_string()
                .starts_with("BUZZ_RELAY_URL: the relay URL carries credentials")
                && !e.to_string().contains("hunter2"),
            "{e}"
        );
        assert_eq!(
            err(&["--presence-interval-secs", "91"]),
            StartupError::Config(ConfigError::PresenceInterval)
        );
        let mut a = base.clone();
        a.extend(["--presence-interval-secs", "90"]);
        assert_eq!(config(&a).unwrap().presence_interval, Duration::from_secs(90));
        let mut a = base.clone();
        a.extend(["--start-nonce", "0123456789abcdef0123456789abcdef"]);
        assert_eq!(config(&a).unwrap().run_nonce, "0123456789abcdef0123456789abcdef");
    }

    #[test]
    fn bools_and_titles() {
        assert_eq!(crate::cli::parse_bool("YES"), Ok(true));
        assert_eq!(crate::cli::parse_bool(""), Ok(false));
        assert!(crate::cli::parse_bool("maybe").is_err());
        assert_eq!(sanitize_session_title("a\u{0}b\nc"), Some("abc".into()));
        assert_eq!(sanitize_session_title(&"x".repeat(200)).unwrap().len(), 80);
        assert_eq!(sanitize_session_title("\u{7}"), None);
    }

    #[test]
    fn an_unreadable_current_directory_is_internal() {
        let hex = Keys::generate().secret_key().to_secret_hex();
        let owner = Keys::generate().public_key().to_hex();
        let a = owned(&hex, &owner);
        let no_cwd = Ambient {
            now_secs: NOW,
            cwd: None,
        };
        let e = Config::from_cli(&cli(&a), &no_cwd, nonce).unwrap_err();
        assert_eq!(e, StartupError::Internal(InternalError::Cwd));
        assert_eq!(e.exit(), Exit::Internal);
        let mut b = a.clone();
        b.extend(["--cwd", "/srv"]);
        assert_eq!(
            Config::from_cli(&cli(&b), &no_cwd, nonce).unwrap().cwd,
            PathBuf::from("/srv")
        );
    }
}
