//! The conformance suite: the behaviour every [`Store`] backend must have. A backend runs it
//! with [`conformance_tests!`](crate::conformance_tests), which makes one test per case, each on
//! a fresh store. A change to store behaviour comes with a case here.

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sked_core::{
    NewTask, OccurrenceOutcome, OverlapPolicy, Plan, PlannedOccurrence, ScheduleDef, TaskState,
    TaskTemplate,
};

use crate::*;

/// Makes one `#[tokio::test]` per conformance case. `$make` is an async block that returns
/// `Some((store, guard))`, or `None` to skip the case (no test database configured); the
/// guard (say, a temporary directory) lives until the test ends.
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@cases $make;
            insert_and_get, unique_key_returns_the_holder, unique_key_under_concurrency,
            claim_in_priority_order, future_tasks_wait_until_due, paused_queue_gives_nothing,
            concurrency_limit_caps_running, claim_filters_queues_and_kinds,
            heartbeat_extends_and_rejects_stale, complete_records_result_and_attempt,
            fail_retries_with_backoff_until_dead, fatal_failure_is_dead_at_once,
            snooze_does_not_spend_an_attempt, release_gives_the_task_back_at_once,
            claim_with_min_priority, cancel_before_and_while_running,
            rescue_requeues_expired_and_fences_old_worker, rescue_out_of_attempts_is_dead,
            retry_and_reschedule, prune_removes_old_finished_tasks, list_filters,
            queue_counts, leases_renew_and_take_over, schedule_crud_and_pause,
            schedule_apply_is_exactly_once, schedule_buffer_release_and_replace,
            schedule_sync_creates_updates_and_removes, schedule_sync_concurrently_one_copy,
            activity_counts_ended_work_per_bucket, workers_beat_list_and_prune);
    };
    (@cases $make:expr; $($case:ident),+) => {
        $(
            #[tokio::test]
            async fn $case() {
                let Some((store, _guard)) = $make.await else {
                    return;
                };
                let store: ::std::sync::Arc<dyn $crate::Store> = ::std::sync::Arc::new(store);
                $crate::conformance::$case(&store).await;
            }
        )+
    };
}

/// A fixed start time for every case.
pub fn t0() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

fn at(secs: i64) -> Timestamp {
    t0().checked_add(SignedDuration::from_secs(secs)).unwrap()
}

/// Cases take a shared store so that they can hand it to spawned tasks.
pub type Shared = std::sync::Arc<dyn Store>;

const TTL: SignedDuration = SignedDuration::from_secs(30);

async fn insert(store: &Shared, task: NewTask, now: Timestamp) -> TaskInserted {
    store
        .task_insert_many(TaskInsertParams {
            tasks: vec![task.into()],
            now,
        })
        .await
        .unwrap()
        .remove(0)
}

fn task(kind: &str) -> NewTask {
    NewTask::new(kind)
}

async fn claim(store: &Shared, max: u32, now: Timestamp) -> Vec<sked_core::Task> {
    claim_from(store, &[], max, now).await
}

async fn claim_from(
    store: &Shared,
    queues: &[&str],
    max: u32,
    now: Timestamp,
) -> Vec<sked_core::Task> {
    store
        .task_claim(TaskClaimParams {
            min_priority: None,
            queues: queues.iter().map(|q| q.to_string()).collect(),
            kinds: vec![],
            max,
            worker: "w1".into(),
            lease_ttl: TTL,
            now,
        })
        .await
        .unwrap()
}

async fn finish(
    store: &Shared,
    id: i64,
    attempt: i32,
    outcome: FinishOutcome,
    now: Timestamp,
) -> Result<sked_core::Task> {
    store
        .task_finish_many(vec![TaskFinishParams {
            id,
            attempt,
            outcome,
            now,
            jitter: 0.5,
        }])
        .await
        .unwrap()
        .remove(0)
}

fn failed(retryable: bool) -> FinishOutcome {
    FinishOutcome::Failed {
        error: "boom".into(),
        retryable,
    }
}

pub async fn insert_and_get(store: &Shared) {
    let mut t = task("email");
    t.queue = "mail".into();
    t.payload = json!({"to": "a@example.com", "n": [1, 2]});
    t.priority = 5;
    t.max_attempts = 3;
    t.timeout = Some(SignedDuration::from_secs(30));
    let now = t0();
    let ins = insert(store, t.clone(), now).await;
    assert_eq!(ins.state, TaskState::Available);
    assert!(!ins.duplicate);
    let got = store.task_get(ins.id).await.unwrap();
    assert_eq!((got.kind.as_str(), got.queue.as_str()), ("email", "mail"));
    assert_eq!(got.payload, t.payload);
    assert_eq!((got.priority, got.max_attempts, got.attempt), (5, 3, 0));
    assert_eq!(got.timeout, Some(SignedDuration::from_secs(30)));
    assert_eq!(got.run_at, now);
    assert_eq!(got.created_at, now);

    let mut later = task("email");
    later.run_at = Some(at(60));
    let ins2 = insert(store, later, now).await;
    assert_eq!(ins2.state, TaskState::Scheduled);
    assert!(ins2.id > ins.id, "ids grow in insertion order");
    assert_eq!(store.task_next_run_at().await.unwrap(), Some(at(60)));

    let err = store.task_get(999_999).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let mut bad = task("x");
    bad.max_attempts = 0;
    let err = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![bad.into()],
            now,
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
}

pub async fn unique_key_returns_the_holder(store: &Shared) {
    let mut t = task("report");
    t.unique_key = Some("daily-2026-01-01".into());
    let a = insert(store, t.clone(), t0()).await;
    let b = insert(store, t.clone(), t0()).await;
    assert_eq!(a.id, b.id);
    assert!(b.duplicate);
    // Two with the same key in one batch: one row.
    let both = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![t.clone().into(), t.clone().into()],
            now: t0(),
        })
        .await
        .unwrap();
    assert!(both.iter().all(|i| i.id == a.id && i.duplicate));
    // Once the holder finished, the key is free again.
    let c = claim(store, 1, t0()).await.remove(0);
    finish(
        store,
        c.id,
        c.attempt,
        FinishOutcome::Succeeded { result: None },
        t0(),
    )
    .await
    .unwrap();
    let d = insert(store, t, t0()).await;
    assert!(!d.duplicate);
    assert_ne!(d.id, a.id);
}

pub async fn unique_key_under_concurrency(store: &Shared) {
    let mut handles = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let mut t = task("once");
            t.unique_key = Some("k".into());
            insert(&store, t, t0()).await.id
        }));
    }
    let mut ids = Vec::new();
    for h in handles {
        ids.push(h.await.unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every submission got the same task");
    let all = store
        .task_list(TaskListParams {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 1);
}

pub async fn claim_in_priority_order(store: &Shared) {
    let mut ids = Vec::new();
    for (p, secs) in [(0, 0), (10, 5), (0, -5), (10, 1), (-1, -100)] {
        let mut t = task("k");
        t.priority = p;
        t.run_at = Some(at(secs));
        ids.push(insert(store, t, at(-200)).await.id);
    }
    let claimed = claim(store, 10, at(10)).await;
    let order: Vec<i64> = claimed.iter().map(|t| t.id).collect();
    assert_eq!(
        order,
        vec![ids[3], ids[1], ids[2], ids[0], ids[4]],
        "priority desc, then run_at, then id"
    );
    for t in &claimed {
        assert_eq!(t.state, TaskState::Running);
        assert_eq!(t.attempt, 1);
        assert_eq!(t.worker.as_deref(), Some("w1"));
        assert_eq!(t.started_at, Some(at(10)));
        assert_eq!(t.lease_expires_at, Some(at(40)));
    }
    assert!(
        claim(store, 10, at(11)).await.is_empty(),
        "nothing is claimed twice"
    );
}

pub async fn future_tasks_wait_until_due(store: &Shared) {
    let mut t = task("k");
    t.run_at = Some(at(30));
    let id = insert(store, t, t0()).await.id;
    assert!(claim(store, 1, at(29)).await.is_empty());
    let got = claim(store, 1, at(30)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, id);
}

pub async fn paused_queue_gives_nothing(store: &Shared) {
    let mut t = task("k");
    t.queue = "q".into();
    insert(store, t, t0()).await;
    let q = store
        .queue_update(QueueUpdateParams {
            name: "q".into(),
            paused: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(q.paused);
    assert!(claim(store, 5, t0()).await.is_empty());
    assert!(claim_from(store, &["q"], 5, t0()).await.is_empty());
    store
        .queue_update(QueueUpdateParams {
            name: "q".into(),
            paused: Some(false),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(claim(store, 5, t0()).await.len(), 1);
}

pub async fn concurrency_limit_caps_running(store: &Shared) {
    for _ in 0..5 {
        let mut t = task("k");
        t.queue = "limited".into();
        insert(store, t, t0()).await;
    }
    insert(store, task("k"), t0()).await;
    store
        .queue_update(QueueUpdateParams {
            name: "limited".into(),
            concurrency_limit: Some(Some(2)),
            ..Default::default()
        })
        .await
        .unwrap();
    let first = claim(store, 10, t0()).await;
    assert_eq!(first.iter().filter(|t| t.queue == "limited").count(), 2);
    assert_eq!(first.iter().filter(|t| t.queue == "default").count(), 1);
    assert!(
        claim(store, 10, t0()).await.is_empty(),
        "the limit is reached"
    );
    let done = first.iter().find(|t| t.queue == "limited").unwrap();
    finish(
        store,
        done.id,
        done.attempt,
        FinishOutcome::Succeeded { result: None },
        t0(),
    )
    .await
    .unwrap();
    assert_eq!(claim(store, 10, t0()).await.len(), 1, "one slot freed");
}

pub async fn claim_filters_queues_and_kinds(store: &Shared) {
    for (q, k) in [("a", "x"), ("b", "x"), ("a", "y")] {
        let mut t = task(k);
        t.queue = q.into();
        insert(store, t, t0()).await;
    }
    let got = store
        .task_claim(TaskClaimParams {
            min_priority: None,
            queues: vec!["a".into()],
            kinds: vec!["y".into()],
            max: 10,
            worker: "w".into(),
            lease_ttl: TTL,
            now: t0(),
        })
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].queue.as_str(), got[0].kind.as_str()), ("a", "y"));
    assert_eq!(claim_from(store, &["b"], 10, t0()).await.len(), 1);
}

pub async fn heartbeat_extends_and_rejects_stale(store: &Shared) {
    let id = insert(store, task("k"), t0()).await.id;
    let t = claim(store, 1, t0()).await.remove(0);
    let hb = store
        .task_heartbeat(TaskHeartbeatParams {
            id,
            attempt: t.attempt,
            lease_ttl: TTL,
            now: at(20),
        })
        .await
        .unwrap();
    assert_eq!(hb.lease_expires_at, at(50));
    assert!(!hb.cancel_requested);
    let err = store
        .task_heartbeat(TaskHeartbeatParams {
            id,
            attempt: t.attempt + 1,
            lease_ttl: TTL,
            now: at(21),
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let err = store
        .task_heartbeat(TaskHeartbeatParams {
            id: 424_242,
            attempt: 1,
            lease_ttl: TTL,
            now: at(21),
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

pub async fn complete_records_result_and_attempt(store: &Shared) {
    let id = insert(store, task("k"), t0()).await.id;
    let t = claim(store, 1, t0()).await.remove(0);
    let done = finish(
        store,
        id,
        t.attempt,
        FinishOutcome::Succeeded {
            result: Some(json!({"ok": true})),
        },
        at(3),
    )
    .await
    .unwrap();
    assert_eq!(done.state, TaskState::Succeeded);
    assert_eq!(done.finished_at, Some(at(3)));
    assert_eq!(done.result, Some(json!({"ok": true})));
    let got = store.task_get(id).await.unwrap();
    assert_eq!(got.attempts.len(), 1);
    assert_eq!(got.attempts[0].outcome, "succeeded");
    assert_eq!(got.attempts[0].worker, "w1");
    assert_eq!(got.attempts[0].started_at, t0());
    assert_eq!(got.attempts[0].finished_at, Some(at(3)));
    // A second complete of the same attempt is stale.
    let err = finish(
        store,
        id,
        t.attempt,
        FinishOutcome::Succeeded { result: None },
        at(4),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
}

pub async fn fail_retries_with_backoff_until_dead(store: &Shared) {
    let mut t = task("k");
    t.max_attempts = 3;
    let id = insert(store, t, t0()).await.id;
    let mut now = t0();
    for attempt in 1..=3 {
        let c = claim(store, 1, now).await;
        assert_eq!(c.len(), 1, "attempt {attempt} is claimable at {now}");
        assert_eq!(c[0].attempt, attempt);
        let f = finish(store, id, attempt, failed(true), now).await.unwrap();
        assert_eq!(f.last_error.as_deref(), Some("boom"));
        if attempt < 3 {
            assert_eq!(f.state, TaskState::Retrying);
            // Default backoff with jitter 0.5: 10 s, then 20 s.
            let delay = SignedDuration::from_secs(10 * (1 << (attempt - 1)));
            assert_eq!(f.run_at, now.checked_add(delay).unwrap());
            assert!(
                claim(
                    store,
                    1,
                    now.checked_add(delay - SignedDuration::from_secs(1))
                        .unwrap()
                )
                .await
                .is_empty()
            );
            now = f.run_at;
        } else {
            assert_eq!(f.state, TaskState::Dead);
            assert!(f.finished_at.is_some());
        }
    }
    assert_eq!(store.task_get(id).await.unwrap().attempts.len(), 3);
}

pub async fn fatal_failure_is_dead_at_once(store: &Shared) {
    let id = insert(store, task("k"), t0()).await.id;
    claim(store, 1, t0()).await;
    let f = finish(store, id, 1, failed(false), t0()).await.unwrap();
    assert_eq!(f.state, TaskState::Dead);
}

pub async fn snooze_does_not_spend_an_attempt(store: &Shared) {
    let mut t = task("k");
    t.max_attempts = 1;
    let id = insert(store, t, t0()).await.id;
    claim(store, 1, t0()).await;
    let s = finish(store, id, 1, FinishOutcome::Snoozed { until: at(60) }, t0())
        .await
        .unwrap();
    assert_eq!(s.state, TaskState::Scheduled);
    assert_eq!(s.run_at, at(60));
    assert_eq!(s.max_attempts, 2);
    let c = claim(store, 1, at(60)).await.remove(0);
    assert_eq!(
        c.attempt, 2,
        "the attempt number still grows: it fences leases"
    );
    // The snooze gave the attempt back: a retryable failure now is the last one.
    let f = finish(store, id, 2, failed(true), at(61)).await.unwrap();
    assert_eq!(f.state, TaskState::Dead);
}

pub async fn release_gives_the_task_back_at_once(store: &Shared) {
    let mut t = task("k");
    t.max_attempts = 1;
    let id = insert(store, t, t0()).await.id;
    let later = insert(store, task("k"), at(1)).await.id;
    let c = claim(store, 1, at(2)).await.remove(0);
    assert_eq!((c.id, c.attempt), (id, 1));
    let r = finish(store, id, 1, FinishOutcome::Released, at(3))
        .await
        .unwrap();
    assert_eq!(r.state, TaskState::Available);
    assert_eq!(r.run_at, t0(), "it keeps its place in the queue");
    assert_eq!(r.max_attempts, 2, "the attempt is given back");
    assert!(r.lease_expires_at.is_none());
    // Claimable at once, before the task enqueued after it.
    let again = claim(store, 1, at(3)).await.remove(0);
    assert_eq!((again.id, again.attempt), (id, 2));
    let stale = finish(store, id, 1, FinishOutcome::Released, at(4))
        .await
        .unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::Conflict);
    let history = store.task_get(id).await.unwrap().attempts;
    assert_eq!(history[0].outcome, "released");
    assert_eq!(claim(store, 1, at(4)).await[0].id, later);
}

pub async fn claim_with_min_priority(store: &Shared) {
    let mut low = task("k");
    low.priority = 0;
    let mut high = task("k");
    high.priority = 5;
    insert(store, low, t0()).await;
    let high = insert(store, high, at(1)).await.id;
    let ask = |min| TaskClaimParams {
        min_priority: Some(min),
        queues: vec![],
        kinds: vec![],
        max: 10,
        worker: "w1".into(),
        lease_ttl: TTL,
        now: at(2),
    };
    let got = store.task_claim(ask(1)).await.unwrap();
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), vec![high]);
    assert!(store.task_claim(ask(1)).await.unwrap().is_empty());
    assert_eq!(store.task_claim(ask(0)).await.unwrap().len(), 1);
}

pub async fn cancel_before_and_while_running(store: &Shared) {
    let a = insert(store, task("k"), t0()).await.id;
    let c = store
        .task_cancel(TaskCancelParams { id: a, now: at(1) })
        .await
        .unwrap();
    assert_eq!(c.state, TaskState::Cancelled);
    assert!(
        claim(store, 1, at(2)).await.is_empty(),
        "a cancelled task never runs"
    );
    let err = store
        .task_cancel(TaskCancelParams { id: a, now: at(3) })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);

    let b = insert(store, task("k"), at(4)).await.id;
    let running = claim(store, 1, at(4)).await.remove(0);
    let c = store
        .task_cancel(TaskCancelParams { id: b, now: at(5) })
        .await
        .unwrap();
    assert_eq!(c.state, TaskState::Running);
    assert!(c.cancel_requested);
    let hb = store
        .task_heartbeat(TaskHeartbeatParams {
            id: b,
            attempt: running.attempt,
            lease_ttl: TTL,
            now: at(6),
        })
        .await
        .unwrap();
    assert!(
        hb.cancel_requested,
        "the worker hears of it at its next heartbeat"
    );
    let done = finish(store, b, running.attempt, FinishOutcome::Cancelled, at(7))
        .await
        .unwrap();
    assert_eq!(done.state, TaskState::Cancelled);
    assert_eq!(
        store
            .task_cancel(TaskCancelParams {
                id: 77_777,
                now: at(8)
            })
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

pub async fn rescue_requeues_expired_and_fences_old_worker(store: &Shared) {
    let id = insert(store, task("k"), t0()).await.id;
    let old = claim(store, 1, t0()).await.remove(0);
    assert!(
        store
            .task_rescue(TaskRescueParams {
                now: at(30),
                limit: 100
            })
            .await
            .unwrap()
            .is_empty(),
        "not expired yet"
    );
    let rescued = store
        .task_rescue(TaskRescueParams {
            now: at(31),
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(rescued, vec![id]);
    let t = store.task_get(id).await.unwrap();
    assert_eq!(t.state, TaskState::Available);
    assert_eq!(t.attempts.last().unwrap().outcome, "rescued");
    let new = claim(store, 1, at(32)).await.remove(0);
    assert_eq!(new.attempt, old.attempt + 1);
    // The old worker wakes up: its heartbeat and complete are rejected and change nothing.
    let hb = store
        .task_heartbeat(TaskHeartbeatParams {
            id,
            attempt: old.attempt,
            lease_ttl: TTL,
            now: at(33),
        })
        .await
        .unwrap_err();
    assert_eq!(hb.kind(), ErrorKind::Conflict);
    let err = finish(
        store,
        id,
        old.attempt,
        FinishOutcome::Succeeded { result: None },
        at(33),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, StoreError::StaleLease { .. }));
    assert_eq!(store.task_get(id).await.unwrap().state, TaskState::Running);
    let done = finish(
        store,
        id,
        new.attempt,
        FinishOutcome::Succeeded {
            result: Some(json!(2)),
        },
        at(34),
    )
    .await
    .unwrap();
    assert_eq!(done.state, TaskState::Succeeded);
    assert_eq!(done.result, Some(json!(2)));
}

pub async fn rescue_out_of_attempts_is_dead(store: &Shared) {
    let mut t = task("k");
    t.max_attempts = 1;
    let id = insert(store, t, t0()).await.id;
    claim(store, 1, t0()).await;
    store
        .task_rescue(TaskRescueParams {
            now: at(31),
            limit: 100,
        })
        .await
        .unwrap();
    let t = store.task_get(id).await.unwrap();
    assert_eq!(t.state, TaskState::Dead);
    assert!(t.last_error.unwrap().contains("lease expired"));
}

pub async fn retry_and_reschedule(store: &Shared) {
    let mut t = task("k");
    t.max_attempts = 1;
    let id = insert(store, t, t0()).await.id;
    claim(store, 1, t0()).await;
    finish(store, id, 1, failed(true), t0()).await.unwrap();
    let r = store
        .task_retry(TaskRetryParams { id, now: at(5) })
        .await
        .unwrap();
    assert_eq!(r.state, TaskState::Available);
    assert_eq!(
        r.max_attempts, 2,
        "a manual retry always has an attempt left"
    );
    assert_eq!(claim(store, 1, at(5)).await.len(), 1);
    let err = store
        .task_retry(TaskRetryParams { id, now: at(6) })
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Conflict,
        "a running task cannot be retried"
    );

    let id2 = insert(store, task("k"), at(10)).await.id;
    let moved = store
        .task_reschedule(TaskRescheduleParams {
            id: id2,
            run_at: at(100),
            now: at(10),
        })
        .await
        .unwrap();
    assert_eq!((moved.state, moved.run_at), (TaskState::Scheduled, at(100)));
    assert!(claim(store, 1, at(99)).await.is_empty());
    assert_eq!(claim(store, 1, at(100)).await.len(), 1);
}

pub async fn prune_removes_old_finished_tasks(store: &Shared) {
    let old = insert(store, task("k"), t0()).await.id;
    claim(store, 1, t0()).await;
    finish(
        store,
        old,
        1,
        FinishOutcome::Succeeded { result: None },
        t0(),
    )
    .await
    .unwrap();
    let pending = insert(store, task("k"), t0()).await.id;
    let n = store
        .task_prune(TaskPruneParams {
            finished_before: at(1),
            limit: 1000,
        })
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        store.task_get(old).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(
        store.task_get(pending).await.is_ok(),
        "unfinished tasks are never pruned"
    );
}

pub async fn list_filters(store: &Shared) {
    for (q, k) in [("a", "x"), ("a", "y"), ("b", "x")] {
        let mut t = task(k);
        t.queue = q.into();
        insert(store, t, t0()).await;
    }
    let list = |p: TaskListParams| store.task_list(TaskListParams { limit: 100, ..p });
    assert_eq!(list(TaskListParams::default()).await.unwrap().len(), 3);
    assert_eq!(
        list(TaskListParams {
            queue: Some("a".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .len(),
        2
    );
    assert_eq!(
        list(TaskListParams {
            kind: Some("x".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .len(),
        2
    );
    assert_eq!(
        list(TaskListParams {
            states: vec![TaskState::Running],
            ..Default::default()
        })
        .await
        .unwrap()
        .len(),
        0
    );
    let all = list(TaskListParams::default()).await.unwrap();
    assert!(all[0].id > all[1].id, "newest first");
    let page = list(TaskListParams {
        before_id: Some(all[0].id),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(page.len(), 2);
}

pub async fn queue_counts(store: &Shared) {
    for _ in 0..3 {
        insert(store, task("k"), t0()).await;
    }
    claim(store, 1, t0()).await;
    // Queues before and after "default" in order, each found through another index: "a" has
    // only a finished task, "zz" only a future one, "idle" nothing but settings.
    for queue in ["a", "mail", "mail", "zz"] {
        let mut t = task("k");
        t.queue = queue.into();
        if queue == "zz" {
            t.run_at = Some(at(60));
        }
        let id = insert(store, t, t0()).await.id;
        if queue == "a" {
            store
                .task_cancel(TaskCancelParams { id, now: t0() })
                .await
                .unwrap();
        }
    }
    store
        .queue_update(QueueUpdateParams {
            name: "idle".into(),
            paused: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    let queues = store.queue_list(QUEUE_COUNT_LIMIT).await.unwrap();
    let names: Vec<&str> = queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["a", "default", "idle", "mail", "zz"]);
    let q = queues.iter().find(|q| q.name == "default").unwrap();
    assert_eq!(q.counts.get(&TaskState::Available), Some(&2));
    assert_eq!(q.counts.get(&TaskState::Running), Some(&1));
    assert_eq!(q.counts.len(), 2, "states with no task are left out");
    assert!(q.counts_at_least.is_empty());
    let only = |name: &str| {
        queues
            .iter()
            .find(|q| q.name == name)
            .unwrap()
            .counts
            .clone()
    };
    assert_eq!(only("a"), [(TaskState::Cancelled, 1)].into());
    assert_eq!(only("zz"), [(TaskState::Scheduled, 1)].into());
    assert_eq!(only("mail"), [(TaskState::Available, 2)].into());
    let idle = queues.iter().find(|q| q.name == "idle").unwrap();
    assert!(idle.paused && idle.counts.is_empty());
    // Counting stops at the limit and says so; below it, counts are exact.
    let queues = store.queue_list(1).await.unwrap();
    let q = queues.iter().find(|q| q.name == "default").unwrap();
    assert_eq!(q.counts.get(&TaskState::Available), Some(&1));
    assert_eq!(q.counts.get(&TaskState::Running), Some(&1));
    assert_eq!(
        q.counts_at_least.iter().copied().collect::<Vec<_>>(),
        [TaskState::Available]
    );
    let mail = queues.iter().find(|q| q.name == "mail").unwrap();
    assert_eq!(mail.counts.get(&TaskState::Available), Some(&1));
    assert!(mail.counts_at_least.contains(&TaskState::Available));
    let a = queues.iter().find(|q| q.name == "a").unwrap();
    assert!(a.counts_at_least.is_empty(), "one task, limit one: exact");
    // A queue's settings change answers with its counts too.
    let q = store
        .queue_update(QueueUpdateParams {
            name: "default".into(),
            concurrency_limit: Some(Some(5)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(q.concurrency_limit, Some(5));
    assert_eq!(q.counts.get(&TaskState::Available), Some(&2));
    assert_eq!(q.counts.get(&TaskState::Running), Some(&1));
    let err = store
        .queue_update(QueueUpdateParams {
            name: "".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
}

pub async fn leases_renew_and_take_over(store: &Shared) {
    let acquire = |holder: &str, now| {
        store.lease_acquire(LeaseAcquireParams {
            name: "leader".into(),
            holder: holder.into(),
            ttl: TTL,
            now,
        })
    };
    let a = acquire("a", t0()).await.unwrap().expect("free lease");
    assert!(acquire("b", at(10)).await.unwrap().is_none(), "held by a");
    let renewed = acquire("a", at(20)).await.unwrap().unwrap();
    assert_eq!(renewed.token, a.token, "renewal keeps the token");
    assert_eq!(renewed.expires_at, at(50));
    let b = acquire("b", at(51))
        .await
        .unwrap()
        .expect("expired lease is taken over");
    assert!(b.token > a.token, "a takeover gets a new fencing token");
    assert!(acquire("a", at(52)).await.unwrap().is_none());
    assert_eq!(
        store
            .lease_get("leader", at(52))
            .await
            .unwrap()
            .unwrap()
            .holder,
        "b"
    );
    store.lease_release("leader", "b").await.unwrap();
    assert!(store.lease_get("leader", at(53)).await.unwrap().is_none());
    let a2 = acquire("a", at(53)).await.unwrap().unwrap();
    assert!(a2.token > b.token);
}

fn def(name: &str, spec: &str) -> ScheduleDef {
    ScheduleDef {
        name: name.into(),
        spec: spec.into(),
        tz: "UTC".into(),
        task: TaskTemplate {
            kind: "k".into(),
            queue: "default".into(),
            payload: json!({"n": 1}),
            priority: 0,
            max_attempts: 3,
            timeout: None,
        },
        overlap: OverlapPolicy::Skip,
        catchup: Default::default(),
        catchup_window: SignedDuration::from_hours(1),
        paused: false,
    }
}

fn declared(defs: &[ScheduleDef], now: Timestamp) -> ScheduleSyncParams {
    ScheduleSyncParams {
        group: "billing".into(),
        schedules: defs
            .iter()
            .map(|d| DeclaredSchedule {
                def: d.clone(),
                next_fire_at: Some(now.checked_add(SignedDuration::from_hours(1)).unwrap()),
            })
            .collect(),
        now,
    }
}

pub async fn schedule_sync_creates_updates_and_removes(store: &Shared) {
    let names = |v: &[String]| v.join(",");
    // Made at run time: never touched by a group's sync.
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: def("adhoc", "0 5 * * *"),
            next_fire_at: Some(at(5 * 3600)),
            now: t0(),
        })
        .await
        .unwrap();
    let (a, b) = (def("a", "0 1 * * *"), def("b", "0 2 * * *"));
    let r = store
        .schedule_sync(declared(&[a.clone(), b.clone()], t0()))
        .await
        .unwrap();
    assert_eq!((names(&r.created), r.updated.len()), ("a,b".into(), 0));
    let first = store.schedule_get("a").await.unwrap();
    assert_eq!(first.declared_by.as_deref(), Some("billing"));
    assert_eq!(first.next_fire_at, Some(at(3600)));
    // The same declarations again change nothing, not even the next fire time.
    let r = store
        .schedule_sync(declared(&[a.clone(), b.clone()], at(60)))
        .await
        .unwrap();
    assert_eq!(names(&r.unchanged), "a,b");
    assert_eq!(store.schedule_get("a").await.unwrap(), first);
    // An operator pauses `a`; the next deploy changes its task, drops `b`, adds `c`.
    store
        .schedule_set_paused(SchedulePauseParams {
            name: "a".into(),
            paused: true,
            next_fire_at: None,
            now: at(70),
        })
        .await
        .unwrap();
    let mut a2 = a.clone();
    a2.task.priority = 7;
    let r = store
        .schedule_sync(declared(&[a2, def("c", "0 3 * * *")], at(80)))
        .await
        .unwrap();
    assert_eq!(
        (names(&r.created), names(&r.updated), names(&r.removed)),
        ("c".into(), "a".into(), "b".into())
    );
    let a = store.schedule_get("a").await.unwrap();
    assert!(a.paused, "a pause survives a redeploy");
    assert_eq!(a.task.priority, 7);
    assert_eq!(
        a.next_fire_at, first.next_fire_at,
        "same spec: same next fire"
    );
    assert_eq!(
        store.schedule_get("b").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let adhoc = store.schedule_get("adhoc").await.unwrap();
    assert_eq!(adhoc.declared_by, None);
    // A runtime update of a declared schedule keeps it declared.
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: def("c", "0 4 * * *"),
            next_fire_at: Some(at(4 * 3600)),
            now: at(90),
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .schedule_get("c")
            .await
            .unwrap()
            .declared_by
            .as_deref(),
        Some("billing")
    );
    // Declaring nothing removes what the group declared, and only that.
    let r = store.schedule_sync(declared(&[], at(100))).await.unwrap();
    assert_eq!(names(&r.removed), "a,c");
    let left: Vec<String> = store
        .schedule_list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(left, vec!["adhoc".to_string()]);
}

pub async fn schedule_sync_concurrently_one_copy(store: &Shared) {
    let defs = vec![def("x", "*/5 * * * *"), def("y", "0 * * * *")];
    let runs = (0..20).map(|i| {
        let store = store.clone();
        let params = declared(&defs, at(i));
        tokio::spawn(async move { store.schedule_sync(params).await })
    });
    let mut created = 0;
    for run in runs.collect::<Vec<_>>() {
        let report = run.await.unwrap().unwrap();
        created += report.created.len();
        assert!(report.removed.is_empty());
    }
    assert_eq!(created, 2, "each schedule is created by exactly one sync");
    let all = store.schedule_list().await.unwrap();
    assert_eq!(all.len(), 2);
}

pub async fn schedule_crud_and_pause(store: &Shared) {
    let s = store
        .schedule_upsert(ScheduleUpsertParams {
            def: def("nightly", "0 3 * * *"),
            next_fire_at: Some(at(3 * 3600)),
            now: t0(),
        })
        .await
        .unwrap();
    assert_eq!(s.next_fire_at, Some(at(3 * 3600)));
    assert_eq!(s.task.payload, json!({"n": 1}));
    assert!(!s.running && s.last_outcome.is_none());
    // Same spec: the stored next fire time is kept; a new spec takes the given one.
    let mut d = def("nightly", "0 3 * * *");
    d.task.priority = 9;
    let s = store
        .schedule_upsert(ScheduleUpsertParams {
            def: d,
            next_fire_at: Some(at(1)),
            now: at(5),
        })
        .await
        .unwrap();
    assert_eq!((s.next_fire_at, s.task.priority), (Some(at(3 * 3600)), 9));
    let s = store
        .schedule_upsert(ScheduleUpsertParams {
            def: def("nightly", "0 4 * * *"),
            next_fire_at: Some(at(4 * 3600)),
            now: at(6),
        })
        .await
        .unwrap();
    assert_eq!(s.next_fire_at, Some(at(4 * 3600)));
    assert_eq!(
        store.schedule_next_fire_at().await.unwrap(),
        Some(at(4 * 3600))
    );
    let err = store
        .schedule_upsert(ScheduleUpsertParams {
            def: def("bad", "0 0 30 2 *"),
            next_fire_at: None,
            now: t0(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);

    let p = store
        .schedule_set_paused(SchedulePauseParams {
            name: "nightly".into(),
            paused: true,
            next_fire_at: None,
            now: at(7),
        })
        .await
        .unwrap();
    assert!(p.paused);
    assert_eq!(store.schedule_next_fire_at().await.unwrap(), None);
    assert!(
        store
            .schedule_due(ScheduleDueParams {
                now: at(10 * 3600),
                limit: 10
            })
            .await
            .unwrap()
            .is_empty()
    );
    let r = store
        .schedule_set_paused(SchedulePauseParams {
            name: "nightly".into(),
            paused: false,
            next_fire_at: Some(at(28 * 3600)),
            now: at(8),
        })
        .await
        .unwrap();
    assert_eq!((r.paused, r.next_fire_at), (false, Some(at(28 * 3600))));
    assert_eq!(store.schedule_list().await.unwrap().len(), 1);
    assert!(store.schedule_delete("nightly").await.unwrap());
    assert!(!store.schedule_delete("nightly").await.unwrap());
    assert_eq!(
        store.schedule_get("nightly").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

fn occ(nominal_at: Timestamp, outcome: OccurrenceOutcome) -> PlannedOccurrence {
    PlannedOccurrence {
        nominal_at,
        outcome,
        detail: None,
    }
}

pub async fn schedule_apply_is_exactly_once(store: &Shared) {
    let d = def("tick", "* * * * *");
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: d.clone(),
            next_fire_at: Some(at(60)),
            now: t0(),
        })
        .await
        .unwrap();
    let due = store
        .schedule_due(ScheduleDueParams {
            now: at(60),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(due.len(), 1);
    assert!(due[0].active_tasks.is_empty());
    let plan = Plan {
        occurrences: vec![occ(at(60), OccurrenceOutcome::Enqueued)],
        next_fire_at: Some(at(120)),
        ..Plan::default()
    };
    let apply = |expected| {
        store.schedule_apply(ScheduleApplyParams {
            name: "tick".into(),
            expected_next_fire_at: expected,
            plan: plan.clone(),
            task: d.task.clone(),
            now: at(60),
        })
    };
    let ids = apply(Some(at(60))).await.unwrap();
    assert_eq!(ids.len(), 1);
    let t = store.task_get(ids[0]).await.unwrap();
    assert_eq!(
        (t.schedule.as_deref(), t.nominal_at),
        (Some("tick"), Some(at(60)))
    );
    // A second node with the same stale view is refused, whatever it expected.
    assert_eq!(
        apply(Some(at(60))).await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    // Even a plan that passes the compare-and-set cannot record the same occurrence twice.
    assert_eq!(
        apply(Some(at(120))).await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    let tasks = store
        .task_list(TaskListParams {
            schedule: Some("tick".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(tasks.len(), 1);
    let s = store.schedule_get("tick").await.unwrap();
    assert_eq!(s.next_fire_at, Some(at(120)));
    let ledger = store
        .occurrence_list(OccurrenceListParams {
            schedule: "tick".into(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].task_id, Some(ids[0]));
    assert_eq!(ledger[0].task_state, Some(TaskState::Available));
    // Status derived from the schedule's tasks.
    let c = claim(store, 1, at(61)).await.remove(0);
    let s = store.schedule_get("tick").await.unwrap();
    assert!(s.running);
    assert_eq!(s.last_started_at, Some(at(61)));
    finish(store, c.id, c.attempt, failed(false), at(62))
        .await
        .unwrap();
    let s = store.schedule_get("tick").await.unwrap();
    assert!(!s.running);
    assert_eq!(
        (s.last_finished_at, s.last_outcome),
        (Some(at(62)), Some(TaskState::Dead))
    );
}

pub async fn schedule_buffer_release_and_replace(store: &Shared) {
    let d = def("b", "* * * * *");
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: d.clone(),
            next_fire_at: Some(at(60)),
            now: t0(),
        })
        .await
        .unwrap();
    let apply = |expected, plan: Plan, now| {
        store.schedule_apply(ScheduleApplyParams {
            name: "b".into(),
            expected_next_fire_at: expected,
            plan,
            task: d.task.clone(),
            now,
        })
    };
    let first = apply(
        Some(at(60)),
        Plan {
            occurrences: vec![occ(at(60), OccurrenceOutcome::Enqueued)],
            next_fire_at: Some(at(120)),
            ..Plan::default()
        },
        at(60),
    )
    .await
    .unwrap()[0];
    // The next occurrence is buffered while the first is pending.
    apply(
        Some(at(120)),
        Plan {
            occurrences: vec![occ(at(120), OccurrenceOutcome::Buffered)],
            buffered: Some(at(120)),
            next_fire_at: Some(at(180)),
            ..Plan::default()
        },
        at(120),
    )
    .await
    .unwrap();
    let due = store
        .schedule_due(ScheduleDueParams {
            now: at(121),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(due.len(), 1, "a buffered schedule is due");
    assert_eq!(due[0].active_tasks, vec![first]);
    assert_eq!(due[0].schedule.buffered_at, Some(at(120)));
    // Released: the buffered line becomes enqueued, with a task.
    let released = apply(
        Some(at(180)),
        Plan {
            occurrences: vec![occ(at(120), OccurrenceOutcome::Enqueued)],
            buffered: None,
            next_fire_at: Some(at(180)),
            cancel: vec![first],
        },
        at(130),
    )
    .await
    .unwrap();
    assert_eq!(released.len(), 1);
    assert_eq!(
        store.task_get(first).await.unwrap().state,
        TaskState::Cancelled,
        "replaced"
    );
    let ledger = store
        .occurrence_list(OccurrenceListParams {
            schedule: "b".into(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[0].outcome, OccurrenceOutcome::Enqueued);
    assert_eq!(ledger[0].task_id, Some(released[0]));
    assert_eq!(store.schedule_get("b").await.unwrap().buffered_at, None);
}

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
    let list = store.worker_list(at(0)).await.unwrap();
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
    // Goodbye, then back again.
    store
        .worker_beat(beat("w1", "worker", at(20), true))
        .await
        .unwrap();
    let w1 = store.worker_list(at(15)).await.unwrap().remove(0);
    assert_eq!(w1.stopped_at, Some(at(20)));
    store
        .worker_beat(beat("w1", "worker", at(30), false))
        .await
        .unwrap();
    // A sign of life that does not know the concurrency (a claim) keeps the one told.
    let mut seen = beat("w1", "worker", at(31), false);
    seen.concurrency = None;
    store.worker_beat(seen).await.unwrap();
    let list = store.worker_list(at(15)).await.unwrap();
    assert_eq!(list.len(), 1, "n1 was last seen before the cut");
    assert_eq!(list[0].stopped_at, None);
    assert_eq!(
        (list[0].concurrency, list[0].last_seen_at),
        (Some(8), at(31))
    );
    assert_eq!(store.worker_prune(at(6)).await.unwrap(), 1);
    assert_eq!(store.worker_list(at(0)).await.unwrap().len(), 1);
}
