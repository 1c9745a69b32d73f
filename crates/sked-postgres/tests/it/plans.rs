//! Query plans that must not depend on statistics the database may not have: PostgreSQL plans
//! each statement from its tables' statistics, and a small table that autovacuum seldom
//! analyzes can turn a claim into a read of every available task.

use sked_postgres::testing::{claim_sql, fresh_store};
use sked_store::{Store, TaskInsert, TaskInsertParams};

#[tokio::test]
async fn a_claim_walks_the_claim_index_whatever_the_queue_statistics() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = jiff::Timestamp::now();
    for _ in 0..5 {
        let tasks = (0..10_000)
            .map(|_| TaskInsert::from(sked_core::NewTask::new("noop")))
            .collect();
        store
            .task_insert_many(TaskInsertParams { tasks, now })
            .await
            .unwrap();
    }
    let (c, conn) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    // The tasks analyzed, as autovacuum would; the queue settings written but never analyzed,
    // as in a deployment that paused a few queues.
    c.batch_execute(
        "ANALYZE sked_tasks; \
         INSERT INTO sked_queues (name, paused, updated_at) \
           SELECT 'q' || g, g % 2 = 0, now() FROM generate_series(1, 10) g",
    )
    .await
    .unwrap();
    let max: i64 = 1000;
    let worker = "w".to_string();
    let plan: Vec<String> = c
        .query(
            &format!("EXPLAIN {}", claim_sql()),
            &[&now, &now, &worker, &max],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Index Scan using sked_tasks_available") && !plan.contains("Sort"),
        "a claim does not walk the claim index in order:\n{plan}"
    );
}
