//! The UTC hour grid and the pro-rata split of an interval across it
//! (collector-design.md §3 "Windows", "Counters"; runtime-agent-backend-contract.md §4
//! "What arrives": `(window_start, window_seconds)` is in every usage key).
//!
//! - Windows are [`WINDOW_SECONDS`] long and UTC-aligned: an instant belongs to the
//!   window starting at ⌊t / 3600 s⌋·3600 ([`window_start_of`]).
//! - A counter's delta over `[start, end)` is split across the windows the interval
//!   overlaps by the time spent in each, ⌊delta·length/total⌋ in 128 bits, the remainder
//!   to the last segment, so the parts sum exactly to the delta ([`split_pro_rata`]).

use crate::time::NANOS_PER_SEC;

/// Window length in seconds (contract §4: initially hourly).
pub const WINDOW_SECONDS: u64 = 3600;

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = NANOS_PER_SEC;
    /// 2026-08-06T10:00:00Z.
    const T10: u64 = 1_786_010_400;

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

    }
}
