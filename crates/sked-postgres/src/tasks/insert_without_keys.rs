//! The bulk insert of tasks without unique keys: one `unnest` statement, its columns by the
//! batch's shape, the values every task shares sent once, and the ids it answers.

use jiff::Timestamp;
use sked_core::{TaskId, TaskState};
use sked_store::*;

use super::Param;
use crate::codec::{col, ms};
use crate::listen::notify_tasks_sql;

/// The columns a bulk insert may write, with their types, in the order of its arrays (`$3` on
/// in the announcing statement): those every task sets, then its options, then the concurrency
/// key and trace context, then how a task with parents starts. The third field says whether a
/// value that every task of a batch shares is sent once (see [`Sent`]): the options are null
/// for most tasks and stay arrays. `has_children` is set at insert for a workflow's tasks that
/// others of it wait for (a later task's insert flags its parents otherwise).
const BULK_COLUMNS: [(&str, &str, bool); 20] = [
    ("queue", "text", true),
    ("kind", "text", true),
    ("payload", "jsonb", false),
    ("priority", "int", true),
    ("state", "text", true),
    ("run_at", "timestamptz", true),
    ("max_attempts", "int", true),
    ("timeout_ms", "bigint", false),
    ("backoff_base_ms", "bigint", false),
    ("backoff_max_ms", "bigint", false),
    ("backoff", "text", false),
    ("expires_at", "timestamptz", false),
    ("schedule", "text", false),
    ("nominal_at", "timestamptz", false),
    ("concurrency_key", "text", false),
    ("traceparent", "text", false),
    ("wait", "bigint", false),
    ("last_error", "text", false),
    ("finished_at", "timestamptz", false),
    ("has_children", "bool", false),
];

/// How many of [`BULK_COLUMNS`] may be sent once: all are among the seven every shape writes,
/// and [`BulkParams::params`] gives their values in the same order.
const SENT_ONCE: usize = 6;

/// How many of [`BULK_COLUMNS`] a batch writes, by its [`shape`]: tasks
/// without options, tasks with a timeout, backoff, deadline or schedule, tasks with a concurrency key or
/// trace context; and tasks with parents ([`CHILDREN`]), which also write how they start. The
/// columns left out are null (or their defaults), and a batch does not send arrays of nulls
/// for them: bulk enqueues on PostgreSQL were 5–9 % slower with two such arrays.
pub(super) const SHAPES: [usize; 4] = [7, 14, 16, 20];

/// The index in [`SHAPES`] of tasks with parents: every column.
pub(super) const CHILDREN: usize = 3;

/// The index in [`SHAPES`] of `tasks`: the fewest columns that hold every value.
pub(super) fn shape<'a>(tasks: impl IntoIterator<Item = &'a TaskInsert>) -> usize {
    let mut shape = 0;
    for t in tasks {
        let task = &t.task;
        if task.key.is_some() || task.traceparent.is_some() {
            return 2;
        }
        if task.timeout.is_some()
            || task.backoff.is_some()
            || task.expires_at.is_some()
            || task.ttl.is_some()
            || t.schedule.is_some()
            || t.nominal_at.is_some()
        {
            shape = 1;
        }
    }
    shape
}

/// Inserts tasks without unique keys, as many as given, writing the first `columns` of
/// [`BULK_COLUMNS`], and announces them: one statement. Without `announce` it announces
/// nothing and takes no channel: its parameters are those of the announcing statement less one,
/// `now` first (see `insert::insert_then_announce`).
fn bulk_insert_sql(columns: usize, announce: bool) -> String {
    // The parameter that is `$n` in the announcing statement.
    let shift = usize::from(!announce);
    let p = |n: usize| format!("${}", n - shift);
    let written = &BULK_COLUMNS[..columns];
    let names: Vec<&str> = written.iter().map(|(name, ..)| *name).collect();
    let names = names.join(", ");
    let arrays: Vec<String> = written
        .iter()
        .enumerate()
        .map(|(i, (_, t, _))| format!("{}::{t}[]", p(i + 3)))
        .collect();
    // A column sent once has an empty array, which `unnest` pads with nulls, and its value
    // after the arrays.
    let mut once = 0;
    let values: Vec<String> = written
        .iter()
        .map(|(name, t, sent_once)| match sent_once {
            true => {
                once += 1;
                format!("coalesce(u.{name}, {}::{t})", p(2 + columns + once))
            }
            false => format!("u.{name}"),
        })
        .collect();
    let insert = format!(
        "INSERT INTO sked_tasks ({names}, created_at) \
         SELECT {}, {} \
         FROM unnest({}) WITH ORDINALITY AS u({names}, ord) \
         ORDER BY ord",
        values.join(", "),
        p(2),
        arrays.join(", "),
    );
    if !announce {
        return format!("{insert} RETURNING id");
    }
    format!(
        "WITH ins AS ({insert} RETURNING id, run_at, priority, state), \
             announced AS (SELECT {} FROM ( \
               SELECT min(run_at) AS first, max(priority) AS top, \
                 min(run_at) FILTER (WHERE state <> 'available') AS waiting FROM ins) f) \
             SELECT id FROM ins, announced ORDER BY id",
        notify_tasks_sql("f.first", "f.top", "f.waiting")
    )
}

/// [`bulk_insert_sql`] for each of [`SHAPES`] (prepared once per connection).
pub(super) static INSERTS: std::sync::LazyLock<[String; 4]> =
    std::sync::LazyLock::new(|| SHAPES.map(|columns| bulk_insert_sql(columns, true)));

/// [`INSERTS`] without their announcement.
pub(super) static QUIET_INSERTS: std::sync::LazyLock<[String; 4]> =
    std::sync::LazyLock::new(|| SHAPES.map(|columns| bulk_insert_sql(columns, false)));

/// Task fields as parallel arrays, for `unnest`, borrowed from the tasks: a batch copies no
/// payload, queue or kind to send them.
#[derive(Default)]
pub(super) struct Columns<'a> {
    pub(super) queue: Vec<&'a str>,
    pub(super) kind: Vec<&'a str>,
    pub(super) payload: Vec<&'a serde_json::Value>,
    pub(super) priority: Vec<i32>,
    pub(super) state: Vec<&'static str>,
    pub(super) run_at: Vec<Timestamp>,
    pub(super) max_attempts: Vec<i32>,
    pub(super) timeout_ms: Vec<Option<i64>>,
    pub(super) backoff_base_ms: Vec<Option<i64>>,
    pub(super) backoff_max_ms: Vec<Option<i64>>,
    pub(super) backoff: Vec<Option<String>>,
    pub(super) expires_at: Vec<Option<Timestamp>>,
    pub(super) schedule: Vec<Option<&'a str>>,
    pub(super) nominal_at: Vec<Option<Timestamp>>,
    pub(super) concurrency_key: Vec<Option<&'a str>>,
    pub(super) traceparent: Vec<Option<&'a str>>,
    /// How a task with parents starts ([`CHILDREN`]'s columns): its wait, and its error
    /// when it starts cancelled.
    pub(super) wait: Vec<Option<i64>>,
    pub(super) last_error: Vec<Option<String>>,
    pub(super) finished_at: Vec<Option<Timestamp>>,
    pub(super) has_children: Vec<bool>,
}

impl<'a> Columns<'a> {
    /// The announcement of these tasks, as [`notify_tasks_sql`] spells it: the earliest run
    /// time (microseconds, rounded down: never after the stored one), the highest priority,
    /// and the earliest run time of those that wait, if any.
    pub(super) fn announcement(&self) -> String {
        let first = self.run_at.iter().min().map(|t| t.as_microsecond());
        let top = self.priority.iter().max();
        let waiting = (self.run_at.iter().zip(&self.state))
            .filter(|(_, state)| **state != "available")
            .map(|(t, _)| t.as_microsecond())
            .min();
        let mut out = String::from("t");
        if let (Some(first), Some(top)) = (first, top) {
            out.push_str(&format!("{first}p{top}"));
        }
        if let Some(waiting) = waiting {
            out.push_str(&format!("w{waiting}"));
        }
        out
    }

    /// The parameters `$1`–`$18` of a one-task insert: the channel, now, then the first
    /// task's fields in the order of the table's columns, its backoff's spec and its deadline
    /// last.
    pub(super) fn first_row<'p>(&'p self, channel: &'p &str, now: &'p Timestamp) -> Vec<Param<'p>> {
        vec![
            channel,
            now,
            &self.queue[0],
            &self.kind[0],
            &self.payload[0],
            &self.priority[0],
            &self.state[0],
            &self.run_at[0],
            &self.max_attempts[0],
            &self.timeout_ms[0],
            &self.backoff_base_ms[0],
            &self.backoff_max_ms[0],
            &self.schedule[0],
            &self.nominal_at[0],
            &self.concurrency_key[0],
            &self.traceparent[0],
            &self.backoff[0],
            &self.expires_at[0],
        ]
    }

    pub(super) fn of(
        tasks: impl Iterator<Item = &'a TaskInsert>,
        now: Timestamp,
    ) -> Result<Columns<'a>> {
        let mut c = Columns::default();
        for t in tasks {
            let task = &t.task;
            let run_at = task.run_at.unwrap_or(now);
            c.queue.push(&task.queue);
            c.kind.push(&task.kind);
            c.payload.push(&task.payload);
            c.priority.push(task.priority);
            c.state.push(rules::state_for_run_at(run_at, now).as_str());
            c.run_at.push(run_at);
            c.max_attempts.push(task.max_attempts);
            c.timeout_ms.push(task.timeout.map(ms));
            let (base, max, spec) = sked_store::columns::backoff::columns(task.backoff.as_ref());
            c.backoff_base_ms.push(base);
            c.backoff_max_ms.push(max);
            c.backoff.push(spec);
            c.expires_at.push(rules::expires_at(t, now)?);
            c.schedule.push(t.schedule.as_deref());
            c.nominal_at.push(t.nominal_at);
            c.concurrency_key.push(task.key.as_deref());
            c.traceparent.push(task.traceparent.as_deref());
            c.wait.push(None);
            c.last_error.push(None);
            c.finished_at.push(None);
            c.has_children.push(false);
        }
        Ok(c)
    }
}

/// A column of [`Columns`] as a bulk insert sends it: the value every task shares, once, with
/// an empty array, or else the array of every task's value. The server decodes an array element
/// by element: a batch of 1,000 tasks of one queue, kind and priority used to send six arrays of
/// 1,000 equal values.
type Sent<'a, T> = (&'a [T], Option<&'a T>);

fn sent<T: PartialEq>(all: &[T]) -> Sent<'_, T> {
    match all.first() {
        Some(first) if all.iter().all(|v| v == first) => (&all[..0], Some(first)),
        _ => (all, None),
    }
}

/// The parameters of a bulk insert, [`SENT_ONCE`] columns [`sent`] as they may be.
pub(super) struct BulkParams<'a> {
    rows: &'a Columns<'a>,
    queue: Sent<'a, &'a str>,
    kind: Sent<'a, &'a str>,
    priority: Sent<'a, i32>,
    state: Sent<'a, &'static str>,
    run_at: Sent<'a, Timestamp>,
    max_attempts: Sent<'a, i32>,
}

impl<'a> BulkParams<'a> {
    pub(super) fn of(rows: &'a Columns<'a>) -> BulkParams<'a> {
        BulkParams {
            rows,
            queue: sent(&rows.queue),
            kind: sent(&rows.kind),
            priority: sent(&rows.priority),
            state: sent(&rows.state),
            run_at: sent(&rows.run_at),
            max_attempts: sent(&rows.max_attempts),
        }
    }

    /// The parameters after the channel: now, the arrays of the first `columns` of
    /// [`BULK_COLUMNS`], then the values sent once, in that order.
    pub(super) fn params(&'a self, now: &'a Timestamp, columns: usize) -> Vec<Param<'a>> {
        let r = self.rows;
        let arrays: [Param<'a>; 20] = [
            &self.queue.0,
            &self.kind.0,
            &r.payload,
            &self.priority.0,
            &self.state.0,
            &self.run_at.0,
            &self.max_attempts.0,
            &r.timeout_ms,
            &r.backoff_base_ms,
            &r.backoff_max_ms,
            &r.backoff,
            &r.expires_at,
            &r.schedule,
            &r.nominal_at,
            &r.concurrency_key,
            &r.traceparent,
            &r.wait,
            &r.last_error,
            &r.finished_at,
            &r.has_children,
        ];
        let once: [Param<'a>; SENT_ONCE] = [
            &self.queue.1,
            &self.kind.1,
            &self.priority.1,
            &self.state.1,
            &self.run_at.1,
            &self.max_attempts.1,
        ];
        let mut params: Vec<Param<'a>> = Vec::with_capacity(1 + columns + SENT_ONCE);
        params.push(now);
        params.extend_from_slice(&arrays[..columns]);
        params.extend_from_slice(&once);
        params
    }
}

/// What the insert of `rows` answers, given the ids it returned in insertion order: the
/// statement inserts in input order (`ORDER BY ord`), and identity values are handed out in
/// insertion order, so the ids ascend. Ids that do not are refused rather than matched to the
/// wrong tasks.
pub(super) fn answers(
    rows: &Columns<'_>,
    ids: &[tokio_postgres::Row],
) -> Result<Vec<TaskInserted>> {
    if ids.len() != rows.state.len() {
        return Err(StoreError::Backend(format!(
            "a bulk insert of {} tasks returned {} ids",
            rows.state.len(),
            ids.len()
        )));
    }
    let mut last = None;
    ids.iter()
        .enumerate()
        .map(|(k, row)| {
            let id: TaskId = col(row, 0)?;
            if last.is_some_and(|last| last >= id) {
                return Err(StoreError::Backend(format!(
                    "a bulk insert returned id {id} out of insertion order"
                )));
            }
            last = Some(id);
            Ok(TaskInserted {
                id,
                state: TaskState::parse(rows.state[k])
                    .map_err(|e| StoreError::Backend(e.to_string()))?,
                duplicate: false,
                debounced: false,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_columns_sent_once_are_written_by_every_shape() {
        let once: Vec<usize> = (0..BULK_COLUMNS.len())
            .filter(|&i| BULK_COLUMNS[i].2)
            .collect();
        assert_eq!(once.len(), SENT_ONCE);
        assert!(once.iter().all(|&i| i < SHAPES[0]));
        // Each statement names its values sent once after its arrays, numbered on from them.
        for (columns, announce) in SHAPES.iter().flat_map(|&c| [(c, true), (c, false)]) {
            let sql = bulk_insert_sql(columns, announce);
            let last = 2 + columns + SENT_ONCE - usize::from(!announce);
            assert!(sql.contains(&format!("${last}::")), "{sql}");
            assert!(!sql.contains(&format!("${}", last + 1)), "{sql}");
        }
    }
}
