//! Unique keys held past their task's end (dedup windows) and debounced enqueues.

use jiff::SignedDuration;
use sked_core::TaskState;

use super::*;
use crate::*;

pub async fn a_dedup_window_holds_the_key_after_the_task_finished(store: &Shared) {
    let mut t = task("digest");
    t.unique_key = Some("user-7".into());
    t.unique_for = Some(SignedDuration::from_secs(10));
    let first = insert(store, t.clone(), t0()).await;
    assert!(!first.duplicate);
    let c = claim(store, 1, at(1)).await.remove(0);
    let done = FinishOutcome::Succeeded { result: None };
    finish(store, c.id, c.attempt, done, at(2)).await.unwrap();
    // Finished, and still held for the rest of the window; by a plain enqueue too.
    let again = insert(store, t.clone(), at(5)).await;
    assert_eq!((again.id, again.duplicate), (first.id, true));
    assert_eq!(again.state, TaskState::Succeeded);
    let mut plain = task("digest");
    plain.unique_key = Some("user-7".into());
    assert_eq!(insert(store, plain, at(9)).await.id, first.id);
    // Pruning keeps a task whose window is open.
    let pruned = store
        .task_prune(TaskPruneParams {
            finished_before: at(9),
            limit: 100,
            finished_since: None,
        })
        .await
        .unwrap();
    assert_eq!(pruned, 0);
    // The window closes ten seconds after the first enqueue.
    let later = insert(store, t, at(10)).await;
    assert!(!later.duplicate);
    assert_ne!(later.id, first.id);
}

pub async fn a_debounced_enqueue_moves_the_waiting_task(store: &Shared) {
    // As the engine enqueues it: due a second after each enqueue.
    let debounced = |n: i64, ms: i64| {
        let mut t = task("rebuild");
        t.unique_key = Some("site-3".into());
        t.debounce = Some(SignedDuration::from_secs(1));
        t.payload = serde_json::json!({ "n": n });
        t.run_at = Some(t0() + SignedDuration::from_millis(ms + 1_000));
        t
    };
    let ms = |n: i64| t0() + SignedDuration::from_millis(n);
    let first = insert(store, debounced(1, 0), t0()).await;
    assert_eq!(first.state, TaskState::Scheduled);
    for (n, at_ms) in [(2, 200), (3, 400)] {
        let next = insert(store, debounced(n, at_ms), ms(at_ms)).await;
        assert_eq!(
            (next.id, next.duplicate, next.debounced),
            (first.id, true, true)
        );
    }
    let moved = store.task_get(first.id).await.unwrap();
    assert_eq!(moved.run_at, ms(1_400));
    assert_eq!(moved.payload, serde_json::json!({ "n": 3 }));
    assert!(claim(store, 10, ms(1_300)).await.is_empty(), "not due yet");
    let ran = claim(store, 10, ms(1_400)).await;
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0].payload, serde_json::json!({ "n": 3 }));
    // Started: a debounced enqueue no longer moves it, and gets the running task.
    let late = insert(store, debounced(4, 1_500), ms(1_500)).await;
    assert_eq!((late.id, late.debounced), (first.id, false));
    assert_eq!(late.state, TaskState::Running);
    let still = store.task_get(first.id).await.unwrap();
    assert_eq!(still.payload, serde_json::json!({ "n": 3 }));
}
