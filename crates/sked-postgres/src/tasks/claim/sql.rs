//! The claim's statements, in one place: staging due tasks, the claim itself (from the front
//! or after a position), the queue settings it reads, the lease's end and heartbeats. The
//! claim path (`claim.rs`, `limited.rs`, `probe.rs`) runs them; nothing here runs anything.

use sked_store::keyed;
use sked_store::states::TIMED;

use crate::codec::TASK_COLUMNS;
use crate::listen::notify_tasks_sql;
use crate::tasks::Param;

/// Due scheduled/retrying tasks become available (`$1` the channel, `$2` now), at most
/// [`STAGE_BATCH`], and are announced by their highest priority and earliest run time. One
/// row: that priority and run time (null when none was due), how many, and when the next
/// waiting task is due. Rows another node is staging are skipped.
pub(super) static STAGE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH staged AS ( \
           UPDATE sked_tasks SET state = 'available' WHERE id IN ( \
             SELECT id FROM sked_tasks WHERE state IN {TIMED} AND run_at <= $2 \
             ORDER BY run_at LIMIT {STAGE_BATCH} FOR UPDATE SKIP LOCKED) \
           RETURNING priority, run_at) \
         SELECT f.top, f.first, f.n, \
           (SELECT min(run_at) FROM sked_tasks WHERE state IN {TIMED} AND run_at > $2), \
           CASE WHEN f.n > 0 THEN {} END \
         FROM (SELECT max(priority) AS top, min(run_at) AS first, count(*) AS n FROM staged) f",
        notify_tasks_sql("f.first", "f.top", "NULL::timestamptz")
    )
});

/// At most this many tasks staged per claim.
pub(super) const STAGE_BATCH: i64 = 10_000;

/// Keeps the planner from reading the staging and claim statements' rows through a bitmap:
/// set before them and reset after, on the same connection, in the same round trip.
///
/// Both walk an index in order and stop after a batch. PostgreSQL chooses between that walk
/// and a bitmap read of every matching row, sorted, by how many rows its statistics say
/// match. Before the table is first analyzed (a new deployment's first bulk enqueue, until
/// autovacuum gets to it) it guesses a few hundred, and the bitmap read looks cheaper: it
/// read and sorted every available task for each claim, 180–220 ms per claim of 1,000 among
/// 200,000 just enqueued, where the walk takes a few. Once analyzed, the statistics lead to
/// the walk (even when they say that no task is available), or to the bitmap read only when
/// about as many rows match as a batch takes, where both cost the same.
pub(crate) const ORDERED_WALK: &str = "SET enable_bitmapscan = off";
/// Ends [`ORDERED_WALK`].
pub(crate) const ORDERED_WALK_END: &str = "RESET enable_bitmapscan";

/// Candidates `c` of a queue that is neither paused nor limited.
pub(super) static OPEN: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "NOT EXISTS (SELECT 1 FROM sked_queues q WHERE q.name = c.queue AND {})",
        keyed::LIMITED_OR_PAUSED
    )
});

/// [`OPEN`] for parts `s` of kept stages.
pub(super) static OPEN_PARTS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| OPEN.replace("c.queue", "s.queue"));

/// Paused queues and queues with a concurrency, rate or per-key limit (whether limited, and
/// whether by a rate alone).
pub(super) static QUEUE_SETTINGS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT q.name, q.paused, CASE WHEN {} THEN {} END \
         FROM sked_queues q WHERE {}",
        keyed::LIMITED,
        super::rated::RATE_ONLY,
        keyed::LIMITED_OR_PAUSED
    )
});

/// The claim of the first available tasks that match `filter` (`$1` now, `$2` the lease's end,
/// `$3` the worker, `$4` at most how many, `$5` the timeout grace in milliseconds), in claim
/// order. Queues that are paused or limited are left to the slow path ([`claim_limited`]).
///
/// With `after`, the claim starts after the claim-order key (`$6` priority, `$7` run time,
/// `$8` id) where the store's previous claim ended (see [`super::positions`]): the rest of that
/// priority, then the lower ones.
///
/// The planner costs the `NOT EXISTS` from `sked_queues`' statistics. Without any (the table
/// is small and changes seldom, so autovacuum seldom analyzes it) it assumed a table of some
/// size, chose a hash anti-join and read and sorted every available task for each claim (a
/// claim of 1,000 among 250,000 available took 435 ms, against 60 ms walking the claim index
/// in order). So the migrations and every change of queue settings analyze `sked_queues`
/// ([`crate::queues::update`]). A scalar subquery per candidate instead of `NOT EXISTS` did not
/// depend on the statistics, but cost a fifth of the drain's throughput.
///
/// `open`: among the queues that are neither paused nor limited, and with `with_parts` from
/// released parts of kept stages too (`candidates`, with `$parts` (a placeholder) how many parts to
/// lock); otherwise every queue of `filter` (a walk of one limited queue, see
/// [`super::limited`]: no part of a limited queue is released). Without parts, from the task
/// table only.
///
/// A claim from parts (docs/decisions/0026-claims-that-take-a-released-stage.md) locks the
/// first `$parts` parts in claim order that no other claim holds (from the front: the parts are
/// few, and a part another claim held may lie before the position), keeps those of them
/// that hold its first `$4` tasks, and takes the first `$4` of their tasks and of the rows,
/// merged in claim order: the rows by an update, the parts' tasks by an insert of their rows,
/// running, as the leases the update would have written. Each part keeps the tasks left, or
/// goes. Everything about a part is read from the row its lock returned: the statement's
/// snapshot may hold an older one (a claim that committed after the statement began), so the
/// update and the delete find the part by id alone. Without a part, the merge (a sort) does
/// not run.
///
/// Its tasks' rows end with a null; one more row, with no task, answers whether any released
/// part was there when the claim began (taken, held by another claim or left): one this claim
/// could take ([`PARTS_OF_THIS_CLAIM`]; claims like it go on until none is), one of other
/// queues or kinds, or of a paused queue, only ([`PARTS_ELSEWHERE`]; other claims still look
/// at parts), or none (0).
pub(crate) fn claim_sql(
    candidates: &Candidates,
    after: bool,
    open: bool,
    with_parts: bool,
) -> String {
    let filter = &candidates.rows;
    let open_rows = match open {
        true => OPEN.as_str(),
        false => "true",
    };
    let picked = match after {
        false => format!(
            "picked AS (SELECT id, priority, run_at FROM sked_tasks c WHERE {filter} \
               AND {open_rows} ORDER BY priority DESC, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED)"
        ),
        true => format!(
            "same AS (SELECT id, priority, run_at FROM sked_tasks c WHERE {filter} \
               AND priority = $6 AND (run_at, id) > ($7, $8) AND {open_rows} \
               ORDER BY run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED), \
             lower AS (SELECT id, priority, run_at FROM sked_tasks c WHERE {filter} \
               AND priority < $6 AND {open_rows} \
               ORDER BY priority DESC, run_at, id LIMIT $4 - (SELECT count(*) FROM same) \
               FOR UPDATE SKIP LOCKED), \
             picked AS (SELECT * FROM same UNION ALL SELECT * FROM lower)"
        ),
    };
    let lease = lease_end_sql("t.timeout_ms", "$1", "$2", "$5");
    let update = format!(
        "UPDATE sked_tasks t SET state = 'running', attempt = t.attempt + 1, started_at = $1, \
           lease_expires_at = {lease}, worker = $3, cancel_requested = false"
    );
    if !(open && with_parts) {
        return format!(
            "WITH {picked} {update} FROM picked WHERE t.id = picked.id RETURNING {TASK_COLUMNS}"
        );
    }
    let (parts_filter, parts) = (&candidates.parts, &candidates.parts_placeholder);
    let open_parts = OPEN_PARTS.as_str();
    let lease_of_part = lease_end_sql("p.timeout_ms", "$1", "$2", "$5");
    let no_task = vec!["NULL"; TASK_COLUMNS.split(',').count()].join(", ");
    format!(
        "WITH {picked}, \
         locked AS (SELECT * FROM sked_stages s WHERE {parts_filter} AND {open_parts} \
           ORDER BY s.priority DESC, s.run_at, lower(s.span) LIMIT {parts} \
           FOR UPDATE SKIP LOCKED), \
         parts AS (SELECT l.* FROM locked l WHERE l.id IN ( \
           SELECT w.id FROM (SELECT l.id, sum(l.size - l.taken) OVER ( \
               ORDER BY l.priority DESC, l.run_at, lower(l.span)) - (l.size - l.taken) AS before \
             FROM locked l) w \
           WHERE w.before < $4)), \
         offered AS (SELECT p.id AS part, u.id, p.priority, p.run_at, u.payload FROM parts p \
           CROSS JOIN LATERAL unnest(p.ids[p.taken + 1 : p.taken + $4::int], \
                                     p.payloads[p.taken + 1 : p.taken + $4::int]) AS u(id, payload)), \
         chosen AS (SELECT a.part, a.id, a.payload FROM ( \
             SELECT NULL::bigint AS part, id, priority, run_at, NULL::jsonb AS payload FROM picked \
             UNION ALL SELECT part, id, priority, run_at, payload FROM offered) a \
           WHERE EXISTS (SELECT 1 FROM parts) \
           ORDER BY a.priority DESC, a.run_at, a.id LIMIT $4), \
         own AS (SELECT id FROM picked WHERE NOT EXISTS (SELECT 1 FROM parts) \
           UNION ALL SELECT id FROM chosen WHERE part IS NULL), \
         updated AS ({update} FROM own WHERE t.id = own.id RETURNING {TASK_COLUMNS}), \
         inserted AS (INSERT INTO sked_tasks AS t (id, queue, kind, payload, priority, state, \
             run_at, attempt, max_attempts, timeout_ms, backoff_base_ms, backoff_max_ms, backoff, \
             has_children, wait, workflow, created_at, started_at, lease_expires_at, worker, \
             cancel_requested) OVERRIDING SYSTEM VALUE \
           SELECT k.id, p.queue, p.kind, k.payload, p.priority, 'running', p.run_at, 1, \
             p.max_attempts, p.timeout_ms, p.backoff_base_ms, p.backoff_max_ms, p.backoff, \
             p.has_children, p.wait, p.workflow, p.created_at, $1, {lease_of_part}, $3, false \
           FROM chosen k JOIN parts p ON p.id = k.part \
           RETURNING {TASK_COLUMNS}), \
         took AS (SELECT k.part, p.taken + count(*)::int AS taken, p.size FROM chosen k \
           JOIN parts p ON p.id = k.part GROUP BY k.part, p.taken, p.size), \
         kept AS (UPDATE sked_stages s SET taken = took.taken FROM took \
           WHERE s.id = took.part AND took.taken < took.size), \
         emptied AS (DELETE FROM sked_stages s USING took \
           WHERE s.id = took.part AND took.taken >= took.size) \
         SELECT *, NULL::int FROM updated UNION ALL SELECT *, NULL FROM inserted \
         UNION ALL SELECT {no_task}, CASE \
           WHEN EXISTS (SELECT 1 FROM sked_stages s WHERE {parts_filter} AND {open_parts}) \
             THEN {PARTS_OF_THIS_CLAIM} \
           WHEN EXISTS (SELECT 1 FROM sked_stages s WHERE s.released) THEN {PARTS_ELSEWHERE} \
           ELSE 0 END"
    )
}

/// A claim's last row says a released part was there that it could take.
pub(crate) const PARTS_OF_THIS_CLAIM: i32 = 2;
/// A claim's last row says released parts were there, none of which it could take.
pub(crate) const PARTS_ELSEWHERE: i32 = 1;

/// How many parts a claim of `max` tasks locks, parts holding at most `part` tasks: enough
/// for `max` when at most the first of them is part taken.
pub(crate) fn parts_to_lock(max: u32, part: usize) -> i64 {
    let part = part.max(1) as i64;
    (i64::from(max) + part - 1) / part + 1
}

/// The end of the lease of a task whose timeout is `timeout` (milliseconds) started at
/// `start`, asked until `wanted`: never past its timeout and the grace (`grace`,
/// milliseconds) after the start, as [`rules::lease_end`] says.
pub(super) fn lease_end_sql(timeout: &str, start: &str, wanted: &str, grace: &str) -> String {
    format!(
        "CASE WHEN {timeout} IS NULL THEN {wanted}::timestamptz \
           ELSE LEAST({wanted}::timestamptz, \
             {start}::timestamptz + ({timeout} + {grace}::bigint) * interval '1 millisecond') END"
    )
}

/// The timeout grace in whole milliseconds, as the lease statements take it: between zero and
/// the longest duration sked takes, so that the sum with a timeout stays in range.
pub(crate) fn grace_ms(grace: jiff::SignedDuration) -> i64 {
    let most = sked_core::MAX_DURATION.as_millis();
    i64::try_from(grace.as_millis().clamp(0, most)).unwrap_or(0)
}

/// The `WHERE` of a claim's candidate scan at `now`, with its parameters appended to
/// `params`: available tasks that may start then (none past its deadline).
pub(super) fn candidates_filter<'a>(
    now: &'a jiff::Timestamp,
    queues: &'a Vec<String>,
    kinds: &'a Vec<String>,
    min_priority: &'a Option<i32>,
    params: &mut Vec<Param<'a>>,
) -> String {
    Candidates::of(now, queues, kinds, min_priority, None, params).rows
}

/// A claim's candidates: the `WHERE` of its scan of rows ([`candidates_filter`]) and of
/// released parts of kept stages (`s`; a part's tasks have no deadline), and the placeholder
/// of how many parts it looks at.
pub(crate) struct Candidates {
    pub(crate) rows: String,
    pub(crate) parts: String,
    pub(crate) parts_placeholder: String,
}

impl Candidates {
    /// The candidates at `now` of the queues, kinds and priorities given, their parameters
    /// appended to `params`; `parts`, how many parts to look at.
    pub(crate) fn of<'a>(
        now: &'a jiff::Timestamp,
        queues: &'a Vec<String>,
        kinds: &'a Vec<String>,
        min_priority: &'a Option<i32>,
        parts: Option<&'a i64>,
        params: &mut Vec<Param<'a>>,
    ) -> Candidates {
        params.push(now);
        let startable = sked_store::expiry::startable(&format!("${}", params.len()));
        // The same columns in a part, unqualified.
        let narrowed = narrowed(queues, kinds, min_priority, params);
        let parts_placeholder = match parts {
            Some(n) => {
                params.push(n);
                format!("${}", params.len())
            }
            None => "0".into(),
        };
        Candidates {
            rows: format!("state = 'available' AND {startable}{narrowed}"),
            parts: format!("s.released{narrowed}"),
            parts_placeholder,
        }
    }
}

/// The conditions on queue, kind and priority, their parameters appended to `params`.
fn narrowed<'a>(
    queues: &'a Vec<String>,
    kinds: &'a Vec<String>,
    min_priority: &'a Option<i32>,
    params: &mut Vec<Param<'a>>,
) -> String {
    let mut sql = String::new();
    if !queues.is_empty() {
        params.push(queues);
        sql.push_str(&format!(" AND queue = ANY(${})", params.len()));
    }
    if !kinds.is_empty() {
        params.push(kinds);
        sql.push_str(&format!(" AND kind = ANY(${})", params.len()));
    }
    if let Some(min) = min_priority {
        params.push(min);
        sql.push_str(&format!(" AND priority >= ${}", params.len()));
    }
    sql
}

/// Extends a held attempt's lease (`$1` id, `$2` attempt) until `$3`, or its timeout and the
/// grace (`$4`, milliseconds) after its start when that comes first; a task with a timeout
/// whose lease would end by now (`$5`) is not extended, as [`rules::heartbeat`] says.
pub(crate) static HEARTBEAT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let lease = lease_end_sql("t.timeout_ms", "t.started_at", "$3", "$4");
    let running = crate::tasks::by_key("state = 'running'");
    format!(
        "UPDATE sked_tasks t SET lease_expires_at = {lease} \
         WHERE id = $1 AND {running} AND attempt = $2 \
           AND (timeout_ms IS NULL OR {lease} > $5::timestamptz) \
         RETURNING cancel_requested, lease_expires_at"
    )
});
