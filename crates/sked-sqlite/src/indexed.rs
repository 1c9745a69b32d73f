//! Statements whose cost depends on a partial index. SQLite uses a partial index only when the
//! statement's `WHERE` repeats the index's predicate term by term, so each statement here is
//! listed with the indexes it must use, and a test asks SQLite's planner whether it does.

use std::sync::LazyLock;

use sked_store::counts;
use sked_store::states::{ACTIVE_ANY, FINISHED_ANY, Spelling, WAITING};

/// Waiting tasks that are due become available (`?1`: now).
pub(crate) static STAGE: LazyLock<String> = LazyLock::new(|| {
    format!("UPDATE tasks SET state = 'available' WHERE state IN {WAITING} AND run_at <= ?1")
});

/// When the earliest waiting task is due.
pub(crate) static NEXT_RUN_AT: LazyLock<String> =
    LazyLock::new(|| format!("SELECT min(run_at) FROM tasks WHERE state IN {WAITING}"));

/// The unfinished task that holds a unique key (`?1`).
pub(crate) static UNIQUE_KEY_HOLDER: LazyLock<String> =
    LazyLock::new(|| format!("SELECT id, state FROM tasks WHERE unique_key = ?1 AND {ACTIVE_ANY}"));

/// A schedule's (`?1`) unfinished tasks.
pub(crate) static SCHEDULE_ACTIVE: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT id FROM tasks WHERE schedule = ?1 AND {ACTIVE_ANY} ORDER BY id")
});

/// Finished tasks that retention removes: finished before `?1`, at most `?2`.
pub(crate) static PRUNABLE: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT id FROM tasks WHERE {FINISHED_ANY} AND finished_at < ?1 LIMIT ?2")
});

/// Ended tasks per time bucket and state since `?1`, buckets `?2` µs wide.
pub(crate) static ACTIVITY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT (finished_at - ?1) / ?2, state, count(*) FROM tasks \
         WHERE {FINISHED_ANY} AND finished_at >= ?1 GROUP BY 1, 2"
    )
});

/// Counts per queue and state, each up to `?1`.
pub(crate) static COUNTS: LazyLock<String> =
    LazyLock::new(|| counts::queue_counts_sql("tasks", "?1", None, Spelling::AnyOf));

/// One queue's (`?1`) counts per state, each up to `?2`.
pub(crate) static QUEUE_COUNTS: LazyLock<String> =
    LazyLock::new(|| counts::queue_counts_sql("tasks", "?2", Some("?1"), Spelling::AnyOf));

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
        let cases: [(&str, &[&str]); 8] = [
            (&STAGE, &["tasks_waiting"]),
            (&NEXT_RUN_AT, &["tasks_waiting"]),
            (&UNIQUE_KEY_HOLDER, &["tasks_unique_key"]),
            (&SCHEDULE_ACTIVE, &["tasks_schedule_active"]),
            (&PRUNABLE, &["tasks_finished"]),
            (&ACTIVITY, &["tasks_finished"]),
            (
                &COUNTS,
                &[
                    "tasks_waiting_queue",
                    "tasks_available_queue",
                    "tasks_running",
                    "tasks_finished_queue",
                ],
            ),
            (
                &QUEUE_COUNTS,
                &[
                    "tasks_waiting_queue",
                    "tasks_available_queue",
                    "tasks_running",
                    "tasks_finished_queue",
                ],
            ),
        ];
        for (sql, indexes) in cases {
            let plan = plan(&conn, sql);
            let steps: Vec<&str> = plan.lines().collect();
            assert!(
                !steps.iter().any(|s| *s == "SCAN tasks" || *s == "SCAN t"),
                "{sql} reads every task:\n{plan}"
            );
            for index in indexes {
                assert!(
                    steps.iter().any(|s| s.split(' ').any(|w| w == *index)),
                    "{sql} does not use {index}:\n{plan}"
                );
            }
        }
    }
}
