//! [`Diagnostics`] for PostgreSQL: the server's transaction counters, `VACUUM` and the
//! unbounded count, for `sked bench`.

use async_trait::async_trait;
use sked_store::{Diagnostics, Result};

use crate::PgStore;
use crate::codec::db_err;

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
