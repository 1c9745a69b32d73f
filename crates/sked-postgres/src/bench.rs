//! [`Bench`] for PostgreSQL: the server's transaction counters, `VACUUM` and the unbounded
//! count ([`Diagnostics`]), and the bare queue loop on the store's pool (same database and
//! schema), `clients` connections at once, each statement its own transaction.

use std::time::Instant;

use async_trait::async_trait;
use sked_store::bench::{
    Bench, CeilingParams, CeilingReport, CeilingWorkload, Diagnostics, HeldSnapshot, TableSizes,
    payload,
};
use sked_store::{Result, StoreError};

use crate::PgStore;
use crate::codec::db_err;

const CREATE: &str = "DROP TABLE IF EXISTS sked_ceiling_jobs;
    CREATE TABLE sked_ceiling_jobs (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue text NOT NULL,
        kind text NOT NULL, payload jsonb NOT NULL, priority int NOT NULL,
        run_at timestamptz NOT NULL, state text NOT NULL);
    CREATE INDEX sked_ceiling_jobs_available ON sked_ceiling_jobs (priority DESC, run_at, id)
        WHERE state = 'available';";

/// What the kept drain adds to the bare table: the finish time, and finished rows by it.
const KEPT: &str = "ALTER TABLE sked_ceiling_jobs ADD COLUMN finished_at timestamptz;
    CREATE INDEX sked_ceiling_jobs_finished ON sked_ceiling_jobs (finished_at)
        WHERE state = 'succeeded';";

const INSERT: &str = "INSERT INTO sked_ceiling_jobs (queue, kind, payload, priority, run_at, state) \
    SELECT 'default', 'noop', p, 0, now(), 'available' FROM unnest($1::jsonb[]) AS u(p)";

const CLAIM: &str = "UPDATE sked_ceiling_jobs SET state = 'running' WHERE id IN ( \
    SELECT id FROM sked_ceiling_jobs WHERE state = 'available' \
    ORDER BY priority DESC, run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id";

const DELETE: &str = "DELETE FROM sked_ceiling_jobs WHERE id = ANY($1)";

/// The kept drain's ending: the outcome written instead of the rows deleted.
const SUCCEED: &str =
    "UPDATE sked_ceiling_jobs SET state = 'succeeded', finished_at = now() WHERE id = ANY($1)";

#[async_trait]
impl Bench for PgStore {
    fn diagnostics(&self) -> Option<&dyn Diagnostics> {
        Some(self)
    }

    async fn ceiling(&self, p: CeilingParams) -> Result<CeilingReport> {
        if p.batch == 0 {
            return Err(StoreError::Invalid(
                "the batch size must be at least 1".into(),
            ));
        }
        let clients = p.clients.max(1);
        let setup = self.client().await?;
        setup.batch_execute(CREATE).await.map_err(db_err)?;
        let kept = p.workload == CeilingWorkload::DrainKept;
        if kept {
            setup.batch_execute(KEPT).await.map_err(db_err)?;
        }
        let out = match p.workload {
            CeilingWorkload::Insert => {
                let started = Instant::now();
                let parts = (0..clients).map(|k| self.insert(p.n, p.batch, k, clients));
                futures_util::future::try_join_all(parts).await?;
                CeilingReport {
                    secs: started.elapsed().as_secs_f64(),
                    rows: p.n,
                }
            }
            CeilingWorkload::Drain | CeilingWorkload::DrainKept => {
                // Inserted as `sked bench drain` inserts its tasks, and nothing done after.
                self.insert(p.n, 10_000, 0, 1).await?;
                let started = Instant::now();
                let parts = (0..clients).map(|_| self.drain(p.batch, kept));
                let rows = futures_util::future::try_join_all(parts).await?;
                CeilingReport {
                    secs: started.elapsed().as_secs_f64(),
                    rows: rows.iter().sum(),
                }
            }
        };
        setup
            .batch_execute("DROP TABLE sked_ceiling_jobs")
            .await
            .map_err(db_err)?;
        Ok(out)
    }

    async fn hold_snapshot(&self) -> Result<Box<dyn HeldSnapshot>> {
        let c = self.client().await?;
        // The snapshot is taken by the transaction's first statement and kept to its end.
        c.batch_execute(HOLD).await.map_err(db_err)?;
        Ok(Box::new(PgSnapshot(Some(c))))
    }

    async fn sizes(&self) -> Result<TableSizes> {
        let c = self.client().await?;
        let row = c
            .query_one(
                "SELECT (SELECT count(*) FROM sked_tasks), \
                   pg_total_relation_size('sked_tasks') + pg_total_relation_size('sked_task_attempts')",
                &[],
            )
            .await
            .map_err(db_err)?;
        Ok(TableSizes {
            tasks: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
            bytes: u64::try_from(row.get::<_, i64>(1)).unwrap_or(0),
        })
    }
}

/// Takes and keeps a snapshot (the comment names the connection in `pg_stat_activity`). The
/// transaction is idle by design, so it lifts, for itself only, the timeout that ends every
/// other sked session idle in a transaction (`PgOptions::idle_in_transaction_timeout`).
const HOLD: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ; \
    SET LOCAL idle_in_transaction_session_timeout = 0; \
    SELECT count(*) FROM sked_queues /* sked bench: held snapshot */";

/// A pooled connection inside a `REPEATABLE READ` transaction.
struct PgSnapshot(Option<deadpool_postgres::Object>);

#[async_trait]
impl HeldSnapshot for PgSnapshot {
    async fn release(mut self: Box<Self>) -> Result<()> {
        if let Some(c) = self.0.take() {
            c.batch_execute("ROLLBACK").await.map_err(db_err)?;
        }
        Ok(())
    }
}

impl Drop for PgSnapshot {
    fn drop(&mut self) {
        // Not released: the connection leaves the pool (closing it ends the transaction)
        // rather than going back to it inside one.
        if let Some(c) = self.0.take() {
            drop(deadpool_postgres::Object::take(c));
        }
    }
}

impl PgStore {
    /// Client `k` of `clients` inserts every `clients`-th batch of `n` rows.
    async fn insert(&self, n: usize, batch: usize, k: usize, clients: usize) -> Result<()> {
        let c = self.client().await?;
        let stmt = c.prepare(INSERT).await.map_err(db_err)?;
        for start in (k * batch..n).step_by(batch * clients) {
            let rows: Vec<serde_json::Value> = (start..n.min(start + batch)).map(payload).collect();
            c.execute(&stmt, &[&rows]).await.map_err(db_err)?;
        }
        Ok(())
    }

    /// Claims and deletes (or, `kept`, marks succeeded) until nothing is left; the rows this
    /// client handled.
    async fn drain(&self, batch: usize, kept: bool) -> Result<usize> {
        let c = self.client().await?;
        let claim = c.prepare(CLAIM).await.map_err(db_err)?;
        let end = c
            .prepare(if kept { SUCCEED } else { DELETE })
            .await
            .map_err(db_err)?;
        let limit = batch as i64;
        // Planned as sked's claims are (see `tasks::claim::sql::ORDERED_WALK`), and reset whether
        // the loop ends or fails: the connection goes back to the store's pool.
        c.batch_execute(crate::tasks::claim::sql::ORDERED_WALK)
            .await
            .map_err(db_err)?;
        let drained = async {
            let mut done = 0;
            loop {
                let ids: Vec<i64> = c
                    .query(&claim, &[&limit])
                    .await
                    .map_err(db_err)?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                if ids.is_empty() {
                    return Ok::<usize, sked_store::StoreError>(done);
                }
                c.execute(&end, &[&ids]).await.map_err(db_err)?;
                done += ids.len();
            }
        }
        .await;
        let reset = c
            .batch_execute(crate::tasks::claim::sql::ORDERED_WALK_END)
            .await;
        let done = drained?;
        reset.map_err(db_err)?;
        Ok(done)
    }
}

#[async_trait]
impl Diagnostics for PgStore {
    fn operations(&self) -> u64 {
        PgStore::operations(self)
    }

    async fn server_transactions(&self) -> Result<i64> {
        self.op(async |c, _| {
            let row = c
                .query_one(
                    "SELECT sum(xact_commit + xact_rollback)::bigint FROM pg_stat_database",
                    &[],
                )
                .await
                .map_err(db_err)?;
            Ok(row.get(0))
        })
        .await
    }

    async fn vacuum_tasks(&self) -> Result<()> {
        self.op(async |c, _| c.batch_execute("VACUUM sked_tasks").await.map_err(db_err))
            .await
    }

    async fn count_tasks_unbounded(&self) -> Result<u64> {
        self.op(async |c, _| {
            let rows = c
                .query(
                    "SELECT queue, state, count(*) FROM sked_tasks GROUP BY queue, state",
                    &[],
                )
                .await
                .map_err(db_err)?;
            Ok(rows.len() as u64)
        })
        .await
    }
}
