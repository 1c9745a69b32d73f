//! Transactional enqueue: tasks inserted inside the application's own transaction exist if and
//! only if that transaction commits (and workers hear of them only then: notifications are
//! delivered at commit).

use sked_core::NewTask;
use sked_store::{Result, StoreError, TaskInsert, TaskInserted};
use tokio_postgres::GenericClient;

use crate::codec::db_err;
use crate::listen::channel_for;
use crate::tasks::insert_tasks;

/// Enqueues `tasks` through `client`, normally a transaction of the application's
/// (`tokio_postgres::Transaction`, or `&*tx` for a `deadpool_postgres::Transaction`), whose
/// `search_path` reaches sked's tables. Times are the database's.
///
/// ```no_run
/// # async fn example(client: &mut tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let tx = client.transaction().await?;
/// tx.execute("INSERT INTO orders (id) VALUES (42)", &[]).await?;
/// let mut task = sked_core::NewTask::new("send-receipt");
/// task.payload = serde_json::json!({"order": 42});
/// sked_postgres::enqueue_in(&tx, vec![task]).await?;
/// tx.commit().await?; // the order and its task, or neither
/// # Ok(()) }
/// ```
pub async fn enqueue_in<C: GenericClient + Sync>(
    client: &C,
    tasks: Vec<NewTask>,
) -> Result<Vec<TaskInserted>> {
    let row = client
        .query_one("SELECT clock_timestamp(), current_schema()", &[])
        .await
        .map_err(db_err)?;
    let now: jiff::Timestamp = row.get(0);
    let schema: Option<String> = row.get(1);
    let schema = schema.ok_or_else(|| {
        StoreError::Invalid("the connection has no current schema for sked's tables".into())
    })?;
    let inserts: Vec<TaskInsert> = tasks.into_iter().map(Into::into).collect();
    insert_tasks(client, None, &channel_for(&schema), &inserts, now).await
}
