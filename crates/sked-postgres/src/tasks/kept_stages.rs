//! A large stage of a workflow kept until it is released
//! (docs/decisions/0023-tasks-made-when-released.md): a run of tasks that all wait for one
//! wait and share every column but the payload goes in as parts of at most [`Keeping::part`]
//! tasks, each a row of `sked_stages`, its ids taken from the tasks' sequence.
//!
//! `sked_make_stage_rows` (migrations 38 and 39) makes its tasks' rows: the wait's cancel makes
//! them cancelled; the release marks a part released when claims may take it (it is due and
//! its queue has no limit, docs/decisions/0026-claims-that-take-a-released-stage.md), and
//! makes the others' rows available or scheduled; anything else that reads or changes tasks
//! by id or by filter makes them first, waiting (a released part's rest: available), as the
//! rows would have been all along. Claims take a released part's next tasks in claim order
//! and make them rows as their leases (`super::claim::sql`); the part keeps the rest. Counts
//! read a part's tasks as waiting or, released, available.
//!
//! Each statement here calls `sked_make_stage_rows` only when a stage it may make is kept:
//! PostgreSQL plans a SQL function's body at each call (about a millisecond), and checks a
//! condition that names none of the function's rows once, before calling it.

use jiff::Timestamp;
use sked_core::TaskId;
use sked_store::{Result, StoreError};
use tokio_postgres::GenericClient;

use super::insert_without_keys::Columns;
use crate::codec::{col, db_err};

pub(crate) use sked_store::kept::Keeping;

/// Whether the tasks `rows`, whose waits are `waits`, go in as a kept stage: at least `min`
/// of them, all waiting for the same wait, sharing every column but the payload, and none
/// with a value that another part of the store finds a task by (a deadline, a schedule, a
/// concurrency key, a trace).
pub(super) fn keeps(rows: &Columns<'_>, waits: &[Option<i64>], min: usize) -> bool {
    fn same<T: PartialEq>(v: &[T]) -> bool {
        v.windows(2).all(|w| w[0] == w[1])
    }
    let none = |v: &[Option<&str>]| v.iter().all(Option::is_none);
    rows.state.len() >= min.max(1)
        && rows.state.iter().all(|s| *s == "waiting")
        && waits.first().is_some_and(Option::is_some)
        && same(waits)
        && same(&rows.queue)
        && same(&rows.kind)
        && same(&rows.priority)
        && same(&rows.run_at)
        && same(&rows.max_attempts)
        && same(&rows.timeout_ms)
        && same(&rows.backoff_base_ms)
        && same(&rows.backoff_max_ms)
        && same(&rows.backoff)
        && same(&rows.has_children)
        && same(&rows.workflow)
        && rows.expires_at.iter().all(Option::is_none)
        && rows.nominal_at.iter().all(Option::is_none)
        && none(&rows.schedule)
        && none(&rows.concurrency_key)
        && none(&rows.traceparent)
        && rows.last_error.iter().all(Option::is_none)
}

/// The payloads of `rows` as one JSON array, as [`insert`] sends them; `None` when it is
/// longer than [`crate::KEPT_PAYLOAD_BYTES`].
pub(super) fn payloads(rows: &Columns<'_>) -> Option<String> {
    let text = serde_json::to_string(&rows.payload).ok()?;
    (text.len() <= crate::KEPT_PAYLOAD_BYTES).then_some(text)
}

/// Inserts `rows` ([`keeps`] them) as one kept stage, in parts of at most `part` tasks (`None`:
/// one part, not claimable), their payloads given as one JSON array ([`payloads`]); answers its
/// tasks' ids, ascending. The ids come from the sequence named
/// in the statement: looked up in it, PostgreSQL opens the sequence for each id. The payloads
/// are read as one value and taken apart: read as an array of values, each is parsed on its
/// own (the statement's bind took 23 ms for 10,000 small payloads, 9 as one value).
pub(super) async fn insert<C: GenericClient + Sync>(
    c: &C,
    rows: &Columns<'_>,
    payloads: &str,
    wait: i64,
    part: Option<usize>,
    now: Timestamp,
) -> Result<Vec<TaskId>> {
    let n = rows.state.len() as i32;
    let claimable = part.is_some();
    let part = part.map_or(i64::from(n), |p| p.clamp(1, i32::MAX as usize) as i64);
    let parts = c
        .query(
            "INSERT INTO sked_stages (wait, workflow, ids, span, payloads, queue, kind, priority, \
               run_at, max_attempts, timeout_ms, backoff_base_ms, backoff_max_ms, backoff, \
               has_children, created_at, claimable, size) \
             SELECT $1, $2, array_agg(x.id ORDER BY x.k), int8range(min(x.id), max(x.id) + 1), \
               array_agg(x.e ORDER BY x.k), $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $16, \
               count(*) \
             FROM (SELECT i.k, j.e, i.id \
                   FROM (SELECT x AS id, row_number() OVER (ORDER BY x) AS k FROM \
                         (SELECT nextval('sked_tasks_id_seq') AS x \
                          FROM generate_series(1, $15)) a) i \
                   JOIN jsonb_array_elements($3::text::jsonb) WITH ORDINALITY AS j(e, k) \
                     ON j.k = i.k) x \
             GROUP BY (x.k - 1) / $17 \
             RETURNING ids, cardinality(payloads)",
            &[
                &wait,
                &rows.workflow[0],
                &payloads,
                &rows.queue[0],
                &rows.kind[0],
                &rows.priority[0],
                &rows.run_at[0],
                &rows.max_attempts[0],
                &rows.timeout_ms[0],
                &rows.backoff_base_ms[0],
                &rows.backoff_max_ms[0],
                &rows.backoff[0],
                &rows.has_children[0],
                &now,
                &n,
                &claimable,
                &part,
            ],
        )
        .await
        .map_err(db_err)?;
    let mut runs: Vec<Vec<TaskId>> = Vec::with_capacity(parts.len());
    let mut kept = 0;
    for row in &parts {
        runs.push(col(row, 0)?);
        kept += col::<i32>(row, 1)?;
    }
    runs.sort_unstable_by_key(|ids| ids.first().copied());
    let ids = runs.concat();
    if ids.len() != rows.state.len() || kept != n {
        return Err(StoreError::Backend(format!(
            "a kept stage of {} tasks took {} ids and {kept} payloads",
            rows.state.len(),
            ids.len()
        )));
    }
    Ok(ids)
}

/// Makes the rows of the kept stages that hold any of `ids`, waiting; with `family`, also
/// those of their parents and children (a task read with its family, a change that may reach
/// them).
pub(crate) async fn make_rows_of<C: GenericClient + Sync>(
    c: &C,
    ids: &[TaskId],
    family: bool,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    c.execute(
        "SELECT count(*) FROM sked_make_stage_rows($1, $2, NULL, false, NULL, NULL, NULL, NULL) \
         WHERE EXISTS (SELECT 1 FROM sked_stages)",
        &[&ids, &family],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Makes the rows of the kept stages of the workflow `w`, waiting.
pub(crate) async fn make_workflow_rows<C: GenericClient + Sync>(
    c: &C,
    w: sked_core::WorkflowId,
) -> Result<()> {
    c.execute(
        "SELECT count(*) FROM \
         sked_make_stage_rows(NULL, false, ARRAY[$1::bigint], false, NULL, NULL, NULL, NULL) \
         WHERE EXISTS (SELECT 1 FROM sked_stages WHERE workflow = $1)",
        &[&w],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Makes the rows of every kept stage, waiting: before a read or a change that finds tasks by
/// a filter.
pub(crate) async fn make_all_rows<C: GenericClient + Sync>(c: &C) -> Result<()> {
    c.execute(
        "SELECT count(*) FROM \
         sked_make_stage_rows(NULL, false, NULL, true, NULL, NULL, NULL, NULL) \
         WHERE EXISTS (SELECT 1 FROM sked_stages)",
        &[],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Makes the rows of the released parts of the queue `queue`, available, when it has a limit:
/// claims take a limited queue's tasks by a walk of its rows, never from parts.
pub(crate) async fn make_released_rows_if_limited<C: GenericClient + Sync>(
    c: &C,
    queue: &str,
) -> Result<()> {
    c.execute(
        &format!(
            "SELECT count(*) FROM sked_make_stage_rows( \
               (SELECT array_agg(i) FROM sked_stages s, unnest(s.ids[s.taken + 1:]) AS i \
                WHERE s.released AND s.queue = $1), \
               false, NULL, false, NULL, NULL, NULL, NULL) \
             WHERE EXISTS (SELECT 1 FROM sked_stages WHERE released AND queue = $1) \
               AND EXISTS (SELECT 1 FROM sked_queues q WHERE q.name = $1 AND {})",
            sked_store::keyed::LIMITED
        ),
        &[&queue],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// What the ends do to the kept stages of the waits they reached, as the release's count
/// (`COUNT_RELEASE_CANCEL`) does to rows, and answered as it answers: the
/// stages of the waits `$1` made released at `$2` (now), those of the waits `$3` made
/// cancelled, each with its error in `$4`.
pub(crate) const RELEASE_KEPT: &str = "WITH m AS (SELECT * FROM sked_make_stage_rows(\
      NULL, false, NULL, false, $1::bigint[], $3::bigint[], $4::text[], $2) \
      WHERE EXISTS (SELECT 1 FROM sked_stages WHERE wait = ANY($1) OR wait = ANY($3))) \
    SELECT NULL::bigint, min(run_at), max(priority), \
      min(run_at) FILTER (WHERE state = 'scheduled'), NULL::bigint \
      FROM m WHERE state <> 'cancelled' HAVING count(*) > 0 \
    UNION ALL SELECT id, NULL, NULL, NULL, wait FROM m WHERE state = 'cancelled'";
