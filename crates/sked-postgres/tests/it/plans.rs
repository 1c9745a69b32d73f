//! Query plans: PostgreSQL plans each statement from its tables' statistics, and a small table
//! that autovacuum seldom analyzes (queue settings) turned a claim into a read and sort of every
//! available task.

use sked_postgres::testing::{claim_sql, fresh_store};
use sked_store::{QueueUpdateParams, Store, TaskInsert, TaskInsertParams};

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
    // Queue settings as a deployment has them: a few queues paused or limited, through sked.
    for i in 0..10 {
        store
            .queue_update(QueueUpdateParams {
                name: format!("q{i}"),
                paused: Some(i % 2 == 0),
                concurrency_limit: Some((i % 2 == 1).then_some(5)),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // The tasks analyzed, as autovacuum would.
    c.batch_execute("ANALYZE sked_tasks").await.unwrap();
    let max: i64 = 1000;
    let worker = "w".to_string();
    let grace: i64 = 30_000;
    let explain = async |sql: String, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]| {
        let rows = c.query(&format!("EXPLAIN {sql}"), params).await.unwrap();
        rows.iter()
            .map(|r| r.get(0))
            .collect::<Vec<String>>()
            .join("\n")
    };
    let plan = explain(claim_sql(false), &[&now, &now, &worker, &max, &grace]).await;
    assert!(
        plan.contains("Index Scan using sked_tasks_available") && !plan.contains("Sort"),
        "a claim does not walk the claim index in order:\n{plan}"
    );
    // Resuming after a key: that priority from the key on, then the lower ones, both in index
    // order and the first starting at the key rather than filtering up to it.
    let (priority, id) = (0i32, 25_000i64);
    let plan = explain(
        claim_sql(true),
        &[&now, &now, &worker, &max, &grace, &priority, &now, &id],
    )
    .await;
    assert!(
        plan.matches("Index Scan using sked_tasks_available")
            .count()
            == 2
            && plan.contains("(ROW(run_at, id) > ROW(")
            && !plan.contains("Sort Key: c."),
        "a resumed claim does not start at its key in the claim index:\n{plan}"
    );
}
