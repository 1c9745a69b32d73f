//! The engine on PostgreSQL, across two nodes (two stores on one schema): a waiting claim on
//! one node is woken by the other node's enqueue through LISTEN/NOTIFY, not by polling; and a
//! node whose clock is off still agrees with the database on the time. Needs
//! `SKED_TEST_DATABASE_URL` (skipped without it, except under CI).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::SignedDuration;
use sked::{ClaimRequest, Engine, EngineConfig, Store};
use sked_core::{Clock, NewTask};
use sked_postgres::PgStore;
use sked_postgres::testing::{TestSchema, database_url};

#[derive(Debug)]
struct Skewed(SignedDuration);

impl Clock for Skewed {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now().checked_add(self.0).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_nodes_enqueue_wakes_a_waiting_claim_at_once() {
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let a: Arc<dyn Store> = Arc::new(PgStore::connect(schema.options()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PgStore::connect(schema.options()).await.unwrap());
    // Node A's clock is a minute fast; the database's clock corrects it.
    let skewed: Arc<dyn Clock> = Arc::new(Skewed(SignedDuration::from_secs(60)));
    let clock = sked::node_clock(&a, skewed).await.unwrap();
    let drift = clock.now().duration_since(jiff::Timestamp::now()).abs();
    assert!(
        drift < SignedDuration::from_millis(200),
        "corrected clock is off by {drift}"
    );
    let node_a = Engine::with_clock(a, clock, EngineConfig::default());
    let node_b = Engine::new(b, EngineConfig::default());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !node_a.announced() {
        assert!(Instant::now() < deadline, "node A never started listening");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    for round in 0..3 {
        let waiting = tokio::spawn({
            let node_a = node_a.clone();
            async move {
                node_a
                    .claim(ClaimRequest {
                        worker: "a".into(),
                        max: 1,
                        wait: Some(Duration::from_secs(20)),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
            }
        });
        // Let node A settle into its wait (an empty claim, then sleep).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let sent = Instant::now();
        let id = node_b.enqueue(NewTask::new("k")).await.unwrap().id;
        let claimed = waiting.await.unwrap();
        let took = sent.elapsed();
        assert_eq!(claimed.len(), 1, "round {round}");
        assert_eq!(claimed[0].id, id);
        // Polling while announced is every 30 s: anything this quick came from the announcement.
        assert!(
            took < Duration::from_secs(2),
            "round {round}: woke after {took:?}"
        );
    }
}
