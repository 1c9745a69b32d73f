//! Inserting tasks.

use std::collections::HashMap;
use std::sync::LazyLock;

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, Statement, ToSql};
use sked_core::{SpecError, Task, TaskId, TaskState};
use sked_store::kept::Keeping;
use sked_store::rules;
use sked_store::rules::dependents::ParentStates;

use super::dependents::{Made, WaitId};
use sked_store::states::QUEUED;
use sked_store::*;

use super::{STATEMENT_ROWS, parameter_rows};
use crate::codec::{db_err, ms, ts};

/// The columns an insert writes, in the order of [`Row::bind`].
const COLUMNS: &str = "queue, kind, payload, priority, state, run_at, max_attempts, created_at, \
    wait, timeout_ms, unique_key, backoff_base_ms, backoff_max_ms, schedule, nominal_at, concurrency_key, \
    traceparent, backoff, expires_at";
const PER_ROW: usize = 19;

/// The first columns of [`COLUMNS`], all that a task without options (no timeout, key, backoff,
/// schedule, concurrency key or trace) has to write: the rest default to null. Most enqueues are
/// such tasks, and a parameter bound costs more than the row's other work in the statement.
const PLAIN_PER_ROW: usize = 8;

const ROWS_PER_STATEMENT: usize = STATEMENT_ROWS[0];

/// `INSERT INTO tasks (…) VALUES (…), (…), …` with `rows` rows of the first `per_row` columns.
fn insert_sql(rows: usize, per_row: usize) -> String {
    let columns: Vec<&str> = COLUMNS.split(", ").take(per_row).collect();
    format!(
        "INSERT OR FAIL INTO tasks ({}) VALUES {}",
        columns.join(", "),
        parameter_rows(rows, per_row)
    )
}

/// How many values plain rows may share, bound once: every column a plain row writes but the
/// payload, in the order of [`COLUMNS`] (see [`Row::bind_shared`]), and their wait when they
/// have one: the tasks of a workflow's stage share their wait as they share their kind.
const SHARED: usize = PLAIN_PER_ROW - 1;

/// `INSERT INTO tasks (…) VALUES (…), …` with `rows` plain rows that share every value but the
/// payload: those are `?1`–`?7`, in the order of [`COLUMNS`] (and the wait `?8` when
/// `with_wait`), the payloads after them. Rows without a wait do not name the column: an
/// enqueue of plain tasks binds nothing more than before tasks had waits.
fn shared_insert_sql(rows: usize, with_wait: bool) -> String {
    let shared = SHARED + usize::from(with_wait);
    let columns: Vec<&str> = COLUMNS.split(", ").take(shared + 1).collect();
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let mut nth = 0;
            let row: Vec<String> = (columns.iter())
                .map(|&c| match c {
                    "payload" => format!("?{}", shared + 1 + r),
                    _ => {
                        nth += 1;
                        format!("?{nth}")
                    }
                })
                .collect();
            format!("({})", row.join(", "))
        })
        .collect();
    format!(
        "INSERT OR FAIL INTO tasks ({}) VALUES {}",
        columns.join(", "),
        values.join(", ")
    )
}

/// The statements of [`STATEMENT_ROWS`] rows, in that order: every column, plain rows, and
/// plain rows that share all but their payloads (a batch of one kind of task for one queue,
/// the common bulk enqueue, binds a parameter a row instead of eight).
static INSERTS: LazyLock<[String; 4]> =
    LazyLock::new(|| STATEMENT_ROWS.map(|rows| insert_sql(rows, PER_ROW)));
static PLAIN_INSERTS: LazyLock<[String; 4]> =
    LazyLock::new(|| STATEMENT_ROWS.map(|rows| insert_sql(rows, PLAIN_PER_ROW)));
static SHARED_INSERTS: LazyLock<[String; 4]> =
    LazyLock::new(|| STATEMENT_ROWS.map(|rows| shared_insert_sql(rows, false)));
static SHARED_WAIT_INSERTS: LazyLock<[String; 4]> =
    LazyLock::new(|| STATEMENT_ROWS.map(|rows| shared_insert_sql(rows, true)));

/// A checked task, ready to be bound to an insert's parameters.
struct Row<'a> {
    t: &'a TaskInsert,
    state: TaskState,
    run_at: i64,
    payload: String,
    now: i64,
    expires_at: Option<i64>,
    /// The wait of a task with parents.
    wait: Option<i64>,
}

impl<'a> Row<'a> {
    fn new(t: &'a TaskInsert, now: Timestamp) -> Result<Row<'a>> {
        let invalid = |e: SpecError| StoreError::Invalid(e.to_string());
        t.task.validate_fields().map_err(invalid)?;
        let payload = serde_json::to_string(&t.task.payload)
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        sked_core::check_payload_size(payload.len()).map_err(invalid)?;
        let run_at = t.task.run_at.unwrap_or(now);
        Ok(Row {
            t,
            state: rules::state_for_run_at(run_at, now),
            run_at: ts(run_at),
            payload,
            now: ts(now),
            expires_at: rules::expires_at(t, now)?.map(ts),
            wait: None,
        })
    }

    /// Whether the task sets none of the columns after the first [`PLAIN_PER_ROW`] but its
    /// wait.
    fn is_plain(&self) -> bool {
        let task = &self.t.task;
        task.timeout.is_none()
            && task.unique_key.is_none()
            && task.backoff.is_none()
            && self.t.schedule.is_none()
            && self.t.nominal_at.is_none()
            && task.key.is_none()
            && task.traceparent.is_none()
            && self.expires_at.is_none()
    }

    /// Whether this row and `other` have the same values in the columns plain rows may share
    /// (a task with parents may start in another state than its run time gives).
    fn shares_with(&self, other: &Row<'_>) -> bool {
        let (a, b) = (&self.t.task, &other.t.task);
        self.state == other.state
            && a.queue == b.queue
            && a.kind == b.kind
            && a.priority == b.priority
            && self.run_at == other.run_at
            && a.max_attempts == b.max_attempts
            && self.now == other.now
            && self.wait == other.wait
    }

    /// Binds the first `per_row` columns of this row ([`PER_ROW`], or [`PLAIN_PER_ROW`] for a
    /// plain one) to the parameters after `first` (1-based numbering: `first + 1` on).
    fn bind(&self, stmt: &mut Statement<'_>, first: usize, per_row: usize) -> Result<()> {
        let task = &self.t.task;
        let (base, max, spec) = sked_store::columns::backoff::columns(task.backoff.as_ref());
        let values: [&dyn ToSql; PER_ROW] = [
            &task.queue,
            &task.kind,
            &self.payload,
            &task.priority,
            &self.state.as_str(),
            &self.run_at,
            &task.max_attempts,
            &self.now,
            &self.wait,
            &task.timeout.map(ms),
            &task.unique_key,
            &base,
            &max,
            &self.t.schedule,
            &self.t.nominal_at.map(ts),
            &task.key,
            &task.traceparent,
            &spec,
            &self.expires_at,
        ];
        for (i, v) in values.into_iter().take(per_row).enumerate() {
            stmt.raw_bind_parameter(first + i + 1, v).map_err(db_err)?;
        }
        Ok(())
    }

    /// Binds this row's values but the payload to `?1`–`?7` (and its wait, if it has one, to
    /// `?8`), as [`shared_insert_sql`] names them; returns how many it bound.
    fn bind_shared(&self, stmt: &mut Statement<'_>) -> Result<usize> {
        let task = &self.t.task;
        let values: [&dyn ToSql; SHARED + 1] = [
            &task.queue,
            &task.kind,
            &task.priority,
            &self.state.as_str(),
            &self.run_at,
            &task.max_attempts,
            &self.now,
            &self.wait,
        ];
        let shared = SHARED + usize::from(self.wait.is_some());
        for (i, v) in values.into_iter().take(shared).enumerate() {
            stmt.raw_bind_parameter(i + 1, v).map_err(db_err)?;
        }
        Ok(shared)
    }
}

/// Inserts one task inside the caller's transaction.
pub(crate) fn insert_one(tx: &Connection, t: &TaskInsert, now: Timestamp) -> Result<TaskInserted> {
    let mut row = Row::new(t, now)?;
    let parents = match t.task.depends_on.is_empty() {
        true => None,
        false => {
            let kept = super::kept_stages::Kept::Ids(t.task.depends_on.clone());
            super::kept_stages::make(tx, &kept)?;
            let states = super::dependents::parent_states(tx, &t.task.depends_on)?;
            let run_at = t.task.run_at.unwrap_or(now);
            let start =
                rules::dependents::at_enqueue(&states, t.task.on_parent_failure, run_at, now)?;
            row.state = start.state;
            Some((states, start))
        }
    };
    if let Some(key) = &t.task.unique_key
        && let Some(holder) = key_holder(tx, key, &row, now)?
    {
        return Ok(holder);
    }
    let mut made = Made::default();
    if let Some((states, start)) = &parents {
        let then = t.task.on_parent_failure;
        row.wait = Some(made.wait_for(tx, &t.task.depends_on, states, then, start)?);
    }
    let mut stmt = tx.prepare_cached(&INSERTS[3]).map_err(db_err)?;
    row.bind(&mut stmt, 0, PER_ROW)?;
    stmt.raw_execute().map_err(db_err)?;
    let id = tx.last_insert_rowid();
    made.write(tx, now)?;
    if let Some(until) = rules::unique_until(&t.task, now)? {
        tx.prepare_cached("UPDATE tasks SET unique_until = ?2 WHERE id = ?1")
            .map_err(db_err)?
            .execute(rusqlite::params![id, ts(until)])
            .map_err(db_err)?;
    }
    Ok(TaskInserted {
        id,
        state: row.state,
        duplicate: false,
        debounced: false,
    })
}

/// The task that holds `key` against the insert of `row`: an unfinished one (which a
/// debounced insert takes over, payload and run time, when it has not started), or the
/// latest whose dedup window is still open.
fn key_holder(
    tx: &Connection,
    key: &str,
    row: &Row<'_>,
    now: Timestamp,
) -> Result<Option<TaskInserted>> {
    let held = |sql: &str, params: &[&dyn ToSql]| -> Result<Option<(TaskId, TaskState)>> {
        let found: Option<(TaskId, String)> = tx
            .prepare_cached(sql)
            .map_err(db_err)?
            .query_row(params, |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(db_err)?;
        found
            .map(|(id, s)| Ok((id, crate::codec::state(&s).map_err(db_err)?)))
            .transpose()
    };
    let duplicate = |(id, state): (TaskId, TaskState)| TaskInserted {
        id,
        state,
        duplicate: true,
        debounced: false,
    };
    if let Some((id, state)) = held(&crate::partial_indexes::UNIQUE_KEY_HOLDER, &[&key])? {
        if row.t.task.debounce.is_some() {
            let moved = tx
                .prepare_cached(&format!(
                    "UPDATE tasks SET payload = ?2, run_at = ?3, state = ?4, expires_at = ?5 \
                     WHERE id = ?1 AND state IN {QUEUED} AND attempt = 0"
                ))
                .map_err(db_err)?
                .execute(rusqlite::params![
                    id,
                    row.payload,
                    row.run_at,
                    row.state.as_str(),
                    row.expires_at
                ])
                .map_err(db_err)?;
            if moved == 1 {
                return Ok(Some(TaskInserted {
                    state: row.state,
                    debounced: true,
                    ..duplicate((id, state))
                }));
            }
        }
        return Ok(Some(duplicate((id, state))));
    }
    let window = held(crate::partial_indexes::UNIQUE_KEY_WINDOW, &[&key, &ts(now)])?;
    Ok(window.map(duplicate))
}

/// Inserts one task due now and, unless its queue is paused or limited, leases it to a
/// waiting worker at once (see [`sked_store::Store::task_insert_claimed`]).
pub(crate) fn insert_claimed(
    tx: &rusqlite::Transaction<'_>,
    p: &TaskInsertClaimedParams,
) -> Result<(TaskInserted, Option<Task>)> {
    rules::check_insert_claimed(p)?;
    let inserted = insert_one(tx, &p.task, p.now)?;
    if !super::claim::queue_is_open(tx, &p.task.task.queue)? {
        return Ok((inserted, None));
    }
    let expires = p
        .now
        .checked_add(p.lease_ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let mut leased = super::multi_row::lease(
        tx,
        &[inserted.id],
        &p.worker,
        p.now,
        expires,
        p.timeout_grace,
    )?;
    let task = leased
        .pop()
        .ok_or_else(|| StoreError::Backend("the inserted task was not leased".into()))?;
    Ok((
        TaskInserted {
            state: task.state,
            ..inserted
        },
        Some(task),
    ))
}

/// Inserts tasks in order. Tasks without a unique key go in statements of up to
/// [`ROWS_PER_STATEMENT`] rows, those with parents too: their parents' states are read once
/// for the whole call (a parent is named by id, so it exists before the call), and those with
/// the same parents share a wait. One with a key is looked up and inserted alone, after the
/// rows before it, so that a key given twice in one call finds its first task.
pub(crate) fn insert_many(tx: &Connection, p: &TaskInsertParams) -> Result<Vec<TaskInserted>> {
    insert_many_after(tx, p, &mut Made::default())
}

/// [`insert_many`] for tasks whose parents include tasks this transaction made, as `made`
/// says: those are not read again, tasks with the same parents as tasks made before share
/// their wait, and a task that waits for all of a wait's tasks waits for the wait. Notes the
/// tasks it makes in `made`.
pub(crate) fn insert_many_after(
    tx: &Connection,
    p: &TaskInsertParams,
    made: &mut Made,
) -> Result<Vec<TaskInserted>> {
    made.next_insert();
    let mut out = Vec::with_capacity(p.tasks.len());
    let mut pending: Vec<Row<'_>> = Vec::with_capacity(ROWS_PER_STATEMENT.min(p.tasks.len()));
    let states = parents_of_unkeyed(tx, &p.tasks, made)?;
    // The wait of each task, by its place among the answers.
    let mut waits: Vec<Option<WaitId>> = Vec::with_capacity(p.tasks.len());
    for t in &p.tasks {
        if t.task.unique_key.is_some() {
            write_rows(tx, &mut pending, &mut out)?;
            out.push(insert_one(tx, t, p.now)?);
            waits.push(None);
            continue;
        }
        let mut row = Row::new(t, p.now)?;
        if !t.task.depends_on.is_empty() {
            let parents: ParentStates = (t.task.depends_on.iter())
                .map(|id| (*id, states.get(id).copied().or_else(|| made.state(*id))))
                .collect();
            let run_at = t.task.run_at.unwrap_or(p.now);
            let then = t.task.on_parent_failure;
            let start = rules::dependents::at_enqueue(&parents, then, run_at, p.now)?;
            row.state = start.state;
            row.wait = Some(made.wait_for(tx, &t.task.depends_on, &parents, then, &start)?);
        }
        waits.push(row.wait);
        pending.push(row);
        // A stage that may be kept is written once its tasks are all known.
        if pending.len() == ROWS_PER_STATEMENT && made.keeping.min.is_none() {
            write_rows(tx, &mut pending, &mut out)?;
        }
    }
    if out.is_empty() && keeps(&pending, made.keeping) {
        let first = insert_kept(tx, &pending, made.keeping)?;
        out.extend((pending.iter().enumerate()).map(|(i, row)| TaskInserted {
            id: first + i as i64,
            state: row.state,
            duplicate: false,
            debounced: false,
        }));
        pending.clear();
    }
    write_rows(tx, &mut pending, &mut out)?;
    for (ins, wait) in out.iter().zip(&waits) {
        made.add(ins.id, ins.state, *wait);
    }
    made.write(tx, p.now)?;
    let joined: Vec<(TaskId, sked_core::BatchId, TaskState)> = (p.tasks.iter().zip(&out))
        .filter(|(_, ins)| !ins.duplicate)
        .filter_map(|(t, ins)| Some((ins.id, t.task.batch?, ins.state)))
        .collect();
    super::batches::join(tx, &joined, p.now)?;
    Ok(out)
}

/// Whether `rows` (all the tasks of one insert) go in as a kept stage of `keeping`
/// ([`super::kept_stages`]): they all wait for the same wait, share every column but the
/// payload, and have none of the columns past the plain ones, and no batch.
fn keeps(rows: &[Row<'_>], keeping: Keeping) -> bool {
    let Some(first) = rows.first() else {
        return false;
    };
    first.wait.is_some()
        && first.state == TaskState::Waiting
        && rows.iter().all(|r| r.is_plain() && r.shares_with(first))
        && rows.iter().all(|r| r.t.task.batch.is_none())
        && super::kept_stages::keeps(rows.iter().map(|r| r.payload.len()), keeping)
}

/// Inserts `rows` ([`keeps`] them) as a kept stage; answers the first of their ids.
fn insert_kept(tx: &Connection, rows: &[Row<'_>], keeping: Keeping) -> Result<TaskId> {
    let (first, task) = (&rows[0], &rows[0].t.task);
    let shared = super::kept_stages::Shared {
        queue: &task.queue,
        kind: &task.kind,
        priority: task.priority,
        run_at: first.run_at,
        max_attempts: task.max_attempts,
        created_at: first.now,
        wait: first.wait.unwrap_or_default(),
    };
    let payloads: Vec<&str> = rows.iter().map(|r| r.payload.as_str()).collect();
    super::kept_stages::insert(tx, &shared, &payloads, keeping)
}

/// The states of the parents of the tasks without a unique key among `tasks` (a task with a
/// key reads its own, after the key's check) but those in `made`, in one read, once the kept
/// parts that hold any of them are rows.
fn parents_of_unkeyed(
    tx: &Connection,
    tasks: &[TaskInsert],
    made: &Made,
) -> Result<HashMap<TaskId, TaskState>> {
    let mut all: Vec<TaskId> = (tasks.iter())
        .filter(|t| t.task.unique_key.is_none())
        .flat_map(|t| t.task.depends_on.iter().copied())
        .filter(|id| !made.contains(*id))
        .collect();
    if all.is_empty() {
        return Ok(Default::default());
    }
    all.sort_unstable();
    all.dedup();
    super::kept_stages::make(tx, &super::kept_stages::Kept::Ids(all.clone()))?;
    Ok((super::dependents::parent_states(tx, &all)?.into_iter())
        .filter_map(|(id, s)| Some((id, s?)))
        .collect())
}

/// Writes `rows`, in order, with statements of [`STATEMENT_ROWS`] rows, and empties it.
fn write_rows(tx: &Connection, rows: &mut Vec<Row<'_>>, out: &mut Vec<TaskInserted>) -> Result<()> {
    let mut rest = &rows[..];
    for (nth, size) in STATEMENT_ROWS.iter().enumerate() {
        while rest.len() >= *size {
            let (now, later) = rest.split_at(*size);
            write_statement(tx, nth, now, out)?;
            rest = later;
        }
    }
    rows.clear();
    Ok(())
}

/// Writes `rows` with the statement for as many rows (the `nth` of [`STATEMENT_ROWS`]): the
/// shared one when every row is plain and shares its values with the first, the plain one when
/// every row is plain and waits for no parent. Their ids are consecutive: the table's ids come from
/// `AUTOINCREMENT`, one more than the largest so far for each row in turn, and this
/// transaction is the only writer.
fn write_statement(
    tx: &Connection,
    nth: usize,
    rows: &[Row<'_>],
    out: &mut Vec<TaskInserted>,
) -> Result<()> {
    let plain = rows.iter().all(Row::is_plain);
    if plain && rows.iter().all(|r| r.shares_with(&rows[0])) {
        let sql = match rows[0].wait {
            None => &SHARED_INSERTS[nth],
            Some(_) => &SHARED_WAIT_INSERTS[nth],
        };
        let mut stmt = tx.prepare_cached(sql).map_err(db_err)?;
        let shared = rows[0].bind_shared(&mut stmt)?;
        for (i, row) in rows.iter().enumerate() {
            stmt.raw_bind_parameter(shared + 1 + i, &row.payload)
                .map_err(db_err)?;
        }
        return execute(tx, &mut stmt, rows, out);
    }
    let (sql, per_row) = match plain && rows.iter().all(|r| r.wait.is_none()) {
        true => (&PLAIN_INSERTS[nth], PLAIN_PER_ROW),
        false => (&INSERTS[nth], PER_ROW),
    };
    let mut stmt = tx.prepare_cached(sql).map_err(db_err)?;
    for (i, row) in rows.iter().enumerate() {
        row.bind(&mut stmt, i * per_row, per_row)?;
    }
    execute(tx, &mut stmt, rows, out)
}

/// Runs an insert of `rows` whose parameters are bound, and answers them.
fn execute(
    tx: &Connection,
    stmt: &mut Statement<'_>,
    rows: &[Row<'_>],
    out: &mut Vec<TaskInserted>,
) -> Result<()> {
    let n = stmt.raw_execute().map_err(db_err)?;
    if n != rows.len() {
        return Err(StoreError::Backend(format!(
            "inserted {n} of {} tasks",
            rows.len()
        )));
    }
    let first = tx.last_insert_rowid() - rows.len() as i64 + 1;
    out.extend(rows.iter().enumerate().map(|(i, row)| TaskInserted {
        id: first + i as i64,
        state: row.state,
        duplicate: false,
        debounced: false,
    }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_rows_name_the_shared_values_once_and_a_payload_each() {
        assert_eq!(
            shared_insert_sql(2, false),
            "INSERT OR FAIL INTO tasks (queue, kind, payload, priority, state, run_at, max_attempts, \
             created_at) VALUES (?1, ?2, ?8, ?3, ?4, ?5, ?6, ?7), (?1, ?2, ?9, ?3, ?4, ?5, ?6, ?7)"
        );
        assert_eq!(
            shared_insert_sql(2, true),
            "INSERT OR FAIL INTO tasks (queue, kind, payload, priority, state, run_at, max_attempts, \
             created_at, wait) VALUES (?1, ?2, ?9, ?3, ?4, ?5, ?6, ?7, ?8), \
             (?1, ?2, ?10, ?3, ?4, ?5, ?6, ?7, ?8)"
        );
    }
}
