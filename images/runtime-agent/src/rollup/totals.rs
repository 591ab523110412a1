//! One window's record blocks and their merge (collector-design.md §3 "Fields",
//! "Merge", §4 `usage_snapshot`; runtime-agent-backend-contract.md §4 "Delivery
//! semantics": a resumed window merges back into one version per key).
//!
//! The CPU and memory blocks are serde types that the `usage_snapshot` and
//! `usage_window` payloads ([`crate::payload`]) embed as they are, so a field's name
//! and shape are part of the payload schema.
//!
//! - A CPU rate sample and a working-set read count one sample each, keep min and max
//!   and go into the frozen grid's histogram ([`CpuTotals::record_rate`],
//!   [`MemoryTotals::record_working_set`]).
//! - [`WindowTotals::merge`] adds totals and counts, keeps extremes and sums histograms
//!   bucket-wise, so it is associative and commutative and merging N partials equals
//!   the rollup over their union (property-tested below).

use serde::{Deserialize, Serialize};

use crate::grid::{Histogram, Scale};

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
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
