//! Three stores on one schema (three nodes), each with claimers of its own, while their LISTEN
//! connections are ended every 700 ms: the shared scenario of `sked_store::conformance`.

use std::sync::Arc;

use sked_postgres::PgStore;
use sked_postgres::testing::{TestSchema, database_url};
use sked_store::conformance::{ClaimersRun, Shared, concurrent_claims_keep_the_contract};

/// Ends every LISTEN connection of the schema's stores; they reconnect on their own.
async fn end_listeners(url: String, channel: String) {
    let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await else {
        return;
    };
    tokio::spawn(conn);
    let _ = client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1",
            &[&format!("LISTEN \"{channel}\"")],
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_of_three_nodes_that_lose_announcements_keep_the_contract() {
    let Some(url) = database_url() else {
        return;
    };
    let schema = TestSchema::new(&url);
    let mut stores: Vec<Shared> = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(PgStore::connect(schema.options()).await.unwrap()));
    }
    let channel = format!("sked_{}", schema.name);
    let base = schema.base_url.clone();
    let run = ClaimersRun {
        stores,
        lose_announcements: Some(Box::new(move || {
            Box::pin(end_listeners(base.clone(), channel.clone()))
        })),
    };
    concurrent_claims_keep_the_contract(run, 6).await;
    drop(schema);
}
