//! A transaction its client abandons, as a node cut off from the database mid-transaction
//! does: PostgreSQL ends the session after the store's idle-in-transaction timeout, so the
//! row locks it held are free again for the other nodes.

use std::time::{Duration, Instant};

use sked_core::NewTask;
use sked_postgres::PgStore;
use sked_postgres::testing::{TestSchema, database_url};

#[tokio::test]
async fn an_abandoned_transaction_gives_its_row_locks_back() {
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let mut opts = schema.options();
    opts.idle_in_transaction_timeout = Duration::from_millis(300);
    let store = PgStore::connect(opts).await.unwrap();
    let id = sked_postgres::enqueue_in(
        &**store.pool().get().await.unwrap(),
        vec![NewTask::new("locked")],
    )
    .await
    .unwrap()[0]
        .id;

    // A pooled connection locks the task's row and then says nothing more.
    let mut abandoned = store.pool().get().await.unwrap();
    let tx = abandoned.transaction().await.unwrap();
    tx.query_one("SELECT id FROM sked_tasks WHERE id = $1 FOR UPDATE", &[&id])
        .await
        .unwrap();

    // Another connection, which waits at most 5 s for a lock, gets the row once the server
    // has ended the idle session.
    let other = store.pool().get().await.unwrap();
    other
        .batch_execute("SET lock_timeout = '5s'")
        .await
        .unwrap();
    let start = Instant::now();
    other
        .query_one("SELECT id FROM sked_tasks WHERE id = $1 FOR UPDATE", &[&id])
        .await
        .expect("the abandoned transaction still holds the row");
    let waited = start.elapsed();
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    // The abandoned connection is gone.
    assert!(tx.query_one("SELECT 1", &[]).await.is_err());
}

#[tokio::test]
async fn pooled_connections_end_idle_transactions_after_a_second_by_default() {
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let store = PgStore::connect(schema.options()).await.unwrap();
    let client = store.pool().get().await.unwrap();
    let row = client
        .query_one("SHOW idle_in_transaction_session_timeout", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "1s");
}
