//! `sked bench --hold-snapshot`'s snapshot: a transaction that keeps its snapshot (and so holds
//! back vacuum) until released, however long it stays idle.

use sked_postgres::testing::fresh_store;
use sked_store::bench::Bench;

/// Connections idle inside a held snapshot's transaction (named by its statement's comment).
async fn holders(c: &tokio_postgres::Client) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' \
         AND backend_xmin IS NOT NULL AND query LIKE '%sked bench: held snapshot%'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn a_held_snapshot_stays_open_until_released() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let (c, conn) = tokio_postgres::connect(&schema.base_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let before = holders(&c).await;
    let held = store.hold_snapshot().await.unwrap();
    assert_eq!(holders(&c).await, before + 1);
    // Past the 1 s after which sked's other sessions idle in a transaction are ended: the
    // held one is idle in its transaction by design and stays.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(holders(&c).await, before + 1, "the snapshot is still held");
    held.release().await.unwrap();
    assert_eq!(holders(&c).await, before);
}
