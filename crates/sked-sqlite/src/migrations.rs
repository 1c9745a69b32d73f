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

    /// A database written before waiting tasks kept their count: the count of each waiting
    /// task is its edges not yet counted, and a parent's end then releases it.
    #[test]
    fn waiting_tasks_keep_their_count_of_parents_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let mut conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE sked_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        )
        .unwrap();
        for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 <= 24) {
            conn.execute_batch(sql).unwrap();
            conn.execute(
                "INSERT INTO sked_migrations (version, applied_at) VALUES (?1, 0)",
                [version],
            )
            .unwrap();
        }
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
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
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
}
