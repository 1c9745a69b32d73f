//! Large claims of one store over the same queues take turns: each starts where the one before
//! it ended, so that claims made at once take runs of tasks one after the other in claim
//! order, instead of walking the same entries side by side.

use std::collections::HashSet;
use std::sync::Arc;

use jiff::Timestamp;
use sked_core::NewTask;
use sked_postgres::testing::fresh_store;
use sked_store::{Store, TaskInsertParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_claims_made_at_once_take_consecutive_runs_of_tasks() {
    let Some((store, _schema)) = fresh_store().await else {
        return;
    };
    let now = Timestamp::now();
    let tasks = (0..2000).map(|_| NewTask::new("noop").into()).collect();
    let inserted = store
        .task_insert_many(TaskInsertParams { tasks, now })
        .await
        .unwrap();
    let ids: Vec<i64> = inserted.iter().map(|t| t.id).collect();
    let store = Arc::new(store);
    let claims = (0..4).map(|_| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .task_claim(crate::claim_params(&[], 500, now))
                .await
                .unwrap()
        })
    });
    let mut seen = HashSet::new();
    for claim in futures_util::future::join_all(claims).await {
        let claimed = claim.unwrap();
        assert_eq!(claimed.len(), 500);
        // In claim order (one priority, one run time: by id), a run of 500 inserted tasks.
        let first = ids.iter().position(|id| *id == claimed[0].id).unwrap();
        let run: Vec<i64> = claimed.iter().map(|t| t.id).collect();
        assert_eq!(
            run,
            ids[first..first + 500],
            "a claim's tasks are not one run"
        );
        seen.extend(run);
    }
    assert_eq!(seen.len(), 2000, "every task is claimed once");
}
