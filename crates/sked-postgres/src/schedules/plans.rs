//! Plans and the ledger: materialising passes (the schedules due to be planned, claimed with
//! `SKIP LOCKED` so that every node plans a share, planned by [`rules::plan_due`], their plans
//! written in a few statements per batch), plans applied by hand, backfills, the ledger's
//! reads, and runs made ahead withdrawn when their schedule changes.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::{Object, Transaction};
use jiff::Timestamp;
use sked_core::{ActiveTask, OccurrenceOutcome, TaskId};
use sked_store::rules::{PlanWrite, Written};
use sked_store::states::{ACTIVE, MADE_AHEAD};
use sked_store::*;
use tokio_postgres::GenericClient;

use super::{COLUMNS, bad, existing_locked, from_row};
use crate::codec::{col, db_err, state};
use crate::tasks;

/// One pass (see [`Store::schedule_materialise`]).
pub(crate) async fn materialise(
    c: &mut Object,
    channel: &str,
    p: &ScheduleMaterialiseParams,
) -> Result<MaterialiseReport> {
    if !p.runs_ended.is_empty() {
        runs_ended(c, &p.runs_ended, p.now).await?;
    }
    let tx = c.transaction().await.map_err(db_err)?;
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT {columns}, ({dead_runs})::integer FROM sked_schedules s \
             WHERE s.look_at <= $1 ORDER BY s.look_at LIMIT $2 FOR UPDATE OF s SKIP LOCKED",
            columns = columns::planning_columns("sked_tasks"),
            dead_runs = columns::dead_runs("sked_tasks"),
        ))
        .await
        .map_err(db_err)?;
    let rows = tx
        .query(&stmt, &[&p.now, &i64::from(p.limit)])
        .await
        .map_err(db_err)?;
    let mut due = Vec::with_capacity(rows.len());
    for r in &rows {
        let dead_runs = col::<i32>(r, columns::ScheduleColumn::APPENDED)?.max(0) as u32;
        due.push((from_row(r)?, dead_runs));
    }
    let names: Vec<&str> = due.iter().map(|(s, _)| s.name.as_str()).collect();
    let active = active_tasks(&*tx, &names).await?;
    let none = Vec::new();
    let calendars = match rules::Calendars::names(due.iter().map(|(s, _)| s)) {
        names if names.is_empty() => rules::Calendars::default(),
        names => super::calendars::read(&*tx, &names).await?,
    };
    let batch = rules::plan_batch(
        due.iter().map(|(s, dead_runs)| {
            let runs = active.get(s.name.as_str()).unwrap_or(&none);
            (s, runs.as_slice(), *dead_runs)
        }),
        &calendars,
        p,
    );
    for (name, reason, _) in &batch.pauses {
        withdraw_ahead(&*tx, name, p.now).await?;
        tx.execute(
            "UPDATE sked_schedules SET paused = true, paused_reason = $2, look_at = NULL, \
               awaits_run = false, updated_at = $3 WHERE name = $1",
            &[name, reason, &p.now],
        )
        .await
        .map_err(db_err)?;
    }
    for (name, _) in &batch.invalid {
        tx.execute(
            "UPDATE sked_schedules SET look_at = NULL WHERE name = $1",
            &[name],
        )
        .await
        .map_err(db_err)?;
    }
    let written = write_plans(&tx, channel, &batch.writes, p.now).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(batch.report(written, rows.len() as u32 >= p.limit))
}

/// Schedules waiting for a run to end, a run of which ended: planned at once. Their rows are
/// locked in name order, so that two nodes saying so at once cannot deadlock.
async fn runs_ended(c: &Object, names: &[String], now: Timestamp) -> Result<()> {
    let stmt = c
        .prepare_cached(
            "UPDATE sked_schedules s SET look_at = $2 FROM ( \
               SELECT name FROM sked_schedules WHERE name = ANY($1) AND awaits_run \
               AND NOT paused ORDER BY name FOR UPDATE) l \
             WHERE s.name = l.name AND (s.look_at IS NULL OR s.look_at > $2)",
        )
        .await
        .map_err(db_err)?;
    c.execute(&stmt, &[&names, &now]).await.map_err(db_err)?;
    Ok(())
}

/// The unfinished tasks of each schedule named, oldest first, with their states and runs.
async fn active_tasks<C: GenericClient + Sync>(
    c: &C,
    names: &[&str],
) -> Result<HashMap<String, Vec<ActiveTask>>> {
    let mut out: HashMap<String, Vec<ActiveTask>> = HashMap::new();
    if names.is_empty() {
        return Ok(out);
    }
    let rows = c
        .query(
            &format!(
                "SELECT schedule, id, state, nominal_at FROM sked_tasks WHERE schedule = ANY($1) \
                 AND state IN {ACTIVE} ORDER BY id"
            ),
            &[&names],
        )
        .await
        .map_err(db_err)?;
    for r in &rows {
        out.entry(col(r, 0)?).or_default().push(ActiveTask {
            id: col(r, 1)?,
            state: state(col(r, 2)?)?,
            run: col(r, 3)?,
        });
    }
    Ok(out)
}

/// Inserts runs of schedules, in order: tasks together, each workflow with its edges.
pub(crate) async fn insert_runs(
    tx: &Transaction<'_>,
    channel: &str,
    runs: Vec<RunInsert>,
    now: Timestamp,
) -> Result<Vec<RunMade>> {
    let mut made: Vec<Option<RunMade>> = vec![None; runs.len()];
    let split = SplitRuns::of(runs);
    for (i, w) in split.workflows {
        let created = tasks::workflows::insert(tx, channel, &w, Default::default()).await?;
        made[i] = Some(RunMade::of(RunMade::of_workflow_queues(&w), created));
    }
    let (at, tasks): (Vec<usize>, Vec<TaskInsert>) = split.tasks.into_iter().unzip();
    if !tasks.is_empty() {
        let inserted = tasks::insert_tasks(&**tx, None, channel, &tasks, now).await?;
        for ((i, t), ins) in at.into_iter().zip(&tasks).zip(inserted) {
            made[i] = Some(RunMade::of_task(t, ins.id));
        }
    }
    Ok(made.into_iter().flatten().collect())
}

/// Writes a batch of plans whose schedules the caller has locked: the cancels, each ledger
/// line (an `enqueued` one turns the occurrence's `buffered` line into its run, else a new line
/// is inserted unless one is there), a task for each enqueued line written, and each
/// schedule's next state.
pub(crate) async fn write_plans(
    tx: &Transaction<'_>,
    channel: &str,
    writes: &[PlanWrite],
    now: Timestamp,
) -> Result<Written> {
    let give_up: Vec<TaskId> = writes
        .iter()
        .flat_map(|w| w.give_up.iter().copied())
        .collect();
    if !give_up.is_empty() {
        // Transition::StopRetrying, as a compare-and-set on the state.
        tx.execute(
            "UPDATE sked_tasks SET state = 'dead', finished_at = $2 \
             WHERE id = ANY($1) AND state = 'retrying'",
            &[&give_up, &now],
        )
        .await
        .map_err(db_err)?;
        let dead = give_up.iter().map(|id| (*id, sked_core::TaskState::Dead));
        // What it releases is announced; the leader's own claims hear it.
        tasks::dependents::release(tx, channel, dead, now).await?;
    }
    for w in writes {
        for id in &w.plan.cancel {
            // What the cancel releases is announced; the leader's own claims hear it.
            rules::replaced(
                tasks::cancel_in(tx, channel, *id, now)
                    .await
                    .map(|(t, _)| t),
            )?;
        }
    }
    let lines = rules::ledger_lines(writes);
    let key = |schedule: &str, t: Timestamp| (schedule.to_string(), t);
    // Buffered occurrences released.
    let (mut names, mut nominals, mut details) = (vec![], vec![], vec![]);
    for l in lines.iter().filter(|l| l.may_release()) {
        names.push(l.write.name.as_str());
        nominals.push(l.occ.nominal_at);
        details.push(l.occ.detail.as_deref());
    }
    let mut recorded: HashSet<(String, Timestamp)> = HashSet::new();
    if !names.is_empty() {
        let rows = tx
            .query(
                "UPDATE sked_occurrences o SET outcome = 'enqueued', detail = u.detail, recorded_at = $4 \
                 FROM unnest($1::text[], $2::timestamptz[], $3::text[]) AS u(schedule, nominal_at, detail) \
                 WHERE o.schedule = u.schedule AND o.nominal_at = u.nominal_at AND o.outcome = 'buffered' \
                 RETURNING o.schedule, o.nominal_at",
                &[&names, &nominals, &details, &now],
            )
            .await
            .map_err(db_err)?;
        for r in &rows {
            recorded.insert((col(r, 0)?, col(r, 1)?));
        }
    }
    // New lines; the primary key keeps a second one for the same occurrence out.
    let (mut names, mut nominals, mut outcomes, mut details) = (vec![], vec![], vec![], vec![]);
    for l in &lines {
        if !recorded.contains(&key(&l.write.name, l.occ.nominal_at)) {
            names.push(l.write.name.as_str());
            nominals.push(l.occ.nominal_at);
            outcomes.push(l.occ.outcome.as_str());
            details.push(l.occ.detail.as_deref());
        }
    }
    if !names.is_empty() {
        let stmt = tx
            .prepare_cached(
                "INSERT INTO sked_occurrences (schedule, nominal_at, outcome, detail, recorded_at) \
                 SELECT u.schedule, u.nominal_at, u.outcome, u.detail, $5 \
                 FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[]) \
                   AS u(schedule, nominal_at, outcome, detail) \
                 ON CONFLICT (schedule, nominal_at) DO NOTHING RETURNING schedule, nominal_at",
            )
            .await
            .map_err(db_err)?;
        let rows = tx
            .query(&stmt, &[&names, &nominals, &outcomes, &details, &now])
            .await
            .map_err(db_err)?;
        for r in &rows {
            recorded.insert((col(r, 0)?, col(r, 1)?));
        }
    }
    let recorded: Vec<bool> = lines
        .iter()
        .map(|l| recorded.contains(&key(&l.write.name, l.occ.nominal_at)))
        .collect();
    // A run for each enqueued line written.
    let mut inserts = Vec::new();
    let mut of_line = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if let (true, Some(insert)) = (recorded[i], l.run(now)?) {
            inserts.push(insert);
            of_line.push(i);
        }
    }
    let mut runs: Vec<Option<RunMade>> = vec![None; lines.len()];
    if !inserts.is_empty() {
        let made = insert_runs(tx, channel, inserts, now).await?;
        let (mut names, mut nominals, mut ids) = (vec![], vec![], vec![]);
        for (i, made) in of_line.into_iter().zip(made) {
            names.push(lines[i].write.name.as_str());
            nominals.push(lines[i].occ.nominal_at);
            ids.push(made.first);
            runs[i] = Some(made);
        }
        let stmt = tx
            .prepare_cached(
                "UPDATE sked_occurrences o SET task_id = u.id \
                 FROM unnest($1::text[], $2::timestamptz[], $3::bigint[]) AS u(schedule, nominal_at, id) \
                 WHERE o.schedule = u.schedule AND o.nominal_at = u.nominal_at",
            )
            .await
            .map_err(db_err)?;
        tx.execute(&stmt, &[&names, &nominals, &ids])
            .await
            .map_err(db_err)?;
    }
    // Each schedule's next state.
    if !writes.is_empty() {
        let names: Vec<&str> = writes.iter().map(|w| w.name.as_str()).collect();
        let next: Vec<Option<Timestamp>> = writes.iter().map(|w| w.plan.next_fire_at).collect();
        let buffered: Vec<Option<Timestamp>> = writes.iter().map(|w| w.plan.buffered).collect();
        let look: Vec<Option<Timestamp>> = writes.iter().map(|w| w.look_at).collect();
        let awaits: Vec<bool> = writes.iter().map(|w| w.awaits_run).collect();
        let made: Vec<i64> = (writes.iter())
            .map(|w| w.plan.runs.min(sked_core::MAX_RUNS) as i64)
            .collect();
        let stmt = tx
            .prepare_cached(
                "UPDATE sked_schedules s SET next_fire_at = u.next, buffered_at = u.buffered, \
                   look_at = CASE WHEN s.paused THEN NULL ELSE u.look END, awaits_run = u.awaits, \
                   updated_at = $6, runs = s.runs + u.made \
                 FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::timestamptz[], \
                   $5::bool[], $7::bigint[]) AS u(name, next, buffered, look, awaits, made) \
                 WHERE s.name = u.name",
            )
            .await
            .map_err(db_err)?;
        tx.execute(
            &stmt,
            &[&names, &next, &buffered, &look, &awaits, &now, &made],
        )
        .await
        .map_err(db_err)?;
    }
    let outcomes = lines
        .iter()
        .zip(&recorded)
        .filter(|(_, r)| **r)
        .map(|(l, _)| l.occ.outcome)
        .collect();
    Ok(Written {
        recorded,
        runs,
        outcomes,
    })
}

/// Withdraws the runs of schedule `name` made ahead whose time has not come (not started,
/// nominal time after `now`): their tasks (a workflow's all together) and ledger lines go, and the schedule is planned
/// again from the earliest of them. Its row must be locked.
pub(crate) async fn withdraw_ahead<C: GenericClient + Sync>(
    c: &C,
    name: &str,
    now: Timestamp,
) -> Result<()> {
    withdraw_ahead_many(c, &[name], now).await
}

/// [`withdraw_ahead`] for several schedules at once.
pub(crate) async fn withdraw_ahead_many<C: GenericClient + Sync>(
    c: &C,
    names: &[&str],
    now: Timestamp,
) -> Result<()> {
    let rows = c
        .query(
            &format!(
                "DELETE FROM sked_tasks WHERE schedule = ANY($1) AND state IN {MADE_AHEAD} \
                 AND attempt = 0 AND nominal_at > $2 AND state IN {ACTIVE} \
                 RETURNING schedule, nominal_at, id, wait, workflow"
            ),
            &[&names, &now],
        )
        .await
        .map_err(db_err)?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut schedules: Vec<String> = Vec::with_capacity(rows.len());
    let mut nominals: Vec<Timestamp> = Vec::with_capacity(rows.len());
    let mut ids: Vec<TaskId> = Vec::with_capacity(rows.len());
    let mut waits: Vec<Option<i64>> = Vec::with_capacity(rows.len());
    let mut workflows: Vec<Option<i64>> = Vec::with_capacity(rows.len());
    for r in &rows {
        schedules.push(col(r, 0)?);
        nominals.push(col(r, 1)?);
        ids.push(col(r, 2)?);
        waits.push(col(r, 3)?);
        workflows.push(col(r, 4)?);
    }
    // A workflow's waits, edges and membership go with its tasks.
    c.execute(tasks::dependents::FORGET.as_str(), &[&ids, &waits])
        .await
        .map_err(db_err)?;
    c.execute(tasks::workflows::FORGET.as_str(), &[&ids, &workflows])
        .await
        .map_err(db_err)?;
    c.execute(
        "DELETE FROM sked_occurrences o USING unnest($1::text[], $2::timestamptz[]) AS u(schedule, nominal_at) \
         WHERE o.schedule = u.schedule AND o.nominal_at = u.nominal_at",
        &[&schedules, &nominals],
    )
    .await
    .map_err(db_err)?;
    c.execute(
        "UPDATE sked_schedules s SET next_fire_at = u.first \
         FROM (SELECT schedule, min(nominal_at) AS first \
               FROM unnest($1::text[], $2::timestamptz[]) AS w(schedule, nominal_at) GROUP BY schedule) u \
         WHERE s.name = u.schedule AND (s.next_fire_at IS NULL OR s.next_fire_at > u.first)",
        &[&schedules, &nominals],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// When the earliest schedule needs planning next.
pub(crate) async fn next_look_at(c: &mut Object) -> Result<Option<Timestamp>> {
    let stmt = c
        .prepare_cached("SELECT min(look_at) FROM sked_schedules")
        .await
        .map_err(db_err)?;
    let row = c.query_one(&stmt, &[]).await.map_err(db_err)?;
    col(&row, 0)
}

pub(crate) async fn due(c: &mut Object, p: &ScheduleDueParams) -> Result<Vec<DueSchedule>> {
    let limit = i64::from(p.limit);
    // What falls due at `now`, for the store's tests; the scheduler plans with `materialise`.
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {columns}, ARRAY(SELECT t.id FROM sked_tasks t WHERE t.schedule = s.name \
               AND t.state IN {ACTIVE} ORDER BY t.id), ({dead_runs})::integer \
             FROM sked_schedules s WHERE NOT s.paused \
               AND (s.next_fire_at <= $1 OR s.buffered_at IS NOT NULL) \
             ORDER BY s.next_fire_at LIMIT $2",
            columns = COLUMNS.as_str(),
            dead_runs = columns::dead_runs("sked_tasks"),
        ))
        .await
        .map_err(db_err)?;
    let rows = c.query(&stmt, &[&p.now, &limit]).await.map_err(db_err)?;
    rows.iter()
        .map(|r| {
            Ok(DueSchedule {
                schedule: from_row(r)?,
                active_tasks: col(r, columns::ScheduleColumn::APPENDED)?,
                dead_runs: col::<i32>(r, columns::ScheduleColumn::APPENDED + 1)?.max(0) as u32,
            })
        })
        .collect()
}

pub(crate) async fn apply(
    c: &mut Object,
    channel: &str,
    p: &ScheduleApplyParams,
) -> Result<Vec<RunMade>> {
    let tx = c.transaction().await.map_err(db_err)?;
    // The schedule row is locked: of two nodes applying at once, the second waits, then sees
    // the schedule advanced and fails with a conflict.
    let current = tx
        .query_opt(
            "SELECT next_fire_at, look_at, awaits_run, paused FROM sked_schedules WHERE name = $1 FOR UPDATE",
            &[&p.name],
        )
        .await
        .map_err(db_err)?;
    let current = match &current {
        Some(row) => Some(rules::ApplyCurrent {
            next_fire_at: col(row, 0)?,
            look_at: col(row, 1)?,
            awaits_run: col(row, 2)?,
            paused: col(row, 3)?,
        }),
        None => None,
    };
    let writes = [rules::apply_write(p, current)?];
    let written = write_plans(&tx, channel, &writes, p.now).await?;
    rules::check_recorded(&writes, &written.recorded)?;
    tx.commit().await.map_err(db_err)?;
    Ok(written.runs.into_iter().flatten().collect())
}

pub(crate) async fn backfill(
    c: &mut Object,
    channel: &str,
    p: &ScheduleBackfillParams,
) -> Result<BackfillReport> {
    let tx = c.transaction().await.map_err(db_err)?;
    // Locked as a plan's apply locks it: the scheduler does not write this ledger meanwhile.
    let s = match existing_locked(&*tx, &p.name).await? {
        Some(s) => s,
        None => return Err(StoreError::schedule_not_found(&p.name)),
    };
    rules::check_backfill(&s, &p.nominals, p.now)?;
    let present: std::collections::HashSet<Timestamp> = tx
        .query(
            &format!(
                "SELECT nominal_at FROM sked_occurrences WHERE schedule = $1 \
                 AND nominal_at = ANY($2) AND outcome IN {}",
                rules::HAS_A_RUN
            ),
            &[&p.name, &p.nominals],
        )
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| col(r, 0))
        .collect::<Result<_>>()?;
    let mut report = BackfillReport {
        already: present.len() as u64,
        ..BackfillReport::default()
    };
    let missing: Vec<Timestamp> = p
        .nominals
        .iter()
        .copied()
        .filter(|t| !present.contains(t))
        .collect();
    if missing.is_empty() {
        return Ok(report);
    }
    let inserts: Vec<RunInsert> = missing
        .iter()
        .map(|t| rules::backfill_run(&s, *t, p.now))
        .collect::<Result<_>>()?;
    let made = insert_runs(&tx, channel, inserts, p.now).await?;
    let ids: Vec<TaskId> = made.iter().map(|m| m.first).collect();
    tx.execute(
        "INSERT INTO sked_occurrences (schedule, nominal_at, outcome, task_id, detail, recorded_at) \
         SELECT $1, n, 'enqueued', id, $4, $5 FROM unnest($2::timestamptz[], $3::bigint[]) AS u(n, id) \
         ON CONFLICT (schedule, nominal_at) DO UPDATE SET outcome = excluded.outcome, \
           task_id = excluded.task_id, detail = excluded.detail, recorded_at = excluded.recorded_at",
        &[&p.name, &missing, &ids, &rules::BACKFILLED, &p.now],
    )
    .await
    .map_err(db_err)?;
    tx.commit().await.map_err(db_err)?;
    report.enqueued = missing
        .into_iter()
        .zip(ids)
        .map(|(nominal_at, task_id)| BackfilledRun {
            nominal_at,
            task_id,
        })
        .collect();
    Ok(report)
}

pub(crate) async fn occurrences(
    c: &mut Object,
    p: &OccurrenceListParams,
) -> Result<Vec<Occurrence>> {
    let limit = i64::from(p.limit);
    let rows = c
        .query(
            "SELECT o.schedule, o.nominal_at, o.outcome, o.task_id, t.state, o.detail, o.recorded_at \
             FROM sked_occurrences o LEFT JOIN sked_tasks t ON t.id = o.task_id \
             WHERE o.schedule = $1 ORDER BY o.nominal_at DESC LIMIT $2",
            &[&p.schedule, &limit],
        )
        .await
        .map_err(db_err)?;
    rows.iter()
        .map(|r| {
            let outcome: String = col(r, 2)?;
            Ok(Occurrence {
                schedule: col(r, 0)?,
                nominal_at: col(r, 1)?,
                outcome: OccurrenceOutcome::parse(&outcome).ok_or_else(|| bad(&outcome))?,
                task_id: col(r, 3)?,
                task_state: col::<Option<&str>>(r, 4)?.map(state).transpose()?,
                detail: col(r, 5)?,
                recorded_at: col(r, 6)?,
            })
        })
        .collect()
}

pub(crate) async fn next_fire_at(c: &mut Object) -> Result<Option<Timestamp>> {
    let stmt = c
        .prepare_cached("SELECT min(next_fire_at) FROM sked_schedules WHERE NOT paused")
        .await
        .map_err(db_err)?;
    let row = c.query_one(&stmt, &[]).await.map_err(db_err)?;
    col(&row, 0)
}
