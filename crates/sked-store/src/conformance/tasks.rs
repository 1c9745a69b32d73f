//! Claiming and ending attempts.

use jiff::SignedDuration;
use serde_json::json;
use sked_core::TaskState;

use crate::*;

use super::*;

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

/// Claims over several queues take the first tasks in claim order across all of them, not each
/// queue's first ones, whether the queues are named (even twice) or not.
pub async fn claim_merges_queues_in_priority_order(store: &Shared) {
    let mut ids = Vec::new();
    for (q, p, secs) in [
        ("a", 0, 0),
        ("b", 5, 3),
        ("c", 0, -9),
        ("a", 5, 1),
        ("b", 0, -4),
        ("c", 9, 2),
    ] {
        let mut t = task("k");
        t.queue = q.into();
        t.priority = p;
        t.run_at = Some(at(secs));
        ids.push(insert(store, t, at(-20)).await.id);
    }
    let order = |tasks: Vec<sked_core::Task>| tasks.iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(
        order(claim_from(store, &["c", "a", "c"], 2, at(10)).await),
        vec![ids[5], ids[3]],
        "the first two of queues a and c"
    );
    assert_eq!(
        order(claim(store, 3, at(10)).await),
        vec![ids[1], ids[2], ids[4]],
        "the first three left of every queue"
    );
    assert_eq!(order(claim(store, 3, at(10)).await), vec![ids[0]]);
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
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
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
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now: at(20),
            progress: None,
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
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now: at(21),
            progress: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let err = store
        .task_heartbeat(TaskHeartbeatParams {
            id: 424_242,
            attempt: 1,
            lease_ttl: TTL,
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now: at(21),
            progress: None,
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
        timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
        now: at(2),
    };
    let got = store.task_claim(ask(1)).await.unwrap();
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), vec![high]);
    assert!(store.task_claim(ask(1)).await.unwrap().is_empty());
    assert_eq!(store.task_claim(ask(0)).await.unwrap().len(), 1);
}

pub async fn a_heartbeat_keeps_the_progress_of_the_attempt_that_holds_the_task(store: &Shared) {
    let id = insert(store, task("k"), t0()).await.id;
    let t = claim(store, 1, t0()).await.remove(0);
    let beat = |attempt: i32, progress: serde_json::Value, now: Timestamp| {
        store.task_heartbeat_many(vec![TaskHeartbeatParams {
            id,
            attempt,
            lease_ttl: TTL,
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now,
            progress: Some(progress),
        }])
    };
    assert_eq!(store.task_get(id).await.unwrap().progress, None);
    assert!(beat(t.attempt, json!(10), at(1)).await.unwrap()[0].is_ok());
    assert_eq!(store.task_get(id).await.unwrap().progress, Some(json!(10)));
    let detail = json!({"percent": 60, "step": "upload"});
    assert!(beat(t.attempt, detail.clone(), at(2)).await.unwrap()[0].is_ok());
    assert_eq!(
        store.task_get(id).await.unwrap().progress,
        Some(detail.clone()),
        "the latest"
    );
    // A heartbeat of an attempt that does not hold the task keeps nothing.
    assert!(beat(t.attempt + 1, json!(99), at(3)).await.unwrap()[0].is_err());
    assert_eq!(store.task_get(id).await.unwrap().progress, Some(detail));
    // Failed and claimed again: the new attempt has reported nothing yet.
    finish(store, id, t.attempt, failed(true), at(4))
        .await
        .unwrap();
    let again = claim(store, 1, at(100_000)).await.remove(0);
    assert_eq!(again.id, id);
    assert_eq!(store.task_get(id).await.unwrap().progress, None);
    assert!(beat(again.attempt, json!(100), at(100_001)).await.unwrap()[0].is_ok());
    finish(
        store,
        id,
        again.attempt,
        FinishOutcome::Succeeded { result: None },
        at(100_002),
    )
    .await
    .unwrap();
    assert_eq!(
        store.task_get(id).await.unwrap().progress,
        Some(json!(100)),
        "an ended task shows what its last attempt reported"
    );
}

pub async fn a_queue_backoff_times_the_retries_of_tasks_without_their_own(store: &Shared) {
    let secs = SignedDuration::from_secs;
    let set = |backoff: Option<sked_core::Backoff>| {
        store.queue_update(QueueUpdateParams {
            name: "slow".into(),
            backoff: Some(backoff),
            ..Default::default()
        })
    };
    let q = set(Some(sked_core::Backoff::Fixed(secs(30))))
        .await
        .unwrap();
    assert_eq!(q.backoff, Some(sked_core::Backoff::Fixed(secs(30))));
    let own = sked_core::Backoff::Fixed(secs(5));
    let tasks = [
        task("k").queue("slow"),
        task("k").queue("slow").backoff_shape(own.clone()),
        task("k"),
    ];
    let ids: Vec<i64> = (insert_batch(store, &tasks, t0()).await.iter())
        .map(|t| t.id)
        .collect();
    assert_eq!(claim(store, 3, t0()).await.len(), 3);
    let mut waits = Vec::new();
    for id in &ids {
        let f = finish(store, *id, 1, failed(true), t0()).await.unwrap();
        assert_eq!(f.state, TaskState::Retrying);
        waits.push(f.run_at.duration_since(t0()).as_secs());
    }
    // The queue's, the task's own, and the default's first delay (10 s at jitter 0.5).
    assert_eq!(waits, [30, 5, 10]);
    // Back to the default.
    assert_eq!(set(None).await.unwrap().backoff, None);
    assert_eq!(store.queue_get("slow", t0()).await.unwrap().backoff, None);
    let again = finish(store, ids[0], 1, failed(true), t0()).await;
    assert!(again.is_err(), "the attempt ended already");
    let c = claim(store, 3, at(30)).await;
    assert!(c.iter().any(|t| t.id == ids[0]));
    let f = finish(store, ids[0], 2, failed(true), at(30))
        .await
        .unwrap();
    assert_eq!(f.run_at.duration_since(at(30)).as_secs(), 20);
}
