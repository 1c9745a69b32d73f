//! Inserting tasks: one `unnest` statement for tasks without a unique key, one statement each
//! for tasks with one.

use jiff::Timestamp;
use std::collections::HashMap;

use sked_core::{Task, TaskId, TaskState};
use sked_store::keyed::LIMITED_OR_PAUSED;
use sked_store::states::{ACTIVE, QUEUED};
use sked_store::*;
use tokio_postgres::GenericClient;

use super::Param;
use super::dependents::{Made, NewWaits};
use super::insert_without_keys::{
    BulkParams, CHILDREN, Columns, INSERTS, QUIET_INSERTS, SHAPES, answers, shape,
};
use crate::codec::{TASK_COLUMNS, col, db_err, state, task_from_row};
use crate::listen::notify_tasks_sql;
use deadpool_postgres::Object;

/// Inserts tasks. Tasks without a unique key go in with one `unnest` statement (`prepared`,
/// when given, is the one of [`INSERTS`] for their [`shape`]); each task with a key
/// goes in on its own, `ON CONFLICT DO NOTHING` against the partial unique index, and returns
/// the holder when the key is taken. Several statements need a transaction around them: `c` is
/// one whenever `tasks` has a unique key (see [`needs_transaction`]).
pub(crate) async fn insert_tasks<C: GenericClient + Sync>(
    c: &C,
    prepared: Option<&tokio_postgres::Statement>,
    channel: &str,
    tasks: &[TaskInsert],
    now: Timestamp,
) -> Result<Vec<TaskInserted>> {
    validate(tasks)?;
    let mut out: Vec<Option<TaskInserted>> = vec![None; tasks.len()];
    let plain: Vec<usize> = (0..tasks.len()).filter(|&i| is_plain(&tasks[i])).collect();
    if !plain.is_empty() {
        let rows = Columns::of(plain.iter().map(|&i| &tasks[i]), now)?;
        let shape = shape(plain.iter().map(|&i| &tasks[i]));
        let sent = BulkParams::of(&rows);
        let mut params: Vec<Param<'_>> = vec![&channel];
        params.extend(sent.params(&now, SHAPES[shape]));
        let ids = match prepared {
            Some(stmt) => c.query(stmt, &params).await,
            None => c.query(INSERTS[shape].as_str(), &params).await,
        }
        .map_err(db_err)?;
        for (k, answer) in answers(&rows, &ids)?.into_iter().enumerate() {
            out[plain[k]] = Some(answer);
        }
    }
    let children: Vec<usize> = (0..tasks.len())
        .filter(|&i| tasks[i].task.unique_key.is_none() && !tasks[i].task.depends_on.is_empty())
        .collect();
    if !children.is_empty() {
        let tasks = children.iter().map(|&i| (&tasks[i], &[][..]));
        let made = &mut Made::default();
        let inserted = insert_children(c, channel, tasks, made, &Members::default(), now).await?;
        for (k, answer) in inserted.into_iter().enumerate() {
            out[children[k]] = Some(answer);
        }
    }
    for (i, t) in tasks.iter().enumerate() {
        match (t.task.unique_key.is_some(), t.task.depends_on.is_empty()) {
            (true, false) => out[i] = Some(insert_dependent(c, channel, t, now).await?),
            (true, true) => out[i] = Some(insert_unique(c, channel, t, now).await?),
            (false, _) => {}
        }
    }
    let out: Vec<TaskInserted> = out
        .into_iter()
        .map(|o| o.ok_or_else(|| StoreError::Backend("a task was not inserted".into())))
        .collect::<Result<_>>()?;
    let joined: Vec<(TaskId, sked_core::BatchId, TaskState)> = (tasks.iter().zip(&out))
        .filter(|(_, ins)| !ins.duplicate)
        .filter_map(|(t, ins)| Some((ins.id, t.task.batch?, ins.state)))
        .collect();
    super::batches::join(c, channel, &joined, now).await?;
    Ok(out)
}

/// What a workflow's tasks write besides their own fields: the workflow they belong to, and
/// which of them (by place) others of it wait for, so that their rows are flagged as they go
/// in. Tasks of no workflow: none and none.
#[derive(Default)]
pub(crate) struct Members<'a> {
    pub(crate) workflow: Option<sked_core::WorkflowId>,
    pub(crate) has_children: &'a [bool],
    /// How a run is kept until released ([`super::kept_stages`]); by default every task is a
    /// row from the start.
    pub(crate) keeping: super::kept_stages::Keeping,
}

/// Whether `t` goes in with the one statement for many tasks: it has no unique key and no
/// parents.
fn is_plain(t: &TaskInsert) -> bool {
    t.task.unique_key.is_none() && t.task.depends_on.is_empty()
}

/// Inserts tasks with parents and without unique keys, together: every parent of any of them
/// locked and flagged at once (in id order), each task's start from its parents'
/// ([`rules::dependents::at_enqueue`]: its state, parents left, error) written with its row in
/// one statement, then their waits (tasks with the same parents share one) with their edges.
/// Each task comes with parents of its own besides its `depends_on` (a workflow's, by id).
/// Parents in `made` were inserted in this transaction, which alone sees them: they are
/// neither locked nor flagged, and `members` says which tasks are such parents and which
/// workflow the tasks belong to. Notes the tasks it makes in `made`.
async fn insert_children<'a, C: GenericClient + Sync>(
    c: &C,
    channel: &str,
    tasks: impl Iterator<Item = (&'a TaskInsert, &'a [TaskId])> + Clone,
    made: &mut Made,
    members: &Members<'_>,
    now: Timestamp,
) -> Result<Vec<TaskInserted>> {
    let parents_of =
        |(t, more): (&'a TaskInsert, &'a [TaskId])| t.task.depends_on.iter().chain(more).copied();
    let fresh = made.states();
    let mut all: Vec<TaskId> = (tasks.clone())
        .flat_map(parents_of)
        .filter(|id| !fresh.contains_key(id))
        .collect();
    all.sort_unstable();
    all.dedup();
    let mut states: HashMap<TaskId, Option<TaskState>> = match all.is_empty() {
        true => HashMap::new(),
        false => (super::dependents::lock_parents(c, &all).await?.into_iter()).collect(),
    };
    states.extend(made.states().iter().map(|(id, s)| (*id, Some(*s))));
    let mut waits = NewWaits::default();
    let mut starts = Vec::new();
    for (t, more) in tasks.clone() {
        let parents: Vec<(TaskId, Option<TaskState>)> = parents_of((t, more))
            .map(|id| (id, states.get(&id).copied().flatten()))
            .collect();
        let run_at = t.task.run_at.unwrap_or(now);
        let then = t.task.on_parent_failure;
        let start = rules::dependents::at_enqueue(&parents, then, run_at, now)?;
        waits.add(made, &parents, then, &start);
        starts.push(start);
    }
    let wait_ids = waits.number(c).await?;
    let batched = tasks.clone().any(|(t, _)| t.task.batch.is_some());
    let mut rows = Columns::of(tasks.map(|(t, _)| t), now)?;
    for (k, start) in starts.iter().enumerate() {
        rows.state[k] = start.state.as_str();
        rows.wait[k] = wait_ids[k];
        rows.last_error[k] = start.error.clone();
        rows.finished_at[k] = start.state.is_finished().then_some(now);
        rows.has_children[k] = members.has_children.get(k).copied().unwrap_or(false);
        rows.workflow[k] = members.workflow;
    }
    let kept = (members.keeping.min)
        .filter(|&min| !batched && super::kept_stages::keeps(&rows, &wait_ids, min))
        .and(wait_ids.first().copied().flatten())
        .and_then(|wait| Some((wait, super::kept_stages::payloads(&rows)?)));
    let inserted = match kept {
        Some((wait, payloads)) => {
            (super::kept_stages::insert(c, &rows, &payloads, wait, members.keeping.part, now)
                .await?
                .into_iter())
            .map(|id| TaskInserted {
                id,
                state: TaskState::Waiting,
                duplicate: false,
                debounced: false,
            })
            .collect()
        }
        None => {
            let sent = BulkParams::of(&rows);
            let mut params: Vec<Param<'_>> = vec![&channel];
            params.extend(sent.params(&now, SHAPES[CHILDREN]));
            let ids = c
                .query(INSERTS[CHILDREN].as_str(), &params)
                .await
                .map_err(db_err)?;
            answers(&rows, &ids)?
        }
    };
    let ended: Vec<(TaskId, TaskState)> = inserted.iter().map(|t| (t.id, t.state)).collect();
    waits.write(c, made, &ended, &wait_ids).await?;
    Ok(inserted)
}

/// Inserts one run of a workflow's tasks (none with a unique key), which wait for none of each
/// other: as [`insert_tasks`] inserts them, all with the one statement of tasks with parents,
/// each also waiting for the tasks of the workflow its `after` names (`ids`: the ids of those
/// made before, by place; the tasks are not copied to add them). Those parents are in `made`,
/// and `members` names the workflow and flags the tasks of the run that tasks after them will
/// wait for (see [`insert_children`]).
pub(crate) async fn insert_workflow_run<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
    run: &[WorkflowTaskInsert],
    ids: &[TaskId],
    made: &mut Made,
    members: &Members<'_>,
    now: Timestamp,
) -> Result<Vec<TaskInserted>> {
    for t in run {
        t.insert
            .task
            .validate()
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        if t.insert.task.unique_key.is_some() {
            return Err(StoreError::Invalid(format!(
                "task {:?}: a workflow's task cannot have a unique key",
                t.name
            )));
        }
    }
    let after: Vec<Vec<TaskId>> = (run.iter())
        .map(|t| t.after.iter().map(|&a| ids[a]).collect())
        .collect();
    let tasks = run.iter().zip(&after).map(|(t, a)| (&t.insert, &a[..]));
    let out = insert_children(c, channel, tasks, made, members, now).await?;
    let joined: Vec<(TaskId, sked_core::BatchId, TaskState)> = (run.iter().zip(&out))
        .filter_map(|(t, ins)| Some((ins.id, t.insert.task.batch?, ins.state)))
        .collect();
    super::batches::join(c, channel, &joined, now).await?;
    Ok(out)
}

/// Inserts a task with parents and a unique key: its parents locked and flagged, its state
/// from theirs, then its wait and edges. A held unique key returns the holder and adds no
/// edge.
async fn insert_dependent<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
    t: &TaskInsert,
    now: Timestamp,
) -> Result<TaskInserted> {
    let states = super::dependents::lock_parents(c, &t.task.depends_on).await?;
    let run_at = t.task.run_at.unwrap_or(now);
    let start = rules::dependents::at_enqueue(&states, t.task.on_parent_failure, run_at, now)?;
    let mut inserted = insert_unique(c, channel, t, now).await?;
    if !inserted.duplicate {
        inserted.state = start.state;
        let then = t.task.on_parent_failure;
        super::dependents::link(c, inserted.id, &states, then, &start, now).await?;
    }
    Ok(inserted)
}

/// Announces on `$1` the tasks `$2` names (see [`announcement`]).
const ANNOUNCE: &str = "SELECT pg_notify($1, $2)";

/// Inserts one task (`$3`–`$18` as for [`Columns::first_row`]), leased to a worker (`$20`,
/// until `$19`) unless its queue is paused or limited; then it is inserted available (`$7`)
/// and announced. One statement, returning the row.
static INSERT_CLAIMED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH open AS (SELECT NOT EXISTS (SELECT 1 FROM sked_queues q WHERE q.name = $3::text \
               AND {LIMITED_OR_PAUSED}) AS ok), \
             ins AS ( \
               INSERT INTO sked_tasks AS t (queue, kind, payload, priority, state, run_at, \
                 max_attempts, timeout_ms, backoff_base_ms, backoff_max_ms, schedule, nominal_at, \
                 concurrency_key, traceparent, backoff, expires_at, created_at, attempt, \
                 started_at, lease_expires_at, worker) \
               SELECT $3::text, $4::text, $5::jsonb, $6::int, \
                 CASE WHEN ok THEN 'running' ELSE $7::text END, $8::timestamptz, $9::int, \
                 $10::bigint, $11::bigint, $12::bigint, $13::text, $14::timestamptz, $15::text, \
                 $16::text, $17::text, $18::timestamptz, $2::timestamptz, \
                 CASE WHEN ok THEN 1 ELSE 0 END, CASE WHEN ok THEN $2::timestamptz END, \
                 CASE WHEN ok THEN $19::timestamptz END, CASE WHEN ok THEN $20::text END \
               FROM open RETURNING {TASK_COLUMNS}) \
         SELECT ins.*, CASE WHEN ins.state = 'available' THEN {} END FROM ins",
        notify_tasks_sql("ins.run_at", "ins.priority", "NULL::timestamptz")
    )
});

/// Inserts one task due now and, unless its queue is paused or limited, leases it to a
/// waiting worker at once (see [`sked_store::Store::task_insert_claimed`]).
pub(crate) async fn insert_claimed(
    c: &Object,
    channel: &str,
    p: &TaskInsertClaimedParams,
) -> Result<(TaskInserted, Option<Task>)> {
    rules::check_insert_claimed(p)?;
    p.task
        .task
        .validate()
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let wanted = p
        .now
        .checked_add(p.lease_ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let expires = rules::lease_end(p.now, p.task.task.timeout, p.timeout_grace, wanted);
    let rows = Columns::of(std::iter::once(&p.task), p.now)?;
    let mut params = rows.first_row(&channel, &p.now);
    params.extend([&expires as Param<'_>, &p.worker]);
    let stmt = c.prepare_cached(&INSERT_CLAIMED).await.map_err(db_err)?;
    let row = c.query_one(&stmt, &params).await.map_err(db_err)?;
    let task = task_from_row(&row)?;
    let inserted = TaskInserted {
        id: task.id,
        state: task.state,
        duplicate: false,
        debounced: false,
    };
    Ok((inserted, (task.state == TaskState::Running).then_some(task)))
}

/// Whether inserting `tasks` takes more than one statement.
fn needs_transaction(tasks: &[TaskInsert]) -> bool {
    tasks.iter().any(|t| !is_plain(t) || t.task.batch.is_some())
}

async fn insert_unique<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
    t: &TaskInsert,
    now: Timestamp,
) -> Result<TaskInserted> {
    let rows = Columns::of(std::iter::once(t), now)?;
    let key = &t.task.unique_key;
    let until = rules::unique_until(&t.task, now)?;
    // One insert of a key at a time, until commit (`c` is a transaction): a task with a dedup
    // window is not in the unique index, so the index alone cannot keep two from being made.
    c.execute(
        "SELECT pg_advisory_xact_lock(hashtext('sked_unique_key:' || current_schema() || ':' || $1))",
        &[key],
    )
    .await
    .map_err(db_err)?;
    // A task whose dedup window is open holds the key, finished or not.
    let window = c
        .query_opt(
            "SELECT id, state FROM sked_tasks WHERE unique_key = $1 AND unique_until > $2 \
             ORDER BY id DESC LIMIT 1",
            &[key, &now],
        )
        .await
        .map_err(db_err)?;
    // An unfinished task without a window holds it too; the unique index finds that one for
    // an insert without a window, which is in the index, but not for one with a window.
    let holder_sql = format!(
        "SELECT id, state FROM sked_tasks WHERE unique_key = $1 \
         AND unique_until IS NULL AND state IN {ACTIVE}"
    );
    let held = match (window, until) {
        (Some(row), _) => Some(row),
        (None, Some(_)) => c.query_opt(&holder_sql, &[key]).await.map_err(db_err)?,
        (None, None) => None,
    };
    if let Some(row) = held {
        return Ok(TaskInserted {
            id: col(&row, 0)?,
            state: state(col(&row, 1)?)?,
            duplicate: true,
            debounced: false,
        });
    }
    let sql = format!(
        "WITH ins AS ( \
           INSERT INTO sked_tasks (queue, kind, payload, priority, state, run_at, max_attempts, \
             timeout_ms, backoff_base_ms, backoff_max_ms, schedule, nominal_at, concurrency_key, \
             traceparent, backoff, expires_at, created_at, unique_key, unique_until) \
           VALUES ($3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $2, \
             $19, $20) \
           ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_until IS NULL \
             AND state IN {ACTIVE} DO NOTHING \
           RETURNING id, run_at, priority, state) \
         SELECT id, {} FROM ins",
        notify_tasks_sql(
            "ins.run_at",
            "ins.priority",
            "CASE WHEN ins.state <> 'available' THEN ins.run_at END"
        )
    );
    // A holder that finishes between the insert and the lookup frees the key: try again.
    for _ in 0..5 {
        let mut params = rows.first_row(&channel, &now);
        params.extend([key as Param<'_>, &until]);
        if let Some(row) = c.query_opt(&sql, &params).await.map_err(db_err)? {
            return Ok(TaskInserted {
                id: col(&row, 0)?,
                state: state(rows.state[0])?,
                duplicate: false,
                debounced: false,
            });
        }
        // Debounced: a holder that has not started takes this task's payload and run time.
        if t.task.debounce.is_some() {
            let moved = c
                .query_opt(
                    &format!(
                        "UPDATE sked_tasks SET payload = $2, run_at = $3, state = $4, \
                           expires_at = $5 \
                         WHERE unique_key = $1 AND unique_until IS NULL AND state IN {QUEUED} \
                           AND attempt = 0 RETURNING id"
                    ),
                    &[
                        key,
                        &rows.payload[0],
                        &rows.run_at[0],
                        &rows.state[0],
                        &rows.expires_at[0],
                    ],
                )
                .await
                .map_err(db_err)?;
            if let Some(row) = moved {
                return Ok(TaskInserted {
                    id: col(&row, 0)?,
                    state: state(rows.state[0])?,
                    duplicate: true,
                    debounced: true,
                });
            }
        }
        let holder = c.query_opt(&holder_sql, &[key]).await.map_err(db_err)?;
        if let Some(row) = holder {
            return Ok(TaskInserted {
                id: col(&row, 0)?,
                state: state(col(&row, 1)?)?,
                duplicate: true,
                debounced: false,
            });
        }
    }
    Err(StoreError::Unavailable(
        "the unique key kept changing hands; try again".into(),
    ))
}

pub(crate) async fn insert_many(
    c: &mut Object,
    channel: &str,
    p: &TaskInsertParams,
) -> Result<Vec<TaskInserted>> {
    if p.tasks.is_empty() {
        return Ok(Vec::new());
    }
    if !needs_transaction(&p.tasks) {
        return insert_then_announce(c, channel, &p.tasks, p.now).await;
    }
    let unkeyed = p.tasks.iter().filter(|t| is_plain(t));
    let stmt = c
        .prepare_cached(&INSERTS[shape(unkeyed)])
        .await
        .map_err(db_err)?;
    let tx = c.transaction().await.map_err(db_err)?;
    let out = insert_tasks(&*tx, Some(&stmt), channel, &p.tasks, p.now).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(out)
}

/// Inserts tasks without unique keys with one statement of its own (its own transaction), and
/// announces them with the next, sent at once behind it on the same connection: PostgreSQL runs
/// them in order, so the announcement is heard once the tasks are committed. A `NOTIFY` inside
/// the inserting transaction holds a database-wide lock from the moment it is queued until
/// the commit, WAL flush included, so concurrent enqueues that announce commit one at a time;
/// here each enqueue's transaction has none, and the announcing one writes nothing to flush.
/// An announcement that fails only leaves other nodes to their next look; the tasks are in.
async fn insert_then_announce(
    c: &Object,
    channel: &str,
    tasks: &[TaskInsert],
    now: Timestamp,
) -> Result<Vec<TaskInserted>> {
    validate(tasks)?;
    let rows = Columns::of(tasks.iter(), now)?;
    let shape = shape(tasks);
    // Both prepared before either is sent: a statement still to prepare would go out after
    // the announcement.
    let insert = c
        .prepare_cached(&QUIET_INSERTS[shape])
        .await
        .map_err(db_err)?;
    let announce = c.prepare_cached(ANNOUNCE).await.map_err(db_err)?;
    let sent = BulkParams::of(&rows);
    let params = sent.params(&now, SHAPES[shape]);
    let payload = rows.announcement();
    let announced: [Param<'_>; 2] = [&channel, &payload];
    let client: &tokio_postgres::Client = c;
    let (ids, announced) = tokio::join!(
        client.query(&insert, &params),
        client.execute(&announce, &announced)
    );
    if let Err(e) = announced {
        tracing::debug!(error = %e, "the announcement of inserted tasks failed");
    }
    answers(&rows, &ids.map_err(db_err)?)
}

fn validate(tasks: &[TaskInsert]) -> Result<()> {
    for t in tasks {
        t.task
            .validate()
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
    }
    Ok(())
}
