//! Validated configuration and identity resolution (spec I1, §Launch data
//! owner rule, §Auto-Stop; wire-facts §1, §3, §4, §5).
//!
//! Pure: [`Config::from_cli`] turns the raw [`Cli`] into a [`Config`] or a
//! typed refusal, before any connection. Errors never contain a secret value.

use crate::args::normalize_agent_args;
use crate::budget::FINALIZATION_RESERVE;
use crate::cli::Cli;
use crate::exit::Exit;
use buzz_contract::agents::PermissionPolicy;
use buzz_contract::gate::{self, GateError, RespondTo};
use buzz_contract::keys::{self, KeyError};
use buzz_contract::nip_oa::{AuthTag, AuthTagError, ConditionError};
use buzz_contract::presence::KIND_AUTH;
use nostr_sdk::prelude::{Keys, RelayUrl};
use std::path::PathBuf;
use std::time::Duration;

/// Most agent slots (wire-facts §5).
pub const MAX_AGENTS: u32 = 32;
/// Longest session title (wire-facts §5).
pub const SESSION_TITLE_MAX: usize = 80;
/// Longest presence republish interval. Relays expire presence after 180 s
/// (wire-facts §3); at most 90 s leaves room for one lost republish, so no
/// setting can make presence lapse while the agent serves (I3).
pub const MAX_PRESENCE_INTERVAL_SECS: u64 = 90;

/// Identity refusals (I1): the harness refuses to start, before connecting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// `BUZZ_PRIVATE_KEY` missing or malformed.
    #[error("refusing to start: BUZZ_PRIVATE_KEY: {0}")]
    Key(#[from] KeyError),
    /// `BUZZ_PRIVATE_KEY` not set at all.
    #[error("refusing to start: BUZZ_PRIVATE_KEY is not set")]
    KeyMissing,
    /// `BUZZ_RELAY_URL` missing or empty.
    #[error("refusing to start: BUZZ_RELAY_URL is not set")]
    RelayMissing,
    /// Neither a verifying `BUZZ_AUTH_TAG` nor a valid `BUZZ_ACP_AGENT_OWNER`.
    #[error(
        "refusing to start: no owner (neither a verifying BUZZ_AUTH_TAG nor a 64-hex BUZZ_ACP_AGENT_OWNER); \
         !shutdown could never match"
    )]
    NoOwner,
    /// No auth tag verifies and `BUZZ_ACP_AGENT_OWNER` is not a pubkey: there is no owner.
    #[error(
        "refusing to start: no owner (BUZZ_ACP_AGENT_OWNER is not a 64-hex pubkey and no BUZZ_AUTH_TAG verifies); \
         !shutdown could never match"
    )]
    OwnerMalformed,
    /// The resolved owner is the agent itself: its own events are dropped,
    /// so its `!shutdown` could never be heard.
    #[error("refusing to start: the owner is the agent's own key; !shutdown could never be heard")]
    OwnerIsAgent,
}

/// The environment is unusable in a way no setting explains (exit 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InternalError {
    /// The current directory cannot be read and `BUZZ_ACP_CWD` is not absolute.
    #[error("cannot determine the current directory (set an absolute BUZZ_ACP_CWD)")]
    Cwd,
}

/// Why a configured `BUZZ_AUTH_TAG` does not name the owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagRejection {
    /// Malformed, or its signature does not verify for this agent.
    #[error(transparent)]
    Invalid(#[from] AuthTagError),
    /// It verifies, but its conditions do not cover this agent's AUTH now.
    #[error(transparent)]
    Conditions(#[from] ConditionError),
}

/// Configuration errors. Messages name the variable, never a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("BUZZ_RELAY_URL is not a ws:// or wss:// URL")]
    RelayUrl,
    #[error("BUZZ_ACP_AGENTS must be in 1..=32")]
    Agents,
    #[error("BUZZ_ACP_AGENT_COMMAND is empty")]
    Command,
    #[error("{0}")]
    Gate(#[from] GateError),
    #[error("BUZZ_MANAGED_AGENT_START_NONCE must be exactly 32 lowercase hex")]
    Nonce,
    #[error("BUZZ_ACP_PRESENCE_INTERVAL_SECS must be at most 90 (presence expires after 180 s)")]
    PresenceInterval,
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    #[error("BUZZ_ACP_SHUTDOWN_BUDGET_SECS must exceed the 7 s finalization reserve")]
    Budget,
    #[error("BUZZ_ACP_CHANNELS entry {0} is empty or contains whitespace")]
    Channel(usize),
    #[error("BUZZ_ACP_PERMISSION_POLICY must be one of allow, reject, ask-owner")]
    PermissionPolicy,
}

/// Either refusal, mapped to its exit code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Internal(#[from] InternalError),
}

impl StartupError {
    /// The pinned exit reason.
    pub fn exit(&self) -> Exit {
        match self {
            StartupError::Identity(_) => Exit::Identity,
            StartupError::Config(_) => Exit::Config,
            StartupError::Internal(_) => Exit::Internal,
        }
    }
}

/// The resolved identity. `Debug` is redacted.
#[derive(Clone)]
pub struct Identity {
    /// The agent keys.
    pub keys: Keys,
    /// Agent pubkey, 64 lowercase hex.
    pub pubkey: String,
    /// Resolved owner, 64 lowercase hex.
    pub owner: String,
    /// The verified NIP-OA tag to add to the NIP-42 event, if any.
    pub auth_tag: Option<AuthTag>,
    /// Why a configured auth tag was not used, if it was not.
    pub auth_tag_rejected: Option<TagRejection>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("pubkey", &self.pubkey)
            .field("owner", &self.owner)
            .field("auth_tag", &self.auth_tag.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

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
    /// How long `ask-owner` waits for the owner.
    pub permission_timeout: Duration,
    pub respond_to: RespondTo,
    pub allowlist: Vec<String>,
    pub lazy_pool: bool,
    /// `None` = reaper disabled.
    pub exit_after_inactivity: Option<Duration>,
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

/// Resolves the identity (wire-facts §1 owner resolution). Order of refusal:
/// key, relay URL, owner — all before any connection. An auth tag names the
/// owner only if it verifies and its conditions cover the kind 22242 AUTH
/// event it rides on, created now (an expired attestation is not an owner).
/// An owner equal to the agent is refused: self-authored events are dropped,
/// so such an agent could never be stopped.
pub fn resolve_identity(cli: &Cli, now_secs: u64) -> Result<Identity, StartupError> {
    let raw_key = cli.private_key.as_deref().ok_or(IdentityError::KeyMissing)?;
    let keys = keys::parse_private_key(raw_key).map_err(IdentityError::Key)?;
    if cli.relay_url.as_deref().is_none_or(|u| u.trim().is_empty()) {
        return Err(IdentityError::RelayMissing.into());
    }
    let pubkey = keys::pubkey_hex(&keys);
    let mut auth_tag = None;
    let mut auth_tag_rejected = None;
    if let Some(raw) = cli.auth_tag.as_deref().filter(|s| !s.trim().is_empty()) {
        let checked = AuthTag::parse(raw)
            .and_then(|t| t.verify(&pubkey).map(|()| t))
            .map_err(TagRejection::from)
            .and_then(|t| {
                t.covers(u64::from(KIND_AUTH), now_secs)
                    .map(|()| t)
                    .map_err(TagRejection::from)
            });
        match checked {
            Ok(t) => auth_tag = Some(t),
            Err(e) => auth_tag_rejected = Some(e),
        }
    }
    let owner = match &auth_tag {
        Some(t) => t.owner.clone(),
        None => match non_empty(cli.agent_owner.as_ref()) {
            Some(o) => keys::normalize_pubkey_hex(&o).ok_or(IdentityError::OwnerMalformed)?,
            None => return Err(IdentityError::NoOwner.into()),
        },
    };
    if owner == pubkey {
        return Err(IdentityError::OwnerIsAgent.into());
    }
    Ok(Identity {
        keys,
        pubkey,
        owner,
        auth_tag,
        auth_tag_rejected,
    })
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
        let relay_raw = cli.relay_url.as_deref().unwrap_or_default().trim();
        let relay_url = RelayUrl::parse(relay_raw).map_err(|_| ConfigError::RelayUrl)?;
        if !(relay_raw.starts_with("ws://") || relay_raw.starts_with("wss://")) {
            return Err(ConfigError::RelayUrl.into());
        }
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
            permission_timeout: Duration::from_secs(cli.permission_timeout_secs),
            respond_to,
            allowlist,
            lazy_pool: cli.lazy_pool,
            exit_after_inactivity: (cli.exit_after_inactivity > 0)
                .then(|| Duration::from_secs(cli.exit_after_inactivity)),
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use nostr_sdk::prelude::ToBech32;

    fn cli(args: &[&str]) -> Cli {
        let mut v = vec!["buzz-acp"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).unwrap()
    }

    fn nonce() -> String {
        "0".repeat(32)
    }

    const NOW: u64 = 1_800_000_000;

    fn amb() -> Ambient {
        Ambient {
            now_secs: NOW,
            cwd: Some(PathBuf::from("/work")),
        }
    }

    #[test]
    fn identity_refusals_in_order() {
        let k = Keys::generate();
        let nsec = k.secret_key().to_bech32().unwrap();
        let owner = Keys::generate().public_key().to_hex();
        let e = |a: &[&str]| Config::from_cli(&cli(a), &amb(), nonce).unwrap_err();
        assert_eq!(e(&[]), StartupError::Identity(IdentityError::KeyMissing));
        assert_eq!(
            e(&["--private-key", "  "]),
            StartupError::Identity(IdentityError::Key(KeyError::Empty))
        );
        assert_eq!(
            e(&["--private-key", "nsec1garbage"]),
            StartupError::Identity(IdentityError::Key(KeyError::Malformed))
        );
        assert_eq!(
            e(&["--private-key", &nsec]),
            StartupError::Identity(IdentityError::RelayMissing)
        );
        assert_eq!(
            e(&["--private-key", &nsec, "--relay-url", "ws://x"]),
            StartupError::Identity(IdentityError::NoOwner)
        );
        let ok = Config::from_cli(
            &cli(&[
                "--private-key",
                &nsec,
                "--relay-url",
                "ws://x",
                "--agent-owner",
                &owner,
            ]),
            &amb(),
            nonce,
        )
        .unwrap();
        assert_eq!(ok.identity.owner, owner);
        assert_eq!(ok.run_nonce, nonce());
        assert!(!format!("{:?}", ok).contains(&k.secret_key().to_secret_hex()));
    }

    #[test]
    fn verifying_auth_tag_wins_and_bad_tag_falls_back() {
        let agent = Keys::generate();
        let hex = agent.secret_key().to_secret_hex();
        let owner = Keys::generate();
        let other = Keys::generate().public_key().to_hex();
        let tag = AuthTag::mint(&owner, &agent.public_key().to_hex(), "")
            .unwrap()
            .to_json();
        let base = ["--private-key", &hex, "--relay-url", "wss://r.example"];
        let mut a = base.to_vec();
        a.extend(["--auth-tag", &tag, "--agent-owner", &other]);
        let c = Config::from_cli(&cli(&a), &amb(), nonce).unwrap();
        assert_eq!(c.identity.owner, owner.public_key().to_hex());
        assert!(c.identity.auth_tag.is_some());
        // A tag minted for another agent does not verify: fall back to the owner env.
        let wrong = AuthTag::mint(&owner, &other, "").unwrap().to_json();
        let mut b = base.to_vec();
        b.extend(["--auth-tag", &wrong, "--agent-owner", &other]);
        let c = Config::from_cli(&cli(&b), &amb(), nonce).unwrap();
        assert_eq!(c.identity.owner, other);
        assert_eq!(
            c.identity.auth_tag_rejected,
            Some(TagRejection::Invalid(AuthTagError::BadSignature))
        );
        // ...and without a fallback, refuse.
        let mut d = base.to_vec();
        d.extend(["--auth-tag", &wrong]);
        assert_eq!(
            Config::from_cli(&cli(&d), &amb(), nonce).unwrap_err(),
            StartupError::Identity(IdentityError::NoOwner)
        );
    }

    #[test]
    fn config_errors() {
        let hex = Keys::generate().secret_key().to_secret_hex();
        let owner = Keys::generate().public_key().to_hex();
        let base = vec![
            "--private-key",
            &hex,
            "--relay-url",
            "ws://r",
            "--agent-owner",
            &owner,
        ];
        let err = |extra: &[&str]| {
            let mut a = base.clone();
            a.extend_from_slice(extra);
            Config::from_cli(&cli(&a), &amb(), nonce).unwrap_err()
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
        assert_eq!(
            Config::from_cli(&cli(&a), &amb(), nonce).unwrap_err().exit(),
            Exit::Config
        );
        assert_eq!(
            err(&["--presence-interval-secs", "91"]),
            StartupError::Config(ConfigError::PresenceInterval)
        );
        let mut a = base.clone();
        a.extend(["--presence-interval-secs", "90"]);
        assert_eq!(
            Config::from_cli(&cli(&a), &amb(), nonce)
                .unwrap()
                .presence_interval,
            Duration::from_secs(90)
        );
        let mut a = base.clone();
        a.extend(["--start-nonce", "0123456789abcdef0123456789abcdef"]);
        assert_eq!(
            Config::from_cli(&cli(&a), &amb(), nonce).unwrap().run_nonce,
            "0123456789abcdef0123456789abcdef"
        );
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
    fn malformed_owner_without_a_tag_is_no_owner() {
        let hex = Keys::generate().secret_key().to_secret_hex();
        let a = [
            "--private-key",
            &hex,
            "--relay-url",
            "ws://r",
            "--agent-owner",
            "xyz",
        ];
        let e = Config::from_cli(&cli(&a), &amb(), nonce).unwrap_err();
        assert_eq!(e, StartupError::Identity(IdentityError::OwnerMalformed));
        assert_eq!(e.exit(), Exit::Identity);
    }

    #[test]
    fn the_agent_cannot_own_itself() {
        let agent = Keys::generate();
        let hex = agent.secret_key().to_secret_hex();
        let me = agent.public_key().to_hex();
        let a = [
            "--private-key",
            &hex,
            "--relay-url",
            "ws://r",
            "--agent-owner",
            &me,
        ];
        let e = Config::from_cli(&cli(&a), &amb(), nonce).unwrap_err();
        assert_eq!(e, StartupError::Identity(IdentityError::OwnerIsAgent));
        assert_eq!(e.exit(), Exit::Identity);
        // Upper-case spelling of the same key is the same key.
        let upper = me.to_uppercase();
        let a = [
            "--private-key",
            &hex,
            "--relay-url",
            "ws://r",
            "--agent-owner",
            &upper,
        ];
        assert_eq!(
            Config::from_cli(&cli(&a), &amb(), nonce).unwrap_err(),
            StartupError::Identity(IdentityError::OwnerIsAgent)
        );
    }

    #[test]
    fn an_expired_or_not_yet_valid_attestation_is_not_an_owner() {
        let agent = Keys::generate();
        let hex = agent.secret_key().to_secret_hex();
        let owner = Keys::generate();
        let me = agent.public_key().to_hex();
        let fallback = Keys::generate().public_key().to_hex();
        for (conditions, why) in [
            (format!("created_at<{NOW}"), ConditionError::Expired),
            (format!("created_at>{NOW}"), ConditionError::NotYetValid),
            ("kind=9".to_string(), ConditionError::Kind),
        ] {
            let tag = AuthTag::mint(&owner, &me, &conditions).unwrap().to_json();
            let a = ["--private-key", &hex, "--relay-url", "ws://r", "--auth-tag", &tag];
            assert_eq!(
                Config::from_cli(&cli(&a), &amb(), nonce).unwrap_err(),
                StartupError::Identity(IdentityError::NoOwner),
                "{conditions}"
            );
            let mut b = a.to_vec();
            b.extend(["--agent-owner", &fallback]);
            let c = Config::from_cli(&cli(&b), &amb(), nonce).unwrap();
            assert_eq!(c.identity.owner, fallback, "{conditions}");
            assert_eq!(c.identity.auth_tag_rejected, Some(TagRejection::Conditions(why)));
            assert!(c.identity.auth_tag.is_none());
        }
        let live = format!("created_at>{}&created_at<{}&kind=22242", NOW - 1, NOW + 1);
        let tag = AuthTag::mint(&owner, &me, &live).unwrap().to_json();
        let a = ["--private-key", &hex, "--relay-url", "ws://r", "--auth-tag", &tag];
        let c = Config::from_cli(&cli(&a), &amb(), nonce).unwrap();
        assert_eq!(c.identity.owner, owner.public_key().to_hex());
    }

    #[test]
    fn an_unreadable_current_directory_is_internal() {
        let hex = Keys::generate().secret_key().to_secret_hex();
        let owner = Keys::generate().public_key().to_hex();
        let a = [
            "--private-key",
            &hex,
            "--relay-url",
            "ws://r",
            "--agent-owner",
            &owner,
        ];
        let no_cwd = Ambient {
            now_secs: NOW,
            cwd: None,
        };
        let e = Config::from_cli(&cli(&a), &no_cwd, nonce).unwrap_err();
        assert_eq!(e, StartupError::Internal(InternalError::Cwd));
        assert_eq!(e.exit(), Exit::Internal);
        let mut b = a.to_vec();
        b.extend(["--cwd", "/srv"]);
        assert_eq!(
            Config::from_cli(&cli(&b), &no_cwd, nonce).unwrap().cwd,
            PathBuf::from("/srv")
        );
    }
}
