//! [`Bench`] for SQLite: the WAL copied into the file before a measurement, and the bare queue
//! loop on the store's own connection (same file, WAL, `synchronous=FULL`), one writer as the
//! store has.

use std::time::Instant;

use async_trait::async_trait;
use rusqlite::{Connection, TransactionBehavior, params};
use sked_store::bench::{
    Bench, CeilingParams, CeilingReport, CeilingWorkload, HeldSnapshot, TableSizes, payload,
};
use sked_store::{Result, StoreError};

use crate::SqliteStore;
use crate::codec::db_err;

const CREATE: &str = "DROP TABLE IF EXISTS ceiling_jobs;
    CREATE TABLE ceiling_jobs (
        id INTEGER PRIMARY KEY, queue TEXT NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL,
        priority INTEGER NOT NULL, run_at INTEGER NOT NULL, state TEXT NOT NULL);
    CREATE INDEX ceiling_jobs_available ON ceiling_jobs (priority DESC, run_at, id)
        WHERE state = 'available';";

/// What the kept drain adds to the bare table: the finish time, and finished rows by it.
const KEPT: &str = "ALTER TABLE ceiling_jobs ADD COLUMN finished_at INTEGER;
    CREATE INDEX ceiling_jobs_finished ON ceiling_jobs (finished_at) WHERE state = 'succeeded';";

const INSERT: &str = "INSERT INTO ceiling_jobs (queue, kind, payload, priority, run_at, state) \
    VALUES ('default', 'noop', ?1, 0, ?2, 'available')";

const CLAIM: &str = "UPDATE ceiling_jobs SET state = 'running' WHERE id IN ( \
    SELECT id FROM ceiling_jobs WHERE state = 'available' ORDER BY priority DESC, run_at, id \
    LIMIT ?1) RETURNING id";

const DELETE: &str = "DELETE FROM ceiling_jobs WHERE id = ?1";

/// The kept drain's ending: the outcome written instead of the row deleted.
const SUCCEED: &str = "UPDATE ceiling_jobs SET state = 'succeeded', finished_at = ?2 WHERE id = ?1";

#[async_trait]
impl Bench for SqliteStore {
    async fn settle(&self) -> Result<()> {
        self.run(|conn| {
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .map_err(db_err)
        })
        .await
    }

    async fn ceiling(&self, p: CeilingParams) -> Result<CeilingReport> {
        if p.batch == 0 {
            return Err(StoreError::Invalid(
                "the batch size must be at least 1".into(),
            ));
        }
        self.run(move |conn| {
            conn.execute_batch(CREATE).map_err(db_err)?;
            if p.workload == CeilingWorkload::DrainKept {
                conn.execute_batch(KEPT).map_err(db_err)?;
            }
            let out = match p.workload {
                CeilingWorkload::Insert => {
                    let started = Instant::now();
                    insert(conn, p.n, p.batch)?;
                    CeilingReport {
                        secs: started.elapsed().as_secs_f64(),
                        rows: p.n,
                    }
                }
                CeilingWorkload::Drain | CeilingWorkload::DrainKept => {
                    // Inserted as `sked bench drain` inserts its tasks, then the same settling.
                    insert(conn, p.n, 10_000)?;
                    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                        .map_err(db_err)?;
                    let started = Instant::now();
                    let rows = drain(conn, p.batch, p.workload == CeilingWorkload::DrainKept)?;
                    CeilingReport {
                        secs: started.elapsed().as_secs_f64(),
                        rows,
                    }
                }
            };
            conn.execute_batch("DROP TABLE ceiling_jobs")
                .map_err(db_err)?;
            Ok(out)
        })
        .await
    }

    async fn hold_snapshot(&self) -> Result<Box<dyn HeldSnapshot>> {
        let path = self.path.clone();
        let conn = tokio::task::spawn_blocking(move || -> Result<Connection> {
            let conn = Connection::open(&path).map_err(db_err)?;
            // A deferred transaction takes its snapshot at its first read.
            conn.execute_batch("BEGIN; SELECT count(*) FROM queues;")
                .map_err(db_err)?;
            Ok(conn)
        })
        .await
        .map_err(|e| StoreError::Backend(e.to_string()))??;
        Ok(Box::new(SqliteSnapshot(conn)))
    }

    async fn sizes(&self) -> Result<TableSizes> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let (tasks, file) = self
            .read(|conn| {
                conn.query_row(
                    "SELECT (SELECT count(*) FROM tasks), \
                       (SELECT page_count FROM pragma_page_count()) \
                       * (SELECT page_size FROM pragma_page_size())",
                    [],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
                )
                .map_err(db_err)
            })
            .await?;
        let wal = std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0);
        Ok(TableSizes {
            tasks: u64::try_from(tasks).unwrap_or(0),
            bytes: u64::try_from(file).unwrap_or(0) + wal,
        })
    }
}

/// A connection of its own inside a read transaction (closing it ends the transaction).
struct SqliteSnapshot(Connection);

#[async_trait]
impl HeldSnapshot for SqliteSnapshot {
    async fn release(self: Box<Self>) -> Result<()> {
        self.0.execute_batch("ROLLBACK").map_err(db_err)
    }
}

/// `n` rows in transactions of `batch`, one prepared statement per row.
fn insert(conn: &mut Connection, n: usize, batch: usize) -> Result<()> {
    let now = jiff::Timestamp::now().as_microsecond();
    for start in (0..n).step_by(batch) {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db_err)?;
        {
            let mut stmt = tx.prepare_cached(INSERT).map_err(db_err)?;
            for i in start..n.min(start + batch) {
                stmt.execute(params![payload(i).to_string(), now])
                    .map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)?;
    }
    Ok(())
}

/// Claims and deletes (or, `kept`, marks succeeded) until nothing is left; the rows it
/// handled.
fn drain(conn: &mut Connection, batch: usize, kept: bool) -> Result<usize> {
    let mut done = 0;
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db_err)?;
        let ids: Vec<i64> = {
            let mut stmt = tx.prepare_cached(CLAIM).map_err(db_err)?;
            stmt.query_map([batch as i64], |r| r.get(0))
                .map_err(db_err)?
                .collect::<rusqlite::Result<_>>()
                .map_err(db_err)?
        };
        tx.commit().map_err(db_err)?;
        if ids.is_empty() {
            return Ok(done);
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db_err)?;
        if kept {
            let now = jiff::Timestamp::now().as_microsecond();
            let mut stmt = tx.prepare_cached(SUCCEED).map_err(db_err)?;
            for id in &ids {
                stmt.execute(params![id, now]).map_err(db_err)?;
            }
        } else {
            let mut stmt = tx.prepare_cached(DELETE).map_err(db_err)?;
            for id in &ids {
                stmt.execute([id]).map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)?;
        done += ids.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(busy, …)` of a full checkpoint: busy while a reader holds an older snapshot.
    fn checkpoint_busy(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .unwrap()
    }

    /// `(state, rows, rows with a finish time)` of the bare table, by state.
    fn states(conn: &Connection) -> Vec<(String, i64, i64)> {
        let mut stmt = conn
            .prepare(
                "SELECT state, count(*), count(finished_at) FROM ceiling_jobs \
                 GROUP BY state ORDER BY state",
            )
            .unwrap();
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap();
        rows.map(Result::unwrap).collect()
    }

    #[test]
    fn the_kept_drain_ends_every_row_and_deletes_none() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(CREATE).unwrap();
        conn.execute_batch(KEPT).unwrap();
        insert(&mut conn, 2_500, 1_000).unwrap();
        assert_eq!(drain(&mut conn, 1_000, true).unwrap(), 2_500);
        assert_eq!(states(&conn), [("succeeded".to_string(), 2_500, 2_500)]);
        // Retention finds them by finish time, on the index the kept drain adds.
        let plan: String = conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT id FROM ceiling_jobs \
                 WHERE state = 'succeeded' ORDER BY finished_at LIMIT 10",
                [],
                |r| r.get(3),
            )
            .unwrap();
        assert!(plan.contains("ceiling_jobs_finished"), "{plan}");
    }

    #[test]
    fn the_bare_drain_deletes_every_row() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(CREATE).unwrap();
        insert(&mut conn, 2_500, 1_000).unwrap();
        assert_eq!(drain(&mut conn, 1_000, false).unwrap(), 2_500);
        let left: i64 = conn
            .query_row("SELECT count(*) FROM ceiling_jobs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 0);
    }

    #[tokio::test]
    async fn a_held_snapshot_holds_back_checkpoints_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("held.db");
        let store = SqliteStore::open(&path).unwrap();
        let held = store.hold_snapshot().await.unwrap();
        let writer = Connection::open(&path).unwrap();
        writer
            .execute("INSERT INTO queues (name, updated_at) VALUES ('q', 0)", [])
            .unwrap();
        assert_eq!(
            checkpoint_busy(&writer),
            1,
            "the reader's snapshot is older"
        );
        held.release().await.unwrap();
        // The store's own connections may be reading for a moment: try for a while.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while checkpoint_busy(&writer) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "checkpoints still held back"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
