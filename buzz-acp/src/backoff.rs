//! Reconnect and respawn backoff (wire-facts §2 "Reconnects"). Pure: the
//! jitter sample comes in as an argument.

use std::time::Duration;

/// Reconnect steps 1, 2, 4, 8, 16 × base, capped there.
pub const RECONNECT_MAX_FACTOR: u32 = 16;
/// ±20 % jitter.
pub const JITTER: f64 = 0.2;
/// Cap on the respawn delay of a crashed agent.
pub const RESPAWN_CAP: Duration = Duration::from_secs(30);

/// The delay before reconnect attempt `attempt` (0-based), with `jitter` in
/// `[-1.0, 1.0]` scaling the ±20 % band.
pub fn reconnect_delay(base: Duration, attempt: u32, jitter: f64) -> Duration {
    let factor = 1u32
        .checked_shl(attempt.min(31))
        .unwrap_or(u32::MAX)
        .min(RECONNECT_MAX_FACTOR);
    let nominal = base.saturating_mul(factor);
    let j = jitter.clamp(-1.0, 1.0) * JITTER;
    nominal.mul_f64(1.0 + j)
}

/// The respawn delay after `failures` consecutive deaths (1-based), doubling, capped.
pub fn respawn_delay(base: Duration, failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << exp).min(RESPAWN_CAP.max(base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_steps_are_1_2_4_8_16_capped() {
        let b = Duration::from_secs(1);
        let got: Vec<u64> = (0..8).map(|a| reconnect_delay(b, a, 0.0).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 16, 16, 16, 16]);
        assert_eq!(reconnect_delay(b, 100, 0.0), Duration::from_secs(16));
    }

    #[test]
    fn jitter_is_plus_minus_twenty_percent() {
        let b = Duration::from_secs(1);
        assert_eq!(reconnect_delay(b, 2, 1.0), Duration::from_millis(4800));
        assert_eq!(reconnect_delay(b, 2, -1.0), Duration::from_millis(3200));
        assert_eq!(reconnect_delay(b, 2, 7.0), Duration::from_millis(4800), "clamped");
    }

    #[test]
    fn respawn_doubles_and_caps() {
        let b = Duration::from_secs(1);
        assert_eq!(respawn_delay(b, 1), b);
        assert_eq!(respawn_delay(b, 3), Duration::from_secs(4));
        assert_eq!(respawn_delay(b, 30), RESPAWN_CAP);
    }
}
