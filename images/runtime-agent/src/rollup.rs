//! Hour-window rollups (collector-design.md §3 "Windows", "Counters", "Fields",
//! "Reset, start, resume", "Merge"; runtime-agent-backend-contract.md §4 "What
//! arrives" and "Delivery semantics").
//!
//! Pure: every poll hands in a [`ClockReading`] and a [`Reading`]; nothing here reads
//! a clock or a file. The module is split by concept:
//!
//! - `window`: the UTC hour grid and the exact pro-rata split of an interval's delta
//!   across it ([`window_start_of`], [`split_pro_rata`]; design §3 "Windows", "Counters").
//! - `totals`: one window's record blocks — the serde types the payloads carry — and
//!   how samples are counted into them and merged ([`WindowTotals`]; design §3
//!   "Fields", "Merge", §4 `usage_snapshot`).
//! - Here: the rollup state — counter baselines and the open windows — that folds one
//!   poll in ([`Rollup::observe`]; design §3 "Windows", "Reset, start, resume").
//!
//! The rules:
//!
//! - Windows are 3600 s, UTC-aligned ([`window_start_of`]).
//! - A poll's interval is `[t − Δmono, t)` with `t` the realtime reading. Δmono ≤ 0 is
//!   dropped; realtime and monotonic advancing by more than 1 s apart rebaselines every
//!   counter and is counted ([`Rollup::clock_rebaselines`]).
//! - Counter deltas (CPU usage, CFS periods and throttled periods, PSI totals) are split
//!   pro rata across the windows the interval overlaps with ⌊a·b/c⌋ in 128 bits and the
//!   remainder to the last segment, so the parts sum exactly ([`split_pro_rata`]).
//!   `covered_nanoseconds` is the interval itself, split the same way, counted when the
//!   CPU delta was taken (so core and covered nanoseconds always describe the same time).
//! - Each CPU delta gives one rate sample (delta·1000/interval millicores) in the window
//!   holding `t − 1 ns`; throttling and PSI sample counts go there too when their delta
//!   was taken. Each working-set read is a sample of `t`'s window.
//! - A counter below its baseline rebaselines and contributes nothing that interval; a
//!   counter that could not be read loses its baseline, so the next read only
//!   rebaselines. The first poll only sets baselines. A resumed window
//!   ([`Rollup::resume`]) merges back and the next poll only rebaselines, so nothing is
//!   counted twice and the downtime stays uncovered.
//! - [`WindowTotals::merge`] adds totals and counts, keeps extremes and sums histograms.

use std::collections::BTreeMap;

use crate::time::{ClockReading, NANOS_PER_SEC};

mod totals;
mod window;

pub use totals::{CpuTotals, MemoryTotals, WindowTotals};
pub use window::{Segment, WINDOW_SECONDS, split_pro_rata, window_start_of};

/// Largest tolerated disagreement between the realtime and monotonic advance.
pub const MAX_CLOCK_DIVERGENCE_NS: u64 = NANOS_PER_SEC;

/// What one poll read; `None` = not read this poll.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reading {
    /// Cumulative CPU usage, ns.
    pub cpu_usage_ns: Option<u64>,
    /// Cumulative CFS periods (`nr_periods`).
    pub cpu_periods: Option<u64>,
    /// Cumulative throttled periods (`nr_throttled`).
    pub cpu_throttled_periods: Option<u64>,
    /// Cumulative CPU PSI `some` stall, ns.
    pub cpu_psi_ns: Option<u64>,
    /// Working set, bytes (a gauge).
    pub working_set_bytes: Option<u64>,
    /// Cumulative memory PSI `some` stall, ns.
    pub memory_psi_ns: Option<u64>,
}

/// A cumulative counter's baseline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counter {
    baseline: Option<u64>,
}

impl Counter {
    /// Take the delta since the baseline and move the baseline. `None` (nothing
    /// counted) on the first read, after an unread poll, and when the counter went
    /// backwards (a reset: rebaseline).
    pub fn advance(&mut self, value: Option<u64>) -> Option<u64> {
        let previous = self.baseline;
        self.baseline = value;
        match (previous, value) {
            (Some(b), Some(v)) if v >= b => Some(v - b),
            _ => None,
        }
    }

    /// Set the baseline without counting.
    pub fn rebaseline(&mut self, value: Option<u64>) {
        self.baseline = value;
    }
}

/// The rollup of one container's usage into hour windows.
#[derive(Debug, Clone, Default)]
pub struct Rollup {
    windows: BTreeMap<u64, WindowTotals>,
    last_clock: Option<ClockReading>,
    cpu: Counter,
    periods: Counter,
    throttled: Counter,
    cpu_psi: Counter,
    memory_psi: Counter,
    clock_rebaselines: u64,
    dropped_intervals: u64,
}

impl Rollup {
    /// An empty rollup; its first poll only sets baselines.
    pub fn new() -> Self {
        Self::default()
    }

    /// Merge a window recovered from the spool (an unended-window snapshot). The
    /// counters keep no baseline, so the next poll only rebaselines.
    pub fn resume(&mut self, window_start: u64, totals: &WindowTotals) {
        self.windows.entry(window_start).or_default().merge(totals);
        self.last_clock = None;
        self.rebaseline_all(&Reading::default());
    }

    /// How often the clocks diverged by more than 1 s and every counter was rebaselined.
    pub fn clock_rebaselines(&self) -> u64 {
        self.clock_rebaselines
    }

    /// How many intervals were dropped because the monotonic clock did not advance.
    pub fn dropped_intervals(&self) -> u64 {
        self.dropped_intervals
    }

    /// The windows currently held (open, or closed and not yet taken).
    pub fn windows(&self) -> &BTreeMap<u64, WindowTotals> {
        &self.windows
    }

    /// Remove and return every window that ended at or before `now_ns`.
    pub fn take_closed(&mut self, now_ns: u64) -> Vec<(u64, WindowTotals)> {
        let open_from = window_start_of(now_ns);
        let open = self.windows.split_off(&open_from);
        let closed = std::mem::replace(&mut self.windows, open);
        closed.into_iter().collect()
    }

    fn rebaseline_all(&mut self, r: &Reading) {
        self.cpu.rebaseline(r.cpu_usage_ns);
        self.periods.rebaseline(r.cpu_periods);
        self.throttled.rebaseline(r.cpu_throttled_periods);
        self.cpu_psi.rebaseline(r.cpu_psi_ns);
        self.memory_psi.rebaseline(r.memory_psi_ns);
    }

    fn window(&mut self, start: u64) -> &mut WindowTotals {
        self.windows.entry(start).or_default()
    }

    fn spread(&mut self, start_ns: u64, end_ns: u64, delta: u64, add: impl Fn(&mut WindowTotals, u64)) {
        for seg in split_pro_rata(start_ns, end_ns, delta) {
            add(self.window(seg.window_start), seg.part);
        }
    }

    /// Fold one poll in.
    pub fn observe(&mut self, clock: ClockReading, r: &Reading) {
        let t = clock.realtime_ns;
        if let Some(bytes) = r.working_set_bytes {
            self.window(window_start_of(t)).memory.record_working_set(bytes);
        }
        let previous = self.last_clock.replace(clock);
        let Some(prev) = previous else {
            self.rebaseline_all(r);
            return;
        };
        let Some(interval) = clock
            .monotonic_ns
            .checked_sub(prev.monotonic_ns)
            .filter(|d| *d > 0)
        else {
            self.dropped_intervals += 1;
            self.rebaseline_all(r);
            return;
        };
        let real_advance = i128::from(t) - i128::from(prev.realtime_ns);
        if (real_advance - i128::from(interval)).unsigned_abs() > u128::from(MAX_CLOCK_DIVERGENCE_NS) {
            self.clock_rebaselines += 1;
            self.rebaseline_all(r);
            return;
        }
        let Some(start) = t.checked_sub(interval) else {
            self.dropped_intervals += 1;
            self.rebaseline_all(r);
            return;
        };
        let sample_window = window_start_of(t - 1);

        if let Some(delta) = self.cpu.advance(r.cpu_usage_ns) {
            self.spread(start, t, delta, |w, p| {
                w.cpu.core_nanoseconds = w.cpu.core_nanoseconds.saturating_add(p)
            });
            self.spread(start, t, interval, |w, p| {
                w.cpu.covered_nanoseconds = w.cpu.covered_nanoseconds.saturating_add(p)
            });
            let milli = (u128::from(delta) * 1000 / u128::from(interval)).min(u128::from(u64::MAX)) as u64;
            self.window(sample_window).cpu.record_rate(milli);
        }
        let periods = self.periods.advance(r.cpu_periods);
        let throttled = self.throttled.advance(r.cpu_throttled_periods);
        if let (Some(periods), Some(throttled)) = (periods, throttled) {
            self.spread(start, t, periods, |w, p| {
                w.cpu.total_periods = w.cpu.total_periods.saturating_add(p)
            });
            self.spread(start, t, throttled, |w, p| {
                w.cpu.throttled_periods = w.cpu.throttled_periods.saturating_add(p)
            });
            let w = self.window(sample_window);
            w.cpu.throttling_samples = w.cpu.throttling_samples.saturating_add(1);
        }
        if let Some(delta) = self.cpu_psi.advance(r.cpu_psi_ns) {
            self.spread(start, t, delta, |w, p| {
                w.cpu.psi_stall_nanoseconds = w.cpu.psi_stall_nanoseconds.saturating_add(p)
            });
            let w = self.window(sample_window);
            w.cpu.psi_samples = w.cpu.psi_samples.saturating_add(1);
        }
        if let Some(delta) = self.memory_psi.advance(r.memory_psi_ns) {
            self.spread(start, t, delta, |w, p| {
                w.memory.psi_stall_nanoseconds = w.memory.psi_stall_nanoseconds.saturating_add(p)
            });
            let w = self.window(sample_window);
            w.memory.psi_samples = w.memory.psi_samples.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = NANOS_PER_SEC;
    /// 2026-08-06T10:00:00Z.
    const T10: u64 = 1_786_010_400;

    fn at(secs: u64, mono_secs: u64) -> ClockReading {
        ClockReading {
            realtime_ns: secs * S,
            monotonic_ns: mono_secs * S,
        }
    }

    fn cpu(ns: u64) -> Reading {
        Reading {
            cpu_usage_ns: Some(ns),
            ..Reading::default()
        }
    }

    #[test]
    fn a_delta_across_the_hour_is_split_and_the_sample_lands_before_t() {
        let mut r = Rollup::new();
        r.observe(at(T10 + 3595, 100), &cpu(0));
        r.observe(at(T10 + 3605, 110), &cpu(10 * S));
        let w = r.windows();
        assert_eq!(w[&T10].cpu.core_nanoseconds, 5 * S);
        assert_eq!(w[&T10].cpu.covered_nanoseconds, 5 * S);
        assert_eq!(w[&T10].cpu.samples, 0);
        let next = &w[&(T10 + 3600)].cpu;
        assert_eq!(
            (next.core_nanoseconds, next.covered_nanoseconds, next.samples),
            (5 * S, 5 * S, 1)
        );
        assert_eq!(next.max_milli, Some(1000));
        // The earlier window is closed by now; the later one is open.
        let closed = r.take_closed((T10 + 3605) * S);
        assert_eq!(closed.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![T10]);
        assert!(r.windows().contains_key(&(T10 + 3600)));
    }

    #[test]
    fn a_poll_exactly_on_the_hour_samples_into_the_closing_window() {
        let mut r = Rollup::new();
        r.observe(at(T10 + 3590, 0), &cpu(0));
        r.observe(
            at(T10 + 3600, 10),
            &Reading {
                working_set_bytes: Some(1 << 20),
                ..cpu(5 * S)
            },
        );
        let w = r.windows();
        assert_eq!(w[&T10].cpu.samples, 1);
        assert_eq!(w[&T10].cpu.core_nanoseconds, 5 * S);
        assert_eq!(w[&(T10 + 3600)].memory.samples, 1, "memory goes to t's window");
        assert_eq!(w[&(T10 + 3600)].cpu.samples, 0);
    }

    #[test]
    fn a_counter_that_goes_backwards_is_rebaselined_without_a_spike() {
        let mut r = Rollup::new();
        r.observe(at(T10 + 10, 10), &cpu(100 * S));
        r.observe(at(T10 + 20, 20), &cpu(105 * S));
        // Reset: the counter restarts near zero.
        r.observe(at(T10 + 30, 30), &cpu(S));
        r.observe(at(T10 + 40, 40), &cpu(3 * S));
        let c = &r.windows()[&T10].cpu;
        assert_eq!(c.core_nanoseconds, 7 * S);
        assert_eq!(c.covered_nanoseconds, 20 * S, "the reset interval is not covered");
        assert_eq!(c.samples, 2);
        assert_eq!(c.max_milli, Some(500));
    }

    #[test]
    fn one_counter_resetting_leaves_the_others_counting() {
        let mut r = Rollup::new();
        let read = |cpu_ns, psi| Reading {
            cpu_usage_ns: Some(cpu_ns),
            cpu_psi_ns: Some(psi),
            ..Reading::default()
        };
        r.observe(at(T10 + 10, 10), &read(10 * S, 5000));
        r.observe(at(T10 + 20, 20), &read(12 * S, 10));
        let c = &r.windows()[&T10].cpu;
        assert_eq!((c.core_nanoseconds, c.samples), (2 * S, 1));
        assert_eq!((c.psi_stall_nanoseconds, c.psi_samples), (0, 0));
    }

    #[test]
    fn an_unread_counter_loses_its_baseline() {
        let mut r = Rollup::new();
        r.observe(at(T10 + 10, 10), &cpu(0));
        r.observe(at(T10 + 20, 20), &Reading::default());
        r.observe(at(T10 + 30, 30), &cpu(20 * S));
        r.observe(at(T10 + 40, 40), &cpu(21 * S));
        let c = &r.windows()[&T10].cpu;
        assert_eq!((c.core_nanoseconds, c.covered_nanoseconds), (S, 10 * S));
    }

    #[test]
    fn a_resumed_key_is_rebaselined_and_not_counted_twice() {
        let mut before = Rollup::new();
        before.observe(at(T10 + 10, 10), &cpu(50 * S));
        before.observe(at(T10 + 20, 20), &cpu(52 * S));
        let saved = before.windows()[&T10].clone();

        // Restart: a fresh process, its monotonic clock elsewhere, the counter moved on.
        let mut after = Rollup::new();
        after.resume(T10, &saved);
        after.observe(at(T10 + 600, 5), &cpu(90 * S));
        after.observe(at(T10 + 610, 15), &cpu(91 * S));
        let c = &after.windows()[&T10].cpu;
        assert_eq!(c.core_nanoseconds, 3 * S);
        assert_eq!(c.covered_nanoseconds, 20 * S, "the downtime stays uncovered");
        assert_eq!(c.samples, 2);
    }

    #[test]
    fn resuming_into_a_running_rollup_rebaselines_first() {
        let mut r = Rollup::new();
        r.observe(at(T10 + 10, 10), &cpu(0));
        r.observe(at(T10 + 20, 20), &cpu(S));
        let saved = WindowTotals {
            cpu: CpuTotals {
                core_nanoseconds: 7,
                ..CpuTotals::default()
            },
            ..Default::default()
        };
        r.resume(T10, &saved);
        // Nothing is counted across the resume: the next poll only sets baselines.
        r.observe(at(T10 + 30, 30), &cpu(50 * S));
        r.observe(at(T10 + 40, 40), &cpu(51 * S));
        assert_eq!(r.windows()[&T10].cpu.core_nanoseconds, 2 * S + 7);
    }

    #[test]
    fn diverging_clocks_rebaseline_and_are_counted() {
        let mut r = Rollup::new();
        r.observe(at(T10 + 10, 10), &cpu(0));
        // Realtime jumped 2 s more than the monotonic clock.
        r.observe(at(T10 + 22, 20), &cpu(S));
        assert_eq!(r.clock_rebaselines(), 1);
        r.observe(at(T10 + 32, 30), &cpu(2 * S));
        let c = &r.windows()[&T10].cpu;
        assert_eq!((c.core_nanoseconds, c.covered_nanoseconds), (S, 10 * S));
        // A non-advancing monotonic clock drops the interval.
        r.observe(at(T10 + 33, 30), &cpu(3 * S));
        assert_eq!(r.dropped_intervals(), 1);
        assert_eq!(r.windows()[&T10].cpu.core_nanoseconds, S);
    }

    #[test]
    fn throttling_needs_both_period_counters() {
        let mut r = Rollup::new();
        let read = |p, t| Reading {
            cpu_periods: Some(p),
            cpu_throttled_periods: t,
            ..Reading::default()
        };
        r.observe(at(T10 + 10, 10), &read(100, Some(1)));
        r.observe(at(T10 + 20, 20), &read(200, Some(13)));
        r.observe(at(T10 + 30, 30), &read(300, None));
        let c = &r.windows()[&T10].cpu;
        assert_eq!(
            (c.total_periods, c.throttled_periods, c.throttling_samples),
            (100, 12, 1)
        );
    }

    fn polls() -> impl Strategy<Value = (u64, Vec<(u64, u64, u64)>)> {
        // start offset into the hour; per poll: seconds advanced (1..3000), ns added, working set.
        (
            0u64..3600,
            prop::collection::vec((1u64..3000, 0u64..40_000_000_000, 0u64..1 << 34), 1..40),
        )
    }

    proptest! {
        #[test]
        fn splitting_then_merging_gives_the_totals((offset, steps) in polls()) {
            let mut r = Rollup::new();
            let mut real = T10 + offset;
            let mut mono = 1000u64;
            let mut counter = 7u64;
            let mut memory = MemoryTotals::default();
            r.observe(at(real, mono), &cpu(counter));
            let (first_real, first_counter) = (real, counter);
            for (secs, add, ws) in &steps {
                real += secs;
                mono += secs;
                counter += add;
                r.observe(at(real, mono), &Reading { working_set_bytes: Some(*ws), ..cpu(counter) });
                memory.record_working_set(*ws);
            }
            let mut all = WindowTotals::default();
            for w in r.windows().values() {
                all.merge(w);
            }
            prop_assert_eq!(all.cpu.core_nanoseconds, counter - first_counter);
            prop_assert_eq!(all.cpu.covered_nanoseconds, (real - first_real) * S);
            prop_assert_eq!(all.cpu.samples, steps.len() as u64);
            prop_assert_eq!(all.memory, memory);
        }
    }
}
