//! Many schedules written in one transaction, a statement per part.

use deadpool_postgres::Object;
use jiff::Timestamp;
use sked_store::*;

use super::{COLUMNS, from_row};
use crate::codec::{col, db_err, ms};
use crate::tasks::announce_schedules;

/// Rows per statement of a bulk write.
const UPSERT_ROWS: usize = 5_000;

/// Many schedules written as [`super::upsert`] writes one, in one transaction, a statement per
/// [`UPSERT_ROWS`].
pub(crate) async fn upsert_many(
    c: &mut Object,
    channel: &str,
    p: &ScheduleUpsertManyParams,
) -> Result<ScheduleUpsertReport> {
    rules::check_many(&p.schedules)?;
    let tx = c.transaction().await.map_err(db_err)?;
    let mut report = ScheduleUpsertReport::default();
    for part in p.schedules.chunks(UPSERT_ROWS) {
        let mut names: Vec<&str> = part.iter().map(|d| d.def.name.as_str()).collect();
        names.sort_unstable();
        // Those that exist, locked in name order, their runs made ahead withdrawn.
        let locked = tx
            .query(
                "SELECT name FROM sked_schedules WHERE name = ANY($1) ORDER BY name FOR UPDATE",
                &[&names],
            )
            .await
            .map_err(db_err)?;
        let mut existing = std::collections::HashMap::new();
        if !locked.is_empty() {
            let names: Vec<&str> = locked.iter().map(|r| r.get(0)).collect();
            crate::plans::withdraw_ahead_many(&*tx, &names, p.now).await?;
            let rows = tx
                .query(
                    &format!(
                        "SELECT {columns} FROM sked_schedules s WHERE s.name = ANY($1)",
                        columns = COLUMNS.as_str()
                    ),
                    &[&names],
                )
                .await
                .map_err(db_err)?;
            for r in &rows {
                let s = from_row(r)?;
                existing.insert(s.name.clone(), s);
            }
        }
        let mut cols = UpsertColumns::default();
        for d in part {
            cols.push(&d.def, existing.get(&d.def.name), d.next_fire_at, p.now)?;
        }
        let rows = tx
            .query(UPSERT_MANY, &cols.params(&p.now))
            .await
            .map_err(db_err)?;
        for r in &rows {
            match col::<bool>(r, 0)? {
                true => report.created += 1,
                false => report.updated += 1,
            }
        }
    }
    announce_schedules(&*tx, channel).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(report)
}

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
    look_at: Vec<Option<Timestamp>>,
}

impl UpsertColumns {
    fn push(
        &mut self,
        def: &sked_core::ScheduleDef,
        existing: Option<&Schedule>,
        next_fire_at: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<()> {
        let (next_fire_at, anchor_at) =
            rules::rewritten_times(existing, def, rules::Rewrite::RunTime, next_fire_at, now);
        let policy = rules::PolicyColumns::of(def);
        self.name.push(def.name.clone());
        self.spec.push(def.spec.clone());
        self.tz.push(def.tz.clone());
        self.task
            .push(serde_json::to_value(&def.task).map_err(|e| StoreError::Invalid(e.to_string()))?);
        self.overlap.push(def.overlap.to_string());
        self.catchup.push(def.catchup.as_str());
        self.catchup_window_ms.push(ms(def.catchup_window));
        self.paused.push(def.paused);
        self.anchor_at.push(anchor_at);
        self.next_fire_at.push(next_fire_at);
        self.interval_from.push(policy.interval_from);
        self.jitter_ms.push(policy.jitter_ms);
        self.dst.push(policy.dst);
        self.pause_after_failures.push(policy.pause_after_failures);
        self.look_at
            .push(rules::first_look(next_fire_at, def.paused, now));
        Ok(())
    }

    fn params<'a>(
        &'a self,
        now: &'a Timestamp,
    ) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 16] {
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
        ]
    }
}

/// The bulk write of [`UpsertColumns`] (`$16`: now); each row says whether it was created.
const UPSERT_MANY: &str = "INSERT INTO sked_schedules AS s (name, spec, tz, task, overlap, catchup, \
       catchup_window_ms, paused, anchor_at, next_fire_at, created_at, updated_at, \
       interval_from, jitter_ms, dst, pause_after_failures, look_at) \
     SELECT u.name, u.spec, u.tz, u.task, u.overlap, u.catchup, u.cw, u.paused, u.anchor, u.next, \
       $16, $16, u.interval_from, u.jitter_ms, u.dst, u.paf, u.look \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], \
       $7::bigint[], $8::bool[], $9::timestamptz[], $10::timestamptz[], $11::text[], $12::bigint[], \
       $13::text[], $14::int[], $15::timestamptz[]) \
       AS u(name, spec, tz, task, overlap, catchup, cw, paused, anchor, next, interval_from, \
         jitter_ms, dst, paf, look) \
     ON CONFLICT (name) DO UPDATE SET \
       next_fire_at = excluded.next_fire_at, anchor_at = excluded.anchor_at, \
       look_at = excluded.look_at, awaits_run = false, \
       spec = excluded.spec, tz = excluded.tz, task = excluded.task, overlap = excluded.overlap, \
       catchup = excluded.catchup, catchup_window_ms = excluded.catchup_window_ms, \
       interval_from = excluded.interval_from, jitter_ms = excluded.jitter_ms, \
       dst = excluded.dst, pause_after_failures = excluded.pause_after_failures, \
       paused_reason = CASE WHEN excluded.paused THEN s.paused_reason END, \
       resumed_at = CASE WHEN s.paused AND NOT excluded.paused \
         THEN excluded.updated_at ELSE s.resumed_at END, \
       paused = excluded.paused, updated_at = excluded.updated_at \
     RETURNING (xmax = 0)";
