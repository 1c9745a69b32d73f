//! Materialising passes: the schedules due to be planned, planned by [`rules::plan_due`], and
//! their plans written in the one write transaction. Also runs made ahead withdrawn when their
//! schedule changes.

use std::collections::HashSet;

use jiff::Timestamp;
use rusqlite::{Connection, Transaction, params};
use sked_core::{ActiveTask, TaskId};
use sked_store::rules::{PlanWrite, Written};
use sked_store::*;

use super::from_row;
use crate::codec::{db_err, opt_ts, state, ts};
use crate::tasks;

/// One pass (see [`Store::schedule_materialise`]).
pub(crate) fn materialise(
    tx: &Transaction<'_>,
    p: &ScheduleMaterialiseParams,
) -> Result<MaterialiseReport> {
    for name in &p.runs_ended {
        tx.prepare_cached(
            "UPDATE schedules SET look_at = ?2 WHERE name = ?1 AND awaits_run AND paused = 0 \
             AND (look_at IS NULL OR look_at > ?2)",
        )
        .map_err(db_err)?
        .execute(params![name, ts(p.now)])
        .map_err(db_err)?;
    }
    let due: Vec<(Schedule, u32)> = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT {columns}, {dead_runs} FROM schedules s \
                 WHERE s.look_at <= ?1 ORDER BY s.look_at LIMIT ?2",
                columns = columns::planning_columns("tasks"),
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
    let active: Vec<Vec<ActiveTask>> = due
        .iter()
        .map(|(s, _)| active_runs(tx, &s.name))
        .collect::<Result<_>>()?;
    let calendars = match rules::Calendars::names(due.iter().map(|(s, _)| s)) {
        names if names.is_empty() => rules::Calendars::default(),
        names => super::calendars::read(tx, &names)?,
    };
    let batch = rules::plan_batch(
        due.iter()
            .zip(&active)
            .map(|((s, dead_runs), runs)| (s, runs.as_slice(), *dead_runs)),
        &calendars,
        p,
    );
    for (name, reason, _) in &batch.pauses {
        withdraw_ahead(tx, name, p.now)?;
        tx.execute(
            "UPDATE schedules SET paused = 1, paused_reason = ?2, look_at = NULL, \
               awaits_run = 0, updated_at = ?3 WHERE name = ?1",
            params![name, reason, ts(p.now)],
        )
        .map_err(db_err)?;
    }
    for (name, _) in &batch.invalid {
        tx.execute(
            "UPDATE schedules SET look_at = NULL WHERE name = ?1",
            [name],
        )
        .map_err(db_err)?;
    }
    let written = write_plans(tx, &batch.writes, p.now)?;
    Ok(batch.report(written, due.len() as u32 >= p.limit))
}

/// A schedule's unfinished tasks, oldest first.
pub(crate) fn active_tasks(conn: &Connection, name: &str) -> Result<Vec<TaskId>> {
    let mut stmt = conn
        .prepare_cached(&crate::partial_indexes::SCHEDULE_ACTIVE)
        .map_err(db_err)?;
    let rows = stmt.query_map([name], |r| r.get(0)).map_err(db_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(db_err)
}

/// A schedule's unfinished tasks, oldest first, with their states and runs.
fn active_runs(conn: &Connection, name: &str) -> Result<Vec<ActiveTask>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT id, state, nominal_at FROM tasks WHERE schedule = ?1 AND {} ORDER BY id",
            sked_store::states::ACTIVE_ANY
        ))
        .map_err(db_err)?;
    let rows = stmt
        .query_map([name], |r| {
            Ok(ActiveTask {
                id: r.get(0)?,
                state: state(&r.get::<_, String>(1)?)?,
                run: opt_ts(r.get(2)?),
            })
        })
        .map_err(db_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(db_err)
}

/// Inserts runs of schedules, in order: tasks together, each workflow with its edges.
pub(crate) fn insert_runs(
    tx: &Transaction<'_>,
    runs: Vec<RunInsert>,
    now: Timestamp,
) -> Result<Vec<RunMade>> {
    let mut made: Vec<Option<RunMade>> = vec![None; runs.len()];
    let split = SplitRuns::of(runs);
    for (i, w) in split.workflows {
        let queues = RunMade::of_workflow_queues(&w);
        made[i] = Some(RunMade::of(
            queues,
            tasks::workflows::create(tx, w, Default::default())?,
        ));
    }
    let (at, tasks): (Vec<usize>, Vec<TaskInsert>) = split.tasks.into_iter().unzip();
    if !tasks.is_empty() {
        let params = TaskInsertParams { tasks, now };
        let inserted = tasks::insert_many(tx, &params)?;
        for ((i, t), ins) in at.into_iter().zip(&params.tasks).zip(inserted) {
            made[i] = Some(RunMade::of_task(t, ins.id));
        }
    }
    Ok(made.into_iter().flatten().collect())
}

/// Writes a batch of plans: the cancels, each ledger line (an `enqueued` one turns the
/// occurrence's `buffered` line into its run, else a new line is inserted unless one is there),
/// a task for each enqueued line written, and each schedule's next state.
pub(crate) fn write_plans(
    tx: &Transaction<'_>,
    writes: &[PlanWrite],
    now: Timestamp,
) -> Result<Written> {
    for w in writes {
        for id in &w.give_up {
            // Transition::StopRetrying, as a compare-and-set on the state.
            tx.prepare_cached(
                "UPDATE tasks SET state = 'dead', finished_at = ?2 WHERE id = ?1 AND state = 'retrying'",
            )
            .map_err(db_err)?
            .execute(params![id, ts(now)])
            .map_err(db_err)?;
            tasks::dependents::release(tx, [(*id, sked_core::TaskState::Dead)], now)?;
        }
        for id in &w.plan.cancel {
            rules::replaced(tasks::cancel(tx, *id, now))?;
        }
    }
    let lines = rules::ledger_lines(writes);
    let mut recorded = Vec::with_capacity(lines.len());
    for l in &lines {
        let (name, nominal) = (&l.write.name, ts(l.occ.nominal_at));
        let released = l.may_release()
            && tx
                .prepare_cached(
                    "UPDATE occurrences SET outcome = 'enqueued', detail = ?3, recorded_at = ?4 \
                     WHERE schedule = ?1 AND nominal_at = ?2 AND outcome = 'buffered'",
                )
                .map_err(db_err)?
                .execute(params![name, nominal, l.occ.detail, ts(now)])
                .map_err(db_err)?
                > 0;
        let inserted = !released
            && tx
                .prepare_cached(
                    "INSERT INTO occurrences (schedule, nominal_at, outcome, detail, recorded_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (schedule, nominal_at) DO NOTHING",
                )
                .map_err(db_err)?
                .execute(params![
                    name,
                    nominal,
                    l.occ.outcome.as_str(),
                    l.occ.detail,
                    ts(now)
                ])
                .map_err(db_err)?
                > 0;
        recorded.push(released || inserted);
    }
    let mut runs: Vec<Option<RunMade>> = vec![None; lines.len()];
    let mut inserts = Vec::new();
    let mut of_line = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if let (true, Some(insert)) = (recorded[i], l.run(now)?) {
            inserts.push(insert);
            of_line.push(i);
        }
    }
    for (i, made) in of_line.into_iter().zip(insert_runs(tx, inserts, now)?) {
        tx.prepare_cached(
            "UPDATE occurrences SET task_id = ?3 WHERE schedule = ?1 AND nominal_at = ?2",
        )
        .map_err(db_err)?
        .execute(params![
            lines[i].write.name,
            ts(lines[i].occ.nominal_at),
            made.first
        ])
        .map_err(db_err)?;
        runs[i] = Some(made);
    }
    for w in writes {
        tx.prepare_cached(
            "UPDATE schedules SET next_fire_at = ?2, buffered_at = ?3, \
               look_at = CASE WHEN paused THEN NULL ELSE ?4 END, awaits_run = ?5, updated_at = ?6, \
               runs = runs + ?7 \
             WHERE name = ?1",
        )
        .map_err(db_err)?
        .execute(params![
            w.name,
            w.plan.next_fire_at.map(ts),
            w.plan.buffered.map(ts),
            w.look_at.map(ts),
            w.awaits_run,
            ts(now),
            w.plan.runs.min(sked_core::MAX_RUNS) as i64,
        ])
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
/// nominal time after `now`): their tasks (a workflow's all together) and ledger lines go, and
/// the schedule is planned again from the earliest of them.
pub(crate) fn withdraw_ahead(tx: &Transaction<'_>, name: &str, now: Timestamp) -> Result<()> {
    let made: Vec<(TaskId, i64)> = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT id, nominal_at FROM tasks WHERE schedule = ?1 AND {} AND attempt = 0 \
                 AND nominal_at > ?2 AND {}",
                sked_store::states::MADE_AHEAD_ANY,
                sked_store::states::ACTIVE_ANY
            ))
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params![name, ts(now)], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    let Some(first) = made.iter().map(|(_, n)| *n).min() else {
        return Ok(());
    };
    let ids: Vec<TaskId> = made.iter().map(|(id, _)| *id).collect();
    tasks::delete(tx, &ids)?;
    let gone: HashSet<i64> = made.into_iter().map(|(_, n)| n).collect();
    for nominal in gone {
        tx.prepare_cached("DELETE FROM occurrences WHERE schedule = ?1 AND nominal_at = ?2")
            .map_err(db_err)?
            .execute(params![name, nominal])
            .map_err(db_err)?;
    }
    tx.execute(
        "UPDATE schedules SET next_fire_at = ?2 WHERE name = ?1 \
           AND (next_fire_at IS NULL OR next_fire_at > ?2)",
        params![name, first],
    )
    .map_err(db_err)?;
    Ok(())
}

/// When the earliest schedule needs planning next.
pub(crate) fn next_look_at(conn: &Connection) -> Result<Option<Timestamp>> {
    let us: Option<i64> = conn
        .query_row("SELECT min(look_at) FROM schedules", [], |r| r.get(0))
        .map_err(db_err)?;
    Ok(opt_ts(us))
}
