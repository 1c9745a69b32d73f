//! Calendars as both backends store them, and the checks that keep every calendar a schedule
//! skips in existence.

use jiff::Timestamp;
use jiff::civil::Date;

use crate::{CalendarInfo, StoreError};

/// A calendar's dates as stored: `2026-12-25,2027-01-01`.
pub fn dates_column(dates: &[Date]) -> String {
    let each: Vec<String> = dates.iter().map(Date::to_string).collect();
    each.join(",")
}

/// A calendar read back from its columns.
pub fn calendar_of_columns(
    name: String,
    dates: &str,
    tz: Option<String>,
    created_at: Timestamp,
    updated_at: Timestamp,
) -> crate::Result<CalendarInfo> {
    let dates = sked_core::parse_dates(dates)
        .map_err(|e| StoreError::Backend(format!("bad calendar row {name:?}: {e}")))?;
    Ok(CalendarInfo {
        name,
        dates,
        tz,
        created_at,
        updated_at,
    })
}

/// The calendars a schedule skips as stored: a JSON array of names, or NULL for none.
pub fn skip_calendars_column(names: &[String]) -> Option<String> {
    (!names.is_empty()).then(|| serde_json::Value::from(names.to_vec()).to_string())
}

/// The calendars a schedule skips, read back from their column.
pub fn skip_calendars_of_column(v: Option<&str>) -> Result<Vec<String>, String> {
    match v {
        None => Ok(Vec::new()),
        Some(v) => serde_json::from_str(v).map_err(|e| format!("bad skip_calendars {v:?}: {e}")),
    }
}

/// Refuses a schedule that skips a calendar not among those that exist (`existing`).
pub fn check_calendars_exist(
    def: &sked_core::ScheduleDef,
    existing: &[String],
) -> crate::Result<()> {
    match def.skip_calendars.iter().find(|n| !existing.contains(n)) {
        Some(missing) => Err(StoreError::Invalid(format!(
            "schedule {:?} skips calendar {missing:?}, which does not exist: add it first (sked calendar add)",
            def.name
        ))),
        None => Ok(()),
    }
}

/// Refuses to delete calendar `name` while schedules skip it. `skipping`: each schedule that
/// skips some calendar, with the names it skips as stored.
pub fn check_calendar_unused(
    name: &str,
    skipping: impl IntoIterator<Item = (String, Option<String>)>,
) -> crate::Result<()> {
    let mut users = Vec::new();
    for (schedule, column) in skipping {
        let names = skip_calendars_of_column(column.as_deref()).map_err(StoreError::Backend)?;
        if names.iter().any(|n| n == name) {
            users.push(schedule);
        }
    }
    users.sort_unstable();
    match users.as_slice() {
        [] => Ok(()),
        _ => Err(StoreError::Conflict(format!(
            "calendar {name} is skipped by schedule {}: remove it from them first",
            users.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_read_back_as_written() {
        let dates = sked_core::parse_dates("2026-12-25,2027-01-01").unwrap();
        let c = calendar_of_columns("h".into(), &dates_column(&dates), None, t(), t()).unwrap();
        assert_eq!(c.dates, dates);
        let names = vec!["a,b".to_string(), "c\"d".to_string()];
        let column = skip_calendars_column(&names);
        assert_eq!(skip_calendars_of_column(column.as_deref()).unwrap(), names);
        assert_eq!(skip_calendars_column(&[]), None);
        assert!(skip_calendars_of_column(None).unwrap().is_empty());
    }

    #[test]
    fn a_calendar_in_use_is_kept_and_names_its_schedules() {
        let skipping = vec![
            ("b".to_string(), skip_calendars_column(&["h".into()])),
            (
                "a".to_string(),
                skip_calendars_column(&["x".into(), "h".into()]),
            ),
            ("c".to_string(), skip_calendars_column(&["hh".into()])),
        ];
        let e = check_calendar_unused("h", skipping.clone()).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Conflict);
        assert!(e.to_string().contains("schedule a, b:"), "{e}");
        assert!(check_calendar_unused("y", skipping).is_ok());
    }

    fn t() -> Timestamp {
        Timestamp::UNIX_EPOCH
    }
}
