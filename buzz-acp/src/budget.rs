//! The shutdown budget (spec §Stop and Delete, Known Defect 7): one shared
//! deadline over the whole post-signal path, with a reserved finalization
//! slice for presence `offline` (2 s) and relay close (5 s) that child
//! cleanup may never consume. Pure: instants come in as arguments.

use buzz_contract::presence::{OFFLINE_PUBLISH_BOUND, RELAY_CLOSE_BOUND};
use std::time::{Duration, Instant};

/// The reserved finalization slice: 2 s + 5 s = 7 s.
pub const FINALIZATION_RESERVE: Duration = OFFLINE_PUBLISH_BOUND.saturating_add(RELAY_CLOSE_BOUND);
/// At a graceful stop, a running turn silent this long is cancelled at once
/// (issue "a stop that does not wait for stuck prompts"): a prompt that is
/// making progress may still finish within the drain. 4 s, so that a pool of
/// stuck agents that ignore both the cancel and SIGTERM is gone in 4 s plus
/// the default 5 s kill grace, under the 10 s goal with the finalization.
/// A turn with a tool call running is never stalled, however quiet the tool
/// (review-9b395e0 #7; `acp::turn::stalled_at`).
pub const STALLED_AFTER: Duration = Duration::from_secs(4);

/// Time kept for SIGKILL and its short wait once the child deadline is reached.
pub const KILL_WAIT: Duration = Duration::from_millis(500);

/// The phases of one shutdown, as absolute instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownPlan {
    /// When the stop was triggered.
    pub start: Instant,
    /// The drain point: running turns may finish (and reply) until here;
    /// what remains is cancelled.
    pub drain_until: Instant,
    /// Cancelled turns may acknowledge their cancel until here; then SIGTERM.
    pub cancel_until: Instant,
    /// SIGKILL goes to every surviving agent group here at the latest.
    pub kill_at: Instant,
    /// Child cleanup ends here, whatever remains: the finalization slice starts.
    pub children_until: Instant,
    /// The one shared deadline.
    pub deadline: Instant,
    /// The SIGTERM → SIGKILL grace the plan was made with.
    pub kill_grace: Duration,
}

impl ShutdownPlan {
    /// Plans a shutdown started at `start` with total `budget`, a preferred
    /// `drain` length and a SIGTERM→SIGKILL `kill_grace`. Child cleanup
    /// degrades first: drain and grace shrink so that `children_until` never
    /// passes `deadline - 7 s`.
    pub fn new(start: Instant, budget: Duration, drain: Duration, kill_grace: Duration) -> ShutdownPlan {
        let deadline = start + budget;
        let children_until = deadline - FINALIZATION_RESERVE.min(budget);
        let child_span = children_until - start;
        let kill_at_latest = children_until.checked_sub(KILL_WAIT).unwrap_or(start).max(start);
        let reap_span = kill_grace.saturating_add(KILL_WAIT);
        let drain_until =
            (start + drain).min(children_until.checked_sub(reap_span).unwrap_or(start).max(start));
        let kill_at = (drain_until + kill_grace).min(kill_at_latest);
        let cancel_until = drain_until + (kill_at.saturating_duration_since(drain_until) / 2);
        debug_assert!(child_span <= budget);
        ShutdownPlan {
            start,
            drain_until,
            cancel_until,
            kill_at,
            children_until,
            deadline,
            kill_grace,
        }
    }

    /// The plan once the drain ended early, at `at` (every running turn
    /// finished or stalled): cancel and kill move up by as much, never later
    /// than planned; `children_until` and `deadline` do not move, so the
    /// finalization slice is untouched.
    pub fn drained_at(&self, at: Instant) -> ShutdownPlan {
        if at >= self.drain_until {
            return *self;
        }
        let at = at.max(self.start);
        let kill_at = (at + self.kill_grace).min(self.kill_at);
        ShutdownPlan {
            drain_until: at,
            cancel_until: at + kill_at.saturating_duration_since(at) / 2,
            kill_at,
            ..*self
        }
    }

    /// The bound for publishing `offline`: at most 2 s and never past the deadline.
    pub fn offline_bound(&self, now: Instant) -> Duration {
        OFFLINE_PUBLISH_BOUND.min(self.deadline.saturating_duration_since(now))
    }

    /// The bound for closing the relay: at most 5 s and never past the deadline.
    pub fn close_bound(&self, now: Instant) -> Duration {
        RELAY_CLOSE_BOUND.min(self.deadline.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn default_budget_reserves_seven_seconds() {
        let t = Instant::now();
        let p = ShutdownPlan::new(t, s(60), s(30), s(5));
        assert_eq!(p.deadline, t + s(60));
        assert_eq!(p.children_until, t + s(53));
        assert_eq!(p.drain_until, t + s(30));
        assert_eq!(p.cancel_until, t + Duration::from_millis(32_500));
        assert_eq!(p.kill_at, t + s(35));
        assert_eq!(FINALIZATION_RESERVE, s(7));
    }

    #[test]
    fn child_cleanup_degrades_first_under_a_small_budget() {
        let t = Instant::now();
        let p = ShutdownPlan::new(t, s(10), s(30), s(5));
        assert_eq!(p.children_until, t + s(3));
        assert!(p.kill_at <= p.children_until - KILL_WAIT);
        assert!(p.drain_until <= p.cancel_until && p.cancel_until <= p.kill_at);
        assert_eq!(
            p.deadline - p.children_until,
            s(7),
            "the reserve is never consumed"
        );
    }

    #[test]
    fn finalizer_bounds_never_pass_the_deadline() {
        let t = Instant::now();
        let p = ShutdownPlan::new(t, s(60), s(30), s(5));
        assert_eq!(p.offline_bound(t + s(53)), s(2));
        assert_eq!(p.close_bound(t + s(55)), s(5));
        assert_eq!(p.close_bound(t + s(58)), s(2));
        assert_eq!(p.offline_bound(t + s(61)), Duration::ZERO);
    }

    #[test]
    fn an_early_drain_moves_cancel_and_kill_up_but_not_the_reserve() {
        let t = Instant::now();
        let p = ShutdownPlan::new(t, s(60), s(30), s(5));
        let q = p.drained_at(t + s(2));
        assert_eq!(q.drain_until, t + s(2));
        assert_eq!(q.kill_at, t + s(7));
        assert_eq!(q.cancel_until, t + Duration::from_millis(4_500));
        assert_eq!((q.children_until, q.deadline), (p.children_until, p.deadline));
        assert_eq!(p.drained_at(t + s(40)), p, "a late drain changes nothing");
        // Never later than planned, even under a budget that squeezed the grace.
        let small = ShutdownPlan::new(t, s(10), s(30), s(5));
        let q = small.drained_at(t);
        assert!(q.kill_at <= small.kill_at && q.cancel_until <= q.kill_at);
    }
}
