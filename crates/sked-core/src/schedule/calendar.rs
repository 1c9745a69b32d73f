//! Calendars: named sets of dates on which the schedules that name them do not fire.

use std::collections::BTreeSet;

use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use crate::error::SpecError;

/// The most dates one calendar holds: a century of holidays, and then some.
pub const MAX_CALENDAR_DATES: usize = 10_000;

/// The most calendars one schedule skips.
pub const MAX_SKIP_CALENDARS: usize = 16;

/// A calendar as a user defines it: its dates, and the zone they are dates in. Without a zone,
/// each schedule that skips it reads the dates in its own zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CalendarDef {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Name))]
    pub name: String,
    /// Dates (`2026-12-25`) on which no occurrence fires; 1 to 10,000 of them.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub dates: Vec<Date>,
    /// An IANA time zone the dates are in; by default, each schedule's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
}

impl CalendarDef {
    /// A calendar named `name` of these dates, in each schedule's own zone.
    pub fn new(name: impl Into<String>, dates: impl IntoIterator<Item = Date>) -> CalendarDef {
        CalendarDef {
            name: name.into(),
            dates: dates.into_iter().collect(),
            tz: None,
        }
    }

    /// Its dates are in this zone, whatever the schedule's.
    pub fn tz(mut self, tz: impl Into<String>) -> CalendarDef {
        self.tz = Some(tz.into());
        self
    }

    /// Checks it, and answers it with its dates sorted, each once.
    pub fn validate(mut self) -> Result<CalendarDef, SpecError> {
        crate::validate_name("calendar name", &self.name)?;
        if let Some(tz) = &self.tz {
            super::parse_zone(tz)?;
        }
        self.dates.sort_unstable();
        self.dates.dedup();
        if self.dates.is_empty() || self.dates.len() > MAX_CALENDAR_DATES {
            return Err(SpecError::new(format!(
                "a calendar has 1 to {MAX_CALENDAR_DATES} dates, not {}",
                self.dates.len()
            )));
        }
        Ok(self)
    }
}

/// Parses dates written `2026-12-25,2027-01-01` (spaces allowed around each).
pub fn parse_dates(s: &str) -> Result<Vec<Date>, SpecError> {
    s.split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| {
            d.parse::<Date>()
                .map_err(|_| SpecError::new(format!("invalid date {d:?}: expected YYYY-MM-DD")))
        })
        .collect()
}

/// A calendar as the planner reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Calendar {
    pub name: String,
    /// `None`: the schedule's zone.
    pub tz: Option<TimeZone>,
    pub dates: BTreeSet<Date>,
}

impl Calendar {
    /// The calendar a checked definition describes.
    pub fn of(def: &CalendarDef) -> Result<Calendar, SpecError> {
        Ok(Calendar {
            name: def.name.clone(),
            tz: def.tz.as_deref().map(super::parse_zone).transpose()?,
            dates: def.dates.iter().copied().collect(),
        })
    }

    /// Whether `t` falls on one of its dates, in its zone or else `schedule_tz`.
    pub fn excludes(&self, t: Timestamp, schedule_tz: &TimeZone) -> bool {
        let tz = self.tz.as_ref().unwrap_or(schedule_tz);
        self.dates.contains(&tz.to_datetime(t).date())
    }
}

/// Checks the calendars a schedule skips: valid names, each once, at most
/// [`MAX_SKIP_CALENDARS`].
pub fn check_skip_calendars(names: &[String]) -> Result<(), SpecError> {
    if names.len() > MAX_SKIP_CALENDARS {
        return Err(SpecError::new(format!(
            "a schedule skips at most {MAX_SKIP_CALENDARS} calendars, not {}",
            names.len()
        )));
    }
    for (i, name) in names.iter().enumerate() {
        crate::validate_name("calendar name", name)?;
        if names[..i].contains(name) {
            return Err(SpecError::new(format!("calendar {name:?} is named twice")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_date_is_read_in_the_calendars_zone_or_the_schedules() {
        let def = CalendarDef::new(
            "h",
            parse_dates("2026-12-25, 2026-12-25,2026-01-01").unwrap(),
        )
        .validate()
        .unwrap();
        assert_eq!(def.dates.len(), 2, "sorted, each once");
        let utc = Calendar::of(&def).unwrap();
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        // 23:30 UTC on the 24th is 00:30 on the 25th in Berlin.
        let t: Timestamp = "2026-12-24T23:30:00Z".parse().unwrap();
        assert!(!utc.excludes(t, &TimeZone::UTC));
        assert!(utc.excludes(t, &berlin), "the schedule's zone");
        let in_utc = Calendar::of(&def.clone().tz("UTC")).unwrap();
        assert!(!in_utc.excludes(t, &berlin), "the calendar's own zone");
    }

    #[test]
    fn a_dst_day_is_a_date_like_any_other() {
        // 2026-03-29: Berlin's clocks go from 02:00 to 03:00. A 02:30 job runs at 03:00 that
        // day (Debian's rule), still on the 29th, so a calendar of the 29th skips it.
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        let cron = crate::CronExpr::parse("30 2 * * *").unwrap();
        let after: Timestamp = "2026-03-28T12:00:00Z".parse().unwrap();
        let fire = cron.next_after(after, &berlin).unwrap();
        assert_eq!(fire, "2026-03-29T01:00:00Z".parse::<Timestamp>().unwrap());
        let def = CalendarDef::new("h", parse_dates("2026-03-29").unwrap());
        let c = Calendar::of(&def.validate().unwrap()).unwrap();
        assert!(c.excludes(fire, &berlin));
        assert!(!c.excludes(cron.next_after(fire, &berlin).unwrap(), &berlin));
    }

    #[test]
    fn bad_calendars_are_refused() {
        assert!(parse_dates("2026-13-01").is_err());
        assert!(
            parse_dates("tomorrow")
                .unwrap_err()
                .to_string()
                .contains("YYYY-MM-DD")
        );
        assert!(CalendarDef::new("h", []).validate().is_err());
        let day = parse_dates("2026-12-25").unwrap();
        assert!(
            CalendarDef::new("h", day.clone())
                .tz("Mars/Olympus")
                .validate()
                .is_err()
        );
        assert!(CalendarDef::new("a b", day).validate().is_err());
        assert!(check_skip_calendars(&["h".into(), "h".into()]).is_err());
    }
}
