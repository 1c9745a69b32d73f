//! Batches: tasks join them, and their callbacks are enqueued once, after the batch was closed
//! and its tasks ended — `on_success` only when they all succeeded — however the tasks end
//! and however many end at once.

use sked_core::{BatchId, NewBatch, Task, TaskId, TaskState};

use super::*;

async fn open(
    store: &Shared,
    on_success: Option<NewTask>,
    on_complete: Option<NewTask>,
) -> BatchId {
    let b = store
        .batch_open(BatchOpenParams {
            batch: NewBatch {
                name: Some("import".into()),
                on_success,
                on_complete,
            },
            now: t0(),
        })
        .await
        .unwrap();
    assert_eq!((b.state, b.total), (BatchState::Open, 0));
    b.id
}

async fn close(store: &Shared, id: BatchId, now: Timestamp) -> BatchInfo {
    store
        .batch_close(BatchCloseParams { id, now })
        .await
        .unwrap()
}

async fn info(store: &Shared, id: BatchId) -> BatchInfo {
    store.batch_get(id).await.unwrap()
}

/// Claims every claimable task and ends each: succeeded, or dead for the ids in `die`.
async fn run_all(store: &Shared, die: &[TaskId], now: Timestamp) -> Vec<TaskId> {
    let claimed = claim(store, 100, now).await;
    for t in &claimed {
        let outcome = match die.contains(&t.id) {
            true => failed(false),
            false => FinishOutcome::Succeeded { result: None },
        };
        finish(store, t.id, t.attempt, outcome, now).await.unwrap();
    }
    claimed.iter().map(|t| t.id).collect()
}

async fn callback(store: &Shared, id: Option<TaskId>) -> Task {
    store.task_get(id.expect("a callback task")).await.unwrap()
}

fn member(kind: &str, batch: BatchId) -> NewTask {
    task(kind).batch(batch)
}

pub async fn a_batch_enqueues_its_callbacks_once_when_closed_and_ended(store: &Shared) {
    let id = open(
        store,
        Some(task("ok").payload(serde_json::json!({"to": "ops"}))),
        Some(task("report")),
    )
    .await;
    let members: Vec<TaskId> = insert_batch(store, &vec![member("m", id); 3], t0())
        .await
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(store.task_get(members[0]).await.unwrap().batch, Some(id));
    let b = info(store, id).await;
    assert_eq!((b.total, b.counts[&TaskState::Available]), (3, 3));
    // All ended before the close: nothing yet.
    let claimed = claim(store, 2, at(1)).await;
    for t in &claimed {
        finish(
            store,
            t.id,
            t.attempt,
            FinishOutcome::Succeeded { result: None },
            at(1),
        )
        .await
        .unwrap();
    }
    let b = close(store, id, at(2)).await;
    assert_eq!(b.state, BatchState::Closed);
    assert_eq!(b.closed_at, Some(at(2)));
    assert!(b.on_complete_task.is_none());
    // The last task's end enqueues both, in its own write.
    assert_eq!(run_all(store, &[], at(3)).await.len(), 1);
    let b = info(store, id).await;
    assert_eq!((b.state, b.done_at), (BatchState::Done, Some(at(3))));
    let ok = callback(store, b.on_success_task).await;
    assert_eq!((ok.kind.as_str(), ok.state), ("ok", TaskState::Available));
    assert_eq!(
        ok.payload,
        serde_json::json!({"to": "ops", "batch": {"id": id, "counts": {"succeeded": 3}}})
    );
    assert_eq!(callback(store, b.on_complete_task).await.kind, "report");
    // Closed again: nothing more; a task for it now is refused, and nothing is made.
    assert_eq!(
        close(store, id, at(4)).await.on_success_task,
        b.on_success_task
    );
    let before = store
        .task_list(TaskListParams {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .items
        .len();
    let late = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![task("x").into(), member("late", id).into()],
            now: at(5),
        })
        .await
        .unwrap_err();
    assert_eq!(late.kind(), ErrorKind::Conflict, "{late}");
    assert!(
        late.to_string().contains(&format!("batch {id} has ended")),
        "{late}"
    );
    let unknown = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![member("x", 424_242).into()],
            now: at(5),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::Invalid);
    assert!(unknown.to_string().contains("no batch 424242"), "{unknown}");
    let after = store
        .task_list(TaskListParams {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(before, after, "a refused insert made nothing");
    assert_eq!(
        store.batch_get(424_242).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let listed = store
        .batch_list(BatchListParams {
            before_id: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].counts[&TaskState::Succeeded], 3);
}

pub async fn a_failed_task_skips_on_success_and_an_empty_batch_ends_at_close(store: &Shared) {
    let id = open(store, Some(task("ok")), Some(task("report"))).await;
    let ids: Vec<TaskId> = insert_batch(
        store,
        &[member("m", id).max_attempts(1), member("m", id)],
        t0(),
    )
    .await
    .iter()
    .map(|t| t.id)
    .collect();
    run_all(store, &[ids[0]], at(1)).await;
    // Every task ended: the close ends the batch at once.
    let b = close(store, id, at(2)).await;
    assert_eq!(b.state, BatchState::Done);
    assert!(b.on_success_task.is_none(), "a task died: no on_success");
    let report = callback(store, b.on_complete_task).await;
    assert_eq!(
        report.payload["batch"]["counts"],
        serde_json::json!({"succeeded": 1, "dead": 1})
    );
    // Nothing joined: the close runs both, the batch having succeeded.
    let empty = open(store, Some(task("ok")), Some(task("report"))).await;
    let b = close(store, empty, at(3)).await;
    assert_eq!(b.state, BatchState::Done);
    assert!(b.on_success_task.is_some() && b.on_complete_task.is_some());
}

pub async fn a_batch_grows_from_its_own_tasks_and_ends_after_the_last(store: &Shared) {
    let id = open(store, None, Some(task("report"))).await;
    let first = insert(store, member("stage1", id), t0()).await.id;
    close(store, id, at(1)).await;
    let held = claim(store, 1, at(2)).await;
    assert_eq!(held[0].id, first);
    // While it runs, the first stage adds the second to the closed batch.
    let second = insert(store, member("stage2", id), at(2)).await.id;
    finish(
        store,
        first,
        1,
        FinishOutcome::Succeeded { result: None },
        at(3),
    )
    .await
    .unwrap();
    assert_eq!(
        info(store, id).await.state,
        BatchState::Closed,
        "the second stage runs"
    );
    assert_eq!(run_all(store, &[], at(4)).await, vec![second]);
    let b = info(store, id).await;
    assert_eq!((b.state, b.total), (BatchState::Done, 2));
    let report = callback(store, b.on_complete_task).await;
    assert_eq!(report.payload["batch"]["counts"]["succeeded"], 2);

    // A task that died and is retried before the batch ends counts as unfinished again.
    let id = open(store, Some(task("ok")), None).await;
    let flaky = insert(store, member("flaky", id).max_attempts(1), at(5))
        .await
        .id;
    run_all(store, &[flaky], at(5)).await;
    store
        .task_retry(TaskRetryParams {
            id: flaky,
            now: at(6),
        })
        .await
        .unwrap();
    assert_eq!(close(store, id, at(7)).await.state, BatchState::Closed);
    run_all(store, &[], at(8)).await;
    let b = info(store, id).await;
    assert_eq!(b.state, BatchState::Done);
    assert_eq!(callback(store, b.on_success_task).await.kind, "ok");
}

pub async fn batch_tasks_ending_at_once_enqueue_the_callback_once(store: &Shared) {
    const TASKS: usize = 40;
    let id = open(store, Some(task("ok")), Some(task("report"))).await;
    insert_batch(store, &vec![member("m", id); TASKS], t0()).await;
    close(store, id, t0()).await;
    let claimed = claim(store, TASKS as u32, at(1)).await;
    assert_eq!(claimed.len(), TASKS);
    let mut ends = Vec::new();
    for t in claimed {
        let store = store.clone();
        ends.push(tokio::spawn(async move {
            finish(
                &store,
                t.id,
                t.attempt,
                FinishOutcome::Succeeded { result: None },
                at(2),
            )
            .await
            .unwrap();
        }));
    }
    for e in ends {
        e.await.unwrap();
    }
    let b = info(store, id).await;
    assert_eq!(b.state, BatchState::Done);
    let callbacks = store
        .task_list(TaskListParams {
            kind: Some("report".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(callbacks.items.len(), 1, "enqueued once");
    let report = callback(store, Some(callbacks.items[0].id)).await;
    assert_eq!(report.payload["batch"]["counts"]["succeeded"], TASKS as u64);
    assert_eq!(b.on_complete_task, Some(report.id));
}
