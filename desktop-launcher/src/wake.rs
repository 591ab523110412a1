//! Wake on mention, the launcher's decisions (issue 33; spec I5; the shared
//! words in `buzz_contract::wake`). Pure: records, times and events in,
//! decisions out. The shell that watches relays and starts agents is
//! [`crate::app::waker`].
//!
//! **Sleep is not stop.** An agent at rest is one of ([`Rest`]):
//!
//! | what the launcher knows | rest | a mention wakes it |
//! |---|---|---|
//! | its harness runs, or its presence is online/away | running | — |
//! | never started | not started | no |
//! | a launcher `stop` or `undeploy` since its last start | stopped by its owner | no (I5) |
//! | its run ended saying `stop=owner` or `stop=signal` | stopped | no (I5) |
//! | its run ended saying `stop=idle` | sleeping | yes |
//! | its run failed (a non-zero exit) | failed | no: its error is shown, a Start is the owner's |
//! | deployed, ended unseen (no launcher watched) | sleeping, unseen | yes |
//! | a local run whose end left no record | offline | no |
//!
//! The unseen row is a decision: a pod that slept while no launcher
//! watched ends the same way, unseen, as one deleted by other hands, and
//! waking either is the fresh Start the owner would press. Whatever the
//! row, an owner's `!shutdown` to a sleeping agent, from any client, is on
//! the relay and stops it for good ([`owner_stopped`]).
//!
//! **What wakes it** ([`wakes_for`]): a kind 9 mention of the agent, created
//! after it fell asleep and within the window, that its respond-to gate
//! accepts, and that is no owner command. **How often** ([`Budget`]): at
//! most one wake per [`MIN_GAP`] and [`PER_HOUR`] an hour per agent; a
//! failed wake backs off, doubling from [`MIN_GAP`] to [`MAX_BACKOFF`].

use buzz_contract::gate::{self, RespondTo};
use buzz_contract::presence::{KIND_CHANNEL_MESSAGE, SHUTDOWN_COMMAND};
use buzz_contract::wake::{StopReason, WINDOW};
use std::time::Duration;

/// The least time between two wakes of one agent.
pub const MIN_GAP: Duration = Duration::from_secs(30);
/// The most wakes of one agent in an hour.
pub const PER_HOUR: usize = 6;
/// The longest wait after failed wakes.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30 * 60);
/// The inactivity bound of an agent whose record sets none, while a waker
/// runs: sleeping costs nothing when a mention wakes it.
pub const DEFAULT_INACTIVITY_WITH_WAKER: u64 = 15 * 60;

/// How a run ended, as far as the launcher knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// On purpose, for this reason, at unix seconds.
    Stopped(StopReason, u64),
    /// A non-zero exit, or killed.
    Failed,
}

/// What the launcher knows of one agent at rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Known {
    /// Its harness runs, or its presence says online or away.
    pub live: bool,
    /// Unix seconds of its last start.
    pub started_at: Option<u64>,
    /// Unix seconds of a launcher `stop` or `undeploy`.
    pub stopped_at: Option<u64>,
    /// How its last run ended, when seen.
    pub ended: Option<Ended>,
    /// A provider agent still recorded as deployed.
    pub deployed: bool,
}

/// An agent's rest (the module's table, one arm per row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rest {
    Running,
    NotStarted,
    /// Stopped by its owner through a launcher.
    StoppedByOwner,
    /// Its run ended on purpose, not by inactivity.
    Stopped(StopReason),
    /// Ended by inactivity at this time: a mention wakes it.
    Sleeping {
        since: u64,
    },
    /// Deployed and ended unseen; asleep since its start, as far as known.
    SleepingUnseen {
        since: u64,
    },
    Failed,
    /// A local run whose end left no record.
    Unknown,
}

impl Rest {
    /// Whether a mention may wake it, and the time it has slept since
    /// (the floor of what wakes it).
    pub fn asleep_since(self) -> Option<u64> {
        match self {
            Rest::Sleeping { since } | Rest::SleepingUnseen { since } => Some(since),
            _ => None,
        }
    }

    /// The word `status` and the page show.
    pub fn word(self) -> &'static str {
        match self {
            Rest::Running => "running",
            Rest::NotStarted => "not started",
            Rest::StoppedByOwner | Rest::Stopped(_) => "stopped",
            Rest::Sleeping { .. } | Rest::SleepingUnseen { .. } => "sleeping",
            Rest::Failed => "failed",
            Rest::Unknown => "offline",
        }
    }
}

/// The module table's rows, in order.
pub fn rest(k: &Known) -> Rest {
    let Some(started) = k.started_at else {
        return if k.live { Rest::Running } else { Rest::NotStarted };
    };
    if k.live {
        return Rest::Running;
    }
    if k.stopped_at.is_some_and(|s| s >= started) {
        return Rest::StoppedByOwner;
    }
    match k.ended {
        Some(Ended::Stopped(r, at)) if r.wakes() => Rest::Sleeping {
            since: at.max(started),
        },
        Some(Ended::Stopped(r, _)) => Rest::Stopped(r),
        Some(Ended::Failed) => Rest::Failed,
        None if k.deployed => Rest::SleepingUnseen { since: started },
        None => Rest::Unknown,
    }
}

/// The gate inputs of one agent's record (wire-facts §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub agent: String,
    pub owner: String,
    pub respond_to: RespondTo,
    pub allowlist: Vec<String>,
    /// The channels its harness answers in (`BUZZ_ACP_CHANNELS` in the
    /// record's env); empty: every channel.
    pub channels: Vec<String>,
}

/// A mention as the waker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    pub id: String,
    pub author: String,
    pub kind: u16,
    pub content: String,
    /// The `p` tags' values.
    pub addressed: Vec<String>,
    /// Its first `h` tag's value (its channel), if any.
    pub channel: Option<String>,
    pub created_at: u64,
}

/// Why a mention does not wake the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoWake {
    NotAMention,
    /// Created before the agent fell asleep, or older than the window.
    TooOld,
    /// The agent's respond-to gate would not answer its author.
    Gated,
    /// `!shutdown`, `!cancel`, `!allow`, `!deny`: never a reason to wake.
    Command,
    /// In a channel its harness does not answer in (its channel scope).
    OtherChannel,
}

/// Whether `m` wakes an agent asleep since `since`, at `now`.
pub fn wakes_for(g: &Gate, since: u64, now: u64, m: &Mention) -> Result<(), NoWake> {
    if m.kind != KIND_CHANNEL_MESSAGE || m.author == g.agent || !m.addressed.contains(&g.agent) {
        return Err(NoWake::NotAMention);
    }
    if m.created_at < since || m.created_at < now.saturating_sub(WINDOW.as_secs()) {
        return Err(NoWake::TooOld);
    }
    // The harness's own rules, in its order: owner commands first (never
    // channel-scoped), then the channel scope, then the gate.
    if m.author == g.owner && buzz_contract::wake::is_owner_command(&m.content) {
        return Err(NoWake::Command);
    }
    if !g.channels.is_empty() && !m.channel.as_ref().is_some_and(|c| g.channels.contains(c)) {
        return Err(NoWake::OtherChannel);
    }
    if !gate::allows(g.respond_to, Some(&g.owner), &g.allowlist, &m.author) {
        return Err(NoWake::Gated);
    }
    Ok(())
}

/// An owner's `!shutdown` to the agent among `ms` since `since` (when it
/// fell asleep, or its start when it ended unseen): the owner stopped it,
/// and nothing wakes it until a Start.
pub fn owner_stopped(g: &Gate, since: u64, ms: &[Mention]) -> bool {
    ms.iter().any(|m| {
        m.author == g.owner
            && m.addressed.contains(&g.agent)
            && m.created_at >= since
            && m.content.trim() == SHUTDOWN_COMMAND
    })
}

/// The waking mentions to hand over, oldest first (ties by id), at most
/// `buzz_contract::wake::MAX_EVENTS`: the most recent ones when more came.
pub fn to_hand_over(mut ms: Vec<Mention>) -> Vec<String> {
    ms.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    ms.dedup_by(|a, b| a.id == b.id);
    let skip = ms.len().saturating_sub(buzz_contract::wake::MAX_EVENTS);
    ms.into_iter().skip(skip).map(|m| m.id).collect()
}

/// One agent's wake budget (the module doc): times in unix seconds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budget {
    /// When its wakes happened, oldest first (the last hour's).
    wakes: Vec<u64>,
    /// Failed wakes in a row.
    failures: u32,
}

/// Why a wake is refused now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Too soon after the last wake; allowed from this time.
    TooSoon { until: u64 },
    /// [`PER_HOUR`] wakes in the last hour; allowed from this time.
    HourFull { until: u64 },
}

impl Budget {
    /// Whether a wake may happen at `now`.
    pub fn check(&self, now: u64) -> Result<(), Refused> {
        let recent: Vec<u64> = self.wakes.iter().copied().filter(|t| *t + 3600 > now).collect();
        if let Some(last) = recent.last() {
            let until = last + self.gap().as_secs();
            if now < until {
                return Err(Refused::TooSoon { until });
            }
        }
        if recent.len() >= PER_HOUR {
            return Err(Refused::HourFull {
                until: recent[recent.len() - PER_HOUR] + 3600,
            });
        }
        Ok(())
    }

    /// The least time after the last wake: [`MIN_GAP`], doubled per failure.
    fn gap(&self) -> Duration {
        let doubled = MIN_GAP.saturating_mul(1u32 << self.failures.min(16));
        doubled.min(MAX_BACKOFF)
    }

    /// Failed wakes in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Records a wake at `now` and whether its Start succeeded.
    pub fn record(&mut self, now: u64, ok: bool) {
        self.wakes.retain(|t| *t + 3600 > now);
        self.wakes.push(now);
        self.failures = if ok { 0 } else { self.failures.saturating_add(1) };
    }
}

/// What a wake hands the harness ([`buzz_contract::wake`]): the waking
/// mentions and the waker's look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandOver {
    /// Event ids, oldest first ([`to_hand_over`]).
    pub events: Vec<String>,
    /// Unix seconds: when the waker looked at the relay.
    pub look: u64,
}

impl HandOver {
    /// The harness env it becomes.
    pub fn env(&self) -> [(&'static str, String); 2] {
        use buzz_contract::wake::{EVENTS_ENV, SINCE_ENV, format_events};
        [
            (EVENTS_ENV, format_events(&self.events)),
            (SINCE_ENV, self.look.to_string()),
        ]
    }
}

/// The inactivity bound a Start gives the harness: the record's, else
/// [`DEFAULT_INACTIVITY_WITH_WAKER`] while a waker runs, else none (the
/// backend's own default: no bound locally, the provider's schema default).
pub fn inactivity(record: Option<u64>, waker_runs: bool) -> Option<u64> {
    match (record, waker_runs) {
        (Some(n), _) => Some(n),
        (None, true) => Some(DEFAULT_INACTIVITY_WITH_WAKER),
        (None, false) => None,
    }
}

/// The doze bound when a record names none (issue 50; the Kubernetes
/// provider's `doze_seconds` default too): after 5 minutes without a turn
/// the agent's processes end, and the harness answers the next mention by
/// itself, no waker needed.
pub const DEFAULT_DOZE: u64 = 300;

/// The doze bound a Start gives the harness: the record's, else
/// [`DEFAULT_DOZE`]; 0 = no doze.
pub fn doze(record: Option<u64>) -> u64 {
    record.unwrap_or(DEFAULT_DOZE)
}

#[cfg(test)]
#[path = "wake_tests.rs"]
mod tests;
