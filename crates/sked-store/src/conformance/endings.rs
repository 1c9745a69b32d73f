//! Ending many attempts in one call: each as it would end alone, answered whole or briefly.

use jiff::SignedDuration;
use serde_json::json;
use sked_core::TaskState;

use crate::*;

use super::*;

/// One call ends many attempts of every kind at once, more than a store may write in one
/// statement: each answer and each stored row is what that ending alone would have made, an id
/// given twice finds its first ending, and stale or unknown ones change nothing.
pub async fn a_batch_of_endings_ends_each_as_alone(store: &Shared) {
    endings_each_as_alone(store, true, false).await;
}

/// The same without an id given twice, so that a store may end successes without reading
/// them first: successes that no longer hold their task, or name none, still say why.
pub async fn a_batch_of_distinct_endings_ends_each_as_alone(store: &Shared) {
    endings_each_as_alone(store, false, false).await;
}

/// The first case through [`crate::Store::task_finish_many_lean`]: the same rows written, each answer
/// what the stored row says, the same errors.
pub async fn a_batch_of_brief_endings_ends_each_as_alone(store: &Shared) {
    endings_each_as_alone(store, true, true).await;
}

/// The second case through [`crate::Store::task_finish_many_lean`], where a store may write
/// successes without reading them.
pub async fn a_batch_of_distinct_brief_endings_ends_each_as_alone(store: &Shared) {
    endings_each_as_alone(store, false, true).await;
}

/// An answer of `task_finish_many` (a task) or `task_finish_many_lean` (what it left of a task).
#[derive(Debug, PartialEq)]
enum Answer {
    Whole(Box<sked_core::Task>),
    Brief(crate::TaskEnded),
}

async fn endings_each_as_alone(store: &Shared, repeat: bool, brief: bool) {
    let n = 70;
    let mut tasks = Vec::new();
    for i in 0..n + 2 {
        let mut t = task("k");
        t.max_attempts = 2;
        t.payload = json!({ "i": i });
        tasks.push(t);
    }
    insert_batch(store, &tasks, t0()).await;
    let mut claimed = claim(store, n + 2, t0()).await;
    assert_eq!(claimed.len(), n as usize + 2);
    // A running task that the batch names with a stale attempt only.
    let running = claimed.pop().unwrap();
    // The last task failed once: its next attempt ends with the others, and a success keeps the
    // error it had.
    let failed_once = claimed.pop().unwrap();
    let retrying = finish(
        store,
        failed_once.id,
        failed_once.attempt,
        failed(true),
        t0(),
    )
    .await
    .unwrap();
    let again = claim(store, 1, retrying.run_at).await.pop().unwrap();
    assert_eq!(again.id, failed_once.id);
    claimed.push(again);
    let waiting = insert(store, task("k"), t0()).await.id;
    let ending = |i: usize| match i % 5 {
        0 => FinishOutcome::Succeeded { result: None },
        1 => FinishOutcome::Succeeded {
            result: Some(json!({ "n": i, "s": "é\"\\" })),
        },
        2 => failed(true),
        3 => failed(false),
        _ => FinishOutcome::Snoozed { until: at(600) },
    };
    let mut params: Vec<TaskFinishParams> = claimed
        .iter()
        .enumerate()
        .map(|(i, t)| TaskFinishParams {
            id: t.id,
            attempt: t.attempt,
            outcome: ending(i),
            now: at(i as i64),
            jitter: 0.5,
        })
        .collect();
    // A stale attempt, a task that is not running, and a task that does not exist; with
    // `repeat`, the first task again.
    let first = &claimed[0];
    let mut odd = vec![(running.id, 7), (waiting, 0), (i64::MAX, 1)];
    if repeat {
        odd.insert(0, (first.id, first.attempt));
    }
    for (id, attempt) in odd.iter().copied() {
        params.push(TaskFinishParams {
            id,
            attempt,
            outcome: FinishOutcome::Succeeded { result: None },
            now: at(100),
            jitter: 0.5,
        });
    }
    let answers: Vec<crate::Result<Answer>> = if brief {
        let answers = store.task_finish_many_lean(params).await.unwrap();
        answers.into_iter().map(|r| r.map(Answer::Brief)).collect()
    } else {
        let answers = store.task_finish_many(params).await.unwrap();
        answers
            .into_iter()
            .map(|r| r.map(|t| Answer::Whole(Box::new(t))))
            .collect()
    };
    assert_eq!(answers.len(), claimed.len() + odd.len());
    for (i, (t, answer)) in claimed.iter().zip(&answers).enumerate() {
        let done = answer.as_ref().unwrap();
        let stored = store.task_get(t.id).await.unwrap();
        let (state, finished) = match i % 5 {
            0 | 1 => (TaskState::Succeeded, true),
            2 => (TaskState::Retrying, false),
            3 => (TaskState::Dead, true),
            _ => (TaskState::Scheduled, false),
        };
        let without_history = sked_core::Task {
            attempts: Vec::new(),
            ..stored.clone()
        };
        let expected = match brief {
            false => Answer::Whole(Box::new(without_history)),
            true => Answer::Brief(without_history.into()),
        };
        assert_eq!(done, &expected, "task {i}: the answer is the stored row");
        assert_eq!(stored.state, state, "task {i}");
        assert_eq!(
            stored.finished_at,
            finished.then_some(at(i as i64)),
            "task {i}"
        );
        assert_eq!(stored.lease_expires_at, None, "task {i}");
        // A snooze gives its attempt back.
        let allowed = if i % 5 == 4 { 3 } else { 2 };
        assert_eq!(stored.max_attempts, allowed, "task {i}");
        match i % 5 {
            1 => assert_eq!(stored.result, Some(json!({ "n": i, "s": "é\"\\" }))),
            2 | 3 => assert_eq!(stored.last_error.as_deref(), Some("boom")),
            4 => assert_eq!(stored.run_at, at(600)),
            _ => assert_eq!(stored.result, None),
        }
        if t.id == failed_once.id {
            assert_eq!(stored.last_error.as_deref(), Some("boom"), "task {i}");
            assert_eq!(stored.payload, json!({ "i": n }), "task {i}");
        } else {
            assert_eq!(stored.payload, json!({ "i": i }), "task {i}");
        }
    }
    let kinds: Vec<ErrorKind> = answers[claimed.len()..]
        .iter()
        .map(|a| a.as_ref().unwrap_err().kind())
        .collect();
    let mut expected = vec![
        ErrorKind::Conflict,
        ErrorKind::Conflict,
        ErrorKind::NotFound,
    ];
    if repeat {
        expected.insert(0, ErrorKind::Conflict);
    }
    assert_eq!(kinds, expected);
    assert_eq!(
        store.task_get(running.id).await.unwrap().state,
        TaskState::Running
    );
    assert_eq!(
        store.task_get(waiting).await.unwrap().state,
        TaskState::Available
    );
}

/// A batch of successes alone, each task named once (the batch a worker sends, which a store
/// may write without reading the rows): each answer is what the stored row says, a task of a
/// schedule says so, a success after a failed attempt keeps its error, and successes that no
/// longer hold their task, or name none, change nothing and say why.
pub async fn a_batch_of_successes_alone_answers_briefly(store: &Shared) {
    let mut inserts: Vec<TaskInsert> = (0..67)
        .map(|i| {
            let mut t = task("k");
            t.max_attempts = 2;
            t.queue = format!("q{}", i % 3);
            t.payload = json!({ "i": i });
            t.into()
        })
        .collect();
    inserts[5].schedule = Some("nightly".into());
    inserts[5].nominal_at = Some(t0());
    store
        .task_insert_many(TaskInsertParams {
            tasks: inserts,
            now: t0(),
        })
        .await
        .unwrap();
    // Claimed after they were due, so that no start is its run time.
    let mut claimed = claim(store, 67, at(10)).await;
    assert_eq!(claimed.len(), 67);
    let running = claimed.pop().unwrap();
    // A task that failed once succeeds on its second attempt.
    let failed_once = claimed.pop().unwrap();
    let retrying = finish(store, failed_once.id, 1, failed(true), at(20))
        .await
        .unwrap();
    let later = retrying
        .run_at
        .checked_add(SignedDuration::from_secs(5))
        .unwrap();
    let again = claim(store, 1, later).await.pop().unwrap();
    assert_eq!(again.id, failed_once.id);
    claimed.push(again);
    let waiting = insert(store, task("k"), t0()).await.id;
    let result = |i: usize| (i % 2 == 1).then(|| json!({ "n": i }));
    let mut params: Vec<TaskFinishParams> = claimed
        .iter()
        .enumerate()
        .map(|(i, t)| TaskFinishParams {
            id: t.id,
            attempt: t.attempt,
            outcome: FinishOutcome::Succeeded { result: result(i) },
            now: at(100 + i as i64),
            jitter: 0.5,
        })
        .collect();
    for (id, attempt) in [(running.id, 7), (waiting, 0), (i64::MAX, 1)] {
        params.push(TaskFinishParams {
            id,
            attempt,
            outcome: FinishOutcome::Succeeded { result: None },
            now: at(500),
            jitter: 0.5,
        });
    }
    let answers = store.task_finish_many_lean(params).await.unwrap();
    assert_eq!(answers.len(), claimed.len() + 3);
    for (i, (t, answer)) in claimed.iter().zip(&answers).enumerate() {
        let stored = store.task_get(t.id).await.unwrap();
        assert_eq!(
            answer.as_ref().unwrap(),
            &TaskEnded::from(&stored),
            "task {i}"
        );
        assert_eq!(stored.state, TaskState::Succeeded, "task {i}");
        assert_eq!(stored.finished_at, Some(at(100 + i as i64)), "task {i}");
        assert_eq!(stored.lease_expires_at, None, "task {i}");
        assert_eq!(stored.result, result(i), "task {i}");
        assert_eq!(
            (stored.run_at, stored.max_attempts),
            (t.run_at, 2),
            "task {i}"
        );
        let error = (t.id == failed_once.id).then_some("boom");
        assert_eq!(stored.last_error.as_deref(), error, "task {i}");
    }
    let scheduled: Vec<_> = answers
        .iter()
        .flatten()
        .filter_map(|t| t.schedule.clone())
        .collect();
    assert_eq!(scheduled, ["nightly"]);
    let kinds: Vec<ErrorKind> = answers[claimed.len()..]
        .iter()
        .map(|a| a.as_ref().unwrap_err().kind())
        .collect();
    assert_eq!(
        kinds,
        [
            ErrorKind::Conflict,
            ErrorKind::Conflict,
            ErrorKind::NotFound
        ]
    );
    let still = store.task_get(running.id).await.unwrap();
    assert_eq!((still.state, still.attempt), (TaskState::Running, 1));
    assert_eq!(
        store.task_get(waiting).await.unwrap().state,
        TaskState::Available
    );
}

/// A failed attempt waits as its task's backoff says: each shape's delays, in turn, as the
/// task's run time after each failure (the exponential shape at the middle of its jitter).
pub async fn each_backoff_shape_sets_the_next_run_time(store: &Shared) {
    for (spec, delays) in [
        ("exp:10s..30s", [10, 20, 30, 30]),
        ("fixed:45s", [45, 45, 45, 45]),
        ("linear:10s..25s", [10, 20, 25, 25]),
        ("5s,1m,2m", [5, 60, 120, 120]),
    ] {
        let mut t = task("flaky");
        t.queue = spec.into();
        t.max_attempts = 5;
        t.backoff = Some(spec.parse().unwrap());
        let id = insert(store, t, t0()).await.id;
        let mut now = t0();
        for (n, secs) in delays.into_iter().enumerate() {
            let c = claim_from(store, &[spec], 1, now).await.remove(0);
            assert_eq!((c.id, c.attempt), (id, n as i32 + 1));
            let after = finish(store, id, c.attempt, failed(true), now)
                .await
                .unwrap();
            assert_eq!(after.state, TaskState::Retrying, "{spec}");
            let waited = after.run_at.duration_since(now);
            assert_eq!(
                waited,
                SignedDuration::from_secs(secs),
                "{spec}: after failure {}",
                n + 1
            );
            now = after.run_at;
        }
        assert_eq!(
            store.task_get(id).await.unwrap().backoff,
            Some(spec.parse().unwrap())
        );
    }
}
