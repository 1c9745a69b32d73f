//! Retry policy: exponential backoff with jitter, capped.

use jiff::SignedDuration;

/// How long a failed task waits before its next attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay after the first failed attempt.
    pub base: SignedDuration,
    /// Upper bound of any delay.
    pub max: SignedDuration,
    /// Each delay is scaled by a random factor in `[1 - jitter, 1 + jitter]`.
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
    /// The default policy with a task's own base and max, when it has them.
    pub fn for_task(backoff: Option<crate::Backoff>) -> RetryPolicy {
        let default = RetryPolicy::default();
        match backoff {
            Some(b) => RetryPolicy {
                base: b.base,
                max: b.max,
                ..default
            },
            None => default,
        }
    }

    /// The delay after failed attempt number `attempt` (1-based). `unit` is a random number in
    /// `[0, 1)`; passing it in keeps this function pure and testable.
    pub fn delay(&self, attempt: i32, unit: f64) -> SignedDuration {
        let exp = attempt.saturating_sub(1).clamp(0, 62) as u32;
        let base_ms = self.base.as_millis().max(0) as f64;
        let raw = (base_ms * 2f64.powi(exp as i32)).min(self.max.as_millis() as f64);
        let factor = 1.0 + self.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        SignedDuration::from_millis((raw * factor).round() as i64)
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
        assert_eq!(p.delay(i32::MAX, 0.5), SignedDuration::from_hours(6));
        let mut prev = SignedDuration::ZERO;
        for a in 1..25 {
            let d = p.delay(a, 0.5);
            assert!(d >= prev, "attempt {a}");
            prev = d;
        }
    }
}
