//! [`Ceiling`] for SQLite: the bare queue loop on the store's own connection (same file, WAL,
//! `synchronous=FULL`), one writer as the store has.

use std::time::Instant;

use async_trait::async_trait;
use rusqlite::{Connection, TransactionBehavior, params};
use sked_store::ceiling::{
    Ceiling, CeilingParams, CeilingReport, CeilingWorkload, HeldSnapshot, TableSizes, payload,
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

const INSERT: &str = "INSERT INTO ceiling_jobs (queue, kind, payload, priority, run_at, state) \
    VALUES ('default', 'noop', ?1, 0, ?2, 'available')";

const CLAIM: &str = "UPDATE ceiling_jobs SET state = 'running' WHERE id IN ( \
    SELECT id FROM ceiling_jobs WHERE state = 'available' ORDER BY priority DESC, run_at, id \
    LIMIT ?1) RETURNING id";

const DELETE: &str = "DELETE FROM ceiling_jobs WHERE id = ?1";

#[async_trait]
impl Ceiling for SqliteStore {
    async fn ceiling(&self, p: CeilingParams) -> Result<CeilingReport> {
        if p.batch == 0 {
            return Err(StoreError::Invalid(
                "the batch size must be at least 1".into(),
            ));
        }
        self.run(move |conn| {
            conn.execute_batch(CREATE).map_err(db_err)?;
            let out = match p.workload {
                CeilingWorkload::Insert => {
                    let started = Instant::now();
                    insert(conn, p.n, p.batch)?;
                    CeilingReport {
                        secs: started.elapsed().as_secs_f64(),
                        rows: p.n,
                    }
                }
                CeilingWorkload::Drain => {
                    // Inserted as `sked bench drain` inserts its tasks, then the same settling.
                    insert(conn, p.n, 10_000)?;
                    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                        .map_err(db_err)?;
                    let started = Instant::now();
                    let rows = drain(conn, p.batch)?;
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
            .run(|conn| {
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

/// Claims and deletes until nothing is left; the rows it handled.
fn drain(conn: &mut Connection, batch: usize) -> Result<usize> {
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
        {
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
        assert_eq!(checkpoint_busy(&writer), 0);
    }
}
