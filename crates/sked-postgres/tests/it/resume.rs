//! Claims resume where the store's previous claim ended, so that a held snapshot (which keeps
//! every claimed task's entry in the claim index) does not make each claim walk all of them;
//! tasks that appear before that point are still claimed first. Large batches of successes
//! likewise stop reading the index of running tasks whole once that is measured slower, and a
//! bounded pruning pass reads from its bound.

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use sked_core::{NewTask, Task};
use sked_postgres::PgStore;
use sked_postgres::testing::{TestSchema, fresh_store};
use sked_store::{
    FinishOutcome, Store, StoreError, TaskFinishParams, TaskInsertParams, TaskPruneParams,
};

fn task(priority: i32) -> sked_store::TaskInsert {
    let mut t = NewTask::new("noop");
    t.priority = priority;
    t.into()
}

async fn insert(store: &PgStore, priorities: &[i32], now: Timestamp) -> Vec<i64> {
    let tasks = priorities.iter().map(|p| task(*p)).collect();
    let inserted = store
        .task_insert_many(TaskInsertParams { tasks, now })
        .await
        .unwrap();
    inserted.iter().map(|t| t.id).collect()
}

async fn claim(store: &PgStore, max: u32, now: Timestamp) -> Vec<Task> {
    store
        .task_claim(crate::claim_params(&[], max, now))
        .await
        .unwrap()
}

async fn complete(store: &PgStore, tasks: &[Task], now: Timestamp) {
    let ps = tasks
        .iter()
        .map(|t| TaskFinishParams {
            id: t.id,
            attempt: t.attempt,
            outcome: FinishOutcome::Succeeded { result: None },
            now,
            jitter: 0.5,
        })
        .collect();
    for r in store.task_finish_many(ps).await.unwrap() {
        r.unwrap();
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c
}

/// A connection inside a `REPEATABLE READ` transaction that has taken its snapshot: vacuum
/// keeps every row version since, until it rolls back.
async fn hold_snapshot(url: &str) -> tokio_postgres::Client {
    let holder = connect(url).await;
    holder
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class")
        .await
        .unwrap();
    holder
}

/// Entries `index` has handed out to scans of it, once every connection of the schema's stores
/// has ended (a backend's counters are published when it exits).
async fn index_reads(c: &tokio_postgres::Client, schema: &TestSchema, index: &str) -> i64 {
    let started = Instant::now();
    loop {
        let open: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&schema.name],
            )
            .await
            .unwrap()
            .get(0);
        if open == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "stores did not disconnect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    c.query_one(
        "SELECT idx_tup_read FROM pg_stat_user_indexes \
         WHERE schemaname = $1 AND indexrelname = $2",
        &[&schema.name, &index],
    )
    .await
    .unwrap()
    .get(0)
}

/// Entries the claim index has handed out to scans of it (see [`index_reads`]).
async fn claim_index_reads(c: &tokio_postgres::Client, schema: &TestSchema) -> i64 {
    index_reads(c, schema, "sked_tasks_available").await
}

#[tokio::test]
async fn with_a_snapshot_held_claims_do_not_walk_what_was_claimed_before() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = Timestamp::now();
    let holder = hold_snapshot(&schema.base_url).await;
    let n = 3000;
    insert(&store, &vec![0; n], now).await;
    let mut claimed = 0;
    loop {
        let tasks = claim(&store, 100, now).await;
        if tasks.is_empty() {
            break;
        }
        claimed += tasks.len();
        complete(&store, &tasks, now).await;
    }
    assert_eq!(claimed, n);
    drop(store);
    let reads = claim_index_reads(&connect(&schema.base_url).await, &schema).await;
    // From the front every time, the 30 claims would read 100 + 200 + … + 3,000 entries
    // (46,500): each claimed task's entry stays while the snapshot is held.
    assert!(
        reads < 2 * n as i64,
        "{reads} claim index entries read to claim {n} tasks"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
}

/// A node whose worker keeps up with a steady load has claimed everything there is whenever
/// its staging runs (at least once a second): with a snapshot held, its claims there do not
/// walk from the front past every task claimed since.
#[tokio::test]
async fn with_a_snapshot_held_claims_at_the_end_do_not_walk_back_when_staging() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let holder = hold_snapshot(&schema.base_url).await;
    let (rounds, each) = (30, 100);
    let mut now = Timestamp::now();
    for _ in 0..rounds {
        insert(&store, &vec![0; each], now).await;
        let tasks = claim(&store, 1000, now).await;
        assert_eq!(tasks.len(), each);
        complete(&store, &tasks, now).await;
        // Two seconds on, staging is due again, and there is nothing left to claim.
        now += SignedDuration::from_secs(2);
        assert!(claim(&store, 1000, now).await.is_empty());
    }
    drop(store);
    let reads = claim_index_reads(&connect(&schema.base_url).await, &schema).await;
    let n = (rounds * each) as i64;
    // The probe beside the claims walks from the front at most once a round (at most once a
    // second of the claims' clock): 100 + 200 + … + 3,000 entries (46,500) at most. Were the
    // empty claims to walk from the front too, as many again.
    let probes = (each * rounds * (rounds + 1) / 2) as i64;
    assert!(
        reads < probes + 3 * n,
        "{reads} claim index entries read to claim {n} tasks (the probes: at most {probes})"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
}

/// Claims that reached the end still take a waiting task that comes due: the claim that stages
/// it takes it.
#[tokio::test]
async fn a_task_that_comes_due_after_claims_reached_the_end_is_claimed_when_staged() {
    let Some((store, _schema)) = fresh_store().await else {
        return;
    };
    let now = Timestamp::now();
    let due = now + SignedDuration::from_secs(5);
    let inserted = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![NewTask::new("noop").run_at(due).into()],
            now,
        })
        .await
        .unwrap();
    assert!(claim(&store, 10, now).await.is_empty());
    assert!(
        claim(&store, 10, now + SignedDuration::from_secs(2))
            .await
            .is_empty()
    );
    let claimed = claim(&store, 10, due).await;
    assert_eq!(
        claimed.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![inserted[0].id]
    );
}

#[tokio::test]
async fn a_higher_priority_task_is_claimed_next_whoever_inserted_it() {
    let Some((a, schema)) = fresh_store().await else {
        return;
    };
    let b = PgStore::connect(schema.options()).await.unwrap();
    // Its listener's first connection sends claims to the front: let that happen first.
    let started = Instant::now();
    while !a.listening() {
        assert!(started.elapsed() < Duration::from_secs(10), "not listening");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let now = Timestamp::now();
    insert(&a, &[0, 0, 0, 0], now).await;
    assert_eq!(claim(&a, 1, now).await[0].priority, 0);
    // Inserted through this store: the next claim takes it.
    let [mine] = insert(&a, &[5], now).await[..] else {
        unreachable!()
    };
    assert_eq!(claim(&a, 1, now).await[0].id, mine);
    // Inserted through another: the announcement moves this store's claims back to it (the
    // clock stands still, so no claim from the front finds it instead). It may arrive after a
    // claim or two of the others.
    let [theirs] = insert(&b, &[7], now).await[..] else {
        unreachable!()
    };
    let started = Instant::now();
    let mut seen = Vec::new();
    while !seen.contains(&theirs) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the task inserted elsewhere was not claimed; claimed {seen:?}"
        );
        seen.extend(claim(&a, 1, now).await.iter().map(|t| t.id));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_task_this_store_releases_is_claimed_next() {
    let Some((store, _schema)) = fresh_store().await else {
        return;
    };
    // Its listener's first connection sends claims to the front: let that happen first.
    let started = Instant::now();
    while !store.listening() {
        assert!(started.elapsed() < Duration::from_secs(10), "not listening");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let now = Timestamp::now();
    let [parent] = insert(&store, &[0], now).await[..] else {
        unreachable!()
    };
    let mut child = task(0);
    child.task.depends_on = vec![parent];
    let child = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![child],
            now,
        })
        .await
        .unwrap()[0]
        .id;
    let after = insert(&store, &[0, 0], now).await;
    let claimed = claim(&store, 2, now).await;
    assert_eq!(
        claimed.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![parent, after[0]]
    );
    // The child comes before where claims resume; the parent's success releases it, and the
    // next claim takes it, without waiting for the release's announcement to come back.
    complete(&store, &claimed[..1], now).await;
    assert_eq!(claim(&store, 1, now).await[0].id, child);
}

#[tokio::test]
async fn a_task_passed_over_while_locked_is_claimed_after_the_next_probe() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = Timestamp::now();
    let ids = insert(&store, &[0, 0, 0, 0], now).await;
    let first = claim(&store, 1, now).await;
    assert_eq!(first[0].id, ids[0]);
    // Another transaction holds the next task while a claim passes it.
    let other = connect(&schema.url()).await;
    other
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM sked_tasks WHERE id = {} FOR UPDATE",
            ids[1]
        ))
        .await
        .unwrap();
    assert_eq!(claim(&store, 1, now).await[0].id, ids[2]);
    other.batch_execute("ROLLBACK").await.unwrap();
    // Later (a probe runs at least once a second, less often when it was slow), a claim starts
    // a probe from the front, which finds it before the position; the claims after the
    // probe's answer take it.
    let later = now + SignedDuration::from_secs(60);
    let started = Instant::now();
    let mut seen: Vec<i64> = Vec::new();
    while !seen.contains(&ids[1]) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the task passed over was not claimed; claimed {seen:?}"
        );
        seen.extend(claim(&store, 1, later).await.iter().map(|t| t.id));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two stores claiming side by side while tasks of mixed priorities keep arriving through both:
/// every task is claimed, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_claiming_while_tasks_arrive_claim_every_task_once() {
    let Some((a, schema)) = fresh_store().await else {
        return;
    };
    let b = PgStore::connect(schema.options()).await.unwrap();
    let stores = std::sync::Arc::new([a, b]);
    let (batches, per_batch) = (40, 50);
    let inserting = {
        let stores = stores.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..batches {
                let priorities: Vec<i32> = (0..per_batch).map(|k| (i * 7 + k) % 5).collect();
                ids.extend(insert(&stores[i as usize % 2], &priorities, Timestamp::now()).await);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            ids
        })
    };
    let claimers: Vec<_> = (0..4)
        .map(|w| {
            let stores = stores.clone();
            tokio::spawn(async move {
                let store = &stores[w % 2];
                let mut mine = Vec::new();
                let started = Instant::now();
                let mut idle_since: Option<Instant> = None;
                // Until nothing has come for 2 s (more than a probe's interval).
                while idle_since.is_none_or(|t| t.elapsed() < Duration::from_secs(2)) {
                    assert!(started.elapsed() < Duration::from_secs(60));
                    let tasks = claim(store, 10, Timestamp::now()).await;
                    if tasks.is_empty() {
                        idle_since.get_or_insert_with(Instant::now);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    idle_since = None;
                    complete(store, &tasks, Timestamp::now()).await;
                    mine.extend(tasks.iter().map(|t| t.id));
                }
                mine
            })
        })
        .collect();
    let mut inserted = inserting.await.unwrap();
    let mut claimed = Vec::new();
    for c in claimers {
        claimed.extend(c.await.unwrap());
    }
    inserted.sort_unstable();
    claimed.sort_unstable();
    assert_eq!(
        claimed.len(),
        inserted.len(),
        "a task was claimed twice or not at all"
    );
    assert_eq!(claimed, inserted);
}

/// With a snapshot held, the index of running tasks keeps an entry for every task that ran
/// since: large batches of successes stop reading it whole once looking their tasks up by key
/// is measured cheaper.
#[tokio::test]
#[ignore = "slow tier"]
async fn with_a_snapshot_held_large_batches_of_successes_find_their_tasks_by_key() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let now = Timestamp::now();
    let holder = hold_snapshot(&schema.base_url).await;
    // 400,000 tasks that ran and ended since the snapshot (what half an hour at 200 tasks a
    // second leaves): their entries stay in the index of running tasks.
    let app = connect(&crate::schema_url(&schema)).await;
    let ran: i64 = 400_000;
    app.batch_execute(&format!(
        "INSERT INTO sked_tasks (queue, kind, payload, priority, state, run_at, max_attempts, \
           created_at, attempt, started_at, lease_expires_at) \
         SELECT 'default', 'noop', '{{}}', 0, 'running', now(), 25, now(), 1, now(), \
           now() + interval '1 minute' FROM generate_series(1, {ran}); \
         UPDATE sked_tasks SET state = 'succeeded', finished_at = now(), lease_expires_at = NULL \
         WHERE state = 'running'"
    ))
    .await
    .unwrap();
    drop(store);
    let c = connect(&schema.base_url).await;
    let before = index_reads(&c, &schema, "sked_tasks_running").await;
    // A store that has measured nothing yet: ten batches of 500.
    let store = PgStore::connect(schema.options()).await.unwrap();
    insert(&store, &vec![0; 5000], now).await;
    for _ in 0..10 {
        let tasks = claim(&store, 500, now).await;
        assert_eq!(tasks.len(), 500);
        // One ending in each batch names an attempt that does not hold its task.
        let ps = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| TaskFinishParams {
                id: t.id,
                attempt: t.attempt + i32::from(i == 250),
                outcome: FinishOutcome::Succeeded { result: None },
                now,
                jitter: 0.5,
            })
            .collect();
        let answers = store.task_finish_many(ps).await.unwrap();
        for (i, answer) in answers.into_iter().enumerate() {
            match i {
                250 => assert!(
                    matches!(answer, Err(StoreError::StaleLease { .. })),
                    "{answer:?}"
                ),
                _ => assert_eq!(answer.unwrap().id, tasks[i].id),
            }
        }
    }
    drop(store);
    let reads = index_reads(&c, &schema, "sked_tasks_running").await - before;
    // A batch asked plainly reads the index whole, 400,000 entries and more. The first batch
    // is asked plainly and the second by key; the plain statement runs again only twenty times
    // its duration later, or when lookups by key are no longer half as costly.
    assert!(
        reads < 3 * ran,
        "{reads} entries of the running tasks' index read to end ten batches of 500"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
}

/// With a snapshot held, the index of finished tasks keeps an entry for every task deleted
/// since: a full pruning pass steps over all of them, a bounded one starts at its bound.
#[tokio::test]
async fn with_a_snapshot_held_a_bounded_prune_does_not_read_what_was_deleted_before() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let holder = hold_snapshot(&schema.base_url).await;
    let app = connect(&crate::schema_url(&schema)).await;
    // `n` tasks in each of two queues, finished `ago` minutes ago.
    let finished = async |n: i64, ago: i64| {
        app.batch_execute(&format!(
            "INSERT INTO sked_tasks (queue, kind, payload, priority, state, run_at, max_attempts, \
               created_at, attempt, finished_at) \
             SELECT q, 'noop', '{{}}', 0, 'succeeded', now(), 25, now(), 1, \
               now() - interval '{ago} minutes' \
             FROM generate_series(1, {n}), unnest(ARRAY['a', 'b']) AS q"
        ))
        .await
        .unwrap();
    };
    // Deleted while the snapshot is held: 200,000 entries the index keeps.
    let deleted: i64 = 100_000;
    finished(deleted, 180).await;
    app.batch_execute("DELETE FROM sked_tasks").await.unwrap();
    finished(1_000, 90).await;
    finished(1_000, 80).await;
    drop(store);
    let c = connect(&schema.base_url).await;
    let index = "sked_tasks_finished_queue";
    let now = Timestamp::now();
    let hour_ago = now - SignedDuration::from_hours(1);
    // The last complete pass's cutoff was 100 minutes ago.
    let since = now - SignedDuration::from_mins(100);
    let bounded = TaskPruneParams {
        finished_before: now - SignedDuration::from_mins(85),
        now,
        limit: 10_000,
        finished_since: Some(since),
    };
    // What one pass reads of the index, in a store of its own.
    let read_by = async |p: TaskPruneParams| {
        let before = index_reads(&c, &schema, index).await;
        let store = PgStore::connect(schema.options()).await.unwrap();
        assert_eq!(store.task_prune(p).await.unwrap(), 2_000);
        drop(store);
        index_reads(&c, &schema, index).await - before
    };
    let reads = read_by(bounded).await;
    assert!(
        reads < 3_000,
        "{reads} entries of the finished tasks' index read to delete 2,000"
    );
    // The same deletion by a full pass reads the entries of the tasks deleted before.
    let full = TaskPruneParams {
        finished_before: hour_ago,
        now: hour_ago,
        limit: 10_000,
        finished_since: None,
    };
    let reads = read_by(full).await;
    assert!(reads > 2 * deleted, "{reads}: the snapshot was not held");
    holder.batch_execute("ROLLBACK").await.unwrap();
}
