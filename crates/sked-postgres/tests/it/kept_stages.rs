//! Stages of a workflow kept as one row until released
//! (docs/decisions/0023-tasks-made-when-released.md), against the reference: the same random
//! workflows, run by the same claims, endings and cancels on a store that makes every task a
//! row and on one that keeps every stage that qualifies, answer the same. Counts, which read a
//! kept stage without making its rows, are compared after every step; tasks, which make
//! them, at the end and now and then on the way.

use jiff::{SignedDuration, Timestamp};
use sked_core::{NewTask, ParentFailure, TaskId, TaskState};
use sked_postgres::PgStore;
use sked_store::conformance::Rng;
use sked_store::{
    FinishOutcome, Store, TaskCancelParams, TaskFinishParams, WorkflowCreateParams,
    WorkflowTaskInsert, WorkflowTasksParams,
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
async fn counts(store: &PgStore, workflow: i64) -> serde_json::Value {
    let q = store.queue_get("default", Timestamp::now()).await.unwrap();
    let w = store.workflow_get(workflow).await.unwrap();
    serde_json::json!({ "queue": q.counts, "workflow": w.counts, "state": w.state })
}

async fn task(store: &PgStore, id: TaskId) -> serde_json::Value {
    serde_json::to_value(store.task_get(id).await.unwrap()).unwrap()
}

/// How many stages `store` keeps.
async fn kept(schema: &sked_postgres::testing::PooledSchema) -> i64 {
    let (c, conn) = tokio_postgres::connect(&schema.base_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let row = c
        .query_one(
            &format!("SELECT count(*) FROM {}.sked_stages", schema.name),
            &[],
        )
        .await
        .unwrap();
    row.get(0)
}

#[tokio::test]
async fn kept_stages_answer_as_rows_do() {
    use sked_postgres::testing::{pooled_store, pooled_store_keeping_stages};
    let Some((rows, _rows_schema)) = pooled_store().await else {
        return;
    };
    let Some((keeping, kept_schema)) = pooled_store_keeping_stages().await else {
        return;
    };
    let mut kept_at_all = false;
    for seed in 1..=3u64 {
        let base: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let base = base + SignedDuration::from_hours(seed as i64 * 1000);
        let kind = format!("k{seed}");
        let made = rows
            .workflow_create(workflow(&mut Rng(seed * 7919), &kind, base))
            .await
            .unwrap();
        let made_kept = keeping
            .workflow_create(workflow(&mut Rng(seed * 7919), &kind, base))
            .await
            .unwrap();
        assert_eq!(made.tasks, made_kept.tasks, "seed {seed}: the same ids");
        kept_at_all |= kept(&kept_schema).await > 0;
        let ids = made.tasks.clone();
        let mut rng = Rng(seed);
        for step in 0..200 {
            let now = base + SignedDuration::from_secs(step);
            let at = format!("seed {seed}, step {step}");
            match rng.below(20) {
                // A cancel of a task that has not ended: kept, it is made a row first.
                0 => {
                    let id = ids[rng.below(ids.len() as u64) as usize];
                    let (a, b) = (
                        rows.task_cancel(TaskCancelParams { id, now }).await,
                        keeping.task_cancel(TaskCancelParams { id, now }).await,
                    );
                    assert_eq!(
                        a.map(|t| serde_json::to_value(t).unwrap())
                            .map_err(|e| e.to_string()),
                        b.map(|t| serde_json::to_value(t).unwrap())
                            .map_err(|e| e.to_string()),
                        "{at}: cancel of {id}"
                    );
                }
                // A task read with its family: its stage, its parents' and its children's are
                // made rows.
                1 => {
                    let id = ids[rng.below(ids.len() as u64) as usize];
                    assert_eq!(
                        task(&rows, id).await,
                        task(&keeping, id).await,
                        "{at}: {id}"
                    );
                }
                _ => {
                    let max = 1 + rng.below(40) as u32;
                    let a = rows
                        .task_claim(crate::claim_params(&[], max, now))
                        .await
                        .unwrap();
                    let b = keeping.task_claim(crate::claim_params(&[], max, now)).await;
                    let b = b.unwrap();
                    let claimed: Vec<TaskId> = a.iter().map(|t| t.id).collect();
                    let claimed_kept: Vec<TaskId> = b.iter().map(|t| t.id).collect();
                    assert_eq!(claimed, claimed_kept, "{at}: the same tasks claimed");
                    let ends: Vec<TaskFinishParams> = (a.iter())
                        .map(|t| TaskFinishParams {
                            id: t.id,
                            attempt: t.attempt,
                            outcome: match rng.below(10) {
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
                    let a = rows.task_finish_many_lean(ends.clone()).await.unwrap();
                    let b = keeping.task_finish_many_lean(ends).await.unwrap();
                    assert_eq!(format!("{a:?}"), format!("{b:?}"), "{at}: the ends");
                }
            }
            assert_eq!(
                counts(&rows, made.id).await,
                counts(&keeping, made.id).await,
                "{at}: counts"
            );
        }
        for id in &ids {
            assert_eq!(
                task(&rows, *id).await,
                task(&keeping, *id).await,
                "seed {seed}: {id}"
            );
        }
        let graph = WorkflowTasksParams {
            id: made.id,
            after_id: None,
            limit: 1000,
        };
        assert_eq!(
            format!("{:?}", rows.workflow_tasks(graph.clone()).await.unwrap()),
            format!("{:?}", keeping.workflow_tasks(graph).await.unwrap()),
            "seed {seed}: the graph"
        );
        let states: Vec<TaskState> = (rows.task_states(ids.clone()).await.unwrap().into_iter())
            .filter_map(|(_, s)| s)
            .collect();
        assert!(
            states.iter().any(|s| s.is_finished()),
            "seed {seed}: the workflow ran"
        );
    }
    assert!(kept_at_all, "no stage was kept: the test checks nothing");
}

/// A task of a kept stage named as a parent, by the store's insert and by `sked_enqueue` in
/// the application's transaction, is made a row first: the new task waits for it, and the
/// stage's other tasks are rows too.
#[tokio::test]
async fn a_kept_task_can_be_named_as_a_parent() {
    let Some(url) = sked_postgres::testing::database_url() else {
        return;
    };
    for by_sql in [false, true] {
        let schema = sked_postgres::testing::TestSchema::new(&url);
        let store = PgStore::connect(schema.options()).await.unwrap();
        let now = Timestamp::now();
        let node = crate::node;
        let mut tasks = vec![node("root".into(), vec![])];
        tasks.extend((1..=sked_postgres::KEPT_STAGE_MIN).map(|i| node(format!("m{i}"), vec![0])));
        let made = store
            .workflow_create(crate::workflow_of(tasks, now))
            .await
            .unwrap();
        let (c, conn) = tokio_postgres::connect(&crate::schema_url(&schema), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let count = async |sql: &str| -> i64 { c.query_one(sql, &[]).await.unwrap().get(0) };
        assert_eq!(count("SELECT count(*) FROM sked_stages").await, 1);
        assert_eq!(count("SELECT count(*) FROM sked_tasks").await, 1);
        let parent = made.tasks[1];
        let child = match by_sql {
            false => {
                let t = NewTask::new("after").after([parent]);
                let ins = (store.task_insert_many(sked_store::TaskInsertParams {
                    tasks: vec![t.into()],
                    now,
                }))
                .await
                .unwrap();
                ins[0].id
            }
            true => {
                let row = c
                    .query_one(
                        "SELECT sked_enqueue(kind => 'after', depends_on => ARRAY[$1::bigint])",
                        &[&parent],
                    )
                    .await
                    .unwrap();
                row.get(0)
            }
        };
        assert_eq!(
            count("SELECT count(*) FROM sked_stages").await,
            0,
            "sql {by_sql}"
        );
        assert_eq!(
            count("SELECT count(*) FROM sked_tasks WHERE state = 'waiting'").await,
            sked_postgres::KEPT_STAGE_MIN as i64 + 1,
            "sql {by_sql}: the stage's rows and the new task"
        );
        let t = store.task_get(child).await.unwrap();
        assert_eq!(t.state, TaskState::Waiting, "sql {by_sql}");
        assert_eq!(t.waiting_for, vec![parent], "sql {by_sql}");
        assert!(
            store
                .task_get(parent)
                .await
                .unwrap()
                .dependents
                .contains(&child)
        );
    }
}

#[tokio::test]
async fn a_stage_whose_payloads_are_too_large_for_one_value_is_rows() {
    let Some(url) = sked_postgres::testing::database_url() else {
        return;
    };
    let schema = sked_postgres::testing::TestSchema::new(&url);
    // An unoptimized build takes seconds to encode 64 MiB of payloads, in the transaction.
    let mut options = schema.options();
    options.idle_in_transaction_timeout = std::time::Duration::from_secs(60);
    options.op_timeout = std::time::Duration::from_secs(60);
    let store = PgStore::connect(options).await.unwrap();
    let (c, conn) = tokio_postgres::connect(&crate::schema_url(&schema), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let now = Timestamp::now();
    let n = sked_postgres::KEPT_STAGE_MIN;
    // Each payload within a task's limit, all of them together just past the stage's.
    let each = sked_postgres::KEPT_PAYLOAD_BYTES / n + 1;
    for (size, kept) in [(64, 1), (each, 0)] {
        let mut tasks = vec![crate::node("root".into(), vec![])];
        tasks.extend((0..n).map(|i| {
            let mut t = crate::node(format!("m{i}"), vec![0]);
            t.insert.task.payload = serde_json::json!({ "i": i, "s": "x".repeat(size) });
            t
        }));
        let made = store
            .workflow_create(crate::workflow_of(tasks, now))
            .await
            .unwrap();
        let count = async |sql: &str| -> i64 { c.query_one(sql, &[]).await.unwrap().get(0) };
        assert_eq!(
            count("SELECT count(*) FROM sked_stages").await,
            kept,
            "payloads of {size} bytes"
        );
        let last = store.task_get(made.tasks[n]).await.unwrap();
        assert_eq!(last.payload["i"], n - 1);
        assert_eq!(last.payload["s"].as_str().map(str::len), Some(size));
    }
}
