//! The store's own tests: group commit, bulk inserts that fail halfway, claims read after
//! their commit, endings read before their write.

use sked_core::{NewTask, Task, TaskState};
use sked_store::{
    FinishOutcome, Store, StoreError, TaskClaimParams, TaskEnded, TaskFinishParams, TaskInsert,
    TaskInsertParams,
};

/// Writes at once share transactions: each call's answer is its own, and a call that fails
/// after writing leaves nothing of its own behind while the others in its group stand.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_stand_or_fall_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::SqliteStore::open(dir.path().join("sked.db")).unwrap();
    let now = jiff::Timestamp::now();
    let calls = (0..200).map(|i| {
        let store = store.clone();
        let mut keyed = NewTask::new("k");
        keyed.unique_key = Some(format!("key-{i}"));
        let tasks: Vec<NewTask> = match i % 4 {
            // A task, a keyed task (written at once), then one that fails validation.
            0 => vec![NewTask::new("k"), keyed, NewTask::new("")],
            _ => vec![NewTask::new("k"), keyed],
        };
        tokio::spawn(async move {
            let params = TaskInsertParams {
                tasks: tasks.into_iter().map(TaskInsert::from).collect(),
                now,
            };
            (i, store.task_insert_many(params).await)
        })
    });
    let mut kept = 0;
    for call in join_all(calls).await {
        let (i, answer) = call.unwrap();
        match i % 4 {
            0 => assert!(answer.is_err(), "call {i}"),
            _ => kept += answer.unwrap().len(),
        }
    }
    let count = task_count(&store).await;
    assert_eq!(count, kept as i64);
    // The failed calls' keys are free.
    let mut again = NewTask::new("k");
    again.unique_key = Some("key-0".into());
    let params = TaskInsertParams {
        tasks: vec![again.into()],
        now,
    };
    assert!(!store.task_insert_many(params).await.unwrap()[0].duplicate);
}

/// Bulk inserts keep what a statement wrote before it failed (`OR FAIL`, which spares them
/// a statement journal): the write's savepoint, or its transaction when alone, takes it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bulk_insert_that_fails_inside_a_statement_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sked.db");
    let store = crate::SqliteStore::open(&path).unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER boom BEFORE INSERT ON tasks WHEN new.payload = '\"boom\"' \
             BEGIN SELECT RAISE(FAIL, 'boom'); END;",
        )
        .unwrap();
    let now = jiff::Timestamp::now();
    // Calls of 600 tasks of one kind, statements of many rows each; every other call has
    // a task that fails after hundreds of rows of its statement were written.
    let calls = (0..40).map(|i| {
        let store = store.clone();
        let tasks = (0..600)
            .map(|j| {
                let boom = i % 2 == 0 && j == 450;
                let payload = if boom {
                    "boom".into()
                } else {
                    serde_json::json!(j)
                };
                TaskInsert::from(NewTask::new("k").payload(payload))
            })
            .collect();
        tokio::spawn(async move {
            (
                i,
                store
                    .task_insert_many(TaskInsertParams { tasks, now })
                    .await,
            )
        })
    });
    let mut kept = 0;
    for call in join_all(calls).await {
        let (i, answer) = call.unwrap();
        match i % 2 {
            0 => assert!(answer.unwrap_err().to_string().contains("boom"), "call {i}"),
            _ => kept += answer.unwrap().len(),
        }
    }
    let count = task_count(&store).await;
    assert_eq!((count, kept), (20 * 600, 20 * 600));
}

/// A claim large enough to be read after its commit answers as a small one, read in its
/// transaction, does: the tasks in claim order, each as the store keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_claim_read_after_its_commit_answers_as_a_small_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::SqliteStore::open(dir.path().join("sked.db")).unwrap();
    let now = jiff::Timestamp::from_second(1_000_000).unwrap();
    let large = crate::tasks::READ_LATER_FROM;
    // Priorities in turn, so that claim order is not id order; every third with a timeout
    // that ends its lease early.
    let tasks = (0..large + 20)
        .map(|i| {
            let mut t = NewTask::new("k").priority((i % 3) as i32);
            if i % 3 == 0 {
                t.timeout = Some(jiff::SignedDuration::from_secs(5));
            }
            TaskInsert::from(t)
        })
        .collect();
    let past = now - jiff::SignedDuration::from_secs(1);
    let params = TaskInsertParams { tasks, now: past };
    store.task_insert_many(params).await.unwrap();
    let claim = |max: usize, worker: &str| TaskClaimParams {
        min_priority: None,
        queues: vec![],
        kinds: vec![],
        max: max as u32,
        worker: worker.into(),
        lease_ttl: jiff::SignedDuration::from_secs(60),
        timeout_grace: jiff::SignedDuration::from_secs(1),
        now,
    };
    let small = store.task_claim(claim(10, "small")).await.unwrap();
    let large_claim = store.task_claim(claim(large, "large")).await.unwrap();
    assert_eq!((small.len(), large_claim.len()), (10, large));
    for claimed in [&small, &large_claim] {
        let keys: Vec<_> = claimed
            .iter()
            .map(|t| (std::cmp::Reverse(t.priority), t.run_at, t.id))
            .collect();
        assert!(keys.is_sorted(), "claim order");
        for t in claimed.iter() {
            // A claim answers without the attempts' history, which a read adds.
            let mut stored = store.task_get(t.id).await.unwrap();
            stored.attempts.clear();
            assert_eq!(t, &stored, "task {}", t.id);
            assert_eq!(
                (t.state, t.attempt, t.started_at),
                (TaskState::Running, 1, Some(now))
            );
            let ends = match t.timeout {
                Some(_) => now + jiff::SignedDuration::from_secs(6),
                None => now + jiff::SignedDuration::from_secs(60),
            };
            assert_eq!(t.lease_expires_at, Some(ends), "task {}", t.id);
        }
    }
    assert!(
        small
            .iter()
            .all(|t| t.priority == 2 && t.worker.as_deref() == Some("small"))
    );
    assert!(
        large_claim
            .iter()
            .all(|t| t.worker.as_deref() == Some("large"))
    );
}

/// `n` tasks inserted a second before `now` and claimed at `now` by one worker, in claim order.
async fn claimed(store: &crate::SqliteStore, n: usize, now: jiff::Timestamp) -> Vec<Task> {
    let tasks = (0..n)
        .map(|_| TaskInsert::from(NewTask::new("k")))
        .collect();
    let past = now - jiff::SignedDuration::from_secs(1);
    let params = TaskInsertParams { tasks, now: past };
    store.task_insert_many(params).await.unwrap();
    let tasks = store.task_claim(claim_of(n, now)).await.unwrap();
    assert_eq!(tasks.len(), n);
    tasks
}

/// A claim of up to `n` tasks of any queue by worker `w`.
fn claim_of(n: usize, now: jiff::Timestamp) -> TaskClaimParams {
    TaskClaimParams {
        min_priority: None,
        queues: vec![],
        kinds: vec![],
        max: n as u32,
        worker: "w".into(),
        lease_ttl: jiff::SignedDuration::from_secs(60),
        timeout_grace: jiff::SignedDuration::from_secs(1),
        now,
    }
}

/// The endings of `tasks`: successes, every seventh with a result, every eleventh a failure
/// that is retried, and the fifth naming an attempt the task never had.
fn endings(tasks: &[Task], now: jiff::Timestamp) -> Vec<TaskFinishParams> {
    let outcome = |i: usize| match i {
        _ if i.is_multiple_of(11) => FinishOutcome::Failed {
            error: "no".into(),
            retryable: true,
        },
        _ if i.is_multiple_of(7) => FinishOutcome::Succeeded {
            result: Some(serde_json::json!({"i": i})),
        },
        _ => FinishOutcome::Succeeded { result: None },
    };
    let attempt = |i: usize, t: &Task| if i == 5 { t.attempt + 1 } else { t.attempt };
    tasks
        .iter()
        .enumerate()
        .map(|(i, t)| TaskFinishParams {
            id: t.id,
            attempt: attempt(i, t),
            outcome: outcome(i),
            now,
            jitter: 0.5,
        })
        .collect()
}

/// A batch of endings large enough to be read before its write answers as a small one, read
/// in its transaction, does: each answer as the store then keeps the task, and an attempt
/// that does not hold its task refused alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_of_endings_read_before_its_write_answers_as_a_small_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::SqliteStore::open(dir.path().join("sked.db")).unwrap();
    let now = jiff::Timestamp::from_second(1_000_000).unwrap();
    let large = crate::tasks::READ_LATER_FROM + 100;
    let tasks = claimed(&store, 20 + large, now).await;
    let (small, large) = tasks.split_at(20);
    let ended = now + jiff::SignedDuration::from_secs(2);
    for batch in [small, large] {
        let ps = endings(batch, ended);
        assert_eq!(crate::tasks::reads_before(&ps), batch.len() > 20);
        let answers = store.task_finish_many_lean(ps.clone()).await.unwrap();
        assert_eq!(answers.len(), ps.len());
        for (i, (p, answer)) in ps.iter().zip(answers).enumerate() {
            if i == 5 {
                assert!(
                    matches!(answer, Err(StoreError::StaleLease { id, .. }) if id == p.id),
                    "{answer:?}"
                );
                let stored = store.task_get(p.id).await.unwrap();
                assert_eq!(stored.state, TaskState::Running, "left as it was");
                continue;
            }
            let stored = store.task_get(p.id).await.unwrap();
            assert_eq!(answer.unwrap(), TaskEnded::from(&stored), "task {}", p.id);
            let (state, result) = match i {
                _ if i % 11 == 0 => (TaskState::Retrying, None),
                _ if i % 7 == 0 => (TaskState::Succeeded, Some(serde_json::json!({"i": i}))),
                _ => (TaskState::Succeeded, None),
            };
            assert_eq!(
                (stored.state, stored.result),
                (state, result),
                "task {}",
                p.id
            );
            if state == TaskState::Succeeded {
                assert_eq!(stored.finished_at, Some(ended));
            }
        }
    }
}

/// A write whose read was made before it, and which finds a task's attempt changed since,
/// fails whole and is rolled back; ended again, the batch refuses only that task's ending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endings_read_before_a_lease_was_lost_are_written_again() {
    // A success without a result (3), then one with a result (14), checked by the other
    // statement.
    for lost in [3, 14] {
        ended_again_after_losing(lost).await;
    }
}

async fn ended_again_after_losing(lost: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::SqliteStore::open(dir.path().join("sked.db")).unwrap();
    let now = jiff::Timestamp::from_second(1_000_000).unwrap();
    let tasks = claimed(&store, 40, now).await;
    let ended = now + jiff::SignedDuration::from_secs(2);
    let ps: Vec<TaskFinishParams> = endings(&tasks, ended)
        .into_iter()
        .enumerate()
        .map(|(i, mut p)| {
            p.attempt = tasks[i].attempt;
            p
        })
        .collect();
    let p = ps.clone();
    let before = store
        .read(move |conn| crate::tasks::read_before(conn, &p))
        .await
        .unwrap();
    // Since the read, the task was rescued and leased again.
    let lost = tasks[lost].id;
    store
        .write(move |tx| {
            let rescued = "UPDATE tasks SET attempt = attempt + 1, worker = 'w2' WHERE id = ?1";
            tx.execute(rescued, [lost]).map_err(crate::codec::db_err)
        })
        .await
        .unwrap();
    let p = ps.clone();
    let err = store
        .write(move |tx| crate::tasks::finish_many_lean(tx, &p, Some(before)))
        .await
        .unwrap_err();
    assert!(crate::tasks::changed_since_read(&err), "{err:?}");
    let running = store
        .run(|conn| {
            let sql = "SELECT count(*) FROM tasks WHERE state = 'running'";
            conn.query_row(sql, [], |r| r.get::<_, i64>(0))
                .map_err(crate::codec::db_err)
        })
        .await
        .unwrap();
    assert_eq!(running, 40, "nothing of the failed write stands");
    let p = ps.clone();
    let answers = store
        .write(move |tx| crate::tasks::finish_many_lean(tx, &p, None))
        .await
        .unwrap();
    for (p, answer) in ps.iter().zip(answers) {
        match p.id == lost {
            true => assert!(
                matches!(answer, Err(StoreError::StaleLease { .. })),
                "{answer:?}"
            ),
            false => assert_ne!(answer.unwrap().state, TaskState::Running),
        }
    }
}

async fn task_count(store: &crate::SqliteStore) -> i64 {
    store
        .run(|conn| {
            conn.query_row("SELECT count(*) FROM tasks", [], |r| r.get::<_, i64>(0))
                .map_err(crate::codec::db_err)
        })
        .await
        .unwrap()
}

async fn join_all<T>(
    handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let handles: Vec<_> = handles.collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await);
    }
    out
}

/// Claimers at once, on a store that inserts and one that only claims, opened on the same
/// file: the shared scenario of `sked_store::conformance` (SQLite announces nothing, so there
/// is nothing to lose).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_keep_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sked.db");
    let stores: Vec<sked_store::conformance::Shared> = vec![
        std::sync::Arc::new(crate::SqliteStore::open(&path).unwrap()),
        std::sync::Arc::new(crate::SqliteStore::open(&path).unwrap()),
    ];
    let run = sked_store::conformance::ClaimersRun {
        stores,
        lose_announcements: None,
    };
    sked_store::conformance::concurrent_claims_keep_the_contract(run, 6).await;
}

/// A 1 → 1,000 → 1 workflow keeps its graph in two waits and two edges: the stage's tasks
/// share one wait, and the fan-in waits for that whole wait through one edge. A retry by hand
/// of a stage's task after the fan-in counted it is kept as one pair.
#[tokio::test]
async fn a_stage_and_its_fan_in_are_two_waits_and_two_edges() {
    use sked_store::{TaskRetryParams, WorkflowCreateParams, WorkflowTaskInsert};
    let dir = tempfile::tempdir().unwrap();
    // Every task a row: the stage is not kept.
    let store =
        crate::SqliteStore::open_keeping(dir.path().join("sked.db"), Default::default()).unwrap();
    let now = jiff::Timestamp::now();
    let node = |name: String, after: Vec<usize>| WorkflowTaskInsert {
        name,
        after,
        insert: NewTask::new("k").into(),
    };
    let mut tasks = vec![node("root".into(), vec![])];
    tasks.extend((1..=1000).map(|i| node(format!("m{i}"), vec![0])));
    tasks.push(node("fan-in".into(), (1..=1000).collect()));
    store
        .workflow_create(WorkflowCreateParams {
            name: None,
            tasks,
            schedule: None,
            nominal_at: None,
            now,
        })
        .await
        .unwrap();
    let rows = |sql: &'static str| {
        let store = store.clone();
        async move {
            store
                .run(move |conn| {
                    conn.query_row(sql, [], |r| r.get::<_, i64>(0))
                        .map_err(crate::codec::db_err)
                })
                .await
                .unwrap()
        }
    };
    assert_eq!(rows("SELECT count(*) FROM waits").await, 2);
    assert_eq!(rows("SELECT count(*) FROM wait_parents").await, 1);
    assert_eq!(rows("SELECT count(*) FROM wait_stages").await, 1);
    assert_eq!(rows("SELECT count(DISTINCT wait) FROM tasks").await, 2);
    // The root and the stage run; the fan-in is released once the last of them succeeds.
    let mut ended: Vec<i64> = Vec::new();
    while ended.len() < 1001 {
        let batch = store.task_claim(claim_of(100, now)).await.unwrap();
        assert!(
            !batch.is_empty(),
            "nothing to claim after {} ends",
            ended.len()
        );
        let successes = (batch.iter())
            .map(|t| TaskFinishParams {
                id: t.id,
                attempt: t.attempt,
                outcome: FinishOutcome::Succeeded { result: None },
                now,
                jitter: 0.5,
            })
            .collect();
        store.task_finish_many(successes).await.unwrap();
        ended.extend(batch.iter().map(|t| t.id));
    }
    let fan_in = ended.iter().max().unwrap() + 1;
    assert_eq!(
        store.task_get(fan_in).await.unwrap().state,
        TaskState::Available
    );
    store
        .task_retry(TaskRetryParams { id: ended[1], now })
        .await
        .unwrap();
    assert_eq!(rows("SELECT count(*) FROM wait_counted").await, 1);
}
