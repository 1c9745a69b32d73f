//! A store stages due waiting tasks only when one may be due: announcements and its own
//! changes say when, and it looks anyway once a second.

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use sked_core::NewTask;
use sked_postgres::PgStore;
use sked_postgres::testing::{TestSchema, fresh_store};
use sked_store::{Store, TaskInsertParams};

/// Waits until the store listens (its first connection makes what it knows unknown).
async fn listening(store: &PgStore) {
    let started = Instant::now();
    while !store.listening() {
        assert!(started.elapsed() < Duration::from_secs(10), "not listening");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn claim_ids(store: &PgStore, now: Timestamp) -> Vec<i64> {
    let tasks = store
        .task_claim(crate::claim_params(&[], 10, now))
        .await
        .unwrap();
    tasks.iter().map(|t| t.id).collect()
}

async fn insert_due(store: &PgStore, run_at: Timestamp, now: Timestamp) -> i64 {
    let mut t = NewTask::new("noop");
    t.run_at = Some(run_at);
    let inserted = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![t.into()],
            now,
        })
        .await
        .unwrap();
    inserted[0].id
}

/// Moves a waiting task's run time to `due` with plain SQL: nothing announces it.
async fn due_behind_the_back(schema: &TestSchema, id: i64, due: Timestamp) {
    let (c, conn) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c.execute(
        "UPDATE sked_tasks SET run_at = $1 WHERE id = $2",
        &[&due, &id],
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_task_due_soon_is_staged_when_due_whoever_inserted_it() {
    let Some((a, schema)) = fresh_store().await else {
        return;
    };
    let b = PgStore::connect(schema.options()).await.unwrap();
    listening(&a).await;
    let now = Timestamp::now();
    // A learns that nothing waits.
    assert!(claim_ids(&a, now).await.is_empty());
    // Its own insert, due in half a second: claimed when due, without waiting for a second.
    let soon = now + SignedDuration::from_millis(500);
    let mine = insert_due(&a, soon, now).await;
    assert!(claim_ids(&a, now).await.is_empty(), "not due yet");
    assert_eq!(claim_ids(&a, soon).await, vec![mine]);
    // Inserted through another store: the announcement tells it (it may take a moment).
    let later = soon + SignedDuration::from_millis(300);
    let theirs = insert_due(&b, later, soon).await;
    let started = Instant::now();
    loop {
        let got = claim_ids(&a, later).await;
        if got == vec![theirs] {
            break;
        }
        assert!(got.is_empty(), "claimed {got:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the task inserted elsewhere was not staged when due"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_unannounced_task_is_staged_within_a_second() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    listening(&store).await;
    let now = Timestamp::now();
    assert!(claim_ids(&store, now).await.is_empty());
    // Made waiting behind the store's back: nothing announces it.
    let due = now + SignedDuration::from_millis(100);
    let id = insert_due(&store, now + SignedDuration::from_secs(3600), now).await;
    due_behind_the_back(&schema, id, due).await;
    let mut seen = claim_ids(&store, due).await;
    seen.extend(claim_ids(&store, now + SignedDuration::from_secs(1)).await);
    assert_eq!(seen, vec![id], "staged by the look a second after the last");
}

#[tokio::test]
async fn tasks_that_do_not_wait_do_not_make_claims_stage() {
    let Some((a, schema)) = fresh_store().await else {
        return;
    };
    let b = PgStore::connect(schema.options()).await.unwrap();
    listening(&a).await;
    let mut events = a.subscribe().expect("announcements");
    let now = Timestamp::now();
    assert!(
        claim_ids(&a, now).await.is_empty(),
        "learns that nothing waits"
    );
    // A waiting task made due behind the store's back: only staging finds it.
    let hidden = insert_due(&a, now + SignedDuration::from_secs(3600), now).await;
    due_behind_the_back(&schema, hidden, now - SignedDuration::from_millis(1)).await;
    // A task due now, inserted through another store: its announcement reaches this one.
    let theirs = insert_due(&b, now, now).await;
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("the other store's announcement")
            .unwrap();
        // PostgreSQL keeps microseconds.
        if let sked_store::StoreEvent::Tasks { run_at: Some(t) } = event
            && t.as_microsecond() == now.as_microsecond()
        {
            break;
        }
    }
    let soon = now + SignedDuration::from_millis(10);
    assert_eq!(
        claim_ids(&a, soon).await,
        vec![theirs],
        "a task that does not wait needs no staging"
    );
    let mine = insert_due(&a, now, now).await;
    assert_eq!(claim_ids(&a, soon).await, vec![mine], "nor does its own");
    // Staged by the look a second after the last; it sits before where claims resume, so the
    // claim after the staging one takes it.
    let later = now + SignedDuration::from_secs(1);
    let mut seen = claim_ids(&a, later).await;
    seen.extend(claim_ids(&a, later).await);
    assert_eq!(seen, vec![hidden], "staged a second after the last look");
}
