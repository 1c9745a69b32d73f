//! Many schedules written in one transaction, a statement per part.

use std::collections::HashMap;

use deadpool_postgres::Object;
use jiff::Timestamp;
use sked_store::*;

use super::from_row;
use crate::codec::{col, db_err, ms};
use crate::tasks::announce_schedules;

/// Rows per statement of a bulk write.
const UPSERT_ROWS: usize = 5_000;

/// Writes many schedules in one transaction (see [`Store::schedule_write_many`]), in parts of
/// [`UPSERT_ROWS`] taken in name order, so that concurrent writes lock rows in one order. A
/// group's writes run one at a time (an advisory lock keyed by the group).
pub(crate) async fn write_many(
    c: &mut Object,
    channel: &str,
    p: &ScheduleWriteParams,
) -> Result<ScheduleSyncReport> {
    rules::check_write(p)?;
    let tx = c.transaction().await.map_err(db_err)?;
    let report = write_in(&tx, p).await?;
    if p.dry_run {
        tx.rollback().await.map_err(db_err)?;
        return Ok(report);
    }
    if changed(&report) {
        announce_schedules(&*tx, channel).await?;
    }
    tx.commit().await.map_err(db_err)?;
    Ok(report)
}

/// Creates or replaces one schedule made at run time: [`write_many`] with one, and the
/// schedule as it is then.
pub(crate) async fn upsert(
    c: &mut Object,
    channel: &str,
    p: &ScheduleUpsertParams,
) -> Result<Schedule> {
    let one = ScheduleWriteParams::one(p);
    rules::check_write(&one)?;
    let tx = c.transaction().await.map_err(db_err)?;
    if changed(&write_in(&tx, &one).await?) {
        announce_schedules(&*tx, channel).await?;
    }
    let s = super::get(&*tx, &p.def.name).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(s)
}

fn changed(r: &ScheduleSyncReport) -> bool {
    !(r.created.is_empty() && r.updated.is_empty() && r.removed.is_empty())
}

/// The writes of [`write_many`], in the caller's transaction.
async fn write_in(
    tx: &deadpool_postgres::Transaction<'_>,
    p: &ScheduleWriteParams,
) -> Result<ScheduleSyncReport> {
    let group = p.group.as_deref();
    let mut sorted: Vec<&DeclaredSchedule> = p.schedules.iter().collect();
    sorted.sort_unstable_by(|a, b| a.def.name.cmp(&b.def.name));
    if let Some(g) = group {
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('sked_schedule_sync:' || $1))",
            &[&g],
        )
        .await
        .map_err(db_err)?;
    }
    let mut report = ScheduleSyncReport::default();
    for part in sorted.chunks(UPSERT_ROWS) {
        let names: Vec<&str> = part.iter().map(|d| d.def.name.as_str()).collect();
        let mut existing = stored(tx, &names, true).await?;
        let mut changed: Vec<&DeclaredSchedule> = Vec::with_capacity(part.len());
        for d in part {
            let action = rules::sync_action(existing.get(&d.def.name), &d.def, group);
            if rules::note_sync(&mut report, action, &d.def.name) {
                changed.push(d);
            }
        }
        // What is written applies to every run not started yet.
        let rewritten: Vec<&str> = changed
            .iter()
            .map(|d| d.def.name.as_str())
            .filter(|n| existing.contains_key(*n))
            .collect();
        if !rewritten.is_empty() {
            super::plans::withdraw_ahead_many(&**tx, &rewritten, p.now).await?;
            existing = stored(tx, &rewritten, false).await?;
        }
        if changed.is_empty() {
            continue;
        }
        let mut named: Vec<String> = (changed.iter())
            .flat_map(|d| d.def.skip_calendars.iter().cloned())
            .collect();
        named.sort_unstable();
        named.dedup();
        let calendars = super::calendars::existing(&**tx, &named).await?;
        let mut cols = UpsertColumns::default();
        for d in changed {
            rules::check_calendars_exist(&d.def, &calendars)?;
            let r = rules::rewritten(existing.get(&d.def.name), d, group, p.now);
            cols.push(&d.def, r)?;
        }
        tx.execute(UPSERT_MANY, &cols.params(&p.now, &group))
            .await
            .map_err(db_err)?;
    }
    if p.prune {
        let names: Vec<&str> = sorted.iter().map(|d| d.def.name.as_str()).collect();
        let leaving = tx
            .query(
                "SELECT name FROM sked_schedules WHERE declared_by = $1 AND NOT (name = ANY($2)) \
                 ORDER BY name FOR UPDATE",
                &[&group, &names],
            )
            .await
            .map_err(db_err)?;
        for row in &leaving {
            report.removed.push(col(row, 0)?);
        }
        if !report.removed.is_empty() {
            let gone: Vec<&str> = report.removed.iter().map(String::as_str).collect();
            super::plans::withdraw_ahead_many(&**tx, &gone, p.now).await?;
            tx.execute(
                "DELETE FROM sked_occurrences WHERE schedule = ANY($1)",
                &[&gone],
            )
            .await
            .map_err(db_err)?;
            tx.execute("DELETE FROM sked_schedules WHERE name = ANY($1)", &[&gone])
                .await
                .map_err(db_err)?;
        }
    }
    Ok(report)
}

/// The stored schedules of these names, without figures of their tasks; `lock`ed until the
/// transaction ends, in name order.
async fn stored(
    tx: &deadpool_postgres::Transaction<'_>,
    names: &[&str],
    lock: bool,
) -> Result<HashMap<String, Schedule>> {
    let rows = tx
        .query(
            &format!(
                "SELECT {columns} FROM sked_schedules s WHERE s.name = ANY($1) ORDER BY s.name{lock}",
                columns = STORED.as_str(),
                lock = if lock { " FOR UPDATE" } else { "" },
            ),
            &[&names],
        )
        .await
        .map_err(db_err)?;
    let mut existing = HashMap::with_capacity(rows.len());
    for r in &rows {
        let s = from_row(r)?;
        existing.insert(s.name.clone(), s);
    }
    Ok(existing)
}

/// A schedule's own columns (see [`sked_store::columns::stored_columns`]).
static STORED: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(sked_store::columns::stored_columns);

/// The columns of a bulk write, one array each.
#[derive(Default)]
struct UpsertColumns {
    name: Vec<String>,
    spec: Vec<String>,
    tz: Vec<String>,
    task: Vec<serde_json::Value>,
    overlap: Vec<String>,
    catchup: Vec<&'static str>,
    catchup_window_ms: Vec<i64>,
    paused: Vec<bool>,
    anchor_at: Vec<Timestamp>,
    next_fire_at: Vec<Option<Timestamp>>,
    interval_from: Vec<&'static str>,
    jitter_ms: Vec<Option<i64>>,
    dst: Vec<&'static str>,
    pause_after_failures: Vec<Option<i32>>,
    keep_retrying: Vec<bool>,
    look_at: Vec<Option<Timestamp>>,
    start_at: Vec<Option<Timestamp>>,
    end_at: Vec<Option<Timestamp>>,
    max_runs: Vec<Option<i64>>,
    skip_calendars: Vec<Option<String>>,
}

impl UpsertColumns {
    fn push(&mut self, def: &sked_core::ScheduleDef, r: rules::Rewritten) -> Result<()> {
        let policy = rules::PolicyColumns::of(def);
        self.name.push(def.name.clone());
        self.spec.push(def.spec.clone());
        self.tz.push(def.tz.clone());
        self.task.push(rules::template_column(def)?);
        self.overlap.push(def.overlap.to_string());
        self.catchup.push(def.catchup.as_str());
        self.catchup_window_ms.push(ms(def.catchup_window));
        self.paused.push(r.paused);
        self.anchor_at.push(r.anchor_at);
        self.next_fire_at.push(r.next_fire_at);
        self.interval_from.push(policy.interval_from);
        self.jitter_ms.push(policy.jitter_ms);
        self.dst.push(policy.dst);
        self.pause_after_failures.push(policy.pause_after_failures);
        self.keep_retrying.push(policy.keep_retrying);
        self.look_at.push(r.look_at);
        self.start_at.push(policy.start_at);
        self.end_at.push(policy.end_at);
        self.max_runs.push(policy.max_runs);
        (self.skip_calendars).push(rules::skip_calendars_column(&def.skip_calendars));
        Ok(())
    }

    fn params<'a>(
        &'a self,
        now: &'a Timestamp,
        group: &'a Option<&'a str>,
    ) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 22] {
        [
            &self.name,
            &self.spec,
            &self.tz,
            &self.task,
            &self.overlap,
            &self.catchup,
            &self.catchup_window_ms,
            &self.paused,
            &self.anchor_at,
            &self.next_fire_at,
            &self.interval_from,
            &self.jitter_ms,
            &self.dst,
            &self.pause_after_failures,
            &self.look_at,
            now,
            group,
            &self.keep_retrying,
            &self.start_at,
            &self.end_at,
            &self.max_runs,
            &self.skip_calendars,
        ]
    }
}

/// The bulk write of [`UpsertColumns`] (`$16`: now, `$17`: the group, if any, which a
/// schedule written without one keeps; `$18` on come after them as they were added later).
const UPSERT_MANY: &str = "INSERT INTO sked_schedules AS s (name, spec, tz, task, overlap, catchup, \
       catchup_window_ms, paused, anchor_at, next_fire_at, created_at, updated_at, \
       interval_from, jitter_ms, dst, pause_after_failures, look_at, declared_by, keep_retrying, \
       start_at, end_at, max_runs, skip_calendars) \
     SELECT u.name, u.spec, u.tz, u.task, u.overlap, u.catchup, u.cw, u.paused, u.anchor, u.next, \
       $16, $16, u.interval_from, u.jitter_ms, u.dst, u.paf, u.look, $17::text, u.keep, \
       u.start_at, u.end_at, u.max_runs, u.skip_calendars \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], \
       $7::bigint[], $8::bool[], $9::timestamptz[], $10::timestamptz[], $11::text[], $12::bigint[], \
       $13::text[], $14::int[], $15::timestamptz[], $18::bool[], $19::timestamptz[], \
       $20::timestamptz[], $21::bigint[], $22::text[]) \
       AS u(name, spec, tz, task, overlap, catchup, cw, paused, anchor, next, interval_from, \
         jitter_ms, dst, paf, look, keep, start_at, end_at, max_runs, skip_calendars) \
     ON CONFLICT (name) DO UPDATE SET \
       next_fire_at = excluded.next_fire_at, anchor_at = excluded.anchor_at, \
       look_at = excluded.look_at, awaits_run = false, \
       spec = excluded.spec, tz = excluded.tz, task = excluded.task, overlap = excluded.overlap, \
       catchup = excluded.catchup, catchup_window_ms = excluded.catchup_window_ms, \
       interval_from = excluded.interval_from, jitter_ms = excluded.jitter_ms, \
       dst = excluded.dst, pause_after_failures = excluded.pause_after_failures, \
       keep_retrying = excluded.keep_retrying, start_at = excluded.start_at, \
       end_at = excluded.end_at, max_runs = excluded.max_runs, \
       skip_calendars = excluded.skip_calendars, \
       paused_reason = CASE WHEN excluded.paused THEN s.paused_reason END, \
       resumed_at = CASE WHEN s.paused AND NOT excluded.paused \
         THEN excluded.updated_at ELSE s.resumed_at END, \
       paused = excluded.paused, updated_at = excluded.updated_at, \
       declared_by = coalesce(excluded.declared_by, s.declared_by)";
