//! Waits on PostgreSQL: a stage and its fan-in are two waits and two edges, and a schema
//! written before waits keeps what its waiting tasks wait for.

use jiff::{SignedDuration, Timestamp};
use sked_core::{NewTask, TaskState};
use sked_postgres::PgStore;
use sked_postgres::testing::{TestSchema, fresh_store};
use sked_store::{FinishOutcome, Store, TaskCancelParams, TaskFinishParams, TaskRetryParams};

async fn count(schema: &TestSchema, sql: &str) -> i64 {
    let (c, conn) = tokio_postgres::connect(&crate::schema_url(schema), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c.query_one(sql, &[]).await.unwrap().get(0)
}

/// A 1 → 1,000 → 1 workflow keeps its graph in two waits and two edges: the stage's tasks
/// share one wait, and the fan-in waits for that whole wait through one edge. The fan-in is
/// released by the last of the stage; a retry by hand of a stage's task after that is kept
/// as one pair.
#[tokio::test]
async fn a_stage_and_its_fan_in_are_two_waits_and_two_edges() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = Timestamp::now();
    let node = crate::node;
    let mut tasks = vec![node("root".into(), vec![])];
    tasks.extend((1..=1000).map(|i| node(format!("m{i}"), vec![0])));
    tasks.push(node("fan-in".into(), (1..=1000).collect()));
    let made = store
        .workflow_create(crate::workflow_of(tasks, now))
        .await
        .unwrap();
    let rows = |sql: &'static str| count(&schema, sql);
    assert_eq!(rows("SELECT count(*) FROM sked_waits").await, 2);
    assert_eq!(rows("SELECT count(*) FROM sked_wait_parents").await, 1);
    assert_eq!(rows("SELECT count(*) FROM sked_wait_stages").await, 1);
    // The stage is kept as one row until its release (docs/decisions/0023): its wait is there.
    assert_eq!(rows("SELECT count(*) FROM sked_stages").await, 1);
    assert_eq!(
        rows(
            "SELECT count(DISTINCT wait) FROM (SELECT wait FROM sked_tasks \
              UNION ALL SELECT wait FROM sked_stages) w"
        )
        .await,
        2
    );
    let mut ended = 0;
    while ended < 1001 {
        // Released tasks are announced at commit; a claim finds them once that is heard.
        let mut batch = Vec::new();
        for _ in 0..100 {
            batch = store
                .task_claim(crate::claim_params(&[], 200, now))
                .await
                .unwrap();
            if !batch.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(!batch.is_empty(), "nothing to claim after {ended} ends");
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
        ended += batch.len();
    }
    let fan_in = *made.tasks.last().unwrap();
    assert_eq!(
        store.task_get(fan_in).await.unwrap().state,
        TaskState::Available
    );
    store
        .task_retry(TaskRetryParams {
            id: made.tasks[1],
            now,
        })
        .await
        .unwrap();
    assert_eq!(rows("SELECT count(*) FROM sked_wait_counted").await, 1);
}

/// A schema migrated before waits, with a task that waits for one parent that succeeded and
/// one still running: the migration gives it a wait of its own with its count and edges, it
/// still waits for the running one, and that one's cancel cancels it, saying why.
#[tokio::test]
async fn a_waiting_task_keeps_its_count_through_the_migration_to_waits() {
    // Task 1 succeeded (its edge counted), 2 is available; 3 waits for both, 4 for 2 and runs
    // anyway.
    let rows = "INSERT INTO sked_tasks (id, queue, kind, payload, priority, state, run_at, max_attempts, \
           created_at, parents_left, on_parent_failure, has_children) OVERRIDING SYSTEM VALUE VALUES \
           (1, 'default', 'p', 'null', 0, 'succeeded', now(), 1, now(), 0, NULL, true), \
           (2, 'default', 'p', 'null', 0, 'available', now(), 1, now(), 0, NULL, true), \
           (3, 'default', 'c', 'null', 0, 'waiting', now(), 1, now(), 1, NULL, false), \
           (4, 'default', 'c', 'null', 0, 'waiting', now(), 1, now(), 1, 'run', false); \
         SELECT setval(pg_get_serial_sequence('sked_tasks', 'id'), 4); \
         INSERT INTO sked_task_edges (child, parent, done) VALUES (3, 1, true), (3, 2, false), \
           (4, 2, false);";
    let Some(schema) = crate::schema_before(36, rows).await else {
        return;
    };
    let store = PgStore::connect(schema.options()).await.unwrap();
    let t = store.task_get(3).await.unwrap();
    assert_eq!((t.depends_on, t.waiting_for), (vec![1, 2], vec![2]));
    assert_eq!(store.task_get(1).await.unwrap().dependents, vec![3]);
    let now = Timestamp::now() + SignedDuration::from_secs(1);
    store
        .task_cancel(TaskCancelParams { id: 2, now })
        .await
        .unwrap();
    let t = store.task_get(3).await.unwrap();
    assert_eq!(
        (t.state, t.last_error),
        (TaskState::Cancelled, Some("parent 2 was cancelled".into()))
    );
    assert_eq!(store.task_get(4).await.unwrap().state, TaskState::Available);
    // A task with parents made after the migration has a wait of its own, numbered after
    // those the migration made.
    let made = store
        .task_insert_many(sked_store::TaskInsertParams {
            tasks: vec![NewTask::new("c").after([1, 4]).into()],
            now,
        })
        .await
        .unwrap();
    let t = store.task_get(made[0].id).await.unwrap();
    assert_eq!((t.depends_on, t.waiting_for), (vec![1, 4], vec![4]));
    assert_eq!(count(&schema, "SELECT count(*) FROM sked_waits").await, 3);
}
