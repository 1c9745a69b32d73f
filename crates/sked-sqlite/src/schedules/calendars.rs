//! Calendars: written, read, deleted while no schedule skips them, and read for a pass.

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sked_store::*;

use crate::codec::{db_err, from_ts, ts};

const COLUMNS: &str = "name, dates, tz, created_at, updated_at";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<CalendarInfo>> {
    Ok(rules::calendar_of_columns(
        r.get(0)?,
        &r.get::<_, String>(1)?,
        r.get(2)?,
        from_ts(r.get(3)?),
        from_ts(r.get(4)?),
    ))
}

pub(crate) fn put(tx: &Transaction<'_>, p: &CalendarPutParams) -> Result<CalendarInfo> {
    let def = (p.def.clone().validate()).map_err(|e| StoreError::Invalid(e.to_string()))?;
    tx.prepare_cached(
        "INSERT INTO calendars (name, dates, tz, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4) \
         ON CONFLICT (name) DO UPDATE SET dates = excluded.dates, tz = excluded.tz, \
           updated_at = excluded.updated_at",
    )
    .map_err(db_err)?
    .execute(params![
        def.name,
        rules::dates_column(&def.dates),
        def.tz,
        ts(p.now)
    ])
    .map_err(db_err)?;
    get(tx, &def.name)
}

pub(crate) fn get(conn: &Connection, name: &str) -> Result<CalendarInfo> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM calendars WHERE name = ?1"))
        .map_err(db_err)?
        .query_row([name], from_row)
        .optional()
        .map_err(db_err)?
        .ok_or_else(|| StoreError::calendar_not_found(name))?
}

pub(crate) fn list(conn: &Connection) -> Result<Vec<CalendarInfo>> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM calendars ORDER BY name"))
        .map_err(db_err)?;
    let rows = stmt.query_map([], from_row).map_err(db_err)?;
    rows.map(|r| r.map_err(db_err)?).collect()
}

/// Deletes calendar `name` unless a schedule skips it (the schedules that skip any calendar
/// are read: few, and this is rare).
pub(crate) fn delete(tx: &Transaction<'_>, name: &str) -> Result<bool> {
    let skipping: Vec<(String, Option<String>)> = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT name, skip_calendars FROM schedules WHERE skip_calendars IS NOT NULL",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    rules::check_calendar_unused(name, skipping)?;
    let n = tx
        .execute("DELETE FROM calendars WHERE name = ?1", [name])
        .map_err(db_err)?;
    Ok(n > 0)
}

/// The calendars of these names that exist, as the planner reads them.
pub(crate) fn read(conn: &Connection, names: &[String]) -> Result<rules::Calendars> {
    let mut defs = Vec::with_capacity(names.len());
    for name in names {
        match get(conn, name) {
            Ok(c) => defs.push(c.def()),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    rules::Calendars::new(defs)
}

/// The names among `names` that are calendars.
pub(crate) fn existing(conn: &Connection, names: &[String]) -> Result<Vec<String>> {
    let mut found = Vec::with_capacity(names.len());
    for name in names {
        let there = conn
            .prepare_cached("SELECT 1 FROM calendars WHERE name = ?1")
            .map_err(db_err)?
            .exists([name])
            .map_err(db_err)?;
        if there {
            found.push(name.clone());
        }
    }
    Ok(found)
}
