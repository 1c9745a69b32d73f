//! Numbered SQL migrations, embedded at compile time and applied in order, once each.

use rusqlite::Connection;
use sked_store::{Result, StoreError};

use crate::codec::db_err;

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (2, include_str!("../migrations/0002_declared.sql")),
    (3, include_str!("../migrations/0003_observe.sql")),
    (4, include_str!("../migrations/0004_queue_counts.sql")),
    (5, include_str!("../migrations/0005_any_of.sql")),
    (6, include_str!("../migrations/0006_fewer_indexes.sql")),
    (
        7,
        include_str!("../migrations/0007_available_all_queues.sql"),
    ),
    (8, include_str!("../migrations/0008_rate_limits.sql")),
    (9, include_str!("../migrations/0009_rate_bursts.sql")),
    (10, include_str!("../migrations/0010_unique_windows.sql")),
    (11, include_str!("../migrations/0011_schedule_policies.sql")),
    (12, include_str!("../migrations/0012_concurrency_keys.sql")),
    (13, include_str!("../migrations/0013_trace_context.sql")),
    (
        14,
        include_str!("../migrations/0014_rowid_in_claim_indexes.sql"),
    ),
    (15, include_str!("../migrations/0015_schedules_ahead.sql")),
    (16, include_str!("../migrations/0016_keep_retrying.sql")),
    (17, include_str!("../migrations/0017_paused_schedules.sql")),
    (18, include_str!("../migrations/0018_dependencies.sql")),
    (19, include_str!("../migrations/0019_progress.sql")),
    (20, include_str!("../migrations/0020_workflows.sql")),
    (21, include_str!("../migrations/0021_batches.sql")),
    (
        22,
        include_str!("../migrations/0022_schedule_dead_runs.sql"),
    ),
    (
        23,
        include_str!("../migrations/0023_open_edges_by_child.sql"),
    ),
    (
        24,
        include_str!("../migrations/0024_one_open_edges_index.sql"),
    ),
    (25, include_str!("../migrations/0025_parents_left.sql")),
    (
        26,
        include_str!("../migrations/0026_unique_windows_alone.sql"),
    ),
    (27, include_str!("../migrations/0027_backoff_shapes.sql")),
    (28, include_str!("../migrations/0028_expiry.sql")),
    (29, include_str!("../migrations/0029_queue_retention.sql")),
    (
        30,
        include_str!("../migrations/0030_schedule_bounds_and_calendars.sql"),
    ),
    (31, include_str!("../migrations/0031_queue_backoff.sql")),
    (32, include_str!("../migrations/0032_strict_key_order.sql")),
    (33, include_str!("../migrations/0033_waits.sql")),
    (
        34,
        include_str!("../migrations/0034_workflow_members_in_its_row.sql"),
    ),
    (35, include_str!("../migrations/0035_kept_stages.sql")),
];

pub(crate) fn run(conn: &mut Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS sked_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    )
    .map_err(db_err)?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(db_err)?;
    let current: i64 = tx
        .query_row(
            "SELECT coalesce(max(version), 0) FROM sked_migrations",
            [],
            |r| r.get(0),
        )
        .map_err(db_err)?;
    let newest = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > newest {
        return Err(StoreError::Invalid(format!(
            "the database schema is version {current}, newer than this sked knows ({newest}): upgrade sked"
        )));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tx.execute_batch(sql).map_err(db_err)?;
        tx.execute(
            "INSERT INTO sked_migrations (version, applied_at) VALUES (?1, ?2)",
            (version, jiff::Timestamp::now().as_microsecond()),
        )
        .map_err(db_err)?;
    }
    tx.commit().map_err(db_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database at `path` as migrations up to `version` left it.
    fn database_at(path: &std::path::Path, version: i64) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(
            "CREATE TABLE sked_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        )
        .unwrap();
        for (v, sql) in MIGRATIONS.iter().filter(|m| m.0 <= version) {
            conn.execute_batch(sql).unwrap();
            conn.execute(
                "INSERT INTO sked_migrations (version, applied_at) VALUES (?1, 0)",
                [v],
            )
            .unwrap();
        }
        conn
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A database written before waiting tasks kept their count: the count of each waiting
    /// task is its edges not yet counted, and a parent's end then releases it.
    #[test]
    fn waiting_tasks_keep_their_count_of_parents_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let mut conn = database_at(&path, 24);
        // Task 1 succeeded (its edge counted), 2 still runs; 3 waits for both.
        conn.execute_batch(
            "INSERT INTO tasks (id, queue, kind, payload, priority, state, run_at, max_attempts, \
               created_at) VALUES \
               (1, 'default', 'p', 'null', 0, 'succeeded', 0, 1, 0), \
               (2, 'default', 'p', 'null', 0, 'available', 0, 1, 0), \
               (3, 'default', 'c', 'null', 0, 'waiting', 0, 1, 0); \
             INSERT INTO task_edges (child, parent, done) VALUES (3, 1, 1), (3, 2, 0);",
        )
        .unwrap();
        run(&mut conn).unwrap();
        let left: i64 = conn
            .query_row("SELECT parents_left FROM waits WHERE id = 3", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(left, 1);
        drop(conn);
        let store = crate::SqliteStore::open(&path).unwrap();
        runtime().block_on(async {
            use sked_store::Store;
            let t = store.task_get(3).await.unwrap();
            assert_eq!(t.waiting_for, vec![2]);
            store
                .task_cancel(sked_store::TaskCancelParams {
                    id: 2,
                    now: jiff::Timestamp::now(),
                })
                .await
                .unwrap();
            let t = store.task_get(3).await.unwrap();
            assert_eq!(
                (t.state, t.last_error),
                (
                    sked_core::TaskState::Cancelled,
                    Some("parent 2 was cancelled".into())
                )
            );
        });
    }

    /// A database whose workflows kept their tasks as rows of `workflow_tasks`: each
    /// workflow's tasks become its range of ids with their names by place, a task deleted
    /// before leaving a gap, and the workflow reads as it did.
    #[test]
    fn workflow_members_become_a_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let mut conn = database_at(&path, 33);
        // Workflow 1 made tasks 5 to 7 (6 deleted since), workflow 2 tasks 8 and 9; task 4
        // is no workflow's.
        conn.execute_batch(
            "INSERT INTO tasks (id, queue, kind, payload, priority, state, run_at, max_attempts, \
               created_at, finished_at) VALUES \
               (4, 'default', 'k', 'null', 0, 'available', 0, 1, 0, NULL), \
               (5, 'default', 'k', 'null', 0, 'succeeded', 0, 1, 0, 10), \
               (7, 'default', 'k', 'null', 0, 'available', 0, 1, 0, NULL), \
               (8, 'default', 'k', 'null', 0, 'available', 0, 1, 0, NULL), \
               (9, 'default', 'k', 'null', 0, 'available', 0, 1, 0, NULL); \
             INSERT INTO workflows (id, name, created_at, size) VALUES (1, 'one', 0, 3), \
               (2, 'two', 0, 2); \
             INSERT INTO workflow_tasks (task, workflow, name) VALUES (5, 1, 'a'), (7, 1, 'c'), \
               (8, 2, 'x'), (9, 2, 'y');",
        )
        .unwrap();
        run(&mut conn).unwrap();
        let row: (i64, i64, String) = conn
            .query_row(
                "SELECT first_task, last_task, names FROM workflows WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(row, (5, 7, r#"["a",null,"c"]"#.to_string()));
        drop(conn);
        let store = crate::SqliteStore::open(&path).unwrap();
        runtime().block_on(async {
            use sked_store::Store;
            let of = |id: i64, name: &str| {
                Some(sked_core::TaskWorkflow {
                    id,
                    name: name.into(),
                })
            };
            assert_eq!(store.task_get(7).await.unwrap().workflow, of(1, "c"));
            assert_eq!(store.task_get(8).await.unwrap().workflow, of(2, "x"));
            assert_eq!(store.task_get(4).await.unwrap().workflow, None);
            let w = store.workflow_get(1).await.unwrap();
            assert_eq!(w.counts.values().sum::<u64>(), 2);
            let page = store
                .workflow_tasks(sked_store::WorkflowTasksParams {
                    id: 2,
                    after_id: None,
                    limit: 10,
                })
                .await
                .unwrap();
            let names: Vec<&str> = page.items.iter().map(|n| n.name.as_str()).collect();
            assert_eq!(names, ["x", "y"]);
            // Deleted, its last task takes the workflow with it, not before.
            store.task_delete(5).await.unwrap();
            assert!(store.workflow_get(1).await.is_ok());
            store
                .task_cancel(sked_store::TaskCancelParams {
                    id: 7,
                    now: jiff::Timestamp::now(),
                })
                .await
                .unwrap();
            store.task_delete(7).await.unwrap();
            assert!(store.workflow_get(1).await.is_err());
            assert!(store.workflow_get(2).await.is_ok());
        });
    }
}
