//! Stages of a workflow kept until released (`crate::kept`), against the reference: the same
//! random workflows, run by the same claims, endings and cancels on a store that makes every
//! task a row and on stores that keep every stage that qualifies, answer the same. Counts,
//! which read a kept stage without making its rows, are compared after every step; tasks,
//! which make them, at the end and now and then on the way.

use jiff::{SignedDuration, Timestamp};
use sked_core::{NewTask, ParentFailure, TaskId, TaskState};

use super::Rng;
use crate::{
    FinishOutcome, Store, TaskCancelParams, TaskClaimParams, TaskFinishParams,
    WorkflowCreateParams, WorkflowTaskInsert, WorkflowTasksParams,
};

/// A random workflow: a root, then stages of 1 to 30 tasks that each wait for one earlier
/// task or a whole earlier stage, and fan-ins that wait for one or two stages and a task.
/// Each stage's tasks share everything but the payload; some stages run whatever their
/// parents do.
fn workflow(rng: &mut Rng, kind: &str, now: Timestamp) -> WorkflowCreateParams {
    let mut after: Vec<Vec<usize>> = vec![Vec::new()];
    let mut rules = vec![ParentFailure::Cancel];
    let mut stages: Vec<Vec<usize>> = Vec::new();
    while after.len() < 120 {
        let n = after.len();
        let one = rng.below(n as u64) as usize;
        let (size, mut parents) = match rng.below(3) {
            0 if !stages.is_empty() => {
                let mut p = stages[rng.below(stages.len() as u64) as usize].clone();
                if rng.chance(50) {
                    p.extend(stages[rng.below(stages.len() as u64) as usize].iter());
                }
                p.push(one);
                (1, p)
            }
            1 if !stages.is_empty() => {
                let p = stages[rng.below(stages.len() as u64) as usize].clone();
                (1 + rng.below(30) as usize, p)
            }
            _ => (1 + rng.below(30) as usize, vec![one]),
        };
        parents.sort_unstable();
        parents.dedup();
        let rule = match rng.chance(30) {
            true => ParentFailure::Run,
            false => ParentFailure::Cancel,
        };
        stages.push((n..n + size).collect());
        for _ in 0..size {
            after.push(parents.clone());
            rules.push(rule);
        }
    }
    let tasks = (after.into_iter().zip(rules).enumerate())
        .map(|(i, (after, rule))| {
            let task = NewTask::new(kind)
                .payload(serde_json::json!({ "i": i, "text": format!("task {i}") }))
                .max_attempts(2)
                .on_parent_failure(rule);
            WorkflowTaskInsert {
                name: format!("n{i}"),
                after,
                insert: task.into(),
            }
        })
        .collect();
    WorkflowCreateParams {
        name: Some(kind.into()),
        tasks,
        schedule: None,
        nominal_at: None,
        now,
    }
}

/// The store's answers that must agree: each task's queue counts, and the workflow's.
async fn counts(store: &dyn Store, workflow: i64) -> serde_json::Value {
    let q = store.queue_get("default", Timestamp::now()).await.unwrap();
    let w = store.workflow_get(workflow).await.unwrap();
    serde_json::json!({ "queue": q.counts, "workflow": w.counts, "state": w.state })
}

async fn task(store: &dyn Store, id: TaskId) -> serde_json::Value {
    serde_json::to_value(store.task_get(id).await.unwrap()).unwrap()
}

/// Runs three random workflows on `rows`, a store that makes every task a row, and on each
/// store of `kept` (named), which keep every stage that qualifies, and asserts that they
/// answer the same: claims of 1 to 40 (every field of every task claimed), their ends,
/// cancels and reads with the family, counts after every step, then every task and the graph.
/// `parts(k)` answers how many parts the `k`th kept store holds, and how many of them are
/// released: the run fails when no stage was kept, or no claim met a released part.
pub async fn kept_stages_answer_as_rows_do(
    rows: &dyn Store,
    kept: &[(&str, &dyn Store)],
    mut parts: impl AsyncFnMut(usize) -> (i64, i64),
) {
    let (mut kept_at_all, mut released_at_all) = (false, false);
    for seed in 1..=3u64 {
        let base: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let base = base + SignedDuration::from_hours(seed as i64 * 1000);
        let kind = format!("k{seed}");
        let made = rows
            .workflow_create(workflow(&mut Rng(seed * 7919), &kind, base))
            .await
            .unwrap();
        for (k, (name, store)) in kept.iter().enumerate() {
            let made_kept = store
                .workflow_create(workflow(&mut Rng(seed * 7919), &kind, base))
                .await
                .unwrap();
            assert_eq!(
                made.tasks, made_kept.tasks,
                "seed {seed}, {name}: the same ids"
            );
            kept_at_all |= parts(k).await.0 > 0;
        }
        let ids = made.tasks.clone();
        let mut rng = Rng(seed);
        for step in 0..200 {
            let now = base + SignedDuration::from_secs(step);
            match rng.below(20) {
                // A cancel of a task that has not ended: kept, it is made a row first.
                0 => {
                    let id = ids[rng.below(ids.len() as u64) as usize];
                    let cancel = async |store: &dyn Store| {
                        (store.task_cancel(TaskCancelParams { id, now }).await)
                            .map(|t| serde_json::to_value(t).unwrap())
                            .map_err(|e| e.to_string())
                    };
                    let expected = cancel(rows).await;
                    for (name, store) in kept {
                        let at = format!("seed {seed}, step {step}, {name}");
                        assert_eq!(expected, cancel(*store).await, "{at}: cancel of {id}");
                    }
                }
                // A task read with its family: its stage, its parents' and its children's are
                // made rows.
                1 => {
                    let id = ids[rng.below(ids.len() as u64) as usize];
                    let expected = task(rows, id).await;
                    for (name, store) in kept {
                        let at = format!("seed {seed}, step {step}, {name}");
                        assert_eq!(expected, task(*store, id).await, "{at}: {id}");
                    }
                }
                _ => {
                    let max = 1 + rng.below(40) as u32;
                    let outcomes: Vec<u64> = (0..max).map(|_| rng.below(10)).collect();
                    let expected = claim_and_end(rows, max, &outcomes, now).await;
                    for (k, (name, store)) in kept.iter().enumerate() {
                        let at = format!("seed {seed}, step {step}, {name}");
                        released_at_all |= parts(k).await.1 > 0;
                        let (claimed, ends) = claim_and_end(*store, max, &outcomes, now).await;
                        assert_eq!(expected.0, claimed, "{at}: the same tasks claimed");
                        assert_eq!(expected.1, ends, "{at}: the ends");
                    }
                }
            }
            let expected = counts(rows, made.id).await;
            for (name, store) in kept {
                let at = format!("seed {seed}, step {step}, {name}");
                assert_eq!(expected, counts(*store, made.id).await, "{at}: counts");
            }
        }
        for id in &ids {
            let expected = task(rows, *id).await;
            for (name, store) in kept {
                assert_eq!(
                    expected,
                    task(*store, *id).await,
                    "seed {seed}, {name}: {id}"
                );
            }
        }
        let graph = WorkflowTasksParams {
            id: made.id,
            after_id: None,
            limit: 1000,
        };
        let expected = format!("{:?}", rows.workflow_tasks(graph.clone()).await.unwrap());
        for (name, store) in kept {
            let graph = format!("{:?}", store.workflow_tasks(graph.clone()).await.unwrap());
            assert_eq!(expected, graph, "seed {seed}, {name}: the graph");
        }
        let states: Vec<TaskState> = (rows.task_states(ids.clone()).await.unwrap().into_iter())
            .filter_map(|(_, s)| s)
            .collect();
        assert!(
            states.iter().any(|s| s.is_finished()),
            "seed {seed}: the workflow ran"
        );
    }
    assert!(kept_at_all, "no stage was kept: the test checks nothing");
    assert!(
        released_at_all,
        "no claim met a released part: the test checks nothing of the claims that take them"
    );
}

/// A claim of at most `max` tasks on `store`, each claimed task then ended by the next of
/// `outcomes` (0: failed for good; 1: failed, to retry; otherwise succeeded), all at `now`:
/// the tasks claimed, every field, and the ends' answers.
async fn claim_and_end(
    store: &dyn Store,
    max: u32,
    outcomes: &[u64],
    now: Timestamp,
) -> (Vec<serde_json::Value>, String) {
    let claimed = (store
        .task_claim(TaskClaimParams {
            queues: vec![],
            kinds: vec![],
            max,
            min_priority: None,
            worker: "w".into(),
            lease_ttl: SignedDuration::from_secs(60),
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now,
        })
        .await)
        .unwrap();
    let ends: Vec<TaskFinishParams> = (claimed.iter().zip(outcomes))
        .map(|(t, outcome)| TaskFinishParams {
            id: t.id,
            attempt: t.attempt,
            outcome: match outcome {
                0 => FinishOutcome::Failed {
                    error: "no".into(),
                    retryable: false,
                },
                1 => FinishOutcome::Failed {
                    error: "again".into(),
                    retryable: true,
                },
                _ => FinishOutcome::Succeeded { result: None },
            },
            now,
            jitter: 0.0,
        })
        .collect();
    let ends = store.task_finish_many_lean(ends).await.unwrap();
    let claimed = (claimed.iter())
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    (claimed, format!("{ends:?}"))
}
