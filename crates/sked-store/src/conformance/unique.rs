//! Unique keys held for a window after their enqueue (dedup windows) and debounced enqueues.

use jiff::SignedDuration;
use sked_core::TaskState;

use super::*;
use crate::*;

/// A task with `digest`'s key `user-7`, held for `window` seconds after its enqueue (`None`:
/// while it is unfinished).
fn keyed(window: Option<i64>) -> sked_core::NewTask {
    let mut t = task("digest");
    t.unique_key = Some("user-7".into());
    t.unique_for = window.map(SignedDuration::from_secs);
    t
}

/// A task enqueued with a dedup window holds its key for the window, whatever its state:
/// after its end, and not after the window though it has not run.
pub async fn a_dedup_window_holds_the_key_for_the_window_alone(store: &Shared) {
    let first = insert(store, keyed(Some(10)), t0()).await;
    assert!(!first.duplicate);
    let c = claim(store, 1, at(1)).await.remove(0);
    let done = FinishOutcome::Succeeded { result: None };
    finish(store, c.id, c.attempt, done, at(2)).await.unwrap();
    // Finished, and still held for the rest of the window; by a plain enqueue too.
    let again = insert(store, keyed(Some(10)), at(5)).await;
    assert_eq!((again.id, again.duplicate), (first.id, true));
    assert_eq!(again.state, TaskState::Succeeded);
    assert_eq!(insert(store, keyed(None), at(9)).await.id, first.id);
    // Pruning keeps a task whose window is open.
    let pruned = store
        .task_prune(TaskPruneParams {
            finished_before: at(9),
            now: at(9),
            limit: 100,
            finished_since: None,
        })
        .await
        .unwrap();
    assert_eq!(pruned, 0);
    // The window closes ten seconds after the first enqueue.
    let second = insert(store, keyed(Some(10)), at(10)).await;
    assert!(!second.duplicate);
    assert_ne!(second.id, first.id);
    // Its window closes before it runs: the key is free again, for a window or not.
    let third = insert(store, keyed(Some(10)), at(20)).await;
    assert!(
        !third.duplicate,
        "a closed window held the key of an unfinished task"
    );
    assert_ne!(third.id, second.id);
    let waiting = store.task_get(second.id).await.unwrap();
    assert_eq!(waiting.state, TaskState::Available);
    assert_eq!(insert(store, keyed(None), at(25)).await.id, third.id);
    let plain = insert(store, keyed(None), at(30)).await;
    assert!(
        !plain.duplicate,
        "two unfinished tasks whose windows closed held the key"
    );
    // A task without a window holds the key while unfinished, against a window too.
    let held = insert(store, keyed(Some(10)), at(45)).await;
    assert_eq!((held.id, held.duplicate), (plain.id, true));
}

/// Enqueues of one key at the same moment, with a window and without, make one task; five
/// keys in turn.
pub async fn a_dedup_window_under_concurrency(store: &Shared) {
    for key in 0..5 {
        let mut handles = Vec::new();
        for n in 0..16 {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let mut t = keyed((n % 2 == 0).then_some(10));
                t.unique_key = Some(format!("key-{key}"));
                insert(&store, t, t0()).await.id
            }));
        }
        let mut ids = Vec::new();
        for h in handles {
            ids.push(h.await.unwrap());
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 1, "enqueues of key-{key} made {ids:?}");
    }
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
