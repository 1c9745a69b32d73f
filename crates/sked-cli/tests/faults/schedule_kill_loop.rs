//! Schedules at scale under `kill -9`: three nodes on PostgreSQL plan 10,000 schedules due every
//! 10 s while one node after another is killed and restarted (`SKED_TEST_DATABASE_URL`; a
//! schema of its own).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::wait_for;
use crate::history::{self, Event, now_ns};
use crate::load::{self, http};
use sked_postgres::testing::{TestSchema, database_url};

/// How many schedules, and how often each is due.
const SCHEDULES: usize = 10_000;
const PERIOD_S: i64 = 10;
/// How long nodes are killed for, one every [`KILL_EVERY`].
const FAULTS_FOR: Duration = Duration::from_secs(180);
const KILL_EVERY: Duration = Duration::from_secs(20);
/// The nodes' lease TTL (see [`load::node`]).
const LEASE_TTL_NS: i64 = 2_000_000_000;

/// 10,000 schedules `*/10 * * * * *` (overlap `allow`, so that every occurrence has a task
/// although nothing runs them) on three nodes, one node `kill -9`ed every 20 s and restarted
/// half a second later, for three minutes. Then the history checker, over every task the store
/// lists: no occurrence with two tasks, none without a task within the span, and each task
/// claimable by its nominal time plus the lease TTL and a second (p99): a dead node's share of
/// the planning moves to the others when its locks go with its connection.
#[test]
#[ignore = "slow tier"]
fn schedules_at_scale_survive_a_kill_loop_of_nodes() {
    let Some(url) = database_url() else { return };
    let _alone = crate::alone();
    let schema = TestSchema::new(&url);
    let dir = tempfile::tempdir().unwrap();
    let (_, _, rec) = load::history_in(dir.path());
    let (mut nodes, urls) = load::nodes(dir.path(), &schema.url(), 3);
    let schedules: Vec<Value> = (0..SCHEDULES)
        .map(|i| {
            json!({"name": format!("s{i}"), "spec": "*/10 * * * * *", "overlap": "allow",
                   "task": {"kind": "k", "queue": "fanout"}})
        })
        .collect();
    let (status, report) = http(
        &urls[0],
        "PUT",
        "/v1/schedules",
        &json!({ "schedules": schedules }),
        Duration::from_secs(120),
    )
    .unwrap();
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["created"].as_array().unwrap().len(), SCHEDULES);
    // The span starts at the first boundary after the schedules exist.
    let period_ns = PERIOD_S * 1_000_000_000;
    let from_ns = (now_ns() / period_ns + 1) * period_ns;

    let started = Instant::now();
    let mut victim = 0;
    while started.elapsed() < FAULTS_FOR {
        std::thread::sleep(KILL_EVERY);
        rec.record(&Event::Fault {
            kind: "kill_node".into(),
            at_ns: now_ns(),
        });
        nodes[victim].kill();
        std::thread::sleep(Duration::from_millis(500));
        nodes[victim].spawn();
        victim = (victim + 1) % nodes.len();
    }
    // The span ends at the last boundary that every node had time to plan.
    let to_ns = (now_ns() - 2 * LEASE_TTL_NS) / period_ns * period_ns;
    rec.record(&Event::Periodic {
        prefix: "s".into(),
        count: SCHEDULES,
        period_ns,
        from_ns,
        to_ns,
    });
    // No more faults: every occurrence up to the span's end has been planned.
    wait_for("every node to answer", Duration::from_secs(30), || {
        urls.iter().all(|u| crate::common::http_ok(u))
    });
    let listed = load::record_finals(&urls[0], &rec);
    drop(nodes);

    let events = history::read_dir(&dir.path().join("history"));
    let report = history::check(&events);
    eprintln!("{}", report.line());
    eprintln!("{listed} tasks listed at the end");
    report.assert_clean();
    let boundaries = ((to_ns - from_ns) / period_ns + 1) as usize;
    assert!(
        report.occurrences >= SCHEDULES * boundaries,
        "{} occurrences for {boundaries} boundaries: {}",
        report.occurrences,
        report.line()
    );
    assert!(
        report.faults.get("kill_node").copied().unwrap_or(0) >= 8,
        "{}",
        report.line()
    );
    assert!(
        report.made_late_p99_ns <= LEASE_TTL_NS + 1_000_000_000,
        "{}",
        report.line()
    );
}
