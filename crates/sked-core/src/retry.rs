//! Retry policy: exponential backoff with jitter, capped.

use jiff::SignedDuration;

/// How long a failed task waits before its next attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay after the first failed attempt.
    pub base: SignedDuration,
    /// Upper bound of any delay.
    pub max: SignedDuration,
    /// Each delay is scaled by a random factor in `[1 - jitter, 1 + jitter]`, and then held
    /// to `max`.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    /// 10 s, 20 s, 40 s … doubling up to 6 h, ±20 %: 25 attempts span about four days.
    fn default() -> RetryPolicy {
        RetryPolicy {
            base: SignedDuration::from_secs(10),
            max: SignedDuration::from_hours(6),
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// The delay after failed attempt number `attempt` (1-based). `unit` is a random number in
    /// `[0, 1)`; passing it in keeps this function pure and testable.
    ///
    /// The jitter spreads the doubled delay and the cap comes last, so that no delay is longer
    /// than `max`: retries that reached the cap wait between `max × (1 - jitter)` and `max`.
    pub fn delay(&self, attempt: i32, unit: f64) -> SignedDuration {
        let exp = attempt.saturating_sub(1).clamp(0, 62);
        let base_ms = self.base.as_millis().max(0) as f64;
        let max_ms = self.max.as_millis().max(0) as f64;
        let raw = (base_ms * 2f64.powi(exp)).min(max_ms);
        let unit = if unit.is_nan() {
            0.5
        } else {
            unit.clamp(0.0, 1.0)
        };
        let jitter = if self.jitter.is_nan() {
            0.0
        } else {
            self.jitter.clamp(0.0, 1.0)
        };
        let factor = 1.0 + jitter * (2.0 * unit - 1.0);
        SignedDuration::from_millis((raw * factor).min(max_ms).round() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_caps() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(1, 0.5), SignedDuration::from_secs(10));
        assert_eq!(p.delay(2, 0.5), SignedDuration::from_secs(20));
        assert_eq!(p.delay(3, 0.5), SignedDuration::from_secs(40));
        assert_eq!(p.delay(1, 0.0), SignedDuration::from_secs(8));
        assert_eq!(p.delay(1, 1.0), SignedDuration::from_secs(12));
        assert_eq!(p.delay(30, 0.5), SignedDuration::from_hours(6));
        assert_eq!(
            p.delay(30, 0.999),
            SignedDuration::from_hours(6),
            "not 7.2 h"
        );
        assert_eq!(
            p.delay(30, 0.0),
            SignedDuration::from_secs(6 * 3600 * 8 / 10)
        );
        assert_eq!(p.delay(i32::MAX, 0.5), SignedDuration::from_hours(6));
        let mut prev = SignedDuration::ZERO;
        for a in 1..25 {
            let d = p.delay(a, 0.5);
            assert!(d >= prev, "attempt {a}");
            prev = d;
        }
    }

    /// Any policy, any attempt, any random draw: the delay is never negative, never above the
    /// cap, within the jitter of the capped exponential delay, and never shorter than the
    /// previous attempt's with the same draw.
    #[test]
    fn delays_stay_within_jitter_and_cap() {
        let mut rng = fastrand::Rng::with_seed(0x5eed_2e7e);
        for _ in 0..20_000 {
            let base = SignedDuration::from_millis(rng.i64(0..=86_400_000));
            let max = SignedDuration::from_millis(rng.i64(0..=30 * 86_400_000));
            let jitter = [0.0, 1.0, rng.f64()][rng.usize(0..3)];
            let p = RetryPolicy { base, max, jitter };
            let attempt =
                [1, 2, 25, i32::MAX, rng.i32(1..=100), rng.i32(i32::MIN..=0)][rng.usize(0..6)];
            let unit = [0.0, 0.999_999, rng.f64()][rng.usize(0..3)];
            let d = p.delay(attempt, unit);
            assert!(d >= SignedDuration::ZERO, "{p:?} {attempt} {unit}: {d:?}");
            assert!(d <= max, "{p:?} {attempt} {unit}: {d:?} above the cap");
            let exp = attempt.saturating_sub(1).clamp(0, 62);
            let raw = (base.as_millis() as f64 * 2f64.powi(exp)).min(max.as_millis() as f64);
            let (low, high) = (
                raw * (1.0 - jitter) - 1.0,
                (raw * (1.0 + jitter)).min(max.as_millis() as f64) + 1.0,
            );
            let ms = d.as_millis() as f64;
            assert!(
                low <= ms && ms <= high,
                "{p:?} {attempt} {unit}: {ms} not in [{low}, {high}]"
            );
            if attempt > 1 && attempt < i32::MAX {
                let before = p.delay(attempt - 1, unit);
                assert!(before <= d, "{p:?} {attempt} {unit}: {before:?} then {d:?}");
            }
        }
    }

    /// The default policy: 6 h at most whatever the draw (it was 7.2 h with the jitter after
    /// the cap).
    #[test]
    fn the_default_cap_holds_for_every_draw() {
        let p = RetryPolicy::default();
        for i in 0..=1000 {
            let d = p.delay(30, f64::from(i) / 1000.0);
            assert!(d <= SignedDuration::from_hours(6), "{d:?}");
            assert!(d >= SignedDuration::from_secs(6 * 3600 * 8 / 10), "{d:?}");
        }
    }
}
