//! The frozen log-histogram grid and the sparse histogram built on it
//! (collector-design.md §3 "Grid" and "Merge"; runtime-agent-backend-contract.md §4,
//! "fixed-boundary histograms for CPU and memory working set").
//!
//! The grid is part of upstream's payload schema: changing a boundary is a schema
//! change, so everything here is exact integer arithmetic, pinned by the design's
//! vectors in the tests below.
//!
//! - Anchor 2^s: s = 0 for CPU millicores ([`Scale::CpuMilli`]), s = 20 (1 MiB) for
//!   working-set bytes ([`Scale::MemoryBytes`]).
//! - Boundary j ≥ 0: b(j) = ⌊2^(s+⌊j/8⌋)·F[j mod 8] / 2^32⌋ in 128-bit arithmetic,
//!   `u64::MAX` once s+⌊j/8⌋ > 62.
//! - A value below the anchor has key 0; any other value has key b(j) for the largest j
//!   with b(j) ≤ v (ties at small values go to the largest j).
//! - Serialized as a sparse `{"<lower bound>": count}` object with keys in ascending
//!   numeric order; empty is `{}`.
//!
//! Merging histograms adds counts bucket-wise (saturating), so it is associative and
//! commutative; the property tests below check both.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// 2^(m/8) for m = 0..8 in 32.32 fixed point, rounded (collector-design.md §3).
pub const FRACTIONS: [u64; 8] = [
    4294967296, 4683695048, 5107605667, 5569883475, 6074001000, 6623745059, 7223245206, 7877004752,
];

/// Which anchor a histogram uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// CPU rate samples in millicores: anchor 2^0.
    CpuMilli,
    /// Working-set samples in bytes: anchor 2^20 (1 MiB).
    MemoryBytes,
}

impl Scale {
    /// The exponent s of the anchor 2^s.
    pub const fn shift(self) -> u32 {
        match self {
            Scale::CpuMilli => 0,
            Scale::MemoryBytes => 20,
        }
    }
}

/// Boundary b(j) of the grid with anchor 2^`shift`.
pub fn boundary(shift: u32, j: u32) -> u64 {
    let exponent = shift + j / 8;
    if exponent > 62 {
        return u64::MAX;
    }
    let scaled = (1u128 << exponent) * u128::from(FRACTIONS[(j % 8) as usize]);
    // exponent ≤ 62 and F < 2^33, so the quotient is below 2^63: it fits.
    (scaled >> 32) as u64
}

/// The key (bucket lower bound) of `value` on the grid with anchor 2^`shift`.
pub fn key_for(shift: u32, value: u64) -> u64 {
    if value < (1u64 << shift) {
        return 0;
    }
    let q = (63 - value.leading_zeros()) - shift;
    // Start at the top of the value's octave and walk down to the largest boundary
    // that does not exceed it. b(8q) = 2^(s+q) ≤ v unless the octave saturates, in
    // which case the walk continues into the octave below.
    let mut j = 8 * q + 7;
    loop {
        let b = boundary(shift, j);
        if b <= value {
            return b;
        }
        // b(0) = 2^s ≤ value here, so the walk ends before j underflows.
        j -= 1;
    }
}

/// A sparse histogram on the grid: bucket lower bound → count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Histogram(BTreeMap<u64, u64>);

impl Histogram {
    /// An empty histogram (`{}`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Count one sample of `value` on `scale`'s grid.
    pub fn record(&mut self, scale: Scale, value: u64) {
        let slot = self.0.entry(key_for(scale.shift(), value)).or_insert(0);
        *slot = slot.saturating_add(1);
    }

    /// Add `other`'s counts bucket-wise.
    pub fn merge(&mut self, other: &Histogram) {
        for (key, count) in &other.0 {
            let slot = self.0.entry(*key).or_insert(0);
            *slot = slot.saturating_add(*count);
        }
    }

    /// The number of samples counted.
    pub fn total(&self) -> u64 {
        self.0.values().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// The occupied buckets in ascending key order.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().map(|(k, v)| (*k, *v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpu_vectors_from_the_design() {
        for (value, key) in [
            (1, 1),
            (10, 10),
            (200, 197),
            (250, 234),
            (500, 469),
            (1000, 939),
            (2000, 1878),
        ] {
            assert_eq!(key_for(0, value), key, "cpu {value}");
        }
        assert_eq!(key_for(0, 0), 0, "zero millicores is bucket 0");
    }

    #[test]
    fn fractions_are_the_rounded_fixed_point_powers() {
        for (m, f) in FRACTIONS.iter().enumerate() {
            let exact = (2f64.powf(m as f64 / 8.0) * 4294967296.0).round() as u64;
            assert_eq!(*f, exact, "F[{m}]");
            // At octave 32 of the CPU grid a boundary is the fixed-point constant itself.
            assert_eq!(boundary(0, 8 * 32 + m as u32), *f);
        }
    }

    #[test]
    fn memory_first_octave_boundaries_are_exact() {
        let expected = [
            1048576, 1143480, 1246974, 1359834, 1482910, 1617125, 1763487, 1923096, 2097152,
        ];
        for (j, b) in expected.iter().enumerate() {
            assert_eq!(boundary(20, j as u32), *b, "b({j})");
            // Every boundary is its own key, and one below it falls to the previous one.
            assert_eq!(key_for(20, *b), *b);
            if j > 0 {
                assert_eq!(key_for(20, *b - 1), expected[j - 1]);
            }
        }
    }

    #[test]
    fn memory_vectors_from_the_design() {
        assert_eq!(key_for(20, 96 * 1024 * 1024), 94906265);
        assert_eq!(key_for(20, 100 * 1024 * 1024), 103496016);
        assert_eq!(key_for(20, 64 * 1024 * 1024), 67108864);
        assert_eq!(key_for(20, 1024 * 1024 - 1), 0);
        assert_eq!(key_for(20, 0), 0);
    }

    #[test]
    fn saturated_octaves_and_the_top_of_the_range() {
        // s + ⌊j/8⌋ = 63 saturates.
        assert_eq!(boundary(0, 8 * 63), u64::MAX);
        assert_eq!(boundary(20, 8 * 43), u64::MAX);
        // The last finite boundary of the CPU grid is b(8·62+7).
        let last = boundary(0, 8 * 62 + 7);
        assert_eq!(last, (((1u128 << 62) * 7877004752u128) >> 32) as u64);
        // A value in the saturated octave but below u64::MAX keys to the last finite boundary.
        assert_eq!(key_for(0, 1u64 << 63), last);
        assert_eq!(key_for(0, u64::MAX - 1), last);
        assert_eq!(key_for(0, u64::MAX), u64::MAX);
        assert_eq!(key_for(20, u64::MAX - 1), boundary(20, 8 * 42 + 7));
    }

    #[test]
    fn serialized_sparse_in_numeric_order() {
        let mut h = Histogram::new();
        assert_eq!(serde_json::to_string(&h).unwrap(), "{}");
        h.record(Scale::MemoryBytes, 100 * 1024 * 1024);
        h.record(Scale::MemoryBytes, 96 * 1024 * 1024);
        h.record(Scale::MemoryBytes, 64 * 1024 * 1024);
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            r#"{"67108864":1,"94906265":1,"103496016":1}"#
        );
        let back: Histogram = serde_json::from_str(r#"{"103496016":1,"67108864":1,"94906265":1}"#).unwrap();
        assert_eq!(back, h);
    }

    fn histogram() -> impl Strategy<Value = Histogram> {
        prop::collection::vec((any::<u64>(), 0u64..5), 0..20).prop_map(|samples| {
            let mut h = Histogram::new();
            for (v, n) in samples {
                for _ in 0..n {
                    h.record(Scale::CpuMilli, v);
                }
            }
            h
        })
    }

    proptest! {
        #[test]
        fn merge_is_associative((a, b, c) in (histogram(), histogram(), histogram())) {
            let mut left = a.clone();
            left.merge(&b);
            left.merge(&c);
            let mut bc = b.clone();
            bc.merge(&c);
            let mut right = a.clone();
            right.merge(&bc);
            prop_assert_eq!(left, right);
        }

        #[test]
        fn merge_is_commutative((a, b) in (histogram(), histogram())) {
            let mut ab = a.clone();
            ab.merge(&b);
            let mut ba = b.clone();
            ba.merge(&a);
            prop_assert_eq!(&ab, &ba);
            prop_assert_eq!(ab.total(), a.total() + b.total());
        }

        #[test]
        fn key_is_the_largest_boundary_not_above_the_value(shift in prop_oneof![Just(0u32), Just(20u32)], v in any::<u64>()) {
            let k = key_for(shift, v);
            prop_assert!(k <= v);
            if v >= 1u64 << shift {
                // k is a boundary, and the next boundary above it exceeds v.
                let j = (0..=8 * (63 - shift) + 7).rev().find(|j| boundary(shift, *j) == k);
                prop_assert!(j.is_some());
                let j = j.unwrap_or_default();
                if boundary(shift, j) != u64::MAX {
                    prop_assert!(boundary(shift, j + 1) > v || boundary(shift, j + 1) == k);
                }
            }
        }

        #[test]
        fn boundaries_never_decrease(shift in prop_oneof![Just(0u32), Just(20u32)], j in 0u32..520) {
            prop_assert!(boundary(shift, j) <= boundary(shift, j + 1));
        }
    }
}
