//! Schedules, the occurrence ledger, and materialisation plans applied atomically.

use jiff::{SignedDuration, Timestamp};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sked_core::OccurrenceOutcome;
use sked_store::*;

use crate::codec::{db_err, from_ts, ms, opt_ts, state, ts};

pub(crate) mod calendars;
pub(crate) mod plans;

/// The schedule select list, in [`columns::ScheduleColumn`]'s order.
static COLUMNS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| columns::schedule_columns("tasks"));

fn invalid_column(e: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::InvalidColumnType(0, e.to_string(), rusqlite::types::Type::Text)
}

pub(crate) fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Schedule> {
    use sked_store::columns::ScheduleColumn as C;
    let (from, jitter, dst, pause_after_failures) = rules::policies_from_columns(
        &r.get::<_, String>(C::IntervalFrom.at())?,
        r.get(C::JitterMs.at())?,
        &r.get::<_, String>(C::Dst.at())?,
        r.get(C::PauseAfterFailures.at())?,
    )
    .map_err(invalid_column)?;
    let stored: serde_json::Value =
        serde_json::from_str(&r.get::<_, String>(C::Task.at())?).map_err(invalid_column)?;
    let (task, workflow) = rules::template_of_column(stored).map_err(invalid_column)?;
    let mut s = Schedule {
        from,
        jitter,
        dst,
        pause_after_failures,
        keep_retrying: r.get(C::KeepRetrying.at())?,
        paused_reason: r.get(C::PausedReason.at())?,
        name: r.get(C::Name.at())?,
        spec: r.get(C::Spec.at())?,
        tz: r.get(C::Tz.at())?,
        task,
        workflow,
        overlap: r
            .get::<_, String>(C::Overlap.at())?
            .parse()
            .map_err(invalid_column)?,
        catchup: r
            .get::<_, String>(C::Catchup.at())?
            .parse()
            .map_err(invalid_column)?,
        catchup_window: SignedDuration::from_millis(r.get(C::CatchupWindowMs.at())?),
        paused: r.get(C::Paused.at())?,
        anchor_at: from_ts(r.get(C::AnchorAt.at())?),
        next_fire_at: opt_ts(r.get(C::NextFireAt.at())?),
        buffered_at: opt_ts(r.get(C::BufferedAt.at())?),
        created_at: from_ts(r.get(C::CreatedAt.at())?),
        updated_at: from_ts(r.get(C::UpdatedAt.at())?),
        last_started_at: opt_ts(r.get(C::LastStartedAt.at())?),
        last_finished_at: opt_ts(r.get(C::LastFinishedAt.at())?),
        running: r.get(C::Running.at())?,
        last_outcome: r
            .get::<_, Option<String>>(C::LastOutcome.at())?
            .map(|s| state(&s))
            .transpose()?,
        declared_by: r.get(C::DeclaredBy.at())?,
        unplanned_from: opt_ts(r.get(C::UnplannedFrom.at())?),
        retrying: columns::retrying_run(
            r.get::<_, Option<String>>(C::RetryingRun.at())?.as_deref(),
        )
        .map_err(invalid_column)?,
        start_at: opt_ts(r.get(C::StartAt.at())?),
        end_at: opt_ts(r.get(C::EndAt.at())?),
        max_runs: r
            .get::<_, Option<i64>>(C::MaxRuns.at())?
            .map(|n| n.max(1) as u64),
        runs: r.get::<_, i64>(C::Runs.at())?.max(0) as u64,
        skip_calendars: rules::skip_calendars_of_column(
            r.get::<_, Option<String>>(C::SkipCalendars.at())?
                .as_deref(),
        )
        .map_err(invalid_column)?,
        ended: None,
    };
    s.ended = rules::ended(&s);
    Ok(s)
}

pub(crate) fn get(conn: &Connection, name: &str) -> Result<Schedule> {
    conn.prepare_cached(&format!(
        "SELECT {columns} FROM schedules s WHERE s.name = ?1",
        columns = COLUMNS.as_str()
    ))
    .map_err(db_err)?
    .query_row([name], from_row)
    .optional()
    .map_err(db_err)?
    .ok_or_else(|| StoreError::schedule_not_found(name))
}

pub(crate) fn list(conn: &Connection, p: &ScheduleListParams) -> Result<Page<Schedule>> {
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let (filter, values) = filter_sql(&p.filter, 3);
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {columns} FROM schedules s WHERE s.name > ?1{filter} ORDER BY s.name LIMIT ?2",
            columns = COLUMNS.as_str()
        ))
        .map_err(db_err)?;
    let after = p.after.clone().unwrap_or_default();
    // One row more than the page: it says whether more follow.
    let mut params: Vec<rusqlite::types::Value> = vec![after.into(), (i64::from(limit) + 1).into()];
    params.extend(values.into_iter().map(as_sql));
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params), from_row)
        .map_err(db_err)?;
    let mut page = sked_store::page::PageBuilder::new(limit);
    for row in rows {
        let mut s = row.map_err(db_err)?;
        if !p.with_payloads {
            s = s.without_payloads();
        }
        if !page.push(s) {
            break;
        }
    }
    Ok(page.finish())
}

pub(crate) fn count(conn: &Connection, f: &ScheduleFilter, limit: u64) -> Result<u64> {
    let (filter, values) = filter_sql(f, 2);
    let upto = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
    let mut params: Vec<rusqlite::types::Value> = vec![upto.into()];
    params.extend(values.into_iter().map(as_sql));
    let n: i64 = conn
        .prepare_cached(&format!(
            "SELECT count(*) FROM (SELECT 1 FROM schedules s WHERE 1{filter} LIMIT ?1)"
        ))
        .map_err(db_err)?
        .query_row(rusqlite::params_from_iter(params), |r| r.get(0))
        .map_err(db_err)?;
    Ok(n.max(0) as u64)
}

/// The filter's conditions, their placeholders numbered from `first`.
fn filter_sql(f: &ScheduleFilter, first: usize) -> (String, Vec<columns::FilterValue>) {
    columns::schedule_filter(f, "tasks", "s.name", |i| format!("?{i}"), first)
}

fn as_sql(v: columns::FilterValue) -> rusqlite::types::Value {
    match v {
        columns::FilterValue::Text(t) => t.into(),
        columns::FilterValue::Bool(b) => b.into(),
    }
}

/// Creates or replaces one schedule made at run time: [`write_many`] with one, and the
/// schedule as it is then.
pub(crate) fn upsert(tx: &Transaction<'_>, p: &ScheduleUpsertParams) -> Result<Schedule> {
    let one = ScheduleWriteParams::one(p);
    write_many(tx, &one)?;
    get(tx, &p.def.name)
}

/// Writes many schedules (see [`Store::schedule_write_many`]); a dry run inside a savepoint
/// rolled back at its end.
pub(crate) fn write_many(
    tx: &Transaction<'_>,
    p: &ScheduleWriteParams,
) -> Result<ScheduleSyncReport> {
    rules::check_write(p)?;
    if !p.dry_run {
        return write_all(tx, p);
    }
    tx.execute_batch("SAVEPOINT sked_dry_run").map_err(db_err)?;
    let report = write_all(tx, p);
    tx.execute_batch("ROLLBACK TO sked_dry_run; RELEASE sked_dry_run")
        .map_err(db_err)?;
    report
}

fn write_all(tx: &Transaction<'_>, p: &ScheduleWriteParams) -> Result<ScheduleSyncReport> {
    let group = p.group.as_deref();
    let mut sorted: Vec<&DeclaredSchedule> = p.schedules.iter().collect();
    sorted.sort_unstable_by(|a, b| a.def.name.cmp(&b.def.name));
    let mut report = ScheduleSyncReport::default();
    for d in &sorted {
        let action = rules::sync_action(stored(tx, &d.def.name)?.as_ref(), &d.def, group);
        if rules::note_sync(&mut report, action, &d.def.name) {
            write(tx, d, group, p.now)?;
        }
    }
    if p.prune {
        let names: std::collections::HashSet<&str> =
            sorted.iter().map(|d| d.def.name.as_str()).collect();
        let before: Vec<String> = {
            let mut stmt = tx
                .prepare_cached("SELECT name FROM schedules WHERE declared_by = ?1 ORDER BY name")
                .map_err(db_err)?;
            let rows = stmt.query_map([group], |r| r.get(0)).map_err(db_err)?;
            rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
        };
        for name in before {
            if !names.contains(name.as_str()) {
                delete(tx, &name, p.now)?;
                report.removed.push(name);
            }
        }
    }
    Ok(report)
}

/// Writes a valid schedule over the stored one of its name, if any, whose runs made ahead are
/// withdrawn (see [`rules::rewritten`]).
fn write(
    tx: &Transaction<'_>,
    d: &DeclaredSchedule,
    group: Option<&str>,
    now: Timestamp,
) -> Result<()> {
    let def = &d.def;
    rules::check_calendars_exist(def, &calendars::existing(tx, &def.skip_calendars)?)?;
    let task = rules::template_column(def)?.to_string();
    plans::withdraw_ahead(tx, &def.name, now)?;
    let r = rules::rewritten(stored(tx, &def.name)?.as_ref(), d, group, now);
    let policy = rules::PolicyColumns::of(def);
    tx.prepare_cached(
        "INSERT INTO schedules (name, spec, tz, task, overlap, catchup, catchup_window_ms, paused, \
           anchor_at, next_fire_at, created_at, updated_at, \
           interval_from, jitter_ms, dst, pause_after_failures, look_at, declared_by, keep_retrying, \
           start_at, end_at, max_runs, skip_calendars) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?11, ?10, ?9, ?9, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
           ?19, ?20, ?21, ?22) \
         ON CONFLICT (name) DO UPDATE SET \
           next_fire_at = excluded.next_fire_at, anchor_at = excluded.anchor_at, \
           look_at = excluded.look_at, awaits_run = 0, \
           spec = excluded.spec, tz = excluded.tz, task = excluded.task, overlap = excluded.overlap, \
           catchup = excluded.catchup, catchup_window_ms = excluded.catchup_window_ms, \
           interval_from = excluded.interval_from, jitter_ms = excluded.jitter_ms, \
           dst = excluded.dst, pause_after_failures = excluded.pause_after_failures, \
           keep_retrying = excluded.keep_retrying, start_at = excluded.start_at, \
           end_at = excluded.end_at, max_runs = excluded.max_runs, \
           skip_calendars = excluded.skip_calendars, \
           paused_reason = CASE WHEN excluded.paused THEN schedules.paused_reason END, \
           resumed_at = CASE WHEN schedules.paused AND NOT excluded.paused \
             THEN excluded.updated_at ELSE schedules.resumed_at END, \
           paused = excluded.paused, updated_at = excluded.updated_at, \
           declared_by = coalesce(excluded.declared_by, schedules.declared_by)",
    )
    .map_err(db_err)?
    .execute(params![
        def.name,
        def.spec,
        def.tz,
        task,
        def.overlap.to_string(),
        def.catchup.as_str(),
        ms(def.catchup_window),
        r.paused,
        ts(now),
        r.next_fire_at.map(ts),
        ts(r.anchor_at),
        policy.interval_from,
        policy.jitter_ms,
        policy.dst,
        policy.pause_after_failures,
        r.look_at.map(ts),
        group,
        policy.keep_retrying,
        policy.start_at.map(ts),
        policy.end_at.map(ts),
        policy.max_runs,
        rules::skip_calendars_column(&def.skip_calendars),
    ])
    .map_err(db_err)?;
    Ok(())
}

/// The stored schedule of this name, if there is one, without figures of its tasks.
fn stored(conn: &Connection, name: &str) -> Result<Option<Schedule>> {
    static STORED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT {} FROM schedules s WHERE s.name = ?1",
            columns::stored_columns()
        )
    });
    conn.prepare_cached(&STORED)
        .map_err(db_err)?
        .query_row([name], from_row)
        .optional()
        .map_err(db_err)
}

pub(crate) fn delete(tx: &Transaction<'_>, name: &str, now: Timestamp) -> Result<bool> {
    plans::withdraw_ahead(tx, name, now)?;
    let n = tx
        .execute("DELETE FROM schedules WHERE name = ?1", [name])
        .map_err(db_err)?;
    tx.execute("DELETE FROM occurrences WHERE schedule = ?1", [name])
        .map_err(db_err)?;
    Ok(n > 0)
}

pub(crate) fn set_paused(tx: &Transaction<'_>, p: &SchedulePauseParams) -> Result<Schedule> {
    let n = if p.paused {
        plans::withdraw_ahead(tx, &p.name, p.now)?;
        tx.execute(
            "UPDATE schedules SET paused = 1, paused_reason = ?3, updated_at = ?2, \
               look_at = NULL, awaits_run = 0 WHERE name = ?1",
            params![p.name, ts(p.now), p.reason],
        )
    } else {
        let look_at = rules::first_look(p.next_fire_at, false, p.now);
        tx.execute(
            "UPDATE schedules SET paused = 0, paused_reason = NULL, resumed_at = ?3, \
               next_fire_at = ?2, updated_at = ?3, look_at = ?4, awaits_run = 0 WHERE name = ?1",
            params![p.name, p.next_fire_at.map(ts), ts(p.now), look_at.map(ts)],
        )
    }
    .map_err(db_err)?;
    if n == 0 {
        return Err(StoreError::schedule_not_found(&p.name));
    }
    get(tx, &p.name)
}

pub(crate) fn due(conn: &Connection, p: &ScheduleDueParams) -> Result<Vec<DueSchedule>> {
    let schedules: Vec<(Schedule, u32)> = {
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {columns}, {dead_runs} FROM schedules s WHERE s.paused = 0 \
                 AND (s.next_fire_at <= ?1 OR s.buffered_at IS NOT NULL) ORDER BY s.next_fire_at LIMIT ?2",
                columns = COLUMNS.as_str(),
                dead_runs = columns::dead_runs("tasks"),
            ))
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params![ts(p.now), p.limit], |r| {
                Ok((from_row(r)?, r.get(columns::ScheduleColumn::APPENDED)?))
            })
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    schedules
        .into_iter()
        .map(|(schedule, dead_runs)| {
            let active_tasks = plans::active_tasks(conn, &schedule.name)?;
            Ok(DueSchedule {
                schedule,
                active_tasks,
                dead_runs,
            })
        })
        .collect()
}

pub(crate) fn apply(tx: &Transaction<'_>, p: &ScheduleApplyParams) -> Result<Vec<RunMade>> {
    let current = tx
        .query_row(
            "SELECT next_fire_at, look_at, awaits_run, paused FROM schedules WHERE name = ?1",
            [&p.name],
            |r| {
                Ok(rules::ApplyCurrent {
                    next_fire_at: opt_ts(r.get(0)?),
                    look_at: opt_ts(r.get(1)?),
                    awaits_run: r.get(2)?,
                    paused: r.get(3)?,
                })
            },
        )
        .optional()
        .map_err(db_err)?;
    let writes = [rules::apply_write(p, current)?];
    let written = plans::write_plans(tx, &writes, p.now)?;
    rules::check_recorded(&writes, &written.recorded)?;
    Ok(written.runs.into_iter().flatten().collect())
}

pub(crate) fn backfill(tx: &Transaction<'_>, p: &ScheduleBackfillParams) -> Result<BackfillReport> {
    let s = get(tx, &p.name)?;
    rules::check_backfill(&s, &p.nominals, p.now)?;
    let (Some(first), Some(last)) = (p.nominals.first(), p.nominals.last()) else {
        return Ok(BackfillReport::default());
    };
    // Occurrences that have their run: enqueued, or buffered to run.
    let present: std::collections::HashSet<i64> = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT nominal_at FROM occurrences WHERE schedule = ?1 \
                 AND nominal_at BETWEEN ?2 AND ?3 AND outcome IN {}",
                rules::HAS_A_RUN
            ))
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params![p.name, ts(*first), ts(*last)], |r| r.get(0))
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    let mut report = BackfillReport::default();
    for &nominal_at in &p.nominals {
        if present.contains(&ts(nominal_at)) {
            report.already += 1;
            continue;
        }
        let run = rules::backfill_run(&s, nominal_at, p.now)?;
        let made = plans::insert_runs(tx, vec![run], p.now)?;
        let task_id = made[0].first;
        tx.prepare_cached(
            "INSERT INTO occurrences (schedule, nominal_at, outcome, task_id, detail, recorded_at) \
             VALUES (?1, ?2, 'enqueued', ?3, ?4, ?5) \
             ON CONFLICT (schedule, nominal_at) DO UPDATE SET outcome = excluded.outcome, \
               task_id = excluded.task_id, detail = excluded.detail, recorded_at = excluded.recorded_at",
        )
        .map_err(db_err)?
        .execute(params![p.name, ts(nominal_at), task_id, rules::BACKFILLED, ts(p.now)])
        .map_err(db_err)?;
        report.enqueued.push(BackfilledRun {
            nominal_at,
            task_id,
        });
    }
    Ok(report)
}

pub(crate) fn occurrences(conn: &Connection, p: &OccurrenceListParams) -> Result<Vec<Occurrence>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT o.schedule, o.nominal_at, o.outcome, o.task_id, t.state, o.detail, o.recorded_at \
             FROM occurrences o LEFT JOIN tasks t ON t.id = o.task_id \
             WHERE o.schedule = ?1 ORDER BY o.nominal_at DESC LIMIT ?2",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params![p.schedule, p.limit], |r| {
            let outcome: String = r.get(2)?;
            Ok(Occurrence {
                schedule: r.get(0)?,
                nominal_at: from_ts(r.get(1)?),
                outcome: OccurrenceOutcome::parse(&outcome)
                    .ok_or_else(|| invalid_column(&outcome))?,
                task_id: r.get(3)?,
                task_state: r
                    .get::<_, Option<String>>(4)?
                    .map(|s| state(&s))
                    .transpose()?,
                detail: r.get(5)?,
                recorded_at: from_ts(r.get(6)?),
            })
        })
        .map_err(db_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(db_err)
}

pub(crate) fn next_fire_at(conn: &Connection) -> Result<Option<Timestamp>> {
    let us: Option<i64> = conn
        .query_row(
            "SELECT min(next_fire_at) FROM schedules WHERE paused = 0",
            [],
            |r| r.get(0),
        )
        .map_err(db_err)?;
    Ok(us.map(from_ts))
}
