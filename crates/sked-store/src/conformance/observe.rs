//! What the store reports: activity per time bucket, the workers.

use jiff::{SignedDuration, Timestamp};
use sked_core::TaskState;

use crate::*;

use super::*;

pub async fn activity_counts_ended_work_per_bucket(store: &Shared) {
    // Minute 0: two successes. Minute 1: a failed attempt that is retried, a cancel.
    // Minute 2: the retried task dies. Before `since`: a success that is not counted.
    let early = insert(store, task("k"), at(-120)).await.id;
    let c = claim(store, 1, at(-120)).await;
    assert_eq!(c[0].id, early);
    finish(
        store,
        early,
        1,
        FinishOutcome::Succeeded { result: None },
        at(-119),
    )
    .await
    .unwrap();
    for i in 0..2 {
        let id = insert(store, task("k"), at(i)).await.id;
        claim(store, 1, at(i)).await;
        finish(
            store,
            id,
            1,
            FinishOutcome::Succeeded { result: None },
            at(10 + i),
        )
        .await
        .unwrap();
    }
    let mut t = task("k");
    t.max_attempts = 2;
    let flaky = insert(store, t, at(60)).await.id;
    claim(store, 1, at(60)).await;
    let f = finish(store, flaky, 1, failed(true), at(70)).await.unwrap();
    assert_eq!(f.state, TaskState::Retrying);
    let gone = insert(store, task("k"), at(61)).await.id;
    store
        .task_cancel(TaskCancelParams {
            id: gone,
            now: at(75),
        })
        .await
        .unwrap();
    let c = claim(store, 1, f.run_at).await;
    assert_eq!(c[0].id, flaky);
    let dies_at = at(130);
    assert!(f.run_at < dies_at);
    let d = finish(store, flaky, 2, failed(true), dies_at)
        .await
        .unwrap();
    assert_eq!(d.state, TaskState::Dead);

    let buckets = store
        .activity(ActivityParams {
            since: t0(),
            bucket: SignedDuration::from_secs(60),
        })
        .await
        .unwrap();
    let b = |start: i64, succeeded, failed, dead, cancelled| ActivityBucket {
        start: at(start),
        succeeded,
        failed,
        dead,
        cancelled,
        expired: 0,
    };
    assert_eq!(
        buckets,
        vec![b(0, 2, 0, 0, 0), b(60, 0, 1, 0, 1), b(120, 0, 0, 1, 0)]
    );
}

pub async fn workers_beat_list_and_prune(store: &Shared) {
    let beat = |id: &str, role: &str, now: Timestamp, stopping: bool| WorkerBeatParams {
        id: id.into(),
        role: role.into(),
        queues: if role == "worker" {
            vec!["a".into(), "b".into()]
        } else {
            vec![]
        },
        concurrency: (role == "worker").then_some(8),
        stopping,
        now,
    };
    store
        .worker_beat(beat("w1", "worker", at(0), false))
        .await
        .unwrap();
    store
        .worker_beat(beat("n1", "node", at(5), false))
        .await
        .unwrap();
    store
        .worker_beat(beat("w1", "worker", at(10), false))
        .await
        .unwrap();
    // w1 holds a lease on one task.
    insert(store, task("k"), at(10)).await;
    claim(store, 1, at(10)).await;
    let workers = |since: i64, limit: u32| {
        store.worker_list(WorkerListParams {
            seen_since: at(since),
            limit,
        })
    };
    let list = workers(0, 100).await.unwrap();
    assert!(!list.more);
    let list = list.items;
    assert_eq!(list.len(), 2);
    let w1 = &list[0];
    assert_eq!(
        (w1.id.as_str(), w1.role.as_str(), w1.concurrency, w1.running),
        ("w1", "worker", Some(8), 1),
        "most recently seen first; running counts its leases"
    );
    assert_eq!(w1.queues, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(
        (w1.started_at, w1.last_seen_at, w1.stopped_at),
        (at(0), at(10), None)
    );
    assert_eq!((list[1].id.as_str(), list[1].running), ("n1", 0));
    let first = workers(0, 1).await.unwrap();
    assert_eq!(
        first.items,
        list[..1],
        "a page of one: the most recently seen"
    );
    assert!(first.more);
    // Goodbye, then back again.
    store
        .worker_beat(beat("w1", "worker", at(20), true))
        .await
        .unwrap();
    let w1 = workers(15, 100).await.unwrap().items.remove(0);
    assert_eq!(w1.stopped_at, Some(at(20)));
    store
        .worker_beat(beat("w1", "worker", at(30), false))
        .await
        .unwrap();
    // A sign of life that does not know the concurrency (a claim) keeps the one told.
    let mut seen = beat("w1", "worker", at(31), false);
    seen.concurrency = None;
    store.worker_beat(seen).await.unwrap();
    let list = workers(15, 100).await.unwrap().items;
    assert_eq!(list.len(), 1, "n1 was last seen before the cut");
    assert_eq!(list[0].stopped_at, None);
    assert_eq!(
        (list[0].concurrency, list[0].last_seen_at),
        (Some(8), at(31))
    );
    assert_eq!(store.worker_prune(at(6)).await.unwrap(), 1);
    assert_eq!(workers(0, 100).await.unwrap().items.len(), 1);
}
