//! Queue rate limits: at most `limit` tasks start in any window of `period` (`10/s`,
//! `20/min`, `1000/d`; a long period is a quota). The window slides: it is the `period`
//! before each instant, not a calendar bucket, so no stretch of that length ever sees more.
//!
//! A burst (`10/s burst 5`) lets a queue that was quiet catch up: a window may then hold
//! `limit + burst` starts, while a token bucket of that size, refilled at `limit` per `period`,
//! keeps the long-run rate at the limit. The bucket is kept as the instant it is full again
//! (the "theoretical arrival time" of GCRA), one timestamp per queue. Without a burst the
//! window alone decides: the bucket would never hold a start back that the window lets
//! through.

use std::fmt;
use std::str::FromStr;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::duration::{format_duration, parse_duration};
use crate::error::SpecError;

/// The longest window a rate limit may have.
pub const MAX_RATE_PERIOD: SignedDuration = SignedDuration::from_hours(24 * 31);

/// At most `limit` starts in any window of `period` (`limit + burst` after a quiet spell, see
/// the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub limit: u32,
    pub period: SignedDuration,
    pub burst: u32,
}

/// The most a burst may add to a limit.
pub const MAX_RATE_BURST: u32 = 1_000_000;

/// What a window leaves for a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// How many tasks may start now.
    pub allowed: u32,
    /// When none may: the first instant one may.
    pub frees_at: Option<Timestamp>,
}

impl RateLimit {
    /// Checks a limit: at least one start, over a window from 1 ms to [`MAX_RATE_PERIOD`].
    pub fn new(limit: u32, period: SignedDuration) -> Result<RateLimit, SpecError> {
        if limit == 0 {
            return Err(SpecError::new(
                "a rate limit must let at least 1 task start per period (to stop a queue, pause it)",
            ));
        }
        if period < SignedDuration::from_millis(1) || period > MAX_RATE_PERIOD {
            return Err(SpecError::new(format!(
                "a rate limit's period must be between 1ms and {}",
                format_duration(MAX_RATE_PERIOD)
            )));
        }
        Ok(RateLimit {
            limit,
            period,
            burst: 0,
        })
    }

    /// The same limit with a burst of `burst` starts (at most [`MAX_RATE_BURST`]).
    pub fn with_burst(self, burst: u32) -> Result<RateLimit, SpecError> {
        if burst > MAX_RATE_BURST {
            return Err(SpecError::new(format!(
                "a rate limit's burst must be at most {MAX_RATE_BURST}"
            )));
        }
        Ok(RateLimit { burst, ..self })
    }

    /// How many starts a window may hold.
    fn most(&self) -> u64 {
        u64::from(self.limit) + u64::from(self.burst)
    }

    /// The start of the window that ends at `now`: starts at or before it no longer count.
    pub fn window_start(&self, now: Timestamp) -> Timestamp {
        now.checked_sub(self.period).unwrap_or(Timestamp::MIN)
    }

    /// The room left at `now`, given the starts recorded in the window (`(when, how many)`, in
    /// any order; older ones are ignored) and, with a burst, the bucket (the instant it is full
    /// again, as [`RateLimit::bucket_after`] left it; `None` when full).
    pub fn room(
        &self,
        starts: &[(Timestamp, u32)],
        bucket: Option<Timestamp>,
        now: Timestamp,
    ) -> Room {
        let window = self.window_room(starts, now);
        if self.burst == 0 {
            return window;
        }
        let (tokens, refills_at) = self.bucket_room(bucket, now);
        let allowed = window.allowed.min(tokens);
        let frees_at = match allowed {
            0 => match (window.allowed, window.frees_at) {
                (0, at) => at.max(refills_at),
                _ => refills_at,
            },
            _ => None,
        };
        Room { allowed, frees_at }
    }

    /// What the window alone allows.
    fn window_room(&self, starts: &[(Timestamp, u32)], now: Timestamp) -> Room {
        let from = self.window_start(now);
        let mut within: Vec<(Timestamp, u64)> = starts
            .iter()
            .filter(|(at, _)| *at > from)
            .map(|(at, n)| (*at, u64::from(*n)))
            .collect();
        let used: u64 = within.iter().map(|(_, n)| n).sum();
        let limit = self.most();
        if used < limit {
            return Room {
                allowed: (limit - used) as u32,
                frees_at: None,
            };
        }
        // Full: a start may come once enough of the oldest have left the window.
        within.sort_by_key(|(at, _)| *at);
        let mut left = used;
        let mut frees_at = None;
        for (at, n) in within {
            left -= n;
            if left < limit {
                frees_at = at.checked_add(self.period).ok();
                break;
            }
        }
        Room {
            allowed: 0,
            frees_at,
        }
    }

    /// The bucket at `now`: the whole tokens it holds, and when it holds none, the instant it
    /// holds one. A token is `period / limit`; the bucket holds `limit + burst`.
    fn bucket_room(&self, full_at: Option<Timestamp>, now: Timestamp) -> (u32, Option<Timestamp>) {
        let (period, limit) = (self.period_ns(), i128::from(self.limit));
        let most = i128::from(self.most());
        let short = match full_at {
            Some(at) => (at.as_nanosecond() - now.as_nanosecond()).max(0),
            None => 0,
        };
        // tokens = most - short / (period / limit), floored.
        let tokens = (most * period - short * limit).div_euclid(period).max(0);
        if tokens > 0 {
            return (u32::try_from(tokens).unwrap_or(u32::MAX), None);
        }
        // One token once `short` is down to (most - 1) tokens' time.
        let wait = short - ((most - 1) * period).div_euclid(limit);
        (0, Some(at_nanos(now.as_nanosecond() + wait.max(0))))
    }

    /// The bucket after `n` starts at `now` (its previous state `full_at`): `None` without a
    /// burst, which keeps no bucket. Rounded up to whole microseconds, as the stores keep it.
    pub fn bucket_after(
        &self,
        full_at: Option<Timestamp>,
        n: u32,
        now: Timestamp,
    ) -> Option<Timestamp> {
        if self.burst == 0 {
            return None;
        }
        let from = full_at.map_or(now, |at| at.max(now)).as_nanosecond();
        let spent = div_up(i128::from(n) * self.period_ns(), i128::from(self.limit));
        let at = from + spent;
        Some(at_nanos(at + (1000 - at.rem_euclid(1000)) % 1000))
    }

    fn period_ns(&self) -> i128 {
        self.period.as_nanos()
    }
}

/// `n / d` rounded up, for a non-negative `n` and a positive `d`.
fn div_up(n: i128, d: i128) -> i128 {
    (n + d - 1).div_euclid(d)
}

/// The instant `ns` nanoseconds after the epoch, clamped to the range of timestamps.
fn at_nanos(ns: i128) -> Timestamp {
    let ns = ns.clamp(
        Timestamp::MIN.as_nanosecond(),
        Timestamp::MAX.as_nanosecond(),
    );
    Timestamp::from_nanosecond(ns).unwrap_or(Timestamp::MAX)
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = [(1, "s"), (60, "min"), (3600, "h"), (86_400, "d")]
            .into_iter()
            .rev()
            .find(|(secs, _)| self.period == SignedDuration::from_secs(*secs));
        match unit {
            Some((_, unit)) => write!(f, "{}/{unit}", self.limit)?,
            None => write!(f, "{}/{}", self.limit, format_duration(self.period))?,
        }
        match self.burst {
            0 => Ok(()),
            burst => write!(f, " burst {burst}"),
        }
    }
}

impl FromStr for RateLimit {
    type Err = SpecError;

    /// `N/UNIT` (`s`, `min`, `h`, `d`, and their long names) or `N/DURATION` (`10/5s`), then
    /// optionally ` burst B`.
    fn from_str(input: &str) -> Result<RateLimit, SpecError> {
        let invalid = || {
            SpecError::new(format!(
                "invalid rate {input:?}: expected starts per period, like 10/s, 20/min, 5/h or 1000/d"
            ))
        };
        let (rate, burst) = match input.split_once("burst") {
            Some((rate, burst)) => {
                let burst = burst.trim().parse::<u32>().map_err(|_| {
                    SpecError::new(format!(
                        "invalid rate {input:?}: a burst is a whole number of starts, like 10/s burst 5"
                    ))
                })?;
                (rate, burst)
            }
            None => (input, 0),
        };
        let (n, per) = rate.trim().split_once('/').ok_or_else(invalid)?;
        let limit: u32 = n.trim().parse().map_err(|_| invalid())?;
        let per = per.trim();
        let period = match per {
            "s" | "sec" | "second" => SignedDuration::from_secs(1),
            "m" | "min" | "minute" => SignedDuration::from_mins(1),
            "h" | "hour" => SignedDuration::from_hours(1),
            "d" | "day" => SignedDuration::from_hours(24),
            _ if per.starts_with(|c: char| c.is_ascii_digit()) => {
                parse_duration(per).map_err(|_| invalid())?
            }
            _ => return Err(invalid()),
        };
        RateLimit::new(limit, period)?.with_burst(burst)
    }
}

impl Serialize for RateLimit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RateLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RateLimit, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).unwrap()
    }

    #[test]
    fn rates_read_and_print_the_same() {
        for (text, shown) in [
            ("10/s", "10/s"),
            ("20/min", "20/min"),
            ("20/m", "20/min"),
            ("5/hour", "5/h"),
            ("1000/d", "1000/d"),
            ("3/5s", "3/5s"),
            (" 7 / 90s ", "7/1m30s"),
            ("10/s burst 5", "10/s burst 5"),
            ("10/s  burst  0", "10/s"),
        ] {
            let rate: RateLimit = text.parse().unwrap();
            assert_eq!(rate.to_string(), shown, "{text}");
            assert_eq!(shown.parse::<RateLimit>().unwrap(), rate);
        }
    }

    #[test]
    fn bad_rates_say_what_is_wrong() {
        for bad in [
            "0/s",
            "ten/s",
            "10",
            "10/fortnight",
            "-1/s",
            "10/0s",
            "1/32d",
            "",
            "10/s burst",
            "10/s burst five",
            "10/s burst -1",
            "10/s burst 1000001",
        ] {
            let err = bad.parse::<RateLimit>().unwrap_err();
            assert!(!err.message().is_empty(), "{bad}");
        }
        assert!(
            "0/s"
                .parse::<RateLimit>()
                .unwrap_err()
                .message()
                .contains("at least 1")
        );
    }

    #[test]
    fn the_window_slides() {
        let rate: RateLimit = "3/s".parse().unwrap();
        // Nothing started: all three.
        assert_eq!(rate.room(&[], None, at(10_000)).allowed, 3);
        // Two started 400 ms ago: one more.
        let starts = [(at(9_600), 2)];
        assert_eq!(rate.room(&starts, None, at(10_000)).allowed, 1);
        // Full: frees when the oldest leaves, a period after it started.
        let starts = [(at(9_600), 2), (at(9_900), 1)];
        let room = rate.room(&starts, None, at(10_000));
        assert_eq!(room.allowed, 0);
        assert_eq!(room.frees_at, Some(at(10_600)));
        // At that instant the two have left the window (it is open at its start).
        assert_eq!(rate.room(&starts, None, at(10_600)).allowed, 2);
        // Over full (a limit lowered meanwhile): frees once enough have left.
        let rate: RateLimit = "1/s".parse().unwrap();
        let starts = [(at(9_900), 1), (at(9_600), 2)];
        assert_eq!(
            rate.room(&starts, None, at(10_000)).frees_at,
            Some(at(10_900))
        );
    }

    /// Claims `want` tasks whenever the limit lets any start (at once, then at each
    /// `frees_at`), keeping the window and the bucket as a store would; returns each start.
    fn drain(rate: RateLimit, want: u32, from: Timestamp) -> Vec<Timestamp> {
        let (mut now, mut left) = (from, want);
        let (mut log, mut bucket, mut started) = (Vec::new(), None, Vec::new());
        while left > 0 {
            let room = rate.room(&log, bucket, now);
            let n = room.allowed.min(left);
            if n > 0 {
                log.push((now, n));
                bucket = rate.bucket_after(bucket, n, now);
                started.extend(std::iter::repeat_n(now, n as usize));
                left -= n;
                continue;
            }
            let next = room.frees_at.expect("a full limit says when it frees");
            assert!(next > now, "frees_at {next} is not after {now}");
            now = next;
        }
        started
    }

    /// The most starts any window of `period` (open at its start) holds.
    fn busiest(starts: &[Timestamp], period: SignedDuration) -> usize {
        starts
            .iter()
            .map(|end| {
                let from = *end - period;
                starts.iter().filter(|t| **t > from && *t <= end).count()
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn without_a_burst_windows_start_the_limit_at_once() {
        let rate: RateLimit = "10/s".parse().unwrap();
        let starts = drain(rate, 100, at(0));
        assert_eq!(busiest(&starts, rate.period), 10);
        assert_eq!(starts[9], at(0));
        assert_eq!(starts[10], at(1_000));
        assert_eq!(starts[99], at(9_000));
        assert_eq!(rate.bucket_after(None, 10, at(0)), None);
    }

    #[test]
    fn a_burst_adds_to_one_window_not_to_the_rate() {
        let rate: RateLimit = "10/s burst 5".parse().unwrap();
        let starts = drain(rate, 100, at(0));
        // The quiet queue starts limit + burst at once...
        assert_eq!(starts.iter().filter(|t| **t == at(0)).count(), 15);
        assert!(busiest(&starts, rate.period) <= 15);
        // ...and then no more than the limit per period: 85 more take 8.5 s.
        let last = *starts.last().unwrap();
        assert!(
            last >= at(8_400) && last <= at(9_000),
            "last start at {last}"
        );
        for end in [2_000, 5_000, 9_000] {
            let n = starts.iter().filter(|t| **t <= at(end)).count();
            assert!(n as i64 <= 15 + end / 100, "{n} starts by {end} ms");
        }
        // A quiet spell refills the bucket, at the limit's pace.
        let full = rate.bucket_after(None, 15, at(0));
        assert_eq!(full, Some(at(1_500)));
        assert_eq!(rate.room(&[], full, at(1_000)).allowed, 10);
        assert_eq!(rate.room(&[], full, at(1_500)).allowed, 15);
        // Empty: the next token comes a tenth of a second later.
        let room = rate.room(&[], full, at(0));
        assert_eq!((room.allowed, room.frees_at), (0, Some(at(100))));
    }

    #[test]
    fn an_uneven_token_keeps_the_rate_over_many_claims() {
        let rate: RateLimit = "3/s burst 1".parse().unwrap();
        let starts = drain(rate, 301, at(0));
        assert!(busiest(&starts, rate.period) <= 4);
        // 4 at once, then 3 a second: 297 more take at least 99 s.
        assert!(*starts.last().unwrap() >= at(98_900));
    }
}
