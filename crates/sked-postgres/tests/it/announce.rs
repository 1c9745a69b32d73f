//! An enqueue outside a transaction of the caller's announces its tasks with a statement of its
//! own, behind the insert: the announcement says what the insert's own `pg_notify` said, and
//! whoever hears it finds the tasks committed.

use std::time::Duration;

use futures_util::StreamExt;
use jiff::{SignedDuration, Timestamp};
use sked_core::NewTask;
use sked_postgres::testing::fresh_store;
use sked_store::{Store, TaskInsertParams};
use tokio_postgres::AsyncMessage;

#[tokio::test]
async fn an_insert_announces_its_tasks_once_they_are_committed() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    let url = crate::schema_url(&schema);
    let (client, mut conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let (heard, mut hear) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
                let _ = heard.send(n.payload().to_string());
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN sked_{}", schema.name))
        .await
        .unwrap();

    // Whole microseconds, as the database keeps them.
    let now = Timestamp::from_microsecond(Timestamp::now().as_microsecond()).unwrap();
    let mut due = NewTask::new("k");
    due.priority = 1;
    let mut later = NewTask::new("k");
    later.priority = 7;
    later.run_at = Some(now.checked_add(SignedDuration::from_secs(60)).unwrap());
    for (tasks, n) in [(vec![due.clone()], 1), (vec![due, later], 3)] {
        let inserted = store
            .task_insert_many(TaskInsertParams {
                tasks: tasks.into_iter().map(Into::into).collect(),
                now,
            })
            .await
            .unwrap();
        let payload = tokio::time::timeout(Duration::from_secs(10), hear.recv())
            .await
            .expect("an announcement")
            .unwrap();
        // As the insert's own `pg_notify` spelled it, from the rows it inserted.
        let ids: Vec<i64> = inserted.iter().map(|i| i.id).collect();
        let row = client
            .query_one(
                "SELECT 't' || (extract(epoch from min(run_at)) * 1000000)::bigint::text \
                   || 'p' || max(priority)::text \
                   || coalesce('w' || (extract(epoch from min(run_at) \
                        FILTER (WHERE state <> 'available')) * 1000000)::bigint::text, ''), \
                   (SELECT count(*) FROM sked_tasks) \
                 FROM sked_tasks WHERE id = ANY($1)",
                &[&ids],
            )
            .await
            .unwrap();
        assert_eq!(payload, row.get::<_, String>(0));
        assert_eq!(
            row.get::<_, i64>(1),
            n,
            "the tasks are committed when heard"
        );
    }
    assert!(hear.try_recv().is_err(), "one announcement an insert");
}
