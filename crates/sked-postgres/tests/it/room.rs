//! An attempt that ends in a queue with a limit on running tasks tells the other nodes that
//! room may have freed (their claims waiting on that queue look again); one that ends in an
//! unlimited queue says nothing.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use sked_core::NewTask;
use sked_postgres::PgStore;
use sked_postgres::testing::fresh_store;
use sked_store::{
    FinishOutcome, QueueUpdateParams, Store, StoreEvent, TaskFinishParams, TaskInsertParams,
};
use tokio::sync::broadcast::Receiver;

async fn listening(store: &PgStore) {
    let started = Instant::now();
    while !store.listening() {
        assert!(started.elapsed() < Duration::from_secs(10), "not listening");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Inserts a task into `queue` through `store`, claims it, and ends it.
async fn run_one(store: &PgStore, queue: &str, now: Timestamp) {
    let mut t = NewTask::new("noop");
    t.queue = queue.into();
    store
        .task_insert_many(TaskInsertParams {
            tasks: vec![t.into()],
            now,
        })
        .await
        .unwrap();
    let claimed = store
        .task_claim(crate::claim_params(&[queue], 1, now))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "claimed from {queue}");
    let ended = store
        .task_finish_many(vec![TaskFinishParams {
            id: claimed[0].id,
            attempt: claimed[0].attempt,
            outcome: FinishOutcome::Succeeded { result: None },
            now,
            jitter: 0.5,
        }])
        .await
        .unwrap();
    ended[0].as_ref().unwrap();
}

/// The events up to the first task announcement (inserts announce), in order.
async fn until_tasks(events: &mut Receiver<StoreEvent>) -> Vec<StoreEvent> {
    let mut seen = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("an announcement")
            .unwrap();
        let tasks = matches!(event, StoreEvent::Tasks { .. });
        seen.push(event);
        if tasks {
            return seen;
        }
    }
}

#[tokio::test]
async fn an_ending_under_a_running_limit_announces_room_to_other_nodes() {
    let Some((a, schema)) = fresh_store().await else {
        return;
    };
    let b = PgStore::connect(schema.options()).await.unwrap();
    listening(&b).await;
    let mut events = b.subscribe().expect("announcements");
    for (queue, concurrency) in [("capped", Some(1)), ("paced", None)] {
        a.queue_update(QueueUpdateParams {
            name: queue.into(),
            concurrency_limit: Some(concurrency),
            rate: concurrency
                .is_none()
                .then(|| Some("1000/s".parse().unwrap())),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    // Each change of queue settings is announced.
    for _ in 0..2 {
        until_tasks(&mut events).await;
    }
    let now = Timestamp::now();
    // Unlimited and rate-limited queues: nothing to announce beyond the insert (an ended
    // attempt frees no room under a rate). Notifications arrive in commit order, so the
    // next insert's announcement comes after anything these endings sent.
    for queue in ["default", "paced"] {
        run_one(&a, queue, now).await;
        let seen = until_tasks(&mut events).await;
        assert!(!seen.contains(&StoreEvent::Room), "{queue}: {seen:?}");
    }
    run_one(&a, "capped", now).await;
    let started = Instant::now();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("the freed room's announcement")
            .unwrap();
        if event == StoreEvent::Room {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
