//! What operators and maintenance do to tasks: cancel, rescue, retry, reschedule, prune, list.

use jiff::SignedDuration;
use std::collections::BTreeMap;

use serde_json::json;
use sked_core::{NewTask, TaskState};

use crate::*;

use super::*;

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
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now: at(6),
            progress: None,
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
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now: at(33),
            progress: None,
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
            now: at(1),
            limit: 1000,
            finished_since: None,
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

/// A limit in the thousands is kept exactly, across queues, and only finished tasks go.
pub async fn prune_deletes_up_to_its_limit(store: &Shared) {
    let tasks: Vec<NewTask> = (0..2_600)
        .map(|i| NewTask::new("k").queue(if i % 2 == 0 { "a" } else { "b" }))
        .collect();
    insert_batch(store, &tasks, t0()).await;
    let claimed = claim(store, 2_600, t0()).await;
    assert_eq!(claimed.len(), 2_600);
    let ends = claimed.iter().map(|t| TaskFinishParams {
        id: t.id,
        attempt: t.attempt,
        outcome: FinishOutcome::Succeeded { result: None },
        now: t0(),
        jitter: 0.5,
    });
    for r in store.task_finish_many_lean(ends.collect()).await.unwrap() {
        r.unwrap();
    }
    let pending = insert(store, task("k"), t0()).await.id;
    let prune = async |limit| {
        let p = TaskPruneParams {
            finished_before: at(1),
            now: at(1),
            limit,
            finished_since: None,
        };
        store.task_prune(p).await.unwrap()
    };
    assert_eq!(prune(2_500).await, 2_500);
    assert_eq!(prune(10_000).await, 100, "the rest, and no more");
    assert_eq!(prune(10_000).await, 0);
    assert!(store.task_get(pending).await.is_ok());
}

/// A bounded pass deletes only what finished since its bound, in every queue.
pub async fn prune_since_leaves_what_finished_before(store: &Shared) {
    let mut ids = Vec::new();
    for (queue, ended) in [("a", 2), ("a", 20), ("b", 20), ("c", 20)] {
        let id = insert(store, task("k").queue(queue), t0()).await.id;
        let claimed = claim(store, 1, t0()).await;
        assert_eq!(claimed.len(), 1);
        let outcome = FinishOutcome::Succeeded { result: None };
        finish(store, id, claimed[0].attempt, outcome, at(ended))
            .await
            .unwrap();
        ids.push(id);
    }
    let pending = insert(store, task("k").queue("d"), t0()).await.id;
    let prune = async |since: Option<i64>| {
        let p = TaskPruneParams {
            finished_before: at(30),
            now: at(30),
            limit: 100,
            finished_since: since.map(at),
        };
        store.task_prune(p).await.unwrap()
    };
    assert_eq!(prune(Some(21)).await, 0, "nothing finished since");
    assert_eq!(prune(Some(10)).await, 3, "one in each queue");
    let left = async || {
        let mut left = Vec::new();
        for &id in ids.iter().chain([&pending]) {
            if store.task_get(id).await.is_ok() {
                left.push(id);
            }
        }
        left
    };
    assert_eq!(
        left().await,
        [ids[0], pending],
        "the earlier, and the unfinished"
    );
    assert_eq!(prune(None).await, 1, "a full pass finds the rest");
    assert_eq!(left().await, [pending]);
}

pub async fn list_filters(store: &Shared) {
    for (q, k) in [("a", "x"), ("a", "y"), ("b", "x")] {
        let mut t = task(k);
        t.queue = q.into();
        insert(store, t, t0()).await;
    }
    let list = async |p: TaskListParams| {
        store
            .task_list(TaskListParams { limit: 100, ..p })
            .await
            .map(|page| page.items)
    };
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

/// Pages stop at their limit (saying that more follow) and at about 8 MiB of payloads; lists
/// without payloads read none.
pub async fn list_pages_are_bounded(store: &Shared) {
    // As large as a payload may be.
    let big = serde_json::Value::String("x".repeat((1 << 20) - 16));
    for _ in 0..12 {
        insert(store, task("big").payload(big.clone()), t0()).await;
    }
    let page = |limit, with_payloads| {
        store.task_list(TaskListParams {
            limit,
            with_payloads,
            ..Default::default()
        })
    };
    let full = page(100, true).await.unwrap();
    assert_eq!(full.items.len(), 8, "about 8 MiB of 1 MiB payloads");
    assert!(full.more);
    assert_eq!(full.items[0].payload, big);
    let lean = page(100, false).await.unwrap();
    assert_eq!(lean.items.len(), 12);
    assert!(!lean.more);
    assert!(
        lean.items
            .iter()
            .all(|t| t.payload.is_null() && t.result.is_none())
    );
    let two = page(2, false).await.unwrap();
    assert_eq!((two.items.len(), two.more), (2, true));
    let all = page(12, false).await.unwrap();
    assert_eq!((all.items.len(), all.more), (12, false));
}

/// A task with a timeout is leased at most until its start, its timeout and the grace: by the
/// claim (fast and limited paths), by an insert for a waiting worker, and by every heartbeat.
/// Past that a heartbeat is refused, the rescuer gives the task back and says it timed out,
/// and the old worker's ending is rejected.
pub async fn a_timed_out_attempt_loses_its_lease(store: &Shared) {
    let grace = SignedDuration::from_secs(2);
    let timed = |queue: &str| {
        let mut t = task("k");
        t.queue = queue.into();
        t.timeout(SignedDuration::from_secs(5))
    };
    let claim_with_grace = |queue: &str, now| {
        store.task_claim(TaskClaimParams {
            min_priority: None,
            queues: vec![queue.into()],
            kinds: vec![],
            max: 10,
            worker: "w1".into(),
            lease_ttl: TTL,
            timeout_grace: grace,
            now,
        })
    };
    let id = insert(store, timed("q"), t0()).await.id;
    let mut plain = task("k");
    plain.queue = "q".into();
    let plain = insert(store, plain, t0()).await.id;
    let claimed = claim_with_grace("q", t0()).await.unwrap();
    let lease = |id| {
        claimed
            .iter()
            .find(|t| t.id == id)
            .unwrap()
            .lease_expires_at
    };
    assert_eq!(lease(id), Some(at(7)), "timeout 5 s + grace 2 s");
    assert_eq!(lease(plain), Some(at(30)), "no timeout: the whole lease");
    assert_eq!(
        store.task_get(id).await.unwrap().lease_expires_at,
        Some(at(7))
    );

    // A queue with a concurrency limit is claimed apart; its leases end the same way.
    insert(store, timed("limited"), t0()).await;
    store
        .queue_update(QueueUpdateParams {
            name: "limited".into(),
            concurrency_limit: Some(Some(5)),
            ..Default::default()
        })
        .await
        .unwrap();
    let limited = claim_with_grace("limited", t0()).await.unwrap();
    assert_eq!(limited[0].lease_expires_at, Some(at(7)));

    // A task handed to a waiting worker at its insert.
    let (_, leased) = store
        .task_insert_claimed(TaskInsertClaimedParams {
            task: timed("handed").into(),
            worker: "w2".into(),
            lease_ttl: TTL,
            timeout_grace: grace,
            now: t0(),
        })
        .await
        .unwrap();
    assert_eq!(leased.unwrap().lease_expires_at, Some(at(7)));

    let attempt = claimed.iter().find(|t| t.id == id).unwrap().attempt;
    let heartbeat = |now| {
        store.task_heartbeat(TaskHeartbeatParams {
            id,
            attempt,
            lease_ttl: TTL,
            timeout_grace: grace,
            now,
            progress: None,
        })
    };
    let hb = heartbeat(at(4)).await.unwrap();
    assert_eq!(
        hb.lease_expires_at,
        at(7),
        "a heartbeat does not pass the deadline"
    );
    let err = heartbeat(at(7)).await.unwrap_err();
    assert!(matches!(err, StoreError::TimedOut { .. }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.to_string().contains("timeout of 5s"), "{err}");
    let many = store
        .task_heartbeat_many(vec![TaskHeartbeatParams {
            id,
            attempt,
            lease_ttl: TTL,
            timeout_grace: grace,
            now: at(8),
            progress: None,
        }])
        .await
        .unwrap();
    assert!(matches!(many[0], Err(StoreError::TimedOut { .. })));

    let rescued = store
        .task_rescue(TaskRescueParams {
            now: at(8),
            limit: 100,
        })
        .await
        .unwrap();
    assert!(rescued.contains(&id), "{rescued:?}");
    assert!(!rescued.contains(&plain), "its lease runs to 30 s");
    let t = store.task_get(id).await.unwrap();
    assert_eq!(t.state, TaskState::Available);
    let error = t.last_error.unwrap_or_default();
    assert!(error.starts_with("timed out"), "{error}");
    let err = finish(
        store,
        id,
        attempt,
        FinishOutcome::Succeeded { result: None },
        at(9),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, StoreError::StaleLease { .. }), "{err:?}");
    assert!(matches!(
        heartbeat(at(9)).await.unwrap_err(),
        StoreError::StaleLease { .. }
    ));
}

/// A queue keeps its ended tasks of a state as long as its own retention for that state says,
/// whether shorter or longer than the server's; its other states, and other queues, keep the
/// server's. A retention goes back to the server's when set to none; one for a state that is
/// not an ended one, or not positive, is refused.
pub async fn a_queue_keeps_each_ended_state_as_its_retention_says(store: &Shared) {
    let set = async |queue: &str, changes: Vec<(TaskState, Option<SignedDuration>)>| {
        store
            .queue_update(QueueUpdateParams {
                name: queue.into(),
                retention: changes,
                ..Default::default()
            })
            .await
    };
    let secs = SignedDuration::from_secs;
    let short = set("short", vec![(TaskState::Succeeded, Some(secs(10)))]).await;
    assert_eq!(short.unwrap().retention.succeeded, Some(secs(10)));
    set("long", vec![(TaskState::Dead, Some(secs(1000)))])
        .await
        .unwrap();
    // In each queue a task that succeeded and one that died, at 1 s.
    let mut ended = BTreeMap::new();
    for queue in ["short", "long", "plain"] {
        for outcome in [FinishOutcome::Succeeded { result: None }, failed(false)] {
            let id = insert(store, task("k").queue(queue), t0()).await.id;
            let c = claim_from(store, &[queue], 1, t0()).await.remove(0);
            let t = finish(store, c.id, c.attempt, outcome, at(1))
                .await
                .unwrap();
            ended.insert((queue, t.state), id);
        }
    }
    // The server keeps ended tasks 100 s.
    let prune = async |now: i64| {
        let p = TaskPruneParams {
            finished_before: at(now - 100),
            now: at(now),
            limit: 1000,
            finished_since: None,
        };
        store.task_prune(p).await.unwrap()
    };
    let left = async || {
        let mut left = Vec::new();
        for (&(queue, state), &id) in &ended {
            if store.task_get(id).await.is_ok() {
                left.push(format!("{queue} {state}"));
            }
        }
        left
    };
    assert_eq!(prune(20).await, 1);
    assert_eq!(
        left().await,
        [
            "long succeeded",
            "long dead",
            "plain succeeded",
            "plain dead",
            "short dead"
        ]
    );
    assert_eq!(prune(200).await, 4);
    assert_eq!(left().await, ["long dead"]);
    assert_eq!(prune(1200).await, 1);
    // Back to the server's; refused: not an ended state, not positive.
    let back = set("long", vec![(TaskState::Dead, None)]).await.unwrap();
    assert!(back.retention.is_default());
    for bad in [
        vec![(TaskState::Running, Some(secs(10)))],
        vec![(TaskState::Dead, Some(secs(0)))],
    ] {
        let r = set("short", bad).await;
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{r:?}");
    }
    let q = store.queue_get("short", at(1200)).await.unwrap();
    assert_eq!(
        q.retention.succeeded,
        Some(secs(10)),
        "a refused change changed it"
    );
}
