//! Bulk operations: retry or cancel by filter, batch by batch, and their dry-run count; one
//! task deleted by id.

use jiff::SignedDuration;
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

/// Lists and bulk operations filter by concurrency key, unique key and enqueue time alike;
/// a bulk delete removes finished tasks (with their attempts) and nothing else, batch by batch.
pub async fn filters_by_key_and_time_and_bulk_delete(store: &Shared) {
    // At t0: two of key t1 (one with a unique key), one of key t2; at 5 s: one without.
    let early = [
        NewTask::new("k").queue("d").key("t1"),
        NewTask::new("k").queue("d").key("t1").unique_key("u1"),
        NewTask::new("k").queue("d").key("t2"),
    ];
    insert_batch(store, &early, t0()).await;
    insert_batch(
        store,
        &[NewTask::new("k").queue("d").max_attempts(1)],
        at(5),
    )
    .await;
    let listed = async |p: TaskListParams| -> Vec<i64> {
        let page = store
            .task_list(TaskListParams { limit: 100, ..p })
            .await
            .unwrap();
        page.items.iter().map(|t| t.id).collect()
    };
    let all = listed(TaskListParams::default()).await;
    assert_eq!(all.len(), 4);
    let of_key = |key: &str| TaskListParams {
        key: Some(key.into()),
        ..Default::default()
    };
    assert_eq!(listed(of_key("t1")).await.len(), 2);
    assert_eq!(listed(of_key("t2")).await.len(), 1);
    let unique = TaskListParams {
        unique_key: Some("u1".into()),
        ..Default::default()
    };
    assert_eq!(listed(unique).await.len(), 1);
    let since = TaskListParams {
        since: Some(at(5)),
        ..Default::default()
    };
    assert_eq!(listed(since).await, vec![all[0]]);
    let until = TaskListParams {
        until: Some(at(5)),
        ..Default::default()
    };
    assert_eq!(listed(until).await.len(), 3);
    let t1 = BulkFilter {
        states: vec![TaskState::Available],
        key: Some("t1".into()),
        ..BulkFilter::default()
    };
    assert_eq!(store.task_bulk_count(t1.clone()).await.unwrap(), 2);
    let recent = BulkFilter {
        states: vec![TaskState::Available],
        since: Some(at(5)),
        ..BulkFilter::default()
    };
    assert_eq!(store.task_bulk_count(recent).await.unwrap(), 1);

    // The recent one fails for good; the t1 ones are cancelled; t2's stays available.
    let recent_task = claim(store, 10, at(6)).await;
    for t in &recent_task {
        if t.id == all[0] {
            finish(store, t.id, t.attempt, failed(false), at(7))
                .await
                .unwrap();
        } else {
            finish(store, t.id, t.attempt, FinishOutcome::Released, at(7))
                .await
                .unwrap();
        }
    }
    let mut after = None;
    loop {
        let b = batch(store, BulkAction::Cancel, &t1, after).await;
        after = b.next_after;
        if after.is_none() {
            break;
        }
    }
    let finished = BulkFilter {
        states: vec![TaskState::Dead, TaskState::Cancelled],
        queue: Some("d".into()),
        ..BulkFilter::default()
    };
    assert_eq!(store.task_bulk_count(finished.clone()).await.unwrap(), 3);
    // Deleted two at a time: 2, then 1 and done.
    let first = batch(store, BulkAction::Delete, &finished, None).await;
    assert_eq!(first.changed, 2);
    let second = batch(store, BulkAction::Delete, &finished, first.next_after).await;
    assert_eq!((second.changed, second.next_after), (1, None));
    let left = listed(TaskListParams::default()).await;
    assert_eq!(left.len(), 1, "only the unfinished task is left");
    for id in &all {
        let got = store.task_get(*id).await;
        assert_eq!(got.is_ok(), left.contains(id), "task {id}");
    }
    // A delete names finished states only.
    assert!(
        BulkAction::Delete
            .applies_to()
            .iter()
            .all(|s| s.is_finished())
    );
}

/// One task deleted by id: only once it has ended, and then gone with what held to it (its
/// dedup window's key, its edges).
pub async fn a_task_is_deleted_by_id_once_it_has_ended(store: &Shared) {
    let mut t = task("digest");
    t.unique_key = Some("weekly".into());
    t.unique_for = Some(SignedDuration::from_secs(3600));
    let first = insert(store, t.clone(), t0()).await;
    let child = insert(store, task("after").after([first.id]), t0()).await;
    let early = store.task_delete(first.id).await.unwrap_err();
    assert_eq!(early.kind(), ErrorKind::Conflict, "{early}");
    assert!(early.to_string().contains("available"), "{early}");
    let c = claim(store, 1, at(1)).await.remove(0);
    assert_eq!(c.id, first.id);
    let running = store.task_delete(first.id).await.unwrap_err();
    assert_eq!(running.kind(), ErrorKind::Conflict, "{running}");
    let done = FinishOutcome::Succeeded { result: None };
    finish(store, c.id, c.attempt, done, at(2)).await.unwrap();
    store.task_delete(first.id).await.unwrap();
    let gone = store.task_get(first.id).await.unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::NotFound);
    let again = store.task_delete(first.id).await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::NotFound);
    // Its window's key is free; its child, released by its success, no longer names it.
    let next = insert(store, t, at(3)).await;
    assert!(!next.duplicate, "a deleted task held its key");
    let child = store.task_get(child.id).await.unwrap();
    assert_eq!(child.state, TaskState::Available);
    assert!(child.depends_on.is_empty(), "{:?}", child.depends_on);
}

/// The ended runs the per-kind figures read: ended tasks (with how long they ran) and failed
/// attempts, since an instant.
pub async fn run_samples_are_the_runs_that_ended(store: &Shared) {
    use crate::kinds::{RunEnd, RunSamplesParams};
    let tasks = [
        NewTask::new("ok"),
        NewTask::new("flaky").max_attempts(3),
        NewTask::new("doomed").max_attempts(1),
    ];
    insert_batch(store, &tasks, t0()).await;
    let waiting = insert(store, NewTask::new("never"), t0()).await.id;
    store
        .task_cancel(TaskCancelParams {
            id: waiting,
            now: at(1),
        })
        .await
        .unwrap();
    let claimed = claim(store, 10, at(1)).await;
    assert_eq!(claimed.len(), 3);
    for t in &claimed {
        let outcome = match t.kind.as_str() {
            "ok" => FinishOutcome::Succeeded { result: None },
            "flaky" => failed(true),
            _ => failed(false),
        };
        finish(store, t.id, t.attempt, outcome, at(3))
            .await
            .unwrap();
    }
    let mut samples = store
        .run_samples(RunSamplesParams {
            since: t0(),
            limit: 100,
        })
        .await
        .unwrap();
    samples.sort_by(|a, b| a.kind.cmp(&b.kind));
    let seen: Vec<(&str, RunEnd, Option<i64>)> = samples
        .iter()
        .map(|s| (s.kind.as_str(), s.end, s.run_ms))
        .collect();
    assert_eq!(
        seen,
        [
            ("doomed", RunEnd::Dead, Some(2000)),
            ("flaky", RunEnd::Failed, Some(2000)),
            ("never", RunEnd::Cancelled, None),
            ("ok", RunEnd::Succeeded, Some(2000)),
        ]
    );
    let later = store
        .run_samples(RunSamplesParams {
            since: at(4),
            limit: 100,
        })
        .await
        .unwrap();
    assert!(later.is_empty(), "{later:?}");
}
