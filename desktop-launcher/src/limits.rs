//! Every timeout, cap and name the launcher uses, each with the spec section
//! that fixes it (DESIGN.md Decision 7).

use std::time::Duration;

/// `info` deadline (spec §`info`: timeout 10s).
pub const INFO_DEADLINE: Duration = Duration::from_secs(10);
/// `deploy` deadline (spec §`deploy`: timeout 600s).
pub const DEPLOY_DEADLINE: Duration = Duration::from_secs(600);
/// Provider stdout cap (spec §Invocation: 1MB; wire-facts §7: 1 MiB).
pub const STDOUT_CAP: usize = 1024 * 1024;
/// Provider stderr cap (spec §Invocation: 64KB; wire-facts §7: 64 KiB).
pub const STDERR_CAP: usize = 64 * 1024;
/// After the provider exits, how long its pipes may stay open before the
/// launcher decides a leftover process holds them (spec §Invocation "no
/// `read_to_end` on pipes a daemonizing child could hold open").
pub const PIPE_DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Poll interval for `try_wait` deadline polling (spec §Invocation).
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Provider executable name prefix (spec §Discovery).
pub const PROVIDER_PREFIX: &str = "buzz-backend-";
/// Windows extensions stripped before the id is derived (spec §Discovery, Known Defect 1).
pub const WINDOWS_SUFFIXES: &[&str] = &[".exe", ".bat", ".cmd"];
/// Session title length bound (wire-facts §5 `BUZZ_ACP_SESSION_TITLE`).
pub const SESSION_TITLE_MAX_CHARS: usize = 80;
/// The effective provider that can never be deployed (spec §Launch data, relay-mesh).
pub const RELAY_MESH: &str = "relay-mesh";
/// Default bound on waiting for presence `offline` after `!shutdown` (spec §Stop
/// declares no harness bound; the K8s grace budget of 60 s plus the 180 s presence TTL is the worst case).
pub const STOP_WAIT: Duration = Duration::from_secs(240);
/// Default bound on waiting for a chat reply.
pub const CHAT_WAIT: Duration = Duration::from_secs(300);
/// State directory override (issue 5 "Records and identity").
pub const HOME_ENV: &str = "BUZZ_LAUNCHER_HOME";
/// Extra provider search path for tests, searched first (issue 5 "Provider discovery").
pub const PROVIDER_PATH_ENV: &str = "BUZZ_PROVIDER_PATH";
/// Strict mode: only approved provider digests may deploy.
pub const STRICT_ENV: &str = "BUZZ_LAUNCHER_STRICT_PROVIDERS";
/// Override of the harness binary for the local backend (default: `buzz-acp` on `PATH`).
pub const HARNESS_BIN_ENV: &str = "BUZZ_ACP_BIN";
/// Presence TTL override in seconds (tests use a short one; default [`buzz_contract::presence::PRESENCE_TTL`]).
pub const PRESENCE_TTL_ENV: &str = "BUZZ_LAUNCHER_PRESENCE_TTL_SECS";
