//! Inserting, claiming and ending attempts.

use jiff::SignedDuration;
use serde_json::json;
use sked_core::TaskState;

use crate::*;

use super::*;

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

    // A batch: each answer is its own task's, in the order given, however the backend writes
    // the batch; a task with a unique key may sit among them.
    let mut keyed = task("batch-keyed");
    keyed.unique_key = Some("in-a-batch".into());
    let mut future = task("batch-1");
    future.run_at = Some(at(90));
    let batch = [task("batch-0"), future, keyed, task("batch-3")];
    let answers = insert_batch(store, &batch, now).await;
    assert_eq!(answers.len(), 4);
    for (sent, answer) in batch.iter().zip(&answers) {
        let got = store.task_get(answer.id).await.unwrap();
        assert_eq!(got.kind, sent.kind);
        assert_eq!(got.state, answer.state);
        assert!(!answer.duplicate);
    }
    assert_eq!(answers[1].state, TaskState::Scheduled);
    assert!(answers[0].id < answers[1].id && answers[1].id < answers[3].id);

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

/// A batch large enough for any way a backend may split it into statements, with tasks that
/// have unique keys (one of them given twice) among the others: each answer is its own task's.
pub async fn a_large_batch_answers_in_order(store: &Shared) {
    let now = t0();
    let batch: Vec<NewTask> = (0..300)
        .map(|i| {
            let mut t = task(&format!("k{i}"));
            t.payload = json!({ "i": i });
            t.priority = i % 3;
            if i % 7 == 0 {
                t.run_at = Some(at(60));
            }
            if i == 70 || i == 200 || i == 201 {
                t.unique_key = Some(format!("large-{}", i.min(200)));
            }
            t
        })
        .collect();
    let answers = insert_batch(store, &batch, now).await;
    assert_eq!(answers.len(), batch.len());
    for (i, (sent, answer)) in batch.iter().zip(&answers).enumerate() {
        if i == 201 {
            assert!(
                answer.duplicate,
                "the second task with a key finds the first"
            );
            assert_eq!(answer.id, answers[200].id);
            continue;
        }
        assert!(!answer.duplicate);
        let got = store.task_get(answer.id).await.unwrap();
        assert_eq!((&got.kind, &got.payload), (&sent.kind, &sent.payload));
        assert_eq!(got.state, answer.state);
        let due_later = i % 7 == 0;
        assert_eq!(answer.state == TaskState::Scheduled, due_later, "task {i}");
    }
    // Tasks without a key get ids that grow in the order given (a keyed task may be written
    // apart from them).
    let unkeyed: Vec<i64> = (0..batch.len())
        .filter(|i| batch[*i].unique_key.is_none())
        .map(|i| answers[i].id)
        .collect();
    assert!(
        unkeyed.windows(2).all(|w| w[0] < w[1]),
        "ids grow in the order given"
    );
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
