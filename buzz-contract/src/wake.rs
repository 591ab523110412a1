//! Wake on mention (issue 33): what the launcher's waker and the harness it
//! starts agree on. Pure: no I/O.
//!
//! An agent that ended by its inactivity bound is **sleeping**, one its
//! owner stopped is **stopped** (spec I5: nothing wakes it). The harness
//! says which when it ends: its last presence carries [`TAG_STOP`] with a
//! [`StopReason`], and its last log line says `stop=<reason>`.
//!
//! A woken harness is told which mentions woke it ([`EVENTS_ENV`], at most
//! [`MAX_EVENTS`] ids) and when the waker looked ([`SINCE_ENV`]). It
//! fetches exactly those events from its relay and answers them through
//! its own gate, never older than [`WINDOW`] or than the owner's last
//! `!shutdown`, and never acts on an owner command among them. Whatever
//! was sent after the waker looked, while the agent was being started,
//! reaches the harness as it would have reached a running one: the woken
//! run's floor is the waker's look, not its own start ([`run_floor`]). A
//! wake is a fresh Start the owner's standing policy asked for, on a new
//! mention, never a restart of the exit (spec I5 "the owner may always
//! issue a fresh Start").

use std::time::Duration;

/// The mentions that woke the harness: event ids, hex, comma-separated.
pub const EVENTS_ENV: &str = "BUZZ_ACP_WAKE_EVENTS";
/// Unix seconds: when the waker looked at the relay; the woken run's floor.
pub const SINCE_ENV: &str = "BUZZ_ACP_WAKE_SINCE";
/// The most mentions one wake hands over; the rest are the relay's history.
pub const MAX_EVENTS: usize = 64;
/// The oldest mention a woken harness answers, counted back from its start.
pub const WINDOW: Duration = Duration::from_secs(3600);
/// The tag of a harness's final presence that says why it stopped.
pub const TAG_STOP: &str = "stop";

/// Why a harness stopped on purpose (the exit code is 0 for each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// The inactivity bound: the agent sleeps, a mention may wake it.
    Idle,
    /// The owner's `!shutdown`: stopped for good (I5).
    Owner,
    /// SIGTERM or SIGINT: whoever sent it stopped it (the launcher's stop,
    /// a pod's deletion, a person at a terminal).
    Signal,
}

impl StopReason {
    /// Every reason.
    pub const ALL: [StopReason; 3] = [StopReason::Idle, StopReason::Owner, StopReason::Signal];

    /// The wire word (the [`TAG_STOP`] value and the log's `stop=`).
    pub const fn as_str(self) -> &'static str {
        match self {
            StopReason::Idle => "idle",
            StopReason::Owner => "owner",
            StopReason::Signal => "signal",
        }
    }

    /// The reason a wire word names, exactly.
    pub fn parse(word: &str) -> Option<StopReason> {
        StopReason::ALL.into_iter().find(|r| r.as_str() == word)
    }

    /// Whether a mention may wake an agent that stopped for this reason.
    pub const fn wakes(self) -> bool {
        matches!(self, StopReason::Idle)
    }
}

/// Why [`parse_events`] refused a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WakeError {
    #[error("{EVENTS_ENV} item {index} is not a 64-character hex event id")]
    NotAnId { index: usize },
    #[error("{EVENTS_ENV} names {count} events; at most {MAX_EVENTS}")]
    TooMany { count: usize },
    #[error("{SINCE_ENV} is not unix seconds")]
    NotSeconds,
}

/// The env value naming `ids` (lower-case hex, in the order given).
pub fn format_events(ids: &[String]) -> String {
    ids.iter()
        .map(|i| i.to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(",")
}

/// The ids an [`EVENTS_ENV`] value names: empty for an empty value,
/// duplicates dropped, order kept. Refused whole when one item is not an
/// event id or there are more than [`MAX_EVENTS`].
pub fn parse_events(value: &str) -> Result<Vec<String>, WakeError> {
    let mut out: Vec<String> = Vec::new();
    for (index, item) in value.split(',').map(str::trim).enumerate() {
        if item.is_empty() {
            continue;
        }
        if item.len() != 64 || !item.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(WakeError::NotAnId { index });
        }
        let id = item.to_ascii_lowercase();
        if !out.contains(&id) {
            out.push(id);
        }
    }
    if out.len() > MAX_EVENTS {
        return Err(WakeError::TooMany { count: out.len() });
    }
    Ok(out)
}

/// The [`SINCE_ENV`] value: unix seconds, trimmed.
pub fn parse_since(value: &str) -> Result<u64, WakeError> {
    value.trim().parse().map_err(|_| WakeError::NotSeconds)
}

/// The oldest waking mention a harness started at `now` answers: inside
/// the [`WINDOW`] and strictly after the owner's last `!shutdown` it can
/// see (`last_shutdown`).
pub fn floor(now: u64, last_shutdown: Option<u64>) -> u64 {
    let window = now.saturating_sub(WINDOW.as_secs());
    let after_stop = last_shutdown.map_or(0, |t| t.saturating_add(1));
    window.max(after_stop)
}

/// The run-start floor of a harness started at `now` (review b30b1a0 #3):
/// its own start, or for a woken one the waker's look (`since`), clamped
/// into the [`WINDOW`] and never after `now`.
pub fn run_floor(now: u64, since: Option<u64>) -> u64 {
    match since {
        None => now,
        Some(s) => s.clamp(now.saturating_sub(WINDOW.as_secs()), now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(c: char) -> String {
        c.to_string().repeat(64)
    }

    #[test]
    fn events_round_trip_and_duplicates_go() {
        let ids = vec![id('a'), id('B'), id('a')];
        let v = format_events(&ids);
        assert_eq!(v, format!("{},{},{}", id('a'), id('b'), id('a')));
        assert_eq!(parse_events(&v), Ok(vec![id('a'), id('b')]));
        assert_eq!(parse_events(""), Ok(vec![]));
        assert_eq!(parse_events(" , "), Ok(vec![]));
    }

    #[test]
    fn a_bad_item_or_too_many_refuses_the_whole_value() {
        assert_eq!(
            parse_events(&format!("{},xyz", id('a'))),
            Err(WakeError::NotAnId { index: 1 })
        );
        assert_eq!(
            parse_events(&"g".repeat(64)),
            Err(WakeError::NotAnId { index: 0 })
        );
        let many: Vec<String> = (0..=MAX_EVENTS).map(|i| format!("{i:064x}")).collect();
        assert_eq!(
            parse_events(&many.join(",")),
            Err(WakeError::TooMany {
                count: MAX_EVENTS + 1
            })
        );
        assert_eq!(
            parse_events(&many[..MAX_EVENTS].join(",")).map(|v| v.len()),
            Ok(MAX_EVENTS)
        );
        assert_eq!(parse_since(" 17 "), Ok(17));
        assert_eq!(parse_since("-1"), Err(WakeError::NotSeconds));
    }

    #[test]
    fn only_an_idle_stop_wakes() {
        for r in StopReason::ALL {
            assert_eq!(StopReason::parse(r.as_str()), Some(r));
            assert_eq!(r.wakes(), r == StopReason::Idle);
        }
        assert_eq!(StopReason::parse("Idle"), None);
    }

    #[test]
    fn the_waking_floor_is_the_window_or_after_the_last_shutdown() {
        let now = 10_000;
        assert_eq!(floor(now, None), now - WINDOW.as_secs());
        assert_eq!(floor(now, Some(9_500)), 9_501, "strictly after the stop");
        assert_eq!(floor(now, Some(1)), now - WINDOW.as_secs());
    }

    #[test]
    fn a_woken_run_starts_at_the_waker_s_look_inside_the_window() {
        let now = 10_000;
        assert_eq!(run_floor(now, None), now);
        assert_eq!(run_floor(now, Some(9_990)), 9_990);
        assert_eq!(run_floor(now, Some(1)), now - WINDOW.as_secs());
        assert_eq!(run_floor(now, Some(20_000)), now, "never after the start");
    }
}

/// Whether an owner's message is one of the harness's commands, as the
/// harness decides it: `!shutdown` and `!cancel` exactly (trimmed), a
/// permission answer by its first word (`!allow …`, `!deny …`). An owner's
/// "!shutdown now" is a message, answered as a turn; a waker that took it
/// for a command would neither wake the agent nor stop it (review afa2bf1
/// finding 9).
pub fn is_owner_command(content: &str) -> bool {
    use crate::presence::{ALLOW_COMMAND, CANCEL_COMMAND, DENY_COMMAND, SHUTDOWN_COMMAND};
    let t = content.trim();
    t == SHUTDOWN_COMMAND
        || t == CANCEL_COMMAND
        || matches!(t.split_whitespace().next(), Some(w) if w == ALLOW_COMMAND || w == DENY_COMMAND)
}

#[cfg(test)]
mod command_tests {
    use super::is_owner_command;

    #[test]
    fn a_command_is_what_the_harness_takes_for_one() {
        for c in [
            "!shutdown",
            " !shutdown ",
            "!cancel",
            "!allow 3fa2c1",
            "!deny",
            "!allow 3fa2c1 always",
        ] {
            assert!(is_owner_command(c), "{c}");
        }
        for m in ["!shutdown now", "!cancel that, please", "hello", "!allowance", ""] {
            assert!(!is_owner_command(m), "{m}");
        }
    }
}
