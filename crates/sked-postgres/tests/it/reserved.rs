//! Claims of a queue limited by a rate alone reserve their starts and correct the reservation
//! to what they took: a claim that took nothing leaves no row in the starts log (idle workers
//! would otherwise leave one per claim for as long as a quota's period).

use jiff::{SignedDuration, Timestamp};
use sked_core::NewTask;
use sked_postgres::testing::fresh_store;
use sked_store::{QueueUpdateParams, Store, TaskInsertParams};

#[tokio::test]
async fn claims_that_start_nothing_leave_no_starts_behind() {
    let Some((store, schema)) = fresh_store().await else {
        return;
    };
    store
        .queue_update(QueueUpdateParams {
            name: "quota".into(),
            rate: Some(Some("1000/1d".parse().unwrap())),
            ..Default::default()
        })
        .await
        .unwrap();
    let now = Timestamp::now();
    let claim = |at: Timestamp| store.task_claim(crate::claim_params(&["quota"], 10, at));
    for i in 0..5 {
        let at = now + SignedDuration::from_secs(i);
        assert!(claim(at).await.unwrap().is_empty());
    }
    let mut t = NewTask::new("k");
    t.queue = "quota".into();
    store
        .task_insert_many(TaskInsertParams {
            tasks: vec![t.clone().into(), t.into()],
            now,
        })
        .await
        .unwrap();
    assert_eq!(
        claim(now + SignedDuration::from_secs(9))
            .await
            .unwrap()
            .len(),
        2
    );
    let (c, conn) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let rows = c
        .query("SELECT n FROM sked_queue_starts WHERE queue = 'quota'", &[])
        .await
        .unwrap();
    let n: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(n, [2], "one row, for the claim that started two");
}
