//! Statements whose cost depends on a partial index. SQLite uses a partial index only when the
//! statement's `WHERE` repeats the index's predicate term by term, so each statement here is
//! listed with the indexes it must use, and a test asks SQLite's planner whether it does.

use std::sync::LazyLock;

use sked_core::TaskState;
use sked_store::counts;
use sked_store::keyed::holds_its_key;
use sked_store::states::{ACTIVE_ANY, EXPIRABLE_ANY, FINISHED, FINISHED_ANY, Spelling, TIMED};

/// Waiting tasks that are due become available (`?1`: now).
pub(crate) static STAGE: LazyLock<String> = LazyLock::new(|| {
    format!("UPDATE tasks SET state = 'available' WHERE state IN {TIMED} AND run_at <= ?1")
});

/// When the earliest waiting task is due.
pub(crate) static NEXT_RUN_AT: LazyLock<String> =
    LazyLock::new(|| format!("SELECT min(run_at) FROM tasks WHERE state IN {TIMED}"));

/// The unfinished task without a dedup window that holds a unique key (`?1`).
pub(crate) static UNIQUE_KEY_HOLDER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id, state FROM tasks WHERE unique_key = ?1 AND unique_until IS NULL AND {ACTIVE_ANY}"
    )
});

/// The latest task whose dedup window holds a unique key (`?1`) after `?2`.
pub(crate) const UNIQUE_KEY_WINDOW: &str = "SELECT id, state FROM tasks \
    WHERE unique_key = ?1 AND unique_until > ?2 ORDER BY id DESC LIMIT 1";

/// Whether any task waits for its parents: one probe of the waiting tasks, and of the kept
/// stages not released. When none does, no end has a child to count down.
pub(crate) const ANY_WAITING: &str = "SELECT 1 FROM tasks WHERE state = 'waiting' \
    UNION ALL SELECT 1 FROM stages WHERE NOT released LIMIT 1";

/// The waits the ends of tasks `?1` (an id list) count (see [`crate::tasks::dependents`]):
/// those that wait for an ended task and have not counted it, and those that wait for the
/// whole of an ended task's wait and have not counted it; each with the ended task, the wait's
/// parents not yet counted and what a failed parent does to its tasks.
pub(crate) const WAITS_REACHED: &str = "SELECT r.wait, r.parent, w.parents_left, w.run_anyway \
    FROM (SELECT p.wait AS wait, p.parent AS parent FROM wait_parents p \
          WHERE p.parent IN rarray(?1) AND p.done = 0 \
          UNION ALL \
          SELECT s.wait, t.id FROM tasks t JOIN wait_stages s ON s.stage = t.wait \
          WHERE t.id IN rarray(?1) AND NOT EXISTS \
            (SELECT 1 FROM wait_counted c WHERE c.task = t.id AND c.wait = s.wait)) r \
    JOIN waits w ON w.id = r.wait";

/// A schedule's (`?1`) unfinished tasks.
pub(crate) static SCHEDULE_ACTIVE: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT id FROM tasks WHERE schedule = ?1 AND {ACTIVE_ANY} ORDER BY id")
});

/// The tasks past their deadline (`?1`: now) that have not started, soonest first, at most
/// `?2`: read from the index of tasks that can expire.
pub(crate) static EXPIRING: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id FROM tasks WHERE expires_at IS NOT NULL AND attempt = 0 AND {EXPIRABLE_ANY} \
         AND expires_at <= ?1 ORDER BY expires_at LIMIT ?2"
    )
});

/// The distinct queues of the tasks that match `cond` (see [`counts::queue_walk`]), as the
/// recursive CTE `g`.
fn walk(cond: &str) -> String {
    counts::queue_walk("g", "tasks", cond)
}

/// The distinct queues of the available tasks, one probe of `tasks_available_queue` each.
pub(crate) static AVAILABLE_QUEUES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE {} SELECT name FROM g WHERE name IS NOT NULL",
        walk("state = 'available'")
    )
});

/// The first available tasks of every queue in claim order, at most `?1`: their keys and queue,
/// read from the index alone. `filter` adds conditions, numbering its parameters from `?2`.
pub(crate) fn claim_keys_all(filter: &str) -> String {
    format!(
        "SELECT priority, run_at, id, queue FROM tasks WHERE state = 'available'{filter} \
         ORDER BY priority DESC, run_at, id LIMIT ?1"
    )
}

/// The first available tasks of one queue (`?1`) in claim order, at most `?2`: their keys in
/// that order, read from the index alone. `filter` adds conditions, numbering its parameters
/// from `?3`.
pub(crate) fn claim_keys(filter: &str) -> String {
    format!(
        "SELECT priority, run_at, id FROM tasks WHERE state = 'available' AND queue = ?1{filter} \
         ORDER BY priority DESC, run_at, id LIMIT ?2"
    )
}

/// The distinct concurrency keys of one queue's (`?1`) available tasks of one priority (`?2`)
/// after key `?3`, in key order, at most `?4`: one probe of `tasks_available_key` per key.
/// `filter` adds conditions, numbering its parameters from `?5`.
pub(crate) fn keyed_keys(filter: &str) -> String {
    let probe = |after: &str| {
        format!(
            "SELECT concurrency_key FROM tasks WHERE state = 'available' \
             AND concurrency_key IS NOT NULL AND queue = ?1 AND priority = ?2 \
             AND concurrency_key > {after}{filter} ORDER BY concurrency_key LIMIT 1"
        )
    };
    format!(
        "WITH RECURSIVE k(key, n) AS (SELECT ({}), 1 \
           UNION ALL SELECT ({}), k.n + 1 FROM k WHERE k.key IS NOT NULL AND k.n < ?4) \
         SELECT key FROM k WHERE key IS NOT NULL",
        probe("?3"),
        probe("k.key")
    )
}

/// The first available tasks of one key (`?3`) of a queue (`?1`) at one priority (`?2`), in
/// claim order, at most `?4`. `filter` numbers its parameters from `?5`.
pub(crate) fn keyed_heads(filter: &str) -> String {
    format!(
        "SELECT run_at, id FROM tasks WHERE state = 'available' AND concurrency_key IS NOT NULL \
         AND queue = ?1 AND priority = ?2 AND concurrency_key = ?3{filter} \
         ORDER BY run_at, id LIMIT ?4"
    )
}

/// The task that holds a queue's (`?1`) key (`?2`) in strict order, if one does (see
/// [`sked_store::keyed::KeyHolder`]): its id, state, priority, kind and run time.
pub(crate) static KEY_HOLDER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id, state, priority, kind, run_at FROM tasks WHERE {} \
         AND queue = ?1 AND concurrency_key = ?2 ORDER BY id LIMIT 1",
        holds_its_key(Spelling::AnyOf)
    )
});

/// The first available tasks without a key of a queue (`?1`) at one priority (`?2`), at most
/// `?4`, among the first `?3` of that priority in claim order (keyed ones included: tasks
/// without a key have no index of their own). `filter` numbers its parameters from `?5`.
pub(crate) fn unkeyed_heads(filter: &str) -> String {
    format!(
        "SELECT run_at, id FROM (SELECT run_at, id, concurrency_key FROM tasks \
           WHERE state = 'available' AND queue = ?1 AND priority = ?2{filter} \
           ORDER BY priority DESC, run_at, id LIMIT ?3) \
         WHERE concurrency_key IS NULL LIMIT ?4"
    )
}

/// The highest priority of one queue's (`?1`) available tasks below `?2`. `filter` numbers
/// its parameters from `?3`.
pub(crate) fn keyed_level(filter: &str) -> String {
    format!(
        "SELECT priority FROM tasks WHERE state = 'available' AND queue = ?1 AND priority < ?2\
         {filter} ORDER BY priority DESC, run_at, id LIMIT 1"
    )
}

/// Finished tasks that retention removes, at most `?2`, found queue by queue and state by
/// state: finished before `?1`, or in a queue with a retention of its own for the state,
/// longer than it before `?3` (now); and out of their dedup window by then. `since` (empty, or
/// ` AND …` on `finished_at`) bounds the walk and the reads alike.
fn prunable(since: &str) -> String {
    let states: Vec<String> = TaskState::ALL
        .into_iter()
        .filter(|s| s.is_finished())
        .map(|s| format!("SELECT '{}'", s.as_str()))
        .collect();
    format!(
        "WITH RECURSIVE {}, s(ended) AS ({}), \
         c(queue, ended, before) AS (SELECT g.name, s.ended, coalesce( \
           (SELECT ?3 - {} * 1000 FROM queues q WHERE q.name = g.name), ?1) \
           FROM g CROSS JOIN s WHERE g.name IS NOT NULL) \
         SELECT t.id FROM c CROSS JOIN tasks t \
         WHERE t.queue = c.queue AND t.state = c.ended AND t.state IN {FINISHED} \
         AND {FINISHED_ANY}{since} AND t.finished_at < c.before \
         AND (t.unique_until IS NULL OR t.unique_until < c.before) LIMIT ?2",
        walk(&format!("{FINISHED_ANY}{since}")),
        states.join(" UNION ALL "),
        sked_store::retention::ms_sql("q", "s.ended")
    )
}

/// [`prunable`] over every finished task.
pub(crate) static PRUNABLE: LazyLock<String> = LazyLock::new(|| prunable(""));

/// [`PRUNABLE`] over the tasks that finished at or after `?4`, in the walk from queue to queue
/// too.
pub(crate) static PRUNABLE_SINCE: LazyLock<String> =
    LazyLock::new(|| prunable(" AND finished_at >= ?4"));

/// Ended tasks per time bucket and state since `?1`, buckets `?2` µs wide.
pub(crate) static ACTIVITY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE {} SELECT (t.finished_at - ?1) / ?2, t.state, count(*) \
         FROM g CROSS JOIN tasks t \
         WHERE g.name IS NOT NULL AND t.queue = g.name AND t.state IN {FINISHED} \
         AND {FINISHED_ANY} AND t.finished_at >= ?1 GROUP BY 1, 2",
        walk(FINISHED_ANY)
    )
});

/// A page of queues after `?1`, at most `?2`, with counts per state, each up to `?3`.
pub(crate) static QUEUE_PAGE: LazyLock<String> = LazyLock::new(|| {
    counts::queue_page_sql(
        "tasks",
        Some("stages"),
        "queues",
        Spelling::AnyOf,
        counts::PagePlaceholders {
            after: "?1",
            rows: "?2",
            count_probe: "?3",
        },
    )
});

/// Ended tasks since `?1`, at most `?2`: kind, state, start and end, found queue by queue.
pub(crate) static ENDED_RUNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE {} SELECT t.kind, t.state, t.started_at, t.finished_at \
         FROM g CROSS JOIN tasks t \
         WHERE g.name IS NOT NULL AND t.queue = g.name AND t.state IN {FINISHED} \
         AND {FINISHED_ANY} AND t.finished_at >= ?1 LIMIT ?2",
        walk(FINISHED_ANY)
    )
});

/// One queue's (`?1`) counts per state, each up to `?2`.
pub(crate) static QUEUE_COUNTS: LazyLock<String> = LazyLock::new(|| {
    counts::queue_counts_sql("tasks", Some("stages"), "?2", "?1", Spelling::AnyOf)
});

/// How many keys of the queue `?1` a dead task stops, among its first `?2` dead tasks.
pub(crate) static KEYS_STOPPED: LazyLock<String> =
    LazyLock::new(|| counts::keys_stopped_sql("tasks", "?1", "?2", Spelling::AnyOf));

/// Whether any task of any state is in the queue `?1`.
pub(crate) static QUEUE_HAS_TASKS: LazyLock<String> =
    LazyLock::new(|| counts::queue_has_tasks_sql("tasks", Some("stages"), "?1", Spelling::AnyOf));

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's plan for a statement, one line per step.
    fn plan(conn: &rusqlite::Connection, sql: &str) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let nulls = vec![rusqlite::types::Value::Null; stmt.parameter_count()];
        let rows = stmt
            .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
            .unwrap();
        rows.map(|r| r.unwrap()).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn each_statement_uses_its_partial_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("plans.db")).unwrap();
        crate::migrations::run(&mut conn).unwrap();
        rusqlite::vtab::array::load_module(&conn).unwrap();
        let claim_keys = claim_keys(" AND priority >= ?3");
        let claim_keys_all = claim_keys_all(" AND queue NOT IN (?2, ?3) AND priority >= ?4");
        let keyed_keys = keyed_keys(" AND kind IN (?5)");
        let keyed_heads = keyed_heads(" AND kind IN (?5)");
        let unkeyed_heads = unkeyed_heads(" AND kind IN (?5)");
        let keyed_level = keyed_level(" AND kind IN (?3)");
        let cases: [(&str, &[&str]); 22] = [
            (&KEY_HOLDER, &["tasks_key_holding"]),
            (&KEYS_STOPPED, &["tasks_finished"]),
            (
                &EXPIRING,
                &["tasks_expiring (expires_at>? AND expires_at<?)"],
            ),
            (ANY_WAITING, &["tasks_waiting_for_parents"]),
            (
                WAITS_REACHED,
                &[
                    "SEARCH p USING PRIMARY KEY (parent=?)",
                    "SEARCH s USING PRIMARY KEY (stage=?)",
                    "SEARCH c USING PRIMARY KEY (task=? AND wait=?)",
                ],
            ),
            (&AVAILABLE_QUEUES, &["COVERING INDEX tasks_available_queue"]),
            (&keyed_keys, &["tasks_available_key"]),
            (&keyed_heads, &["tasks_available_key"]),
            (&unkeyed_heads, &["tasks_available_queue"]),
            (&keyed_level, &["tasks_available_queue"]),
            (&STAGE, &["tasks_waiting"]),
            (&NEXT_RUN_AT, &["tasks_waiting"]),
            (&UNIQUE_KEY_HOLDER, &["tasks_unique_key"]),
            (UNIQUE_KEY_WINDOW, &["tasks_unique_until"]),
            (&SCHEDULE_ACTIVE, &["tasks_schedule_active"]),
            (&claim_keys, &["COVERING INDEX tasks_available_queue"]),
            (&claim_keys_all, &["COVERING INDEX tasks_available"]),
            (
                &PRUNABLE,
                &["tasks_finished (queue=? AND state=? AND finished_at<?)"],
            ),
            (
                &PRUNABLE_SINCE,
                &["tasks_finished (queue=? AND state=? AND finished_at>? AND finished_at<?)"],
            ),
            (
                &ACTIVITY,
                &["tasks_finished (queue=? AND state=? AND finished_at>?)"],
            ),
            (
                &QUEUE_PAGE,
                &[
                    "tasks_waiting_queue",
                    "tasks_available_queue",
                    "tasks_running",
                    "tasks_finished",
                ],
            ),
            (
                &QUEUE_COUNTS,
                &[
                    "tasks_waiting_queue",
                    "tasks_available_queue",
                    "tasks_running",
                    "tasks_finished",
                ],
            ),
        ];
        // Claim order ends with the id, which is the rowid that ends every index entry.
        for sql in [
            &claim_keys,
            &claim_keys_all,
            &keyed_heads,
            &unkeyed_heads,
            &keyed_level,
            &KEY_HOLDER,
        ] {
            let keys_plan = plan(&conn, sql);
            assert!(
                !keys_plan.contains("TEMP B-TREE"),
                "a claim sorts tasks:\n{keys_plan}"
            );
        }
        for (sql, indexes) in cases {
            let plan = plan(&conn, sql);
            let steps: Vec<&str> = plan.lines().collect();
            assert!(
                !steps.iter().any(|s| *s == "SCAN tasks" || *s == "SCAN t"),
                "{sql} reads every task:\n{plan}"
            );
            for index in indexes {
                // A whole word or words of a step: `tasks_finished` is not `tasks_finished_x`.
                let used = steps
                    .iter()
                    .any(|s| format!(" {s} ").contains(&format!(" {index} ")));
                assert!(used, "{sql} does not use {index}:\n{plan}");
            }
        }
    }

    #[test]
    fn a_schedules_run_figures_probe_its_unfinished_and_dead_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("plans.db")).unwrap();
        crate::migrations::run(&mut conn).unwrap();
        let sql = format!(
            "SELECT {}, {} FROM schedules s WHERE s.name > ?1 ORDER BY s.name LIMIT ?2",
            sked_store::columns::schedule_columns("tasks"),
            sked_store::columns::dead_runs("tasks"),
        );
        let plan = plan(&conn, &sql);
        for alias in ["t", "a", "d", "u"] {
            assert!(
                !plan.lines().any(|s| s == format!("SCAN {alias}")),
                "a figure reads every task:\n{plan}"
            );
        }
        for index in ["tasks_schedule_active", "tasks_schedule_dead"] {
            assert!(plan.contains(index), "no probe of {index}:\n{plan}");
        }
    }
}
