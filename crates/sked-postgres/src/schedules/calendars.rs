//! Calendars: written, read, deleted while no schedule skips them, and read for a pass.

use deadpool_postgres::Object;
use sked_store::*;
use tokio_postgres::GenericClient;

use crate::codec::{col, db_err};

const COLUMNS: &str = "name, dates, tz, created_at, updated_at";

fn from_row(r: &tokio_postgres::Row) -> Result<CalendarInfo> {
    rules::calendar_of_columns(col(r, 0)?, col(r, 1)?, col(r, 2)?, col(r, 3)?, col(r, 4)?)
}

pub(crate) async fn put(c: &mut Object, p: &CalendarPutParams) -> Result<CalendarInfo> {
    let def = (p.def.clone().validate()).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let row = c
        .query_one(
            &format!(
                "INSERT INTO sked_calendars (name, dates, tz, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $4) \
                 ON CONFLICT (name) DO UPDATE SET dates = excluded.dates, tz = excluded.tz, \
                   updated_at = excluded.updated_at RETURNING {COLUMNS}"
            ),
            &[&def.name, &rules::dates_column(&def.dates), &def.tz, &p.now],
        )
        .await
        .map_err(db_err)?;
    from_row(&row)
}

pub(crate) async fn get<C: GenericClient + Sync>(c: &C, name: &str) -> Result<CalendarInfo> {
    let row = c
        .query_opt(
            &format!("SELECT {COLUMNS} FROM sked_calendars WHERE name = $1"),
            &[&name],
        )
        .await
        .map_err(db_err)?;
    row.as_ref()
        .map(from_row)
        .transpose()?
        .ok_or_else(|| StoreError::calendar_not_found(name))
}

pub(crate) async fn list(c: &mut Object) -> Result<Vec<CalendarInfo>> {
    let rows = c
        .query(
            &format!("SELECT {COLUMNS} FROM sked_calendars ORDER BY name"),
            &[],
        )
        .await
        .map_err(db_err)?;
    rows.iter().map(from_row).collect()
}

/// Deletes calendar `name` unless a schedule skips it. Its row is locked first, so a schedule
/// written at the same time that names it ([`existing`] reads it `FOR SHARE`) is either seen
/// here or refused there.
pub(crate) async fn delete(c: &mut Object, name: &str) -> Result<bool> {
    let tx = c.transaction().await.map_err(db_err)?;
    let n = tx
        .execute("DELETE FROM sked_calendars WHERE name = $1", &[&name])
        .await
        .map_err(db_err)?;
    let rows = tx
        .query(
            "SELECT name, skip_calendars FROM sked_schedules WHERE skip_calendars IS NOT NULL",
            &[],
        )
        .await
        .map_err(db_err)?;
    let skipping = rows
        .iter()
        .map(|r| Ok((col(r, 0)?, col(r, 1)?)))
        .collect::<Result<Vec<(String, Option<String>)>>>()?;
    rules::check_calendar_unused(name, skipping)?;
    tx.commit().await.map_err(db_err)?;
    Ok(n > 0)
}

/// The calendars of these names that exist, as the planner reads them.
pub(crate) async fn read<C: GenericClient + Sync>(
    c: &C,
    names: &[String],
) -> Result<rules::Calendars> {
    let rows = c
        .query(
            &format!("SELECT {COLUMNS} FROM sked_calendars WHERE name = ANY($1)"),
            &[&names],
        )
        .await
        .map_err(db_err)?;
    let defs = (rows.iter())
        .map(|r| from_row(r).map(|c| c.def()))
        .collect::<Result<Vec<_>>>()?;
    rules::Calendars::new(defs)
}

/// The names among `names` that are calendars, their rows held until the transaction ends.
pub(crate) async fn existing<C: GenericClient + Sync>(
    c: &C,
    names: &[String],
) -> Result<Vec<String>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let rows = c
        .query(
            "SELECT name FROM sked_calendars WHERE name = ANY($1) ORDER BY name FOR SHARE",
            &[&names],
        )
        .await
        .map_err(db_err)?;
    rows.iter().map(|r| col(r, 0)).collect()
}
