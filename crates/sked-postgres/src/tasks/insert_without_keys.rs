//! The bulk insert of tasks without unique keys: one `unnest` statement, its columns by the
//! batch's shape, the values every task shares sent once, and the ids it answers.

use jiff::Timestamp;
use sked_core::{TaskId, TaskState};
use sked_store::*;
use tokio_postgres::types::ToSql;

use super::Param;
use crate::codec::{col, ms};
use crate::listen::notify_tasks_sql;

/// The columns a bulk insert may write, with their types, in the order of its arrays (`$3` on
/// in the announcing statement): those every task sets, then its options, then the concurrency
/// key and trace context, then how a task with parents starts. A column whose value every task
/// of a batch shares is sent once (see [`sent`]), the payload excepted: its array gives the
/// statement its rows. `has_children` is set at insert for a workflow's tasks that others of
/// it wait for (a later task's insert flags its parents otherwise), and `workflow` names the
/// workflow of its tasks.
const BULK_COLUMNS: [(&str, &str); 21] = [
    ("queue", "text"),
    ("kind", "text"),
    ("payload", "jsonb"),
    ("priority", "int"),
    ("state", "text"),
    ("run_at", "timestamptz"),
    ("max_attempts", "int"),
    ("timeout_ms", "bigint"),
    ("backoff_base_ms", "bigint"),
    ("backoff_max_ms", "bigint"),
    ("backoff", "text"),
    ("expires_at", "timestamptz"),
    ("schedule", "text"),
    ("nominal_at", "timestamptz"),
    ("concurrency_key", "text"),
    ("traceparent", "text"),
    ("wait", "bigint"),
    ("last_error", "text"),
    ("finished_at", "timestamptz"),
    ("has_children", "bool"),
    ("workflow", "bigint"),
];

/// The one column of [`BULK_COLUMNS`] always sent as an array of every task's value.
const PAYLOAD: usize = 2;

/// How many of [`BULK_COLUMNS`] a batch writes, by its [`shape`]: tasks
/// without options, tasks with a timeout, backoff, deadline or schedule, tasks with a concurrency key or
/// trace context; and tasks with parents ([`CHILDREN`]), which also write how they start. The
/// columns left out are null (or their defaults) and cost the statement nothing; one a shape
/// writes costs it a parameter and a `coalesce` per row even when it goes once (see [`sent`]).
/// Bulk enqueues on PostgreSQL were 5–9 % slower with two arrays of nulls more.
pub(super) const SHAPES: [usize; 4] = [7, 14, 16, 21];

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
        .map(|(i, (_, t))| format!("{}::{t}[]", p(i + 3)))
        .collect();
    // A column sent once has an empty array, which `unnest` pads with nulls, and its value
    // after the arrays.
    let mut once = 0;
    let values: Vec<String> = written
        .iter()
        .enumerate()
        .map(|(i, (name, t))| match i == PAYLOAD {
            true => format!("u.{name}"),
            false => {
                once += 1;
                format!("coalesce(u.{name}, {}::{t})", p(2 + columns + once))
            }
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
    pub(super) workflow: Vec<Option<i64>>,
}

impl<'a> Columns<'a> {
    /// Columns with room for `n` tasks: a workflow's stage of 10,000 grew each of them about
    /// fourteen times.
    fn with_capacity(n: usize) -> Columns<'a> {
        Columns {
            queue: Vec::with_capacity(n),
            kind: Vec::with_capacity(n),
            payload: Vec::with_capacity(n),
            priority: Vec::with_capacity(n),
            state: Vec::with_capacity(n),
            run_at: Vec::with_capacity(n),
            max_attempts: Vec::with_capacity(n),
            timeout_ms: Vec::with_capacity(n),
            backoff_base_ms: Vec::with_capacity(n),
            backoff_max_ms: Vec::with_capacity(n),
            backoff: Vec::with_capacity(n),
            expires_at: Vec::with_capacity(n),
            schedule: Vec::with_capacity(n),
            nominal_at: Vec::with_capacity(n),
            concurrency_key: Vec::with_capacity(n),
            traceparent: Vec::with_capacity(n),
            wait: Vec::with_capacity(n),
            last_error: Vec::with_capacity(n),
            finished_at: Vec::with_capacity(n),
            has_children: Vec::with_capacity(n),
            workflow: Vec::with_capacity(n),
        }
    }

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
        let mut c = Columns::with_capacity(tasks.size_hint().0);
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
            c.workflow.push(None);
        }
        Ok(c)
    }
}

/// A column of [`Columns`] as a bulk insert sends it: its array, and its value sent once (null
/// when the array is sent). The value every task shares goes once, after an empty array: the
/// server decodes an array element by element, and a batch of 1,000 tasks of one queue, kind
/// and priority used to send six arrays of 1,000 equal values; a column most tasks leave empty
/// sends one null.
type Sent<'a> = (
    Box<dyn ToSql + Sync + Send + 'a>,
    Box<dyn ToSql + Sync + Send + 'a>,
);

fn sent<'a, T: ToSql + Sync + PartialEq + 'a>(all: &'a [T]) -> Sent<'a> {
    match all.first() {
        Some(first) if all.iter().all(|v| v == first) => {
            (Box::new(&all[..0]), Box::new(Some(first)))
        }
        _ => (Box::new(all), Box::new(None::<&T>)),
    }
}

/// The parameters of a bulk insert: each of [`BULK_COLUMNS`] [`sent`] as it may be, the
/// payload always as an array.
pub(super) struct BulkParams<'a> {
    columns: [Sent<'a>; 21],
}

impl<'a> BulkParams<'a> {
    pub(super) fn of(r: &'a Columns<'a>) -> BulkParams<'a> {
        BulkParams {
            columns: [
                sent(&r.queue),
                sent(&r.kind),
                (
                    Box::new(&r.payload[..]),
                    Box::new(None::<&serde_json::Value>),
                ),
                sent(&r.priority),
                sent(&r.state),
                sent(&r.run_at),
                sent(&r.max_attempts),
                sent(&r.timeout_ms),
                sent(&r.backoff_base_ms),
                sent(&r.backoff_max_ms),
                sent(&r.backoff),
                sent(&r.expires_at),
                sent(&r.schedule),
                sent(&r.nominal_at),
                sent(&r.concurrency_key),
                sent(&r.traceparent),
                sent(&r.wait),
                sent(&r.last_error),
                sent(&r.finished_at),
                sent(&r.has_children),
                sent(&r.workflow),
            ],
        }
    }

    /// The parameters after the channel: now, the arrays of the first `columns` of
    /// [`BULK_COLUMNS`], then the values sent once of those columns but the payload, in that
    /// order.
    pub(super) fn params(&'a self, now: &'a Timestamp, columns: usize) -> Vec<Param<'a>> {
        let written = &self.columns[..columns];
        let mut params: Vec<Param<'a>> = Vec::with_capacity(2 * columns);
        params.push(now);
        params.extend(written.iter().map(|(array, _)| &**array as Param<'a>));
        params.extend(
            (written.iter().enumerate())
                .filter(|(i, _)| *i != PAYLOAD)
                .map(|(_, (_, once))| &**once as Param<'a>),
        );
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
    fn every_column_but_the_payload_has_a_value_sent_once_after_the_arrays() {
        assert!(SHAPES.iter().all(|&columns| columns > PAYLOAD));
        for (columns, announce) in SHAPES.iter().flat_map(|&c| [(c, true), (c, false)]) {
            let sql = bulk_insert_sql(columns, announce);
            let last = 2 + 2 * columns - 1 - usize::from(!announce);
            assert!(sql.contains(&format!("${last}::")), "{sql}");
            assert!(!sql.contains(&format!("${}", last + 1)), "{sql}");
            assert_eq!(sql.matches("coalesce(u.").count(), columns - 1, "{sql}");
        }
    }

    #[test]
    fn a_shared_value_goes_once_and_a_varied_one_as_an_array() {
        let (payload, a, b) = (
            serde_json::json!({}),
            serde_json::json!(1),
            serde_json::json!(2),
        );
        let task = |timeout: Option<i64>| {
            let mut c = Columns::default();
            c.payload.push(&payload);
            c.timeout_ms.push(timeout);
            c
        };
        let mut rows = task(None);
        rows.payload.push(&a);
        rows.timeout_ms.push(None);
        rows.payload.push(&b);
        rows.timeout_ms.push(Some(5));
        let sent = BulkParams::of(&rows);
        let debug = |p: Param<'_>| format!("{p:?}");
        // The payload: always every task's; the timeouts differ: every task's, none once.
        assert_eq!(debug(&*sent.columns[PAYLOAD].0), debug(&&rows.payload[..]));
        assert_eq!(debug(&*sent.columns[7].0), debug(&&rows.timeout_ms[..]));
        assert_eq!(debug(&*sent.columns[7].1), debug(&None::<&Option<i64>>));
        let rows = {
            let mut r = task(None);
            r.payload.push(&a);
            r.timeout_ms.push(None);
            r
        };
        let sent = BulkParams::of(&rows);
        assert_eq!(debug(&*sent.columns[7].0), debug(&&rows.timeout_ms[..0]));
        assert_eq!(debug(&*sent.columns[7].1), debug(&Some(&None::<i64>)));
    }
}
