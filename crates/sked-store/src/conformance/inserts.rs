//! Inserting tasks: one or many, unique keys, and a task leased in its insert.

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
    let later = insert(store, task("later").run_at(at(60)), now).await.id;
    assert_eq!(
        store
            .task_states(vec![later, 987_654, ins.id])
            .await
            .unwrap(),
        vec![
            (later, Some(TaskState::Scheduled)),
            (987_654, None),
            (ins.id, Some(TaskState::Available))
        ],
        "states in the order asked, none for a task that does not exist"
    );
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
            if i % 5 == 0 {
                t.queue = format!("q{}", i % 2);
            }
            if i % 7 == 0 {
                t.run_at = Some(at(60));
            }
            if i == 70 || i == 200 || i == 201 {
                t.unique_key = Some(format!("large-{}", i.min(200)));
            }
            if i == 200 {
                t.backoff = Some("linear:5s..1m".parse().unwrap());
            }
            // A few tasks with every option among many with none: a store may write tasks
            // without options with fewer columns.
            if (150..153).contains(&i) {
                t.max_attempts = 4;
                t.timeout = Some(SignedDuration::from_secs(i.into()));
                // Each shape of backoff, as its columns hold it.
                let shapes = [
                    format!("exp:2s..{i}s"),
                    format!("fixed:{i}s"),
                    "1s,1m,1h".into(),
                ];
                t.backoff = Some(shapes[(i - 150) as usize].parse().unwrap());
                t.key = Some(format!("tenant-{i}"));
                t.traceparent = Some(format!("00-{:032x}-00f067aa0ba902b7-01", i + 1));
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
        assert_eq!(
            (&got.queue, &got.kind, &got.payload),
            (&sent.queue, &sent.kind, &sent.payload)
        );
        assert_eq!(
            (got.priority, got.max_attempts, got.timeout, &got.backoff),
            (
                sent.priority,
                sent.max_attempts,
                sent.timeout,
                &sent.backoff
            ),
            "task {i}"
        );
        assert_eq!((&got.key, &got.traceparent), (&sent.key, &sent.traceparent));
        assert_eq!(got.run_at, sent.run_at.unwrap_or(now), "task {i}");
        assert_eq!((got.schedule.as_ref(), got.created_at), (None, now));
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
    // A batch whose options are a timeout and a backoff alone.
    let mut timed = task("timed");
    timed.timeout = Some(SignedDuration::from_secs(9));
    timed.backoff = Some("linear:1s..8s".parse().unwrap());
    let batch = [task("plain"), timed, task("plain")];
    let answers = insert_batch(store, &batch, now).await;
    for (sent, answer) in batch.iter().zip(&answers) {
        let got = store.task_get(answer.id).await.unwrap();
        assert_eq!(
            (&got.kind, got.timeout, &got.backoff),
            (&sent.kind, sent.timeout, &sent.backoff)
        );
        assert_eq!((&got.key, &got.traceparent), (&None, &None));
    }
    // A batch whose tasks share every field but the payload, due later: a store may send a
    // shared value once.
    let batch: Vec<NewTask> = (0..5)
        .map(|i| {
            let mut t = task("same");
            t.queue = "shared".into();
            t.payload = json!({ "i": i });
            t.priority = -2;
            t.max_attempts = 7;
            t.run_at = Some(at(90));
            t
        })
        .collect();
    let answers = insert_batch(store, &batch, now).await;
    assert_eq!(answers.len(), batch.len());
    for (sent, answer) in batch.iter().zip(&answers) {
        let got = store.task_get(answer.id).await.unwrap();
        assert_eq!(
            (&got.queue, &got.kind, &got.payload, got.priority),
            (&sent.queue, &sent.kind, &sent.payload, sent.priority)
        );
        assert_eq!(
            (got.state, got.run_at, got.max_attempts, got.created_at),
            (TaskState::Scheduled, at(90), 7, now)
        );
        assert_eq!(answer.state, TaskState::Scheduled);
    }
    // Batches that share all but one field, which one task sets apart (a store may write a
    // batch with statements of several rows).
    let apart: [fn(&mut NewTask); 6] = [
        |t| t.queue = "apart".into(),
        |t| t.kind = "apart".into(),
        |t| t.priority = 9,
        |t| t.run_at = Some(at(120)),
        |t| t.run_at = None,
        |t| t.max_attempts = 2,
    ];
    for set_apart in apart {
        let mut same = task("same");
        same.run_at = Some(at(60));
        let mut batch = vec![same; 8];
        set_apart(&mut batch[2]);
        let answers = insert_batch(store, &batch, now).await;
        for (sent, answer) in batch.iter().zip(&answers) {
            let got = store.task_get(answer.id).await.unwrap();
            assert_eq!(
                (&got.queue, &got.kind, got.priority, got.max_attempts),
                (&sent.queue, &sent.kind, sent.priority, sent.max_attempts)
            );
            assert_eq!(got.run_at, sent.run_at.unwrap_or(now));
            assert_eq!(got.state, answer.state);
            assert_eq!(got.state == TaskState::Scheduled, sent.run_at.is_some());
        }
    }
}

/// A task inserted for a waiting worker is leased in its insert, as a claim would lease it,
/// unless its queue is paused or limited: then it is inserted available.
pub async fn insert_claimed_leases_unless_held_back(store: &Shared) {
    let now = t0();
    let ttl = SignedDuration::from_secs(30);
    let insert_claimed = |t: NewTask| {
        store.task_insert_claimed(TaskInsertClaimedParams {
            task: t.into(),
            worker: "w".into(),
            lease_ttl: ttl,
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now,
        })
    };
    let mut t = task("k");
    t.payload = json!({"n": 1});
    let (inserted, leased) = insert_claimed(t.clone()).await.unwrap();
    assert_eq!(inserted.state, TaskState::Running);
    assert!(!inserted.duplicate);
    let leased = leased.expect("leased");
    assert_eq!(leased.id, inserted.id);
    assert_eq!(leased.payload, t.payload);
    let stored = store.task_get(inserted.id).await.unwrap();
    for task in [&leased, &stored] {
        assert_eq!(task.state, TaskState::Running);
        assert_eq!(task.attempt, 1);
        assert_eq!(task.worker.as_deref(), Some("w"));
        assert_eq!(task.started_at, Some(now));
        assert_eq!(task.lease_expires_at, Some(now + ttl));
        assert_eq!(task.run_at, now);
    }
    assert!(
        claim(store, 5, now).await.is_empty(),
        "nothing left to claim"
    );
    // It ends like any claimed task.
    finish(
        store,
        leased.id,
        1,
        FinishOutcome::Succeeded { result: None },
        now,
    )
    .await
    .unwrap();

    for (queue, update) in [
        (
            "paused",
            QueueUpdateParams {
                name: "paused".into(),
                paused: Some(true),
                ..Default::default()
            },
        ),
        (
            "limited",
            QueueUpdateParams {
                name: "limited".into(),
                concurrency_limit: Some(Some(5)),
                ..Default::default()
            },
        ),
    ] {
        store.queue_update(update).await.unwrap();
        let mut t = task("k");
        t.queue = queue.into();
        let (inserted, leased) = insert_claimed(t).await.unwrap();
        assert!(leased.is_none(), "{queue}");
        assert_eq!(inserted.state, TaskState::Available, "{queue}");
        let stored = store.task_get(inserted.id).await.unwrap();
        assert_eq!((stored.state, stored.attempt), (TaskState::Available, 0));
    }
    assert_eq!(claim_from(store, &["limited"], 5, now).await.len(), 1);

    let mut keyed = task("k");
    keyed.unique_key = Some("key".into());
    let mut later = task("k");
    later.run_at = Some(at(1));
    for bad in [keyed, later] {
        let err = insert_claimed(bad).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid);
    }
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
    assert_eq!(all.items.len(), 1);
}

/// A task's trace context is stored by every way of inserting it (a batch with and without
/// other tasks' contexts, a unique key, an insert for a waiting worker) and comes back with
/// its claim and its reads.
pub async fn a_trace_context_travels_with_its_task(store: &Shared) {
    let now = t0();
    let tp = |n: u8| format!("00-{:032x}-{:016x}-01", 0xabc0 + n as u128, 0x10 + n as u64);
    let traced = |kind: &str, n: u8| task(kind).traceparent(tp(n));
    let mut unique = traced("unique", 3);
    unique.unique_key = Some("traced".into());
    let batch = [traced("a", 1), task("plain"), traced("b", 2), unique];
    let answers = insert_batch(store, &batch, now).await;
    let alone = insert(store, traced("alone", 4), now).await;
    let (handed, leased) = store
        .task_insert_claimed(TaskInsertClaimedParams {
            task: traced("handed", 5).into(),
            worker: "w".into(),
            lease_ttl: TTL,
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now,
        })
        .await
        .unwrap();
    assert_eq!(leased.unwrap().traceparent, Some(tp(5)));
    assert_eq!(
        store.task_get(handed.id).await.unwrap().traceparent,
        Some(tp(5))
    );
    let mut claimed = claim(store, 10, now).await;
    claimed.sort_by_key(|t| t.id);
    let got: Vec<(i64, Option<String>)> = claimed
        .iter()
        .map(|t| (t.id, t.traceparent.clone()))
        .collect();
    let want = vec![
        (answers[0].id, Some(tp(1))),
        (answers[1].id, None),
        (answers[2].id, Some(tp(2))),
        (answers[3].id, Some(tp(3))),
        (alone.id, Some(tp(4))),
    ];
    assert_eq!(got, want);
    let listed = store
        .task_list(TaskListParams {
            limit: 10,
            ..TaskListParams::default()
        })
        .await
        .unwrap();
    assert!(
        listed.items.iter().any(|t| t.traceparent == Some(tp(2))),
        "lists without payloads keep it"
    );
}
