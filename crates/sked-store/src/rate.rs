//! How the backends keep queue rate limits ([`sked_core::RateLimit`]): the limit's two
//! columns, and what a store remembers between claims about when held-back tasks may start.

use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};
use sked_core::RateLimit;

/// A rate limit as its columns hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Columns {
    /// Starts per period.
    pub limit: Option<i32>,
    /// The period in milliseconds.
    pub period_ms: Option<i64>,
    /// The burst (null when none).
    pub burst: Option<i32>,
}

/// A rate limit's columns.
pub fn to_columns(rate: Option<RateLimit>) -> Columns {
    match rate {
        Some(r) => Columns {
            limit: Some(i32::try_from(r.limit).unwrap_or(i32::MAX)),
            period_ms: Some(i64::try_from(r.period.as_millis()).unwrap_or(i64::MAX)),
            burst: (r.burst > 0).then(|| i32::try_from(r.burst).unwrap_or(i32::MAX)),
        },
        None => Columns::default(),
    }
}

/// The rate limit of a queue row's columns (none unless the limit and period are set and
/// valid).
pub fn from_columns(c: Columns) -> Option<RateLimit> {
    let limit = u32::try_from(c.limit?).ok()?;
    let rate = RateLimit::new(limit, SignedDuration::from_millis(c.period_ms?)).ok()?;
    let burst = c.burst.and_then(|b| u32::try_from(b).ok()).unwrap_or(0);
    rate.with_burst(burst).ok()
}

/// What a limited queue may still start: the least of what its concurrency limit leaves
/// (`concurrency_left`, running tasks deducted) and its rate window's room; `None` when neither
/// limit is set.
pub fn quota(concurrency_left: Option<i64>, room: Option<sked_core::Room>) -> Option<i64> {
    match (concurrency_left, room.map(|r| i64::from(r.allowed))) {
        (Some(left), Some(allowed)) => Some(left.min(allowed)),
        (left, allowed) => left.or(allowed),
    }
}

/// The sooner of two times a held queue frees, either possibly unknown.
pub fn sooner(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The earliest time a rate limit lets held-back tasks start again, as this store's claims
/// found it (see [`crate::Store::task_held_until`]).
#[derive(Debug, Default)]
pub struct HeldUntil(Mutex<Option<Timestamp>>);

impl HeldUntil {
    /// A claim at `now` found a queue full until `at`.
    pub fn note(&self, at: Timestamp, now: Timestamp) {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *held = match *held {
            Some(t) if t > now && t <= at => Some(t),
            _ => Some(at),
        };
    }

    /// The noted time, while it is still ahead of `now`.
    pub fn get(&self, now: Timestamp) -> Option<Timestamp> {
        let held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.filter(|t| *t > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_hold_a_rate_limit() {
        let rate: RateLimit = "20/min".parse().unwrap();
        let columns = to_columns(Some(rate));
        assert_eq!((columns.limit, columns.period_ms), (Some(20), Some(60_000)));
        assert_eq!(columns.burst, None);
        assert_eq!(from_columns(columns), Some(rate));
        let rate: RateLimit = "20/min burst 4".parse().unwrap();
        assert_eq!(to_columns(Some(rate)).burst, Some(4));
        assert_eq!(from_columns(to_columns(Some(rate))), Some(rate));
        assert_eq!(from_columns(Columns::default()), None);
        assert_eq!(to_columns(None), Columns::default());
    }

    #[test]
    fn a_quota_is_the_least_of_both_limits() {
        let room = |allowed| {
            Some(sked_core::Room {
                allowed,
                frees_at: None,
            })
        };
        assert_eq!(quota(None, None), None);
        assert_eq!(quota(Some(2), None), Some(2));
        assert_eq!(quota(None, room(3)), Some(3));
        assert_eq!(quota(Some(5), room(3)), Some(3));
        assert_eq!(quota(Some(-1), room(3)), Some(-1));
    }

    #[test]
    fn the_earliest_future_time_is_kept() {
        let at = |s| Timestamp::from_second(s).unwrap();
        let held = HeldUntil::default();
        assert_eq!(held.get(at(0)), None);
        held.note(at(10), at(0));
        held.note(at(20), at(0));
        assert_eq!(held.get(at(5)), Some(at(10)));
        assert_eq!(held.get(at(10)), None);
        // Past times are replaced.
        held.note(at(30), at(15));
        assert_eq!(held.get(at(15)), Some(at(30)));
    }
}
