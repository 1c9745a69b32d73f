//! Cron expressions: parsing (5 or 6 fields, names, steps, `L`, `LW`, `nW`, `5L`, `1#2`, macros)
//! and the next fire time in an IANA zone with Debian cron's DST behaviour.
//!
//! The search walks the timeline one constant-offset segment at a time (between two zone
//! transitions). Inside a segment wall time and real time move together, so the next match is a
//! plain civil-time search; the DST rules only apply where segments meet:
//! - a gap (spring forward): a *fixed-time* job (minute and hour fields do not start with `*`)
//!   whose wall time falls in the gap fires at the first instant after it; other jobs do not fire;
//! - a fold (fall back): in the repeated wall-clock range a fixed-time job fires only in the first
//!   pass; other jobs fire in both.
//!
//! A schedule's [`DstPolicy`] changes the rules for fixed-time jobs: `skip` leaves a wall time
//! in a gap out, `twice` fires in both passes of a fold.

use std::fmt;

use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::tz::{Offset, TimeZone};
use jiff::{Timestamp, ToSpan};

use super::DstPolicy;
use crate::error::SpecError;

/// A parsed cron expression.
#[derive(Clone, PartialEq, Eq)]
pub struct CronExpr {
    source: String,
    seconds: u64,
    minutes: u64,
    hours: u32,
    days: DaysOfMonth,
    months: u16,
    weekdays: DaysOfWeek,
    /// Vixie rule: when either day field starts with `*`, both must match; otherwise either.
    day_fields_and: bool,
    /// Minute and hour fields both fixed: the job fires once per wall time across DST changes.
    fixed_time: bool,
    /// How a fixed-time job meets a DST change.
    dst: DstPolicy,
}

#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct DaysOfMonth {
    /// Bit d set: day d (1..=31).
    days: u32,
    last: bool,
    last_weekday: bool,
    /// Bit d set: the weekday nearest to day d (`dW`).
    nearest_weekday: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct DaysOfWeek {
    /// Bit w set: weekday w (0 = Sunday).
    days: u8,
    /// Bit w set: the last weekday w of the month (`5L`).
    last: u8,
    /// `nth[w]` bit n set: the n-th weekday w of the month (`1#2`).
    nth: [u8; 7],
}

impl fmt::Debug for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CronExpr({:?})", self.source)
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// How far the search looks ahead. The Gregorian calendar repeats every 400 years, so an
/// expression that matches no day in 401 years never fires.
const HORIZON_YEARS: i16 = 401;

/// The longest cron expression accepted, in bytes: room for every value of every field
/// listed one by one, and no more.
pub const MAX_CRON_LEN: usize = 1024;

impl CronExpr {
    /// Parses a 5-field (`m h dom mon dow`) or 6-field (`s m h dom mon dow`) expression or a
    /// macro, and rejects expressions that can never fire.
    pub fn parse(input: &str) -> Result<CronExpr, SpecError> {
        let source = input.trim();
        if source.len() > MAX_CRON_LEN {
            return Err(SpecError::new(format!(
                "cron expression is {} bytes long; the limit is {MAX_CRON_LEN}",
                source.len()
            )));
        }
        let expanded = match source.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            s if s.starts_with('@') => {
                return Err(SpecError::new(format!(
                    "unknown cron macro {source:?}: expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly"
                )));
            }
            _ => source,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (sec, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            0 => return Err(SpecError::new("empty cron expression")),
            n => {
                return Err(SpecError::new(format!(
                    "cron expression {source:?} has {n} fields; expected 5 (minute hour day-of-month month day-of-week) or 6 (with a leading seconds field)"
                )));
            }
        };
        let [min, hour, dom, mon, dow] = [rest[0], rest[1], rest[2], rest[3], rest[4]];
        let expr = CronExpr {
            source: source.to_string(),
            seconds: parse_simple(sec, Field::Second)?,
            minutes: parse_simple(min, Field::Minute)?,
            hours: parse_simple(hour, Field::Hour)? as u32,
            days: parse_days_of_month(dom)?,
            months: parse_simple(mon, Field::Month)? as u16,
            weekdays: parse_days_of_week(dow)?,
            day_fields_and: starts_with_star(dom) || starts_with_star(dow),
            fixed_time: !starts_with_star(min) && !starts_with_star(hour),
            dst: DstPolicy::Debian,
        };
        if !expr.fires_ever() {
            return Err(SpecError::new(format!(
                "cron expression {source:?} can never fire: no date matches its day-of-month, month and day-of-week fields"
            )));
        }
        Ok(expr)
    }

    /// The same expression, a fixed-time job meeting DST changes by `dst` instead of Debian
    /// cron's rules.
    pub fn with_dst(mut self, dst: DstPolicy) -> CronExpr {
        self.dst = dst;
        self
    }

    /// How a fixed-time job meets DST changes.
    pub fn dst(&self) -> DstPolicy {
        self.dst
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the minute and hour fields are both fixed (the DST rule for such jobs differs).
    pub fn is_fixed_time(&self) -> bool {
        self.fixed_time
    }

    /// Whether a wall-clock time matches every field (ignoring DST rules).
    pub fn matches(&self, dt: DateTime) -> bool {
        self.months & (1 << dt.month()) != 0
            && self.day_matches(dt.date())
            && self.hours & (1 << dt.hour()) != 0
            && self.minutes & (1 << dt.minute()) != 0
            && self.seconds & (1 << dt.second()) != 0
    }

    /// The first fire time strictly after `after`, in `tz`. `None` only past the horizon.
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        // Cron has one-second resolution: the first candidate is the next whole second.
        let mut lo = Timestamp::from_second(after.as_second().checked_add(1)?).ok()?;
        let limit = lo.as_second() + i64::from(HORIZON_YEARS) * 366 * 86_400;
        while lo.as_second() < limit {
            let offset = tz.to_offset(lo);
            let seg_end = tz.following(lo).next().map(|t| t.timestamp());
            // Civil range of this segment: [civil_lo, civil_hi).
            let civil_lo = offset.to_datetime(lo);
            let civil_hi = seg_end.map(|end| offset.to_datetime(end));
            // Wall times repeated from the previous segment (a fold), where fixed jobs don't fire.
            let repeated_until = self.repeated_range_end(tz, lo, offset);
            if let Some(dt) = self.next_civil_in(civil_lo, civil_hi, repeated_until) {
                return offset.to_timestamp(dt).ok();
            }
            let end = seg_end?;
            let next_offset = tz.to_offset(end);
            // A gap: wall times [end+offset, end+next_offset) never happen.
            if next_offset > offset && self.fixed_time && self.dst != DstPolicy::Skip {
                let gap_lo = offset.to_datetime(end);
                let gap_hi = next_offset.to_datetime(end);
                if self.next_civil_in(gap_lo, Some(gap_hi), None).is_some() {
                    return Some(end);
                }
            }
            lo = end;
        }
        None
    }

    /// End of the wall-clock range at the start of the segment holding `lo` that repeats the
    /// previous segment's wall times (a fold). Only fixed-time jobs skip it.
    fn repeated_range_end(&self, tz: &TimeZone, lo: Timestamp, offset: Offset) -> Option<DateTime> {
        if !self.fixed_time || self.dst == DstPolicy::Twice {
            return None;
        }
        // The transition that started this segment (the latest one at or before `lo`).
        let start = tz
            .preceding(lo.checked_add(1.nanosecond()).ok()?)
            .next()?
            .timestamp();
        let before = tz.to_offset(start.checked_sub(1.nanosecond()).ok()?);
        // The fold covers wall times [start+offset, start+before).
        (before > offset).then(|| before.to_datetime(start))
    }

    /// The first matching civil time in `[lo, hi)` (`hi` = unbounded when `None`), skipping
    /// times before `skip_before` (the repeated wall times of a fold).
    fn next_civil_in(
        &self,
        lo: DateTime,
        hi: Option<DateTime>,
        skip_before: Option<DateTime>,
    ) -> Option<DateTime> {
        let lo = match skip_before {
            Some(s) if s > lo => s,
            _ => lo,
        };
        let last_date = match hi {
            Some(hi) => hi.date(),
            None => lo
                .date()
                .checked_add((HORIZON_YEARS as i32 * 366).days())
                .ok()?,
        };
        let mut date = lo.date();
        let mut from = lo.time();
        while date <= last_date {
            if self.months & (1 << date.month()) == 0 {
                // Jump to the first of the next month.
                date = date.first_of_month().checked_add(1.month()).ok()?;
                from = Time::midnight();
                continue;
            }
            if self.day_matches(date)
                && let Some(t) = self.next_time_of_day(from)
            {
                let dt = date.to_datetime(t);
                return match hi {
                    Some(hi) if dt >= hi => None,
                    _ => Some(dt),
                };
            }
            date = date.tomorrow().ok()?;
            from = Time::midnight();
        }
        None
    }

    /// The first matching time of day at or after `from`.
    fn next_time_of_day(&self, from: Time) -> Option<Time> {
        let (h0, m0, s0) = (
            from.hour() as u32,
            from.minute() as u32,
            from.second() as u32,
        );
        let mut h = next_bit(u64::from(self.hours), h0);
        while let Some(hour) = h {
            let mut m = next_bit(self.minutes, if hour == h0 { m0 } else { 0 });
            while let Some(minute) = m {
                let s_from = if hour == h0 && minute == m0 { s0 } else { 0 };
                if let Some(second) = next_bit(self.seconds, s_from) {
                    return Time::new(hour as i8, minute as i8, second as i8, 0).ok();
                }
                m = next_bit(self.minutes, minute + 1);
            }
            h = next_bit(u64::from(self.hours), hour + 1);
        }
        None
    }

    fn day_matches(&self, date: Date) -> bool {
        let dom = self.dom_matches(date);
        let dow = self.dow_matches(date);
        if self.day_fields_and {
            dom && dow
        } else {
            dom || dow
        }
    }

    fn dom_matches(&self, date: Date) -> bool {
        let d = date.day() as u32;
        let last = date.days_in_month() as u32;
        let spec = &self.days;
        if spec.days & (1 << d) != 0 || (spec.last && d == last) {
            return true;
        }
        if spec.last_weekday && d == nearest_weekday(date, last) {
            return true;
        }
        let mut nw = spec.nearest_weekday;
        while nw != 0 {
            let n = nw.trailing_zeros();
            nw &= nw - 1;
            if d == nearest_weekday(date, n.min(last)) {
                return true;
            }
        }
        false
    }

    fn dow_matches(&self, date: Date) -> bool {
        let w = date.weekday().to_sunday_zero_offset() as usize;
        let d = date.day();
        let spec = &self.weekdays;
        spec.days & (1 << w) != 0
            || (spec.last & (1 << w) != 0 && d + 7 > date.days_in_month())
            || spec.nth[w] & (1 << ((d - 1) / 7 + 1)) != 0
    }

    /// Whether any date in a whole 400-year Gregorian cycle matches the day and month fields.
    fn fires_ever(&self) -> bool {
        let Ok(start) = Date::new(2000, 1, 1) else {
            return false;
        };
        let lo = start.to_datetime(Time::midnight());
        let hi = Date::new(2400, 1, 1)
            .ok()
            .map(|d| d.to_datetime(Time::midnight()));
        self.next_civil_in(lo, hi, None).is_some()
    }
}

/// The weekday (Mon–Fri) nearest to day `n` of `date`'s month, never leaving the month.
fn nearest_weekday(date: Date, n: u32) -> u32 {
    let Ok(target) = date.with().day(n as i8).build() else {
        return 0;
    };
    let last = date.days_in_month() as u32;
    match target.weekday() {
        Weekday::Saturday if n == 1 => 3,
        Weekday::Saturday => n - 1,
        Weekday::Sunday if n == last => n - 2,
        Weekday::Sunday => n + 1,
        _ => n,
    }
}

/// The lowest set bit at or above `from`.
fn next_bit(bits: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let masked = bits & (u64::MAX << from);
    (masked != 0).then(|| masked.trailing_zeros())
}

fn starts_with_star(field: &str) -> bool {
    field.starts_with('*') || field.starts_with('?')
}

#[derive(Clone, Copy)]
enum Field {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Second => "seconds",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
        }
    }

    fn range(self) -> (u32, u32) {
        match self {
            Field::Second | Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            // 7 is Sunday too; folded to 0 after parsing.
            Field::DayOfWeek => (0, 7),
        }
    }

    fn value(self, s: &str) -> Result<u32, SpecError> {
        let names: &[&str] = match self {
            Field::Month => &MONTH_NAMES,
            Field::DayOfWeek => &DAY_NAMES,
            _ => &[],
        };
        let upper = s.to_ascii_uppercase();
        if let Some(i) = names.iter().position(|n| *n == upper) {
            let base = if matches!(self, Field::Month) { 1 } else { 0 };
            return Ok(i as u32 + base);
        }
        let (min, max) = self.range();
        let v: u32 = s
            .parse()
            .map_err(|_| SpecError::new(format!("invalid {} value {s:?}", self.name())))?;
        if v < min || v > max {
            return Err(SpecError::new(format!(
                "{} value {v} is out of range {min}-{max}",
                self.name()
            )));
        }
        Ok(v)
    }
}

/// Parses a field made of `*`, values, ranges, steps and lists into a bit set.
fn parse_simple(field: &str, kind: Field) -> Result<u64, SpecError> {
    let mut bits = 0u64;
    for item in field.split(',') {
        bits |= parse_item(item, kind, field)?;
    }
    Ok(bits)
}

fn parse_item(item: &str, kind: Field, field: &str) -> Result<u64, SpecError> {
    if item.is_empty() {
        return Err(SpecError::new(format!(
            "empty list item in {} field {field:?}",
            kind.name()
        )));
    }
    let (min, max) = kind.range();
    let (range, step) = match item.split_once('/') {
        Some((r, s)) => {
            // A step longer than the field never repeats within it: refused, like a value out
            // of range (and so `v + step` below cannot overflow).
            let step: u32 = s
                .parse()
                .ok()
                .filter(|s| (1..=max).contains(s))
                .ok_or_else(|| {
                    SpecError::new(format!(
                        "invalid step {s:?} in {} field {field:?}: expected 1 to {max}",
                        kind.name()
                    ))
                })?;
            (r, Some(step))
        }
        None => (item, None),
    };
    let max = if matches!(kind, Field::DayOfWeek) {
        6
    } else {
        max
    };
    let (lo, hi) = if range == "*" || range == "?" {
        (min, max)
    } else if let Some((a, b)) = range.split_once('-') {
        let (a, b) = (kind.value(a)?, kind.value(b)?);
        if a > b {
            return Err(SpecError::new(format!(
                "range {range:?} in {} field {field:?} runs backwards",
                kind.name()
            )));
        }
        (a, b)
    } else {
        let v = kind.value(range)?;
        // `a/step` means from a to the end of the field's range.
        (v, if step.is_some() { max } else { v })
    };
    let step = step.unwrap_or(1);
    let mut bits = 0u64;
    let mut v = lo;
    while v <= hi {
        // Sunday is 0 or 7.
        let b = if matches!(kind, Field::DayOfWeek) && v == 7 {
            0
        } else {
            v
        };
        bits |= 1 << b;
        v += step;
    }
    Ok(bits)
}

fn parse_days_of_month(field: &str) -> Result<DaysOfMonth, SpecError> {
    let mut spec = DaysOfMonth::default();
    for item in field.split(',') {
        let upper = item.to_ascii_uppercase();
        if upper == "L" {
            spec.last = true;
        } else if upper == "LW" || upper == "WL" {
            spec.last_weekday = true;
        } else if let Some(n) = upper.strip_suffix('W') {
            let d = Field::DayOfMonth.value(n)?;
            spec.nearest_weekday |= 1 << d;
        } else {
            spec.days |= parse_item(item, Field::DayOfMonth, field)? as u32;
        }
    }
    Ok(spec)
}

fn parse_days_of_week(field: &str) -> Result<DaysOfWeek, SpecError> {
    let mut spec = DaysOfWeek::default();
    for item in field.split(',') {
        let upper = item.to_ascii_uppercase();
        if let Some((day, n)) = upper.split_once('#') {
            let w = Field::DayOfWeek.value(day)? % 7;
            let n: u32 = n
                .parse()
                .ok()
                .filter(|n| (1..=5).contains(n))
                .ok_or_else(|| {
                    SpecError::new(format!(
                        "invalid occurrence {n:?} in day-of-week item {item:?}: expected 1 to 5"
                    ))
                })?;
            spec.nth[w as usize] |= 1 << n;
        } else if let Some(day) = upper.strip_suffix('L').filter(|d| !d.is_empty()) {
            let w = Field::DayOfWeek.value(day)? % 7;
            spec.last |= 1 << w;
        } else if upper == "L" {
            // `L` alone in day-of-week means Saturday, the last day of the week (as in Quartz).
            spec.days |= 1 << 6;
        } else {
            spec.days |= parse_item(item, Field::DayOfWeek, field)? as u8;
        }
    }
    Ok(spec)
}
