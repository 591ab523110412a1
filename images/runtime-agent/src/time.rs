//! Clock readings and UTC timestamps (collector-design.md §3 "Windows": every poll
//! reads CLOCK_REALTIME and CLOCK_MONOTONIC; payload instants are RFC 3339 UTC).
//!
//! The core never reads a clock itself: a [`ClockReading`] is passed in, so tests
//! drive time explicitly. [`ClockReading::now`] is the one place the real clocks are
//! read, used by the binary.

/// Nanoseconds per second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// One poll's view of both clocks, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReading {
    /// CLOCK_REALTIME since the Unix epoch.
    pub realtime_ns: u64,
    /// CLOCK_MONOTONIC (arbitrary origin).
    pub monotonic_ns: u64,
}

impl ClockReading {
    /// Read both clocks now. A clock that cannot be read (never on Linux) reads 0,
    /// which the rollup treats as a non-advancing interval and drops.
    pub fn now() -> Self {
        Self {
            realtime_ns: read_clock(libc::CLOCK_REALTIME),
            monotonic_ns: read_clock(libc::CLOCK_MONOTONIC),
        }
    }

    /// Whole seconds of the realtime reading.
    pub fn unix_seconds(&self) -> u64 {
        self.realtime_ns / NANOS_PER_SEC
    }
}

fn read_clock(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 || ts.tv_sec < 0 || ts.tv_nsec < 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(NANOS_PER_SEC)
        .saturating_add(ts.tv_nsec as u64)
}

/// Format Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(unix_seconds: u64) -> String {
    let days = unix_seconds / 86_400;
    let secs = unix_seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// Parse exactly the form [`rfc3339`] writes back into Unix seconds.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u64> {
        let part = text.get(range)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1970..=9999).contains(&year) || !(1..=12).contains(&month) || hour > 23 || minute > 59 || second > 59
    {
        return None;
    }
    let days = days_from_civil(year, month, day)?;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (era arithmetic).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    let leap = year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
    let month_len = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if day == 0 || day > month_len {
        return None;
    }
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y % 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_786_010_400), "2026-08-06T10:00:00Z");
        assert_eq!(rfc3339(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(rfc3339(4_107_542_400), "2100-03-01T00:00:00Z");
    }

    #[test]
    fn parse_round_trips_and_refuses_other_forms() {
        for t in [0u64, 951_868_799, 1_786_010_400, 4_107_542_400] {
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t));
        }
        assert_eq!(parse_rfc3339("2026-02-30T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2026-08-06T10:00:00+00:00"), None);
        assert_eq!(parse_rfc3339("2026-08-06 10:00:00Z"), None);
        assert_eq!(parse_rfc3339("2026-08-06T24:00:00Z"), None);
    }

    #[test]
    fn the_real_clocks_advance() {
        let r = ClockReading::now();
        assert!(r.realtime_ns > 1_700_000_000 * NANOS_PER_SEC);
        assert!(r.monotonic_ns > 0);
    }
}
