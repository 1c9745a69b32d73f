//! A task's deadline to start: claims never take a task past it, and such a task ends
//! `expired`, with what any end does to the tasks that wait for it.

use jiff::SignedDuration;
use sked_core::{TaskId, TaskState};

use super::*;
use crate::*;

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

/// Ends the tasks past their deadline at `now`, as the leader's pass does.
async fn expire(store: &Shared, now: Timestamp) -> Vec<TaskId> {
    store
        .task_expire(TaskExpireParams { now, limit: 100 })
        .await
        .unwrap()
}

async fn state(store: &Shared, id: TaskId) -> TaskState {
    store.task_get(id).await.unwrap().state
}

/// A task not started by its deadline never runs: no claim takes it once the deadline has
/// passed, whether or not it has been ended yet, and it ends `expired`, with the deadline
/// kept and the reason as its error. Its dependents are cancelled naming it, its unique key
/// is free again, and it is counted apart from the cancelled.
pub async fn a_task_not_started_by_its_deadline_expires_and_never_runs(store: &Shared) {
    // Due now with 10 s to start; due at 2 s with a deadline at 5 s; 100 s to start; none.
    let mut keyed = task("digest").ttl(secs(10));
    keyed.unique_key = Some("user-7".into());
    let a = insert(store, keyed, t0()).await.id;
    let b = insert(store, task("b").run_at(at(2)).expires_at(at(5)), t0()).await;
    assert_eq!(b.state, TaskState::Scheduled);
    let c = insert(store, task("c").ttl(secs(100)), t0()).await.id;
    let d = insert(store, task("d"), t0()).await.id;
    let child = insert(store, task("child").after([a]), t0()).await.id;
    let got = store.task_get(a).await.unwrap();
    assert_eq!(got.expires_at, Some(at(10)), "ttl counts from the run time");
    assert_eq!(store.task_get(b.id).await.unwrap().expires_at, Some(at(5)));
    assert_eq!(store.task_get(d).await.unwrap().expires_at, None);

    // At the deadline a task may no longer start.
    let mut taken: Vec<TaskId> = claim(store, 10, at(10))
        .await
        .iter()
        .map(|t| t.id)
        .collect();
    taken.sort_unstable();
    assert_eq!(taken, vec![c, d], "a claim took a task past its deadline");
    // Ended by the pass (a backend may have ended them in the claim already).
    let ended = expire(store, at(10)).await;
    assert!(ended.iter().all(|id| [a, b.id].contains(id)), "{ended:?}");
    assert!(expire(store, at(10)).await.is_empty(), "expired twice");
    for id in [a, b.id] {
        let t = store.task_get(id).await.unwrap();
        assert_eq!(t.state, TaskState::Expired);
        assert_eq!(t.finished_at, Some(at(10)));
        assert_eq!(t.attempt, 0);
        assert_eq!(t.last_error.as_deref(), Some(crate::expiry::REASON));
        assert!(t.attempts.is_empty(), "an expired task never ran");
    }
    let c_child = store.task_get(child).await.unwrap();
    assert_eq!(c_child.state, TaskState::Cancelled);
    assert_eq!(
        c_child.last_error,
        Some(crate::rules::dependents::parent_failed(
            a,
            TaskState::Expired
        ))
    );
    // The key is free again.
    let mut again = task("digest");
    again.unique_key = Some("user-7".into());
    assert!(!insert(store, again, at(11)).await.duplicate);

    // Counted as expired: in the queue's counts and the activity.
    let q = store.queue_get("default", at(11)).await.unwrap();
    assert_eq!(q.counts.get(&TaskState::Expired).copied(), Some(2));
    let buckets = store
        .activity(ActivityParams {
            since: t0(),
            bucket: SignedDuration::from_secs(60),
        })
        .await
        .unwrap();
    let expired: u64 = buckets.iter().map(|b| b.expired).sum();
    let cancelled: u64 = buckets.iter().map(|b| b.cancelled).sum();
    assert_eq!((expired, cancelled), (2, 1));

    // Run again by hand, it runs: the deadline was for its first start.
    let retried = store
        .task_retry(TaskRetryParams {
            id: b.id,
            now: at(20),
        })
        .await
        .unwrap();
    assert_eq!(
        (retried.state, retried.expires_at),
        (TaskState::Available, None)
    );
    let taken: Vec<TaskId> = claim(store, 10, at(21))
        .await
        .iter()
        .map(|t| t.id)
        .collect();
    assert!(taken.contains(&b.id));
}

/// A deadline holds a task to its first start: once started, its retries run after it, and
/// the pass leaves it alone. Until the first start, a task waiting for its run time, its
/// parents or a worker expires alike.
pub async fn a_deadline_is_for_the_first_start(store: &Shared) {
    let started = insert(store, task("s").ttl(secs(5)), t0()).await.id;
    let c = claim(store, 1, at(1)).await.remove(0);
    assert_eq!(c.id, started);
    finish(store, c.id, c.attempt, failed(true), at(2))
        .await
        .unwrap();
    let parent = insert(store, task("p"), at(2)).await.id;
    let waiting = insert(store, task("w").after([parent]).ttl(secs(5)), at(2))
        .await
        .id;
    let scheduled = insert(store, task("l").run_at(at(60)).ttl(secs(5)), at(2))
        .await
        .id;
    assert_eq!(state(store, waiting).await, TaskState::Waiting);
    // Long after the deadlines.
    let ended = expire(store, at(100)).await;
    assert!(!ended.contains(&started), "a started task expired");
    assert_eq!(state(store, waiting).await, TaskState::Expired);
    assert_eq!(state(store, scheduled).await, TaskState::Expired);
    let again: Vec<TaskId> = claim(store, 10, at(100))
        .await
        .iter()
        .map(|t| t.id)
        .collect();
    assert!(again.contains(&started), "a retry was held to the deadline");
    assert!(again.contains(&parent));
    assert!(!again.contains(&waiting) && !again.contains(&scheduled));
}

/// A deadline that has passed, or that comes before the run time, is refused with nothing
/// made; so is a TTL that is not positive, or given with a deadline. A schedule's run made
/// after its deadline (an occurrence caught up late) is made, and expires.
pub async fn a_deadline_that_could_never_be_met_is_refused(store: &Shared) {
    let refused = |t: NewTask| async move {
        let r = store
            .task_insert_many(TaskInsertParams {
                tasks: vec![t.into()],
                now: at(10),
            })
            .await;
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{r:?}");
    };
    refused(task("past").expires_at(at(9))).await;
    refused(task("now").expires_at(at(10))).await;
    refused(task("before").run_at(at(30)).expires_at(at(20))).await;
    refused(task("negative").ttl(secs(-1))).await;
    refused(task("both").ttl(secs(5)).expires_at(at(60))).await;
    // Late: its deadline passed by the time it is made. It never runs.
    let late = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![TaskInsert {
                task: task("nightly").expires_at(at(5)),
                schedule: Some("nightly".into()),
                nominal_at: Some(at(0)),
            }],
            now: at(10),
        })
        .await
        .unwrap()
        .remove(0);
    let page = store
        .task_list(TaskListParams {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1, "a refused task was made");
    assert!(claim(store, 10, at(10)).await.is_empty());
    expire(store, at(10)).await;
    assert_eq!(state(store, late.id).await, TaskState::Expired);
    // A task cannot be moved past its deadline.
    let t = insert(store, task("m").ttl(secs(30)), at(10)).await.id;
    let moved = store
        .task_reschedule(TaskRescheduleParams {
            id: t,
            run_at: at(40),
            now: at(11),
        })
        .await;
    assert!(matches!(moved, Err(StoreError::Invalid(_))), "{moved:?}");
    assert_eq!(store.task_get(t).await.unwrap().run_at, at(10));
}
