//! Stages of a workflow kept until released
//! (docs/decisions/0023-tasks-made-when-released.md, 0026), on PostgreSQL: the shared run
//! against the reference (`sked_store::conformance::kept_stages_answer_as_rows_do`), and the
//! cases of PostgreSQL's own (`sked_enqueue`, claims running together).

use jiff::Timestamp;
use sked_core::{NewTask, TaskId, TaskState};
use sked_postgres::PgStore;
use sked_store::{FinishOutcome, Store, TaskFinishParams};

/// How many rows of `table` (a table, and a condition if any) the store of `schema` has.
async fn count(schema: &sked_postgres::testing::PooledSchema, table: &str) -> i64 {
    let (c, conn) = tokio_postgres::connect(&schema.base_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let row = c
        .query_one(
            &format!("SELECT count(*) FROM {}.{table}", schema.name),
            &[],
        )
        .await
        .unwrap();
    row.get(0)
}

#[tokio::test]
async fn kept_stages_answer_as_rows_do() {
    use sked_postgres::testing::{PooledSchema, pooled_store, pooled_store_with};
    let Some((rows, _rows_schema)) = pooled_store().await else {
        return;
    };
    // Kept, and made rows when released (the reference for parts), or kept in parts of three
    // that claims take once released, so that claims of up to 40 span several parts.
    let mut kept: Vec<(&str, PgStore, PooledSchema)> = Vec::new();
    for (name, part) in [
        ("made rows when released", None),
        ("taken by claims", Some(3)),
    ] {
        let (store, schema) = pooled_store_with(|o| {
            o.kept_stage_min = Some(1);
            o.kept_stage_part = part;
        })
        .await
        .unwrap();
        kept.push((name, store, schema));
    }
    let stores: Vec<(&str, &dyn Store)> = (kept.iter())
        .map(|(name, store, _)| (*name, store as &dyn Store))
        .collect();
    let parts = async |k: usize| {
        let schema = &kept[k].2;
        let all = count(schema, "sked_stages").await;
        (all, count(schema, "sked_stages WHERE released").await)
    };
    sked_store::conformance::kept_stages_answer_as_rows_do(&rows, &stores, parts).await;
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

/// A store on a fresh schema keeping stages in parts of `part` tasks, and a connection of the
/// application's to its schema.
async fn store_in_parts(
    part: usize,
) -> Option<(
    PgStore,
    sked_postgres::testing::TestSchema,
    tokio_postgres::Client,
)> {
    let url = sked_postgres::testing::database_url()?;
    let schema = sked_postgres::testing::TestSchema::new(&url);
    let mut options = schema.options();
    options.kept_stage_min = Some(1);
    options.kept_stage_part = Some(part);
    let store = PgStore::connect(options).await.unwrap();
    let (c, conn) = tokio_postgres::connect(&crate::schema_url(&schema), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    Some((store, schema, c))
}

/// Makes a workflow of a root and `n` tasks after it in `queue`, claims and ends the root: its
/// stage is released. Answers the stage's ids.
async fn released_stage(store: &PgStore, queue: &str, n: usize, now: Timestamp) -> Vec<TaskId> {
    let mut tasks = vec![crate::node("root".into(), vec![])];
    tasks.extend((0..n).map(|i| crate::node(format!("m{i}"), vec![0])));
    for t in &mut tasks {
        t.insert.task.queue = queue.into();
    }
    let made = store
        .workflow_create(crate::workflow_of(tasks, now))
        .await
        .unwrap();
    let root = store
        .task_claim(crate::claim_params(&[], 1, now))
        .await
        .unwrap();
    assert_eq!(
        root.iter().map(|t| t.id).collect::<Vec<_>>(),
        [made.tasks[0]]
    );
    let ended = store
        .task_finish_many_lean(vec![TaskFinishParams {
            id: root[0].id,
            attempt: 1,
            outcome: FinishOutcome::Succeeded { result: None },
            now,
            jitter: 0.0,
        }])
        .await
        .unwrap();
    assert!(ended[0].is_ok());
    made.tasks[1..].to_vec()
}

/// Claims running together on a released stage in parts take each of its tasks once, in
/// claim order within each claim, and leave no part behind.
#[tokio::test]
async fn claims_running_together_take_each_task_of_a_released_stage_once() {
    let Some((store, _schema, c)) = store_in_parts(50).await else {
        return;
    };
    let now = Timestamp::now();
    let stage = released_stage(&store, "default", 1000, now).await;
    let released: i64 = (c.query_one("SELECT count(*) FROM sked_stages WHERE released", &[]))
        .await
        .unwrap()
        .get(0);
    assert_eq!(released, 20, "the stage's parts, released");
    let store = std::sync::Arc::new(store);
    let mut workers = Vec::new();
    for w in 0..4u32 {
        let store = store.clone();
        workers.push(tokio::spawn(async move {
            let mut taken = Vec::new();
            loop {
                let claimed = store
                    .task_claim(crate::claim_params(&[], 30 + w, now))
                    .await
                    .unwrap();
                if claimed.is_empty() {
                    return taken;
                }
                let ids: Vec<TaskId> = claimed.iter().map(|t| t.id).collect();
                assert!(ids.is_sorted(), "a claim answers in claim order: {ids:?}");
                assert!(
                    claimed
                        .iter()
                        .all(|t| t.state == TaskState::Running && t.attempt == 1)
                );
                taken.extend(ids);
            }
        }));
    }
    let mut taken = Vec::new();
    for w in workers {
        taken.extend(w.await.unwrap());
    }
    taken.sort_unstable();
    assert_eq!(taken, stage, "every task of the stage, once");
    let count = async |sql: &str| -> i64 { c.query_one(sql, &[]).await.unwrap().get(0) };
    assert_eq!(count("SELECT count(*) FROM sked_stages").await, 0);
    assert_eq!(
        count("SELECT count(*) FROM sked_tasks WHERE state = 'running'").await,
        1000
    );
}

/// A queue given a limit has the released parts of its stages made rows, available: a limited
/// queue's tasks are claimed by a walk of its rows, which holds to the limit.
#[tokio::test]
async fn a_queue_given_a_limit_makes_its_released_parts_rows() {
    let Some((store, _schema, c)) = store_in_parts(3).await else {
        return;
    };
    let now = Timestamp::now();
    let stage = released_stage(&store, "default", 10, now).await;
    let count = async |sql: &str| -> i64 { c.query_one(sql, &[]).await.unwrap().get(0) };
    assert_eq!(
        count("SELECT count(*) FROM sked_stages WHERE released").await,
        4
    );
    let q = store.queue_get("default", now).await.unwrap();
    assert_eq!(q.counts.get(&TaskState::Available), Some(&10));
    store
        .queue_update(sked_store::QueueUpdateParams {
            name: "default".into(),
            concurrency_limit: Some(Some(4)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(count("SELECT count(*) FROM sked_stages").await, 0);
    assert_eq!(
        count("SELECT count(*) FROM sked_tasks WHERE state = 'available'").await,
        10
    );
    let claimed = store
        .task_claim(crate::claim_params(&[], 10, now))
        .await
        .unwrap();
    let ids: Vec<TaskId> = claimed.iter().map(|t| t.id).collect();
    assert_eq!(ids, stage[..4], "the first four, as the limit allows");
}

/// A claim over other queues, which finds released parts it cannot take, does not make the
/// store's claims over their queue leave them out.
#[tokio::test]
async fn a_claim_over_other_queues_leaves_released_parts_to_claims_over_theirs() {
    let Some((store, _schema, _c)) = store_in_parts(3).await else {
        return;
    };
    let now = Timestamp::now();
    let stage = released_stage(&store, "b", 10, now).await;
    let other = store
        .task_claim(crate::claim_params(&["a"], 10, now))
        .await
        .unwrap();
    assert!(other.is_empty());
    let claimed = store
        .task_claim(crate::claim_params(&["b"], 10, now))
        .await
        .unwrap();
    let ids: Vec<TaskId> = claimed.iter().map(|t| t.id).collect();
    assert_eq!(ids, stage, "the stage's tasks, from its parts");
}
