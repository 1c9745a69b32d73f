//! Query plans: PostgreSQL plans each statement from its tables' statistics, and a small table
//! that autovacuum seldom analyzes (queue settings) turned a claim into a read and sort of every
//! available task.

use sked_postgres::testing::{
    activity_sql, claim_planner_setting, claim_sql, fresh_store, heartbeat_sql, prune_since_sql,
    prune_sql, release_sql, success_sql,
};
use sked_store::{QueueUpdateParams, Store, TaskInsert, TaskInsertParams};
use tokio_postgres::types::ToSql;

type Param<'a> = &'a (dyn ToSql + Sync);

/// 10,000 tasks in each of `queues` (a queue named twice gets twice as many).
async fn insert(store: &impl Store, queues: &[&str], now: jiff::Timestamp) {
    for queue in queues {
        let tasks = (0..10_000)
            .map(|_| TaskInsert::from(sked_core::NewTask::new("noop").queue(*queue)))
            .collect();
        store
            .task_insert_many(TaskInsertParams { tasks, now })
            .await
            .unwrap();
    }
}

/// A plain connection to the store's schema.
async fn connect(schema: &sked_postgres::testing::TestSchema) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c
}

/// PostgreSQL's plan for `sql`, a line per step.
async fn explain(c: &tokio_postgres::Client, sql: &str, params: &[Param<'_>]) -> String {
    let rows = c.query(&format!("EXPLAIN {sql}"), params).await.unwrap();
    rows.iter()
        .map(|r| r.get(0))
        .collect::<Vec<String>>()
        .join("\n")
}

/// The plan PostgreSQL may settle on for `sql` as a prepared statement, one for any values:
/// `EXPLAIN EXECUTE` of it with `args` (SQL, not read by the plan).
async fn generic_plan(c: &tokio_postgres::Client, sql: &str, args: &str) -> String {
    c.batch_execute(&format!(
        "DEALLOCATE ALL; SET plan_cache_mode = force_generic_plan; PREPARE generic AS {sql}"
    ))
    .await
    .unwrap();
    let plan = explain(c, &format!("EXECUTE generic({args})"), &[]).await;
    c.batch_execute("RESET plan_cache_mode; DEALLOCATE ALL")
        .await
        .unwrap();
    plan
}

#[tokio::test]
async fn a_claim_walks_the_claim_index_whatever_the_queue_statistics() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = jiff::Timestamp::now();
    insert(&store, &["default"; 5], now).await;
    let c = connect(&schema).await;
    // Queue settings as a deployment has them: a few queues paused or limited, through sked.
    for i in 0..10 {
        store
            .queue_update(QueueUpdateParams {
                name: format!("q{i}"),
                paused: Some(i % 2 == 0),
                concurrency_limit: Some((i % 2 == 1).then_some(5)),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // The tasks analyzed, as autovacuum would.
    c.batch_execute("ANALYZE sked_tasks").await.unwrap();
    let max: i64 = 1000;
    let worker = "w".to_string();
    let grace: i64 = 30_000;
    let plan = explain(&c, &claim_sql(false), &[&now, &now, &worker, &max, &grace]).await;
    assert!(
        plan.contains("Index Scan using sked_tasks_available") && !plan.contains("Sort Key: c."),
        "a claim does not walk the claim index in order:\n{plan}"
    );
    // The merge with the tasks of kept stages' parts sorts, only when it locked a part.
    assert!(
        plan.contains("Sort Key: picked.priority DESC") && plan.contains("One-Time Filter"),
        "a claim's merge with parts is not behind a condition on the parts:\n{plan}"
    );
    // Resuming after a key: that priority from the key on, then the lower ones, both in index
    // order and the first starting at the key rather than filtering up to it.
    let (priority, id) = (0i32, 25_000i64);
    let plan = explain(
        &c,
        &claim_sql(true),
        &[&now, &now, &worker, &max, &grace, &priority, &now, &id],
    )
    .await;
    assert!(
        plan.matches("Index Scan using sked_tasks_available")
            .count()
            == 2
            && plan.contains("(ROW(run_at, id) > ROW(")
            && !plan.contains("Sort Key: c."),
        "a resumed claim does not start at its key in the claim index:\n{plan}"
    );
}

/// Tasks enqueued into a table not analyzed yet (a new deployment's first bulk enqueue, until
/// autovacuum gets to it): the planner guesses that few tasks are available, and read through
/// a bitmap and sorted, every claim would read them all.
#[tokio::test]
async fn a_claim_walks_the_claim_index_before_the_tasks_are_analyzed() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = jiff::Timestamp::now();
    insert(&store, &["default"; 5], now).await;
    let c = connect(&schema).await;
    let (max, worker, grace): (i64, String, i64) = (1000, "w".into(), 30_000);
    let params: [Param<'_>; 5] = [&now, &now, &worker, &max, &grace];
    let misled = explain(&c, &claim_sql(false), &params).await;
    assert!(
        misled.contains("Bitmap Heap Scan on sked_tasks c"),
        "the statistics no longer mislead the planner, and this test shows nothing:\n{misled}"
    );
    let (setting, reset) = claim_planner_setting();
    c.batch_execute(setting).await.unwrap();
    let plan = explain(&c, &claim_sql(false), &params).await;
    c.batch_execute(reset).await.unwrap();
    assert!(
        plan.contains("Index Scan using sked_tasks_available") && !plan.contains("Sort Key: c."),
        "a claim under its planner setting does not walk the claim index in order:\n{plan}"
    );
    // And the claim takes the first tasks, in order.
    let claimed = store
        .task_claim(sked_store::TaskClaimParams {
            min_priority: None,
            queues: vec![],
            kinds: vec![],
            max: 1000,
            worker: worker.clone(),
            lease_ttl: jiff::SignedDuration::from_secs(60),
            timeout_grace: sked_store::rules::DEFAULT_TIMEOUT_GRACE,
            now,
        })
        .await
        .unwrap();
    let ids: Vec<i64> = claimed.iter().map(|t| t.id).collect();
    let first: Vec<i64> = c
        .query(
            "SELECT id FROM sked_tasks WHERE state = 'running' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, first);
    assert_eq!(
        ids,
        (1..=1000).collect::<Vec<i64>>(),
        "the first 1,000 in claim order"
    );
}

/// The index of running tasks keeps an entry for every task that ran since the oldest snapshot
/// still held: a small batch of successes that read it whole would cost more with every task
/// run meanwhile.
#[tokio::test]
async fn a_small_batch_of_successes_reads_its_own_tasks_not_the_running_ones() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = jiff::Timestamp::now();
    insert(&store, &["default"; 5], now).await;
    let c = connect(&schema).await;
    // Analyzed while nothing ran; then 20,000 running.
    c.batch_execute(
        "ANALYZE sked_tasks; \
         UPDATE sked_tasks SET state = 'running', attempt = 1, started_at = now() \
         WHERE id <= 20000",
    )
    .await
    .unwrap();
    let generic = async |sql: &str| -> String {
        let args = "ARRAY[5001, 5002], ARRAY[1, 1], ARRAY[now(), now()], ARRAY[NULL::jsonb, NULL]";
        generic_plan(&c, sql, args).await
    };
    let (small, large) = (success_sql(10), success_sql(1000));
    assert_ne!(small, large);
    let misled = generic(&large).await;
    assert!(
        misled.contains("sked_tasks_running"),
        "the statement for large batches no longer reads the running tasks' index, and this \
         test shows nothing:\n{misled}"
    );
    let plan = generic(&small).await;
    assert!(
        plan.contains("Index Scan using sked_tasks_pkey") && !plan.contains("sked_tasks_running"),
        "a small batch of successes does not read its tasks by their key:\n{plan}"
    );
    // Planned for its values, it does not read that index either; and it ends exactly those.
    let ids: Vec<i64> = (5001..=5010).collect();
    let attempts = vec![1i32; ids.len()];
    let times = vec![now; ids.len()];
    let results: Vec<Option<serde_json::Value>> = vec![None; ids.len()];
    let params: [Param<'_>; 4] = [&ids, &attempts, &times, &results];
    let custom = explain(&c, &small, &params).await;
    assert!(
        !custom.contains("sked_tasks_running"),
        "a small batch of successes reads the running tasks' index:\n{custom}"
    );
    let ended = c.query(small.as_str(), &params).await.unwrap();
    let mut got: Vec<i64> = ended.iter().map(|r| r.get(0)).collect();
    got.sort();
    assert_eq!(got, ids);
    // A task no longer running is left as it is.
    let again = c.query(small.as_str(), &params).await.unwrap();
    assert!(again.is_empty(), "successes ended twice: {}", again.len());
}

/// A heartbeat finds its task by key: statistics taken while nothing ran make the index of
/// running tasks look empty, and a held snapshot keeps an entry in it for every task run since.
#[tokio::test]
async fn a_heartbeat_reads_its_task_by_key_not_the_running_ones() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = jiff::Timestamp::now();
    insert(&store, &["default"; 2], now).await;
    let c = connect(&schema).await;
    c.batch_execute(
        "ANALYZE sked_tasks; \
         UPDATE sked_tasks SET state = 'running', attempt = 1, started_at = now(), \
           lease_expires_at = now() + interval '1 minute' WHERE id <= 10000",
    )
    .await
    .unwrap();
    let generic = async |sql: &str| -> String {
        let args = "5000, 1, now() + interval '1 minute', 30000, now()";
        generic_plan(&c, sql, args).await
    };
    let sql = heartbeat_sql();
    let misled = generic(&sql.replace("(state = 'running') IS TRUE", "state = 'running'")).await;
    assert!(
        misled.contains("sked_tasks_running"),
        "asked plainly, the heartbeat no longer reads the running tasks' index, and this test \
         shows nothing:\n{misled}"
    );
    let plan = generic(&sql).await;
    assert!(
        plan.contains("sked_tasks_pkey") && !plan.contains("sked_tasks_running"),
        "a heartbeat does not read its task by key:\n{plan}"
    );
    // And it extends that task's lease.
    let later = now + jiff::SignedDuration::from_mins(5);
    let grace: i64 = 30_000;
    let rows = c
        .query(sql.as_str(), &[&5000i64, &1i32, &later, &grace, &now])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let until: jiff::Timestamp = rows[0].get(1);
    assert_eq!(until.as_microsecond(), later.as_microsecond());
}

#[tokio::test]
async fn retention_and_activity_read_finished_tasks_queue_by_queue_on_one_index() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = jiff::Timestamp::now();
    insert(&store, &["a", "b", "c"], now).await;
    let c = connect(&schema).await;
    // Most tasks ended, as a node that keeps a day of history has them.
    c.batch_execute(
        "UPDATE sked_tasks SET state = CASE WHEN id % 10 = 0 THEN 'dead' ELSE 'succeeded' END, \
           finished_at = now() - (id % 1000) * interval '1 minute' WHERE id % 7 <> 0; \
         ANALYZE sked_tasks",
    )
    .await
    .unwrap();
    let before = now - jiff::SignedDuration::from_hours(1);
    let limit: i64 = 1000;
    let width: i64 = 60_000_000;
    for (what, plan) in [
        (
            "retention",
            explain(&c, &prune_sql(), &[&before, &limit, &now]).await,
        ),
        (
            "activity",
            explain(&c, &activity_sql(), &[&before, &width]).await,
        ),
    ] {
        // Each queue's finished tasks of each state by time: the time bounds the scan.
        let per_queue = plan.lines().any(|l| {
            l.contains("Index Cond: ((queue = g")
                && l.contains("(state = ")
                && l.contains("(finished_at")
        });
        let reads_all = plan
            .lines()
            .any(|l| l.contains("Seq Scan on sked_tasks t "));
        assert!(
            plan.contains("Index Only Scan using sked_tasks_finished_queue")
                && per_queue
                && !reads_all,
            "{what} does not read finished tasks queue by queue on their index:\n{plan}"
        );
        // The activity's walk from queue to queue starts at its bound too.
        let walk_bounded = plan.contains("Index Cond: (finished_at >= ");
        assert!(
            what != "activity" || walk_bounded,
            "the activity walks the queues from their oldest finished task:\n{plan}"
        );
    }
    // Retention deletes the rows where it read them, without looking their keys up, in the
    // generic plan too.
    for (sql, args) in [
        (
            prune_sql(),
            format!("'{before}'::timestamptz, {limit}, '{now}'::timestamptz"),
        ),
        (
            prune_since_sql(),
            format!(
                "'{before}'::timestamptz, {limit}, '{now}'::timestamptz, \
                 '{before}'::timestamptz - interval '1 hour'"
            ),
        ),
    ] {
        let plan = generic_plan(&c, &sql, &args).await;
        assert!(
            plan.contains("Tid Scan on sked_tasks")
                && plan.contains("Index Scan using sked_tasks_finished_queue")
                && plan.contains("(finished_at < COALESCE("),
            "retention's generic plan:\n{plan}"
        );
    }
    // And they answer what the finished rows say.
    let finished = async |cmp: &str| -> i64 {
        let sql = format!("SELECT count(*) FROM sked_tasks WHERE finished_at {cmp} $1");
        c.query_one(&sql, &[&before]).await.unwrap().get(0)
    };
    let expected = finished("<").await;
    let ended: i64 = c
        .query(activity_sql().as_str(), &[&before, &width])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>(2))
        .sum();
    let recent = finished(">=").await;
    assert_eq!(ended, recent);
    let mut pruned = 0;
    loop {
        let n = store
            .task_prune(sked_store::TaskPruneParams {
                finished_before: before,
                now: before,
                limit: 1000,
                finished_since: None,
            })
            .await
            .unwrap();
        pruned += n as i64;
        if n == 0 {
            break;
        }
    }
    assert_eq!(pruned, expected);
    let left = finished("<").await;
    assert_eq!(left, 0);
}

/// A release and a cancel find a wait's waiting tasks through the index by wait over waiting
/// tasks, not by reading the other waiting tasks or the rest of the table; whatever plan
/// PostgreSQL settles on for the prepared statement.
#[tokio::test]
async fn a_release_finds_its_wait_s_tasks_by_the_index_over_waiting_tasks() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = jiff::Timestamp::now();
    insert(&store, &["default", "other"], now).await;
    let parent = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![TaskInsert::from(sked_core::NewTask::new("p"))],
            now,
        })
        .await
        .unwrap()[0]
        .id;
    // 2,000 waiting tasks in 200 waits of ten (one insert each).
    for _ in 0..200 {
        let children = (0..10)
            .map(|_| TaskInsert::from(sked_core::NewTask::new("c").after([parent])))
            .collect();
        store
            .task_insert_many(TaskInsertParams {
                tasks: children,
                now,
            })
            .await
            .unwrap();
    }
    let c = connect(&schema).await;
    c.batch_execute("ANALYZE").await.unwrap();
    let plan = generic_plan(
        &c,
        release_sql(),
        "'{1}', '{0}', '{1}', now(), '{2}', '{\"parent 9 ended dead\"}'",
    )
    .await;
    assert_eq!(
        plan.matches("sked_tasks_waiting_by_wait").count(),
        2,
        "the release and the cancel each read the index by wait:\n{plan}"
    );
    assert!(!plan.contains("Seq Scan on sked_tasks"), "{plan}");
}
