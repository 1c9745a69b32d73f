//! Schedules: reading them, and writing them one at a time (created, replaced, declared, paused,
//! deleted); `bulk.rs` writes many at once.

use deadpool_postgres::Object;
use jiff::{SignedDuration, Timestamp};

use sked_store::*;
use tokio_postgres::GenericClient;

use crate::codec::{col, db_err, state};
use crate::tasks::announce_schedules;

mod bulk;
pub(crate) mod calendars;
pub(crate) mod plans;
pub(crate) use bulk::{upsert, write_many};

/// The schedule select list, in [`columns::ScheduleColumn`]'s order.
pub(crate) static COLUMNS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| columns::schedule_columns("sked_tasks"));

pub(crate) fn bad(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("bad schedule row: {e}"))
}

pub(crate) fn from_row(r: &tokio_postgres::Row) -> Result<Schedule> {
    use sked_store::columns::ScheduleColumn as C;
    let (from, jitter, dst, pause_after_failures) = rules::policies_from_columns(
        col(r, C::IntervalFrom.at())?,
        col(r, C::JitterMs.at())?,
        col(r, C::Dst.at())?,
        col(r, C::PauseAfterFailures.at())?,
    )
    .map_err(bad)?;
    let (task, workflow) = rules::template_of_column(col(r, C::Task.at())?).map_err(bad)?;
    let mut s = Schedule {
        from,
        jitter,
        dst,
        pause_after_failures,
        keep_retrying: col(r, C::KeepRetrying.at())?,
        paused_reason: col(r, C::PausedReason.at())?,
        name: col(r, C::Name.at())?,
        spec: col(r, C::Spec.at())?,
        tz: col(r, C::Tz.at())?,
        task,
        workflow,
        overlap: col::<String>(r, C::Overlap.at())?.parse().map_err(bad)?,
        catchup: col::<String>(r, C::Catchup.at())?.parse().map_err(bad)?,
        catchup_window: SignedDuration::from_millis(col(r, C::CatchupWindowMs.at())?),
        paused: col(r, C::Paused.at())?,
        anchor_at: col(r, C::AnchorAt.at())?,
        next_fire_at: col(r, C::NextFireAt.at())?,
        buffered_at: col(r, C::BufferedAt.at())?,
        created_at: col(r, C::CreatedAt.at())?,
        updated_at: col(r, C::UpdatedAt.at())?,
        last_started_at: col(r, C::LastStartedAt.at())?,
        last_finished_at: col(r, C::LastFinishedAt.at())?,
        running: col(r, C::Running.at())?,
        last_outcome: col::<Option<&str>>(r, C::LastOutcome.at())?
            .map(state)
            .transpose()?,
        declared_by: col(r, C::DeclaredBy.at())?,
        unplanned_from: col(r, C::UnplannedFrom.at())?,
        retrying: columns::retrying_run(col::<Option<&str>>(r, C::RetryingRun.at())?)
            .map_err(bad)?,
        start_at: col(r, C::StartAt.at())?,
        end_at: col(r, C::EndAt.at())?,
        max_runs: col::<Option<i64>>(r, C::MaxRuns.at())?.map(|n| n.max(1) as u64),
        runs: col::<i64>(r, C::Runs.at())?.max(0) as u64,
        skip_calendars: rules::skip_calendars_of_column(col::<Option<&str>>(
            r,
            C::SkipCalendars.at(),
        )?)
        .map_err(bad)?,
        ended: None,
    };
    s.ended = rules::ended(&s);
    Ok(s)
}

pub(crate) async fn get<C: GenericClient + Sync>(c: &C, name: &str) -> Result<Schedule> {
    let row = c
        .query_opt(
            &format!(
                "SELECT {columns} FROM sked_schedules s WHERE s.name = $1",
                columns = COLUMNS.as_str()
            ),
            &[&name],
        )
        .await
        .map_err(db_err)?;
    row.as_ref()
        .map(from_row)
        .transpose()?
        .ok_or_else(|| StoreError::schedule_not_found(name))
}

pub(crate) async fn list(c: &mut Object, p: &ScheduleListParams) -> Result<Page<Schedule>> {
    use futures_util::TryStreamExt;
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let (filter, values) = filter_sql(&p.filter, 3);
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {columns} FROM sked_schedules s WHERE {NAME_BYTES} > $1{filter} \
             ORDER BY {NAME_BYTES} LIMIT $2",
            columns = COLUMNS.as_str()
        ))
        .await
        .map_err(db_err)?;
    let after = p.after.as_deref().unwrap_or("");
    // One row more than the page: it says whether more follow.
    let rows = i64::from(limit) + 1;
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&after, &rows];
    params.extend(values.iter().map(as_sql));
    // Row by row, so that a full page stops the reading.
    let rows = c
        .query_raw(&stmt, params.iter().copied())
        .await
        .map_err(db_err)?;
    futures_util::pin_mut!(rows);
    let mut page = sked_store::page::PageBuilder::new(limit);
    while let Some(row) = rows.try_next().await.map_err(db_err)? {
        let mut s = from_row(&row)?;
        if !p.with_payloads {
            s = s.without_payloads();
        }
        if !page.push(s) {
            break;
        }
    }
    Ok(page.finish())
}

pub(crate) async fn count(c: &mut Object, f: &ScheduleFilter, limit: u64) -> Result<u64> {
    let (filter, values) = filter_sql(f, 2);
    let upto = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&upto];
    params.extend(values.iter().map(as_sql));
    let row = c
        .query_one(
            &format!(
                "SELECT count(*) FROM (SELECT 1 FROM sked_schedules s WHERE true{filter} LIMIT $1) x"
            ),
            &params,
        )
        .await
        .map_err(db_err)?;
    Ok(col::<i64>(&row, 0)?.max(0) as u64)
}

/// A schedule's name in the order of its bytes, whatever the database's collation: the order
/// of pages, SQLite's order, and a prefix is a range of it (an index holds it).
const NAME_BYTES: &str = "(s.name COLLATE \"C\")";

/// The filter's conditions, their placeholders numbered from `first`.
fn filter_sql(f: &ScheduleFilter, first: usize) -> (String, Vec<columns::FilterValue>) {
    columns::schedule_filter(f, "sked_tasks", NAME_BYTES, |i| format!("${i}"), first)
}

fn as_sql(v: &columns::FilterValue) -> &(dyn tokio_postgres::types::ToSql + Sync) {
    match v {
        columns::FilterValue::Text(t) => t,
        columns::FilterValue::Bool(b) => b,
    }
}

/// Locks the schedule's row, if there is one, until the transaction ends.
pub(crate) async fn lock<C: GenericClient + Sync>(c: &C, name: &str) -> Result<()> {
    c.execute(
        "SELECT 1 FROM sked_schedules WHERE name = $1 FOR UPDATE",
        &[&name],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// The stored schedule of this name, if there is one, locked until the transaction ends so
/// that what is written over it is decided from what it is.
pub(crate) async fn existing_locked<C: GenericClient + Sync>(
    c: &C,
    name: &str,
) -> Result<Option<Schedule>> {
    lock(c, name).await?;
    match get(c, name).await {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

pub(crate) async fn delete(
    c: &mut Object,
    channel: &str,
    name: &str,
    now: Timestamp,
) -> Result<bool> {
    let tx = c.transaction().await.map_err(db_err)?;
    lock(&*tx, name).await?;
    plans::withdraw_ahead(&*tx, name, now).await?;
    let n = tx
        .execute("DELETE FROM sked_schedules WHERE name = $1", &[&name])
        .await
        .map_err(db_err)?;
    tx.execute("DELETE FROM sked_occurrences WHERE schedule = $1", &[&name])
        .await
        .map_err(db_err)?;
    announce_schedules(&*tx, channel).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(n > 0)
}

pub(crate) async fn set_paused(
    c: &mut Object,
    channel: &str,
    p: &SchedulePauseParams,
) -> Result<Schedule> {
    let tx = c.transaction().await.map_err(db_err)?;
    let n = if p.paused {
        lock(&*tx, &p.name).await?;
        plans::withdraw_ahead(&*tx, &p.name, p.now).await?;
        tx.execute(
            "UPDATE sked_schedules SET paused = true, paused_reason = $3, updated_at = $2, \
               look_at = NULL, awaits_run = false WHERE name = $1",
            &[&p.name, &p.now, &p.reason],
        )
        .await
    } else {
        let look_at = rules::first_look(p.next_fire_at, false, p.now);
        tx.execute(
            "UPDATE sked_schedules SET paused = false, paused_reason = NULL, resumed_at = $3, \
               next_fire_at = $2, updated_at = $3, look_at = $4, awaits_run = false WHERE name = $1",
            &[&p.name, &p.next_fire_at, &p.now, &look_at],
        )
        .await
    }
    .map_err(db_err)?;
    if n == 0 {
        return Err(StoreError::schedule_not_found(&p.name));
    }
    announce_schedules(&*tx, channel).await?;
    let s = get(&*tx, &p.name).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(s)
}
