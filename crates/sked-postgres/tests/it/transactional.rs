//! Transactional enqueue: a task enqueued in the application's own transaction exists if and
//! only if that transaction commits, and workers hear of it only at commit.

use std::time::Duration;

use sked_core::{NewTask, TaskState};
use sked_postgres::testing::{TestSchema, database_url};
use sked_store::{Store, StoreEvent, TaskClaimParams, TaskListParams};

async fn app_client(schema: &TestSchema) -> tokio_postgres::Client {
    let url = crate::schema_url(schema);
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("CREATE TABLE orders (id bigint PRIMARY KEY)")
        .await
        .unwrap();
    client
}

pub(crate) async fn tasks(store: &dyn Store) -> Vec<sked_core::Task> {
    store
        .task_list(TaskListParams {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .items
}

/// Waits for a `Tasks` announcement; false when none comes within `limit`.
pub(crate) async fn announced(
    events: &mut tokio::sync::broadcast::Receiver<StoreEvent>,
    limit: Duration,
) -> bool {
    tokio::time::timeout(limit, async {
        loop {
            if let Ok(StoreEvent::Tasks { .. }) = events.recv().await {
                return;
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn enqueue_in_commits_and_rolls_back_with_the_application() {
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let store = sked_postgres::PgStore::connect(schema.options())
        .await
        .unwrap();
    let mut events = store.subscribe().unwrap();
    // The listener is up before anything is announced.
    while !matches!(events.recv().await, Ok(StoreEvent::Listening)) {}
    let mut app = app_client(&schema).await;

    // Rolled back: neither the order nor its task.
    let tx = app.transaction().await.unwrap();
    tx.execute("INSERT INTO orders VALUES (1)", &[])
        .await
        .unwrap();
    sked_postgres::enqueue_in(&tx, vec![NewTask::new("receipt")])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(tasks(&store).await.is_empty(), "a rolled-back task exists");
    assert!(
        !announced(&mut events, Duration::from_millis(300)).await,
        "a rolled-back task was announced"
    );

    // Committed: both, and workers hear of it at commit, not before.
    let tx = app.transaction().await.unwrap();
    tx.execute("INSERT INTO orders VALUES (2)", &[])
        .await
        .unwrap();
    let inserted = sked_postgres::enqueue_in(&tx, vec![NewTask::new("receipt")])
        .await
        .unwrap();
    assert!(tasks(&store).await.is_empty(), "visible before commit");
    assert!(
        !announced(&mut events, Duration::from_millis(300)).await,
        "announced before commit"
    );
    tx.commit().await.unwrap();
    assert!(
        announced(&mut events, Duration::from_secs(5)).await,
        "not announced at commit"
    );
    let all = tasks(&store).await;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].id, inserted[0].id);
    assert_eq!(all[0].state, TaskState::Available);
    let claimed = store
        .task_claim(TaskClaimParams {
            min_priority: None,
            queues: vec![],
            kinds: vec![],
            max: 10,
            worker: "w".into(),
            lease_ttl: jiff::SignedDuration::from_secs(30),
            timeout_grace: sked_store::rules::DEFAULT_TIMEOUT_GRACE,
            now: jiff::Timestamp::now(),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "the committed task is claimable");
    drop(app);
}
