//! Every timeout, cap and name the launcher uses, each with the spec section
//! that fixes it (DESIGN.md Decision 7).

use std::time::Duration;

/// `info` deadline (spec §`info`: timeout 10s).
pub const INFO_DEADLINE: Duration = Duration::from_secs(10);
/// `deploy` deadline (spec §`deploy`: timeout 600s). This is the provider's
/// budget: it bounds its own operation from its process start and reports
/// the outcome in band (an `ImagePullBackOff` or `Unschedulable` reason)
/// before it runs out.
pub const DEPLOY_DEADLINE: Duration = Duration::from_secs(600);
/// Grace past [`DEPLOY_DEADLINE`] before the launcher kills `deploy`. The
/// provider's clock starts after the launcher's (exec, reading stdin,
/// loading kubeconfig) and it needs a moment to write its answer; killing at
/// exactly 600 s from spawn would always pre-empt its in-band error with a
/// generic timeout (spec §`deploy` timeout; issue "the deploy deadlines are inverted").
pub const DEPLOY_GRACE: Duration = Duration::from_secs(30);
/// When the launcher kills a `deploy` that has not answered.
pub const DEPLOY_KILL_DEADLINE: Duration = Duration::from_secs(600 + 30);
/// Test knob: the provider's deploy budget in seconds, scaled down for
/// tests. The launcher's kill deadline follows with the same ordering (see
/// [`deploy_kill_deadline`]). Pair it with the provider's own knob
/// (`BUZZ_K8S_DEPLOY_DEADLINE_SECS` for the Kubernetes binding).
pub const DEPLOY_DEADLINE_ENV: &str = "BUZZ_LAUNCHER_DEPLOY_DEADLINE_SECS";
/// The smallest grace the scaled-down kill deadline keeps, so short test
/// budgets still leave the provider time to answer.
pub const DEPLOY_GRACE_MIN: Duration = Duration::from_secs(2);

/// The launcher's kill deadline for a provider budget of `budget`: the budget
/// plus [`DEPLOY_GRACE`] scaled by `budget / 600 s`, never below
/// [`DEPLOY_GRACE_MIN`]. For the spec's 600 s this is [`DEPLOY_KILL_DEADLINE`].
pub fn deploy_kill_deadline(budget: Duration) -> Duration {
    let scaled = DEPLOY_GRACE.mul_f64(budget.as_secs_f64() / DEPLOY_DEADLINE.as_secs_f64());
    budget + scaled.max(DEPLOY_GRACE_MIN)
}

/// The kill deadline in force: [`DEPLOY_KILL_DEADLINE`], or the one derived
/// from the [`DEPLOY_DEADLINE_ENV`] knob value when it is a positive integer.
pub fn deploy_kill_deadline_from(knob: Option<&str>) -> Duration {
    knob.and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(DEPLOY_KILL_DEADLINE, |s| {
            deploy_kill_deadline(Duration::from_secs(s))
        })
}

/// When the launcher kills an `undeploy` that has not answered (issue 21:
/// the provider waits for the objects to disappear "within a bound"; the
/// spec fixes none). A graceful pod delete may take the binding's 60 s grace
/// (§K8s Grace) and the apiserver's finalisation on top, so the launcher
/// waits three times that. `undeploy` is idempotent: a killed one is re-run.
pub const UNDEPLOY_KILL_DEADLINE: Duration = Duration::from_secs(180);

/// The largest provider binary the gate stages (it is held in memory).
pub const STAGED_MAX_BYTES: u64 = 256 * 1024 * 1024;
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
/// Clock skew allowed between the launcher and an agent when the launcher
/// asks for presence "since this command began" (the harness stamps
/// `created_at` within [now − 180 s, now + 30 s], wire-facts §3).
pub const PRESENCE_SKEW: Duration = Duration::from_secs(10);
/// How often a live agent republishes presence (wire-facts §3: every 60 s).
pub const PRESENCE_REPUBLISH: Duration = Duration::from_secs(60);
/// Default `status` listening window: one republish interval plus a margin,
/// so every live agent is heard at least once even on a relay that does not
/// replay presence. `status` stops earlier once every deployed agent reported.
pub const STATUS_LISTEN: Duration = Duration::from_secs(60 + 5);
/// How long `status` listens for the presence of a local agent whose
/// harness runs (its verified process already says it runs; a relay that
/// replays presence answers within this, one that does not is not waited
/// out for a republish interval).
pub const STATUS_LOCAL_LISTEN: Duration = Duration::from_secs(2);
/// Default bound on waiting for a chat reply.
pub const CHAT_WAIT: Duration = Duration::from_secs(300);
/// State directory override (issue 5 "Records and identity").
pub const HOME_ENV: &str = "BUZZ_LAUNCHER_HOME";
/// Extra provider search path for tests, searched first (issue 5 "Provider discovery").
pub const PROVIDER_PATH_ENV: &str = "BUZZ_PROVIDER_PATH";
/// Strict mode: only approved provider digests may deploy.
pub const STRICT_ENV: &str = "BUZZ_LAUNCHER_STRICT_PROVIDERS";
/// `0` (or `false`, `no`, `off`): no agent record is shared with the
/// owner's other desktops (issue 52; `app::share`).
pub const SHARE_ENV: &str = "BUZZ_LAUNCHER_SHARE_RECORDS";
/// **Tests**: how often the waker reads the records the owner's other
/// desktops shared, in seconds (default `app::waker::SYNC_EVERY`).
pub const SYNC_EVERY_ENV: &str = "BUZZ_LAUNCHER_SYNC_EVERY_SECS";
/// Override of the harness binary for the local backend (default: `buzz-acp` on `PATH`).
pub const HARNESS_BIN_ENV: &str = "BUZZ_ACP_BIN";
/// Presence TTL override in seconds (tests use a short one; default [`buzz_contract::presence::PRESENCE_TTL`]).
pub const PRESENCE_TTL_ENV: &str = "BUZZ_LAUNCHER_PRESENCE_TTL_SECS";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launcher_always_outwaits_the_provider_budget() {
        assert_eq!(deploy_kill_deadline(DEPLOY_DEADLINE), DEPLOY_KILL_DEADLINE);
        assert_eq!(DEPLOY_KILL_DEADLINE, DEPLOY_DEADLINE + DEPLOY_GRACE);
        for s in [1, 3, 10, 60, 600, 1200] {
            let b = Duration::from_secs(s);
            assert!(deploy_kill_deadline(b) >= b + DEPLOY_GRACE_MIN, "{s}");
        }
        assert_eq!(deploy_kill_deadline_from(None), DEPLOY_KILL_DEADLINE);
        assert_eq!(deploy_kill_deadline_from(Some("0")), DEPLOY_KILL_DEADLINE);
        assert_eq!(deploy_kill_deadline_from(Some("x")), DEPLOY_KILL_DEADLINE);
        assert_eq!(deploy_kill_deadline_from(Some("3")), Duration::from_secs(5));
    }
}
