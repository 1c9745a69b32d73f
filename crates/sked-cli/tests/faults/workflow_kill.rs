//! A workflow 1 → N → 1 while nodes and workers are killed with `kill -9`: on three
//! PostgreSQL nodes (`SKED_TEST_DATABASE_URL`; a schema of its own), and on one node on a
//! SQLite file with a stage large enough to be kept in parts that claims take.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::history::{self, Event, now_ns};
use crate::load::{self, Worker, http};
use sked_postgres::testing::{TestSchema, database_url};

/// Three nodes and four protocol workers (each task runs 500 ms, three at once per worker);
/// one request makes a workflow of a root, 100 tasks after it and one after all of them, and
/// while it runs a node or a worker is killed with `kill -9` (and restarted) every 0.5–1 s.
/// Then the history checker: every task succeeded after a claim, no attempt completed twice or
/// stale, and no task reached a worker before each of its parents had succeeded, the fan-in
/// included (its one success after all 100).
#[test]
#[ignore = "slow tier"]
fn a_workflow_fans_out_and_in_across_kill_9_of_nodes_and_workers() {
    let Some(url) = database_url() else { return };
    let _alone = crate::alone();
    let schema = TestSchema::new(&url);
    fans_out_and_in_under_kills(&schema.url(), 3, 100, None);
}

/// The same on one node on a SQLite file, with a stage of 300 tasks: kept in parts of the
/// `stages` table until the root's end releases them, then taken by claims, while the node
/// is killed and restarted.
#[test]
#[ignore = "slow tier"]
fn a_kept_stage_fans_out_and_in_across_kill_9_on_sqlite() {
    let _alone = crate::alone();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sked.db");
    fans_out_and_in_under_kills(db.to_str().unwrap(), 1, 300, Some(&db));
}

/// A workflow of a root, `n` tasks after it and one after all of them, on `nodes` nodes on
/// `db`, run under kills as the tests above say. With `sqlite`, the file: the stage must be
/// kept when the workflow is made.
fn fans_out_and_in_under_kills(db: &str, nodes: usize, n: usize, sqlite: Option<&std::path::Path>) {
    let dir = tempfile::tempdir().unwrap();
    let (hist, _, rec) = load::history_in(dir.path());
    let (mut servers, urls) = load::nodes(dir.path(), db, nodes);
    let mut workers: Vec<Worker> = (0..4)
        .map(|i| Worker::start(&format!("worker{i}"), "hist_steady", &urls, &hist))
        .collect();

    let middle: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    let mut tasks = vec![json!({"name": "root", "kind": "hist_steady"})];
    tasks.extend(
        (middle.iter()).map(|m| json!({"name": m, "kind": "hist_steady", "after": ["root"]})),
    );
    tasks.push(json!({"name": "last", "kind": "hist_steady", "after": middle}));
    let body = json!({"name": "fan", "tasks": tasks});
    let (status, made) = http(
        &urls[0],
        "POST",
        "/v1/workflows",
        &body,
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(status, 201, "{made}");
    let at_ns = now_ns();
    if let Some(file) = sqlite {
        let kept = sked_sqlite::testing::kept_parts(file).unwrap();
        assert!(kept > 0, "the stage of {n} was not kept");
    }
    let id_of = |name: &str| made["tasks"][name].as_i64().unwrap();
    let (root, last) = (id_of("root"), id_of("last"));
    let ids: Vec<i64> = middle.iter().map(|m| id_of(m)).collect();
    for id in ids.iter().chain([&root, &last]) {
        rec.record(&Event::Enqueued { id: *id, at_ns });
    }
    for id in &ids {
        rec.record(&Event::Waits {
            child: *id,
            parents: vec![root],
        });
    }
    rec.record(&Event::Waits {
        child: last,
        parents: ids.clone(),
    });
    let workflow = format!("/v1/workflows/{}", made["id"]);

    // Faults until the workflow is done: a node or a worker in turn, at random.
    let mut rng = fastrand::Rng::with_seed(0xf10e);
    let started = Instant::now();
    let (mut node_kills_while_running, mut worker_kills) = (0, 0);
    let done = |urls: &[String]| {
        urls.iter().any(|u| {
            matches!(http(u, "GET", &workflow, &Value::Null, Duration::from_secs(2)),
                Ok((200, w)) if w["done"] == true)
        })
    };
    while !done(&urls) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the workflow did not end"
        );
        let at_ns = now_ns();
        if rng.bool() {
            let victim = rng.usize(0..servers.len());
            rec.record(&Event::Fault {
                kind: "kill_server".into(),
                at_ns,
            });
            servers[victim].kill();
            std::thread::sleep(Duration::from_millis(rng.u64(300..700)));
            servers[victim].spawn();
            node_kills_while_running += 1;
        } else {
            let which = rng.usize(0..workers.len());
            let w = &mut workers[which];
            rec.record(&Event::Fault {
                kind: "kill_worker".into(),
                at_ns,
            });
            w.kill();
            std::thread::sleep(Duration::from_millis(rng.u64(100..400)));
            w.spawn();
            worker_kills += 1;
        }
        std::thread::sleep(Duration::from_millis(rng.u64(200..500)));
    }
    let ran_for = started.elapsed();
    let (_, w) = (urls.iter())
        .find_map(|u| http(u, "GET", &workflow, &Value::Null, Duration::from_secs(5)).ok())
        .unwrap();
    load::record_finals(&urls[0], &rec);
    drop(workers);
    drop(servers);

    let events = history::read_dir(&hist);
    let report = history::check(&events);
    eprintln!("{}", report.line());
    eprintln!(
        "workflow {} in {ran_for:?}: {node_kills_while_running} node kills and {worker_kills} \
         worker kills while it ran; {w}",
        w["state"]
    );
    report.assert_clean();
    assert_eq!(w["state"], "succeeded", "{w}");
    assert_eq!(w["counts"], json!({"succeeded": n + 2}), "{w}");
    assert!(
        node_kills_while_running >= 1,
        "no node was killed while the workflow ran ({ran_for:?})"
    );
    let fan_in_claims = (events.iter())
        .filter(|e| matches!(e, Event::Claimed { id, .. } if *id == last))
        .count();
    assert!(fan_in_claims >= 1, "the fan-in never ran");
}
