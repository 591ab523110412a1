//! The operation budget (spec §Provider Protocol `deploy` timeout 600 s,
//! §Deploy State Machine "Startup is part of create", §K8s GC age gate). Pure.
//!
//! - The deadline is measured from **process start**, because the launcher's
//!   600 s clock starts at spawn: stdin, kubeconfig loading and any exec
//!   credential plugin all spend the same budget.
//! - The provider stops acting a margin before the deadline: in the first half
//!   of the margin it may still clean up its own unreferenced Secret, in the
//!   second half it only writes its in-band answer.
//! - The orphan-Secret age gate is 2 × 600 s and does **not** follow the
//!   deadline knob: a provider started with a short deadline must never judge
//!   a default-deadline contender's in-flight Secret abandoned. Only the
//!   separately named, test-only knob [`TEST_ORPHAN_AGE_ENV`] lowers it.

use crate::consts::{DEADLINE_ENV, DEPLOY_DEADLINE, TEST_ORPHAN_AGE_ENV, WATCH_SAFETY_NET};
use std::time::{Duration, Instant};

/// The orphan age gate's floor: twice the protocol's 600 s deploy deadline.
pub const ORPHAN_MIN_AGE: Duration = Duration::from_secs(2 * 600);
/// Smallest stop margin (short test deadlines).
pub const MIN_MARGIN: Duration = Duration::from_millis(400);
/// Largest stop margin (the default deadline): 10 s to clean up, 10 s to answer.
pub const MAX_MARGIN: Duration = Duration::from_secs(20);

/// The budget of one provider process.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// When the process started (captured first thing in `main`).
    pub started: Instant,
    /// The operation deadline, measured from `started`.
    pub deadline: Duration,
    /// Bounded safety-net re-read while waiting on a watch.
    pub safety_net: Duration,
    /// Unreferenced Secrets younger than this (apiserver clock) are never GC'd.
    pub orphan_min_age: Duration,
}

impl Timing {
    /// The default budget from `started`: 600 s, gate 1200 s.
    pub fn new(started: Instant) -> Timing {
        Timing {
            started,
            deadline: DEPLOY_DEADLINE,
            safety_net: WATCH_SAFETY_NET,
            orphan_min_age: ORPHAN_MIN_AGE,
        }
    }

    /// The budget from the two knobs' raw values (`None` = unset). Invalid or
    /// zero values are ignored. The deadline knob never moves the age gate.
    pub fn from_knobs(started: Instant, deadline: Option<&str>, test_orphan_age: Option<&str>) -> Timing {
        let secs = |v: Option<&str>| {
            v.and_then(|s| s.trim().parse::<u64>().ok())
                .filter(|s| *s > 0)
                .map(Duration::from_secs)
        };
        let mut t = Timing::new(started);
        if let Some(d) = secs(deadline) {
            t.deadline = d;
        }
        if let Some(a) = secs(test_orphan_age) {
            t.orphan_min_age = a;
        }
        t
    }

    /// The budget from the process environment.
    pub fn from_env(started: Instant) -> Timing {
        let deadline = std::env::var(DEADLINE_ENV).ok();
        let age = std::env::var(TEST_ORPHAN_AGE_ENV).ok();
        Timing::from_knobs(started, deadline.as_deref(), age.as_deref())
    }

    /// What is held back from the deadline: a tenth of it, within
    /// [`MIN_MARGIN`]..=[`MAX_MARGIN`], and never more than half of it.
    pub fn margin(&self) -> Duration {
        (self.deadline / 10)
            .clamp(MIN_MARGIN, MAX_MARGIN)
            .min(self.deadline / 2)
    }

    /// From here on nothing new is attempted: no create, no further observation.
    pub fn act_until(&self) -> Instant {
        self.started + self.deadline.saturating_sub(self.margin())
    }

    /// Cleanup of this call's own Secret must finish by here; after it only
    /// the answer is written.
    pub fn cleanup_until(&self) -> Instant {
        self.started + self.deadline.saturating_sub(self.margin() / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_knob_never_shrinks_the_age_gate() {
        let t = Timing::from_knobs(Instant::now(), Some("2"), None);
        assert_eq!(t.deadline, Duration::from_secs(2));
        assert_eq!(t.orphan_min_age, Duration::from_secs(1200));
        let t = Timing::from_knobs(Instant::now(), Some("2"), Some("3"));
        assert_eq!(
            t.orphan_min_age,
            Duration::from_secs(3),
            "only the test-only knob moves it"
        );
    }

    #[test]
    fn invalid_knobs_keep_the_defaults() {
        for v in ["", "0", "-5", "ten", "1.5"] {
            let t = Timing::from_knobs(Instant::now(), Some(v), Some(v));
            assert_eq!(
                (t.deadline, t.orphan_min_age),
                (DEPLOY_DEADLINE, ORPHAN_MIN_AGE),
                "{v:?}"
            );
        }
    }

    #[test]
    fn the_provider_stops_acting_and_cleaning_before_the_deadline() {
        let start = Instant::now();
        let t = Timing::new(start);
        assert_eq!(t.margin(), MAX_MARGIN);
        assert_eq!(t.act_until(), start + Duration::from_secs(580));
        assert_eq!(t.cleanup_until(), start + Duration::from_secs(590));
        let short = Timing::from_knobs(start, Some("5"), None);
        assert_eq!(short.margin(), Duration::from_millis(500));
        assert!(short.act_until() < short.cleanup_until());
        assert!(short.cleanup_until() < start + Duration::from_secs(5));
        let tiny = Timing::from_knobs(start, Some("1"), None);
        assert_eq!(tiny.margin(), Duration::from_millis(400));
    }
}
