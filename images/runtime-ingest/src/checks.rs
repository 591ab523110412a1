//! Value checks of the ingest's own (review b30b1a0 finding 15: independent of the
//! collector's `gate` and `time` modules, so a bug there is not mirrored here).
//!
//! - [`valid_digest`]: the whole value is `sha256:` and 64 lowercase hex digits
//!   (host-agent-digest-gate.md "Digest-Gated Evidence Publication"; design §7:
//!   uppercase is refused, not normalized; tags, references, container ids, other
//!   algorithms and whitespace are refused).
//! - [`parse_rfc3339`]: an RFC 3339 `date-time` (§5.6: `T` or `t`, an optional
//!   fraction, `Z` or a numeric offset, leap second 60 allowed) → Unix seconds.
//! - [`format_utc`]: Unix seconds → `YYYY-MM-DDTHH:MM:SSZ` (for the report's labels).

/// Whether `value` is exactly `sha256:<64 lowercase hex>`.
pub fn valid_digest(value: &str) -> bool {
    const PREFIX: &[u8] = b"sha256:";
    let bytes = value.as_bytes();
    bytes.len() == PREFIX.len() + 64
        && bytes.starts_with(PREFIX)
        && bytes[PREFIX.len()..]
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    bytes
        .iter()
        .try_fold(0u64, |n, b| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
}

fn is_leap(year: u64) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        _ => 28,
    }
}

/// Days from 1970-01-01 to `year-month-day` (year ≥ 1970).
fn days_since_epoch(year: u64, month: u64, day: u64) -> u64 {
    let mut days = (1970..year)
        .map(|y| if is_leap(y) { 366 } else { 365 })
        .sum::<u64>();
    days += (1..month).map(|m| days_in_month(year, m)).sum::<u64>();
    days + day - 1
}

/// Parse an RFC 3339 date-time into Unix seconds (fraction dropped). Instants before
/// 1970 or after 9999 are refused.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?);
    let (hour, minute, second) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    if !(1970..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &b[19..];
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        rest = &frac[n..];
    }
    let offset_secs: i64 = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let h = digits(&[*h1, *h2])?;
            let m = digits(&[*m1, *m2])?;
            if h > 23 || m > 59 {
                return None;
            }
            let secs = i64::try_from(h * 3600 + m * 60).ok()?;
            if *sign == b'+' { secs } else { -secs }
        }
        _ => return None,
    };
    let local = days_since_epoch(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second.min(59);
    u64::try_from(i64::try_from(local).ok()?.checked_sub(offset_secs)?).ok()
}

/// `YYYY-MM-DDTHH:MM:SSZ` for Unix seconds.
pub fn format_utc(unix_seconds: u64) -> String {
    let mut days = unix_seconds / 86_400;
    let secs = unix_seconds % 86_400;
    let mut year = 1970;
    loop {
        let len = if is_leap(year) { 366 } else { 365 };
        if days < len {
            break;
        }
        days -= len;
        year += 1;
    }
    let mut month = 1;
    while days >= days_in_month(year, month) {
        days -= days_in_month(year, month);
        month += 1;
    }
    format!(
        "{year:04}-{month:02}-{:02}T{:02}:{:02}:{:02}Z",
        days + 1,
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn only_a_whole_lowercase_sha256_digest_is_valid() {
        assert!(valid_digest(GOOD));
        let hex = &GOOD["sha256:".len()..];
        for bad in [
            String::new(),
            "sha256:".into(),
            GOOD.replace("abcdef", "ABCDEF"),
            GOOD.replace("sha256", "SHA256"),
            GOOD[..GOOD.len() - 1].into(),
            format!("{GOOD}0"),
            format!(" {GOOD}"),
            format!("{GOOD}\n"),
            format!("ghcr.io/acme/sprig@{GOOD}"),
            "ghcr.io/acme/sprig:v1".into(),
            hex.into(),
            format!("containerd://{hex}"),
            GOOD.replace("sha256", "sha512"),
            GOOD.replacen('0', "g", 1),
            format!("sha256:{}", "é".repeat(32)),
        ] {
            assert!(!valid_digest(&bad), "{bad:?}");
        }
    }

    #[test]
    fn rfc3339_instants() {
        // 2026-08-06T10:00:00Z, computed by hand: 20 671 days + 10 h.
        assert_eq!(
            parse_rfc3339("2026-08-06T10:00:00Z"),
            Some(20_671 * 86_400 + 36_000)
        );
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2026-08-06t10:00:00.123456z"),
            parse_rfc3339("2026-08-06T10:00:00Z")
        );
        assert_eq!(
            parse_rfc3339("2026-08-06T12:30:00+02:30"),
            parse_rfc3339("2026-08-06T10:00:00Z")
        );
        assert_eq!(
            parse_rfc3339("2026-08-06T07:00:00-03:00"),
            parse_rfc3339("2026-08-06T10:00:00Z")
        );
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z"), Some(19_782 * 86_400));
        for bad in [
            "",
            "2026-08-06 10:00:00Z",
            "2026-08-06T10:00:00",
            "2026-08-06T10:00:00.Z",
            "2026-13-06T10:00:00Z",
            "2026-02-29T10:00:00Z",
            "2026-08-32T10:00:00Z",
            "2026-08-06T24:00:00Z",
            "2026-08-06T10:60:00Z",
            "2026-08-06T10:00:00+24:00",
            "1969-12-31T23:59:59Z",
            "１０26-08-06T10:00:00Z",
            "2026-08-06T10:00:00Zjunk",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for text in [
            "1970-01-01T00:00:00Z",
            "2024-02-29T23:59:59Z",
            "2026-08-06T10:00:00Z",
            "9999-12-31T23:59:59Z",
        ] {
            assert_eq!(format_utc(parse_rfc3339(text).unwrap()), text);
        }
    }
}
