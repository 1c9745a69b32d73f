//! Deadlines to start racing claims on three PostgreSQL nodes (`SKED_TEST_DATABASE_URL`; a
//! schema of its own), a node killed with `kill -9` while they race.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::history::{self, Event, now_ns};
use crate::load::{self, Worker, http};
use sked_postgres::testing::{TestSchema, database_url};

/// 1,000 tasks, each with a TTL from 1 to 40 s, enqueued at once to three nodes whose three
/// protocol workers run 18 a second: the workers drain them in id order while deadlines pass
/// all along the queue, so claims and the leader's passes race the deadlines on every node.
/// A node is killed with `kill -9` and started again while they race. Then the history
/// checker: no task started after its deadline (by the database's clock, or by a claim sent
/// after it), every task succeeded or expired unstarted, none was lost, and both happened.
#[test]
#[ignore = "slow tier"]
fn deadlines_racing_claims_on_three_nodes_are_never_missed() {
    let Some(url) = database_url() else { return };
    let _alone = crate::alone();
    let schema = TestSchema::new(&url);
    let dir = tempfile::tempdir().unwrap();
    let (hist, _, rec) = load::history_in(dir.path());
    let (mut servers, urls) = load::nodes(dir.path(), &schema.url(), 3);
    let workers: Vec<Worker> = (0..3)
        .map(|i| Worker::start(&format!("worker{i}"), "hist_steady", &urls, &hist))
        .collect();

    let mut rng = fastrand::Rng::with_seed(0x0dea_d11e);
    let tasks: Vec<Value> = (0..1000)
        .map(|_| json!({"kind": "hist_steady", "ttl": format!("{}ms", rng.u64(1_000..40_000))}))
        .collect();
    let mut ids = Vec::new();
    for (i, part) in tasks.chunks(250).enumerate() {
        let body = json!({"tasks": part});
        let url = &urls[i % urls.len()];
        let (status, answer) = http(
            url,
            "POST",
            "/v1/tasks/batch",
            &body,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(status, 201, "{answer}");
        let at_ns = now_ns();
        for t in answer["tasks"].as_array().unwrap() {
            let id = t["id"].as_i64().unwrap();
            rec.record(&Event::Enqueued { id, at_ns });
            ids.push(id);
        }
    }
    assert_eq!(ids.len(), 1000);

    // A node killed and started again while the deadlines pass.
    std::thread::sleep(Duration::from_secs(8));
    rec.record(&Event::Fault {
        kind: "kill_server".into(),
        at_ns: now_ns(),
    });
    servers[0].kill();
    std::thread::sleep(Duration::from_secs(2));
    servers[0].spawn();

    let started = Instant::now();
    while load::unfinished(&urls[1]) != Some(0) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the tasks did not end"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    load::record_finals(&urls[1], &rec);
    drop(workers);
    drop(servers);

    let events = history::read_dir(&hist);
    let report = history::check(&events);
    eprintln!("{}", report.line());
    report.assert_clean();
    let succeeded = (events.iter())
        .filter(|e| matches!(e, Event::Final { state, .. } if state == "succeeded"))
        .count();
    assert_eq!(succeeded + report.expired, 1000);
    assert!(
        report.expired >= 100 && succeeded >= 100,
        "the deadlines did not race the claims: {succeeded} succeeded, {} expired",
        report.expired
    );
}
