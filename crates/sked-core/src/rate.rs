//! Queue rate limits: at most `limit` tasks start in any window of `period` (`10/s`,
//! `20/min`, `1000/d`; a long period is a quota). The window slides: it is the `period`
//! before each instant, not a calendar bucket, so no stretch of that length ever sees more.

use std::fmt;
use std::str::FromStr;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::duration::{format_duration, parse_duration};
use crate::error::SpecError;

/// The longest window a rate limit may have.
pub const MAX_RATE_PERIOD: SignedDuration = SignedDuration::from_hours(24 * 31);

/// At most `limit` starts in any window of `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub limit: u32,
    pub period: SignedDuration,
}

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
        Ok(RateLimit { limit, period })
    }

    /// The start of the window that ends at `now`: starts at or before it no longer count.
    pub fn window_start(&self, now: Timestamp) -> Timestamp {
        now.checked_sub(self.period).unwrap_or(Timestamp::MIN)
    }

    /// The room left at `now`, given the starts recorded in the window (`(when, how many)`, in
    /// any order; older ones are ignored).
    pub fn room(&self, starts: &[(Timestamp, u32)], now: Timestamp) -> Room {
        let from = self.window_start(now);
        let mut within: Vec<(Timestamp, u64)> = starts
            .iter()
            .filter(|(at, _)| *at > from)
            .map(|(at, n)| (*at, u64::from(*n)))
            .collect();
        let used: u64 = within.iter().map(|(_, n)| n).sum();
        let limit = u64::from(self.limit);
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
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = [(1, "s"), (60, "min"), (3600, "h"), (86_400, "d")]
            .into_iter()
            .rev()
            .find(|(secs, _)| self.period == SignedDuration::from_secs(*secs));
        match unit {
            Some((_, unit)) => write!(f, "{}/{unit}", self.limit),
            None => write!(f, "{}/{}", self.limit, format_duration(self.period)),
        }
    }
}

impl FromStr for RateLimit {
    type Err = SpecError;

    /// `N/UNIT` (`s`, `min`, `h`, `d`, and their long names) or `N/DURATION` (`10/5s`).
    fn from_str(input: &str) -> Result<RateLimit, SpecError> {
        let invalid = || {
            SpecError::new(format!(
                "invalid rate {input:?}: expected starts per period, like 10/s, 20/min, 5/h or 1000/d"
            ))
        };
        let (n, per) = input.trim().split_once('/').ok_or_else(invalid)?;
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
        RateLimit::new(limit, period)
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
        assert_eq!(rate.room(&[], at(10_000)).allowed, 3);
        // Two started 400 ms ago: one more.
        let starts = [(at(9_600), 2)];
        assert_eq!(rate.room(&starts, at(10_000)).allowed, 1);
        // Full: frees when the oldest leaves, a period after it started.
        let starts = [(at(9_600), 2), (at(9_900), 1)];
        let room = rate.room(&starts, at(10_000));
        assert_eq!(room.allowed, 0);
        assert_eq!(room.frees_at, Some(at(10_600)));
        // At that instant the two have left the window (it is open at its start).
        assert_eq!(rate.room(&starts, at(10_600)).allowed, 2);
        // Over full (a limit lowered meanwhile): frees once enough have left.
        let rate: RateLimit = "1/s".parse().unwrap();
        let starts = [(at(9_900), 1), (at(9_600), 2)];
        assert_eq!(rate.room(&starts, at(10_000)).frees_at, Some(at(10_900)));
    }
}
