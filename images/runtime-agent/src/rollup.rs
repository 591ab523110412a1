//! Hour-window rollups (collector-design.md §3 "Windows", "Counters", "Fields",
//! "Reset, start, resume", "Merge"; runtime-agent-backend-contract.md §4 "What
//! arrives" and "Delivery semantics").
//!
//! Pure: every poll hands in a [`ClockReading`] and a [`Reading`]; nothing here reads
//! a clock or a file.
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

use serde::{Deserialize, Serialize};

use crate::grid::{Histogram, Scale};
use crate::time::{ClockReading, NANOS_PER_SEC};

/// Window length in seconds (contract §4: initially hourly).
pub const WINDOW_SECONDS: u64 = 3600;
/// Largest tolerated disagreement between the realtime and monotonic advance.
pub const MAX_CLOCK_DIVERGENCE_NS: u64 = NANOS_PER_SEC;

const WINDOW_NS: u64 = WINDOW_SECONDS * NANOS_PER_SEC;

/// Start (Unix seconds) of the window holding the instant `ns`.
pub fn window_start_of(ns: u64) -> u64 {
    (ns / WINDOW_NS) * WINDOW_SECONDS
}

/// One window's share of a split interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Start of the window, Unix seconds.
    pub window_start: u64,
    /// Nanoseconds of the interval inside that window.
    pub length_ns: u64,
    /// The window's part of the delta.
    pub part: u64,
}

/// Split `delta` over `[start_ns, end_ns)` pro rata by the time spent in each window.
/// Empty when the interval is empty.
pub fn split_pro_rata(start_ns: u64, end_ns: u64, delta: u64) -> Vec<Segment> {
    let mut segments = Vec::new();
    if end_ns <= start_ns {
        return segments;
    }
    let total = u128::from(end_ns - start_ns);
    let mut cursor = start_ns;
    let mut given = 0u64;
    while cursor < end_ns {
        let window_start = window_start_of(cursor);
        let window_end = (cursor / WINDOW_NS).saturating_add(1).saturating_mul(WINDOW_NS);
        let seg_end = window_end.min(end_ns);
        let length_ns = seg_end - cursor;
        let part = if seg_end == end_ns {
            delta - given
        } else {
            // length < total, so the quotient is below delta: it fits.
            (u128::from(delta) * u128::from(length_ns) / total) as u64
        };
        given += part;
        segments.push(Segment {
            window_start,
            length_ns,
            part,
        });
        cursor = seg_end;
    }
    segments
}

/// The CPU block of one record (collector-design.md §4 `usage_snapshot`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTotals {
    pub core_nanoseconds: u64,
    pub covered_nanoseconds: u64,
    pub throttled_periods: u64,
    pub total_periods: u64,
    pub throttling_samples: u64,
    pub psi_stall_nanoseconds: u64,
    pub psi_samples: u64,
    pub samples: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_milli: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_milli: Option<u64>,
    pub hist_milli: Histogram,
}

/// The memory block of one record (collector-design.md §4 `usage_snapshot`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTotals {
    pub samples: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    pub sum_bytes: u64,
    pub psi_stall_nanoseconds: u64,
    pub psi_samples: u64,
    pub hist_bytes: Histogram,
}

/// One window's running totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowTotals {
    pub cpu: CpuTotals,
    pub memory: MemoryTotals,
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

impl CpuTotals {
    /// Count one CPU rate sample.
    pub fn record_rate(&mut self, milli: u64) {
        self.samples = self.samples.saturating_add(1);
        self.min_milli = min_opt(self.min_milli, Some(milli));
        self.max_milli = max_opt(self.max_milli, Some(milli));
        self.hist_milli.record(Scale::CpuMilli, milli);
    }

    /// Add `other` into `self`.
    pub fn merge(&mut self, other: &CpuTotals) {
        self.core_nanoseconds = self.core_nanoseconds.saturating_add(other.core_nanoseconds);
        self.covered_nanoseconds = self.covered_nanoseconds.saturating_add(other.covered_nanoseconds);
        self.throttled_periods = self.throttled_periods.saturating_add(other.throttled_periods);
        self.total_periods = self.total_periods.saturating_add(other.total_periods);
        self.throttling_samples = self.throttling_samples.saturating_add(other.throttling_samples);
        self.psi_stall_nanoseconds = self
            .psi_stall_nanoseconds
            .saturating_add(other.psi_stall_nanoseconds);
        self.psi_samples = self.psi_samples.saturating_add(other.psi_samples);
        self.samples = self.samples.saturating_add(other.samples);
        self.min_milli = min_opt(self.min_milli, other.min_milli);
        self.max_milli = max_opt(self.max_milli, other.max_milli);
        self.hist_milli.merge(&other.hist_milli);
    }
}

impl MemoryTotals {
    /// Count one working-set read.
    pub fn record_working_set(&mut self, bytes: u64) {
        self.samples = self.samples.saturating_add(1);
        self.min_bytes = min_opt(self.min_bytes, Some(bytes));
        self.max_bytes = max_opt(self.max_bytes, Some(bytes));
        self.sum_bytes = self.sum_bytes.saturating_add(bytes);
        self.hist_bytes.record(Scale::MemoryBytes, bytes);
    }

    /// Add `other` into `self`.
    pub fn merge(&mut self, other: &MemoryTotals) {
        self.samples = self.samples.saturating_add(other.samples);
        self.min_bytes = min_opt(self.min_bytes, other.min_bytes);
        self.max_bytes = max_opt(self.max_bytes, other.max_bytes);
        self.sum_bytes = self.sum_bytes.saturating_add(other.sum_bytes);
        self.psi_stall_nanoseconds = self
            .psi_stall_nanoseconds
            .saturating_add(other.psi_stall_nanoseconds);
        self.psi_samples = self.psi_samples.saturating_add(other.psi_samples);
        self.hist_bytes.merge(&other.hist_bytes);
    }
}

impl WindowTotals {
    /// Add `other` into `self` (associative and commutative).
    pub fn merge(&mut self, other: &WindowTotals) {
        self.cpu.merge(&other.cpu);
        self.memory.merge(&other.memory);
    }
}

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
    fn windows_are_utc_hour_aligned() {
        assert_eq!(window_start_of(T10 * S), T10);
        assert_eq!(window_start_of((T10 + 3599) * S + (S - 1)), T10);
        assert_eq!(window_start_of((T10 + 3600) * S), T10 + 3600);
        assert_eq!(window_start_of(T10 * S - 1), T10 - 3600);
    }

    #[test]
    fn split_gives_the_remainder_to_the_last_segment() {
        // [10:59:59, 11:00:02): 1 s then 2 s; 10 → ⌊10·1/3⌋ = 3, then 7.
        let segs = split_pro_rata((T10 + 3599) * S, (T10 + 3602) * S, 10);
        assert_eq!(
            segs,
            vec![
                Segment {
                    window_start: T10,
                    length_ns: S,
                    part: 3
                },
                Segment {
                    window_start: T10 + 3600,
                    length_ns: 2 * S,
                    part: 7
                },
            ]
        );
        // Three windows; u64::MAX does not overflow.
        let segs = split_pro_rata((T10 + 1800) * S, (T10 + 3600 * 2 + 1800) * S, u64::MAX);
        assert_eq!(segs.len(), 3);
        assert_eq!(
            segs.iter().map(|s| u128::from(s.part)).sum::<u128>(),
            u128::from(u64::MAX)
        );
        assert_eq!(split_pro_rata(5, 5, 9), vec![]);
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
        fn split_parts_sum_exactly(a in 0u64..1 << 62, len in 1u64..1 << 44, delta in any::<u64>()) {
            let segs = split_pro_rata(a, a + len, delta);
            prop_assert_eq!(segs.iter().map(|s| u128::from(s.part)).sum::<u128>(), u128::from(delta));
            prop_assert_eq!(segs.iter().map(|s| s.length_ns).sum::<u64>(), len);
            for s in &segs {
                // Each part is its pro-rata share, the last one up to the remainder.
                let share = u128::from(delta) * u128::from(s.length_ns) / u128::from(len);
                prop_assert!(u128::from(s.part) >= share);
            }
        }

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

        #[test]
        fn merge_of_partials_equals_the_rollup_over_the_union(
            samples in prop::collection::vec((0u64..1 << 40, 0u64..20_000, 0usize..4), 0..60)
        ) {
            let mut union = WindowTotals::default();
            let mut parts = vec![WindowTotals::default(); 4];
            for (bytes, milli, part) in &samples {
                union.memory.record_working_set(*bytes);
                union.cpu.record_rate(*milli);
                parts[*part].memory.record_working_set(*bytes);
                parts[*part].cpu.record_rate(*milli);
            }
            let mut forward = WindowTotals::default();
            for p in &parts {
                forward.merge(p);
            }
            let mut backward = WindowTotals::default();
            for p in parts.iter().rev() {
                backward.merge(p);
            }
            prop_assert_eq!(&forward, &union);
            prop_assert_eq!(&backward, &union);
        }

        #[test]
        fn window_merge_is_associative_and_commutative(
            a in prop::collection::vec((0u64..1 << 40, 0u64..20_000), 0..10),
            b in prop::collection::vec((0u64..1 << 40, 0u64..20_000), 0..10),
            c in prop::collection::vec((0u64..1 << 40, 0u64..20_000), 0..10),
        ) {
            let build = |v: &Vec<(u64, u64)>| {
                let mut w = WindowTotals::default();
                for (bytes, milli) in v {
                    w.memory.record_working_set(*bytes);
                    w.cpu.record_rate(*milli);
                    w.cpu.core_nanoseconds += milli;
                }
                w
            };
            let (a, b, c) = (build(&a), build(&b), build(&c));
            let mut ab_c = a.clone();
            ab_c.merge(&b);
            ab_c.merge(&c);
            let mut bc = b.clone();
            bc.merge(&c);
            let mut a_bc = a.clone();
            a_bc.merge(&bc);
            prop_assert_eq!(&ab_c, &a_bc);
            let mut ba = b.clone();
            ba.merge(&a);
            let mut ab = a.clone();
            ab.merge(&b);
            prop_assert_eq!(ab, ba);
        }
    }
}
