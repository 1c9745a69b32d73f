//! Bulk operations: retry or cancel by filter, batch by batch, and their dry-run count.

use sked_core::{NewTask, TaskState};

use super::*;

fn filter(states: &[TaskState], queue: &str) -> BulkFilter {
    BulkFilter {
        states: states.to_vec(),
        queue: Some(queue.into()),
        ..BulkFilter::default()
    }
}

async fn batch(
    store: &Shared,
    action: BulkAction,
    f: &BulkFilter,
    after: Option<i64>,
) -> BulkBatch {
    store
        .task_bulk(TaskBulkParams {
            action,
            filter: f.clone(),
            after,
            limit: 2,
            now: at(10),
        })
        .await
        .unwrap()
}

pub async fn bulk_retry_and_cancel_by_filter_in_batches(store: &Shared) {
    // Five dead tasks in queue a, one of kind x; three waiting in queue b.
    let dead: Vec<NewTask> = (0..5)
        .map(|i| {
            NewTask::new(if i == 0 { "x" } else { "k" })
                .queue("a")
                .max_attempts(1)
        })
        .collect();
    insert_batch(store, &dead, t0()).await;
    for t in claim(store, 10, at(1)).await {
        finish(store, t.id, 1, failed(false), at(2)).await.unwrap();
    }
    let waiting: Vec<NewTask> = (0..3).map(|_| NewTask::new("k").queue("b")).collect();
    insert_batch(store, &waiting, at(3)).await;
    let dead_a = filter(&[TaskState::Dead], "a");
    assert_eq!(store.task_bulk_count(dead_a.clone()).await.unwrap(), 5);
    let of_x = BulkFilter {
        kind: Some("x".into()),
        ..dead_a.clone()
    };
    assert_eq!(store.task_bulk_count(of_x).await.unwrap(), 1);
    let enqueued_before = BulkFilter {
        before: Some(at(3)),
        ..filter(&[TaskState::Available], "b")
    };
    assert_eq!(store.task_bulk_count(enqueued_before).await.unwrap(), 0);
    // Retried two at a time: 2, 2, then 1 and done.
    let mut after = None;
    let mut sizes = Vec::new();
    loop {
        let b = batch(store, BulkAction::Retry, &dead_a, after).await;
        sizes.push(b.changed);
        match b.next_after {
            Some(id) => after = Some(id),
            None => break,
        }
    }
    assert_eq!(sizes, [2, 2, 1]);
    assert_eq!(store.task_bulk_count(dead_a.clone()).await.unwrap(), 0);
    let retried = claim_from(store, &["a"], 10, at(11)).await;
    assert_eq!(
        retried.len(),
        5,
        "each runs again, with an attempt to spare"
    );
    let one = store.task_get(retried[0].id).await.unwrap();
    assert_eq!(one.attempts.len(), 2, "the dead attempt is kept: {one:?}");
    // Cancelled: b's waiting tasks; a's running ones are asked to stop.
    let b = filter(&[TaskState::Available], "b");
    assert_eq!(batch(store, BulkAction::Cancel, &b, None).await.changed, 2);
    let b2 = batch(store, BulkAction::Cancel, &b, None).await;
    assert_eq!((b2.changed, b2.next_after), (1, None));
    assert_eq!(store.task_bulk_count(b).await.unwrap(), 0);
    let running = filter(&[TaskState::Running], "a");
    batch(store, BulkAction::Cancel, &running, None).await;
    let t = store.task_get(retried[0].id).await.unwrap();
    assert!(t.cancel_requested && t.state == TaskState::Running, "{t:?}");
}
