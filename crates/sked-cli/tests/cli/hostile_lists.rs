//! Lists that API users can make long: queues, schedules and workers come a page at a time,
//! bounded in items and bytes, and `/metrics` gives at most 1,000 queues series of their own.

use serde_json::Value;

use crate::common::Server;
use crate::executors_cli::peak_rss;
use crate::hostile_cli::request;

fn get(srv: &Server, path: &str) -> Value {
    let (status, body) = request(srv, "GET", path, "");
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Every item of a list by name, following `next_after`; the number of pages too.
fn every_page(srv: &Server, path: &str, key: &str) -> (Vec<Value>, usize) {
    let (mut all, mut pages) = (Vec::new(), 0);
    let mut after: Option<String> = None;
    loop {
        let page = match &after {
            Some(a) => get(srv, &format!("{path}&after={a}")),
            None => get(srv, path),
        };
        pages += 1;
        all.extend(page[key].as_array().unwrap().iter().cloned());
        match page["next_after"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => return (all, pages),
        }
    }
}

/// 1,050 queues, 1,050 workers and 12 schedules with 1 MiB payloads: each list answers a
/// bounded page, the pages together give everything once, and the server stays small.
#[test]
fn long_lists_come_a_page_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = Server::start(dir.path(), &[]);
    let tasks: Vec<Value> = (0..1050)
        .map(|i| serde_json::json!({"kind": "k", "queue": format!("q{i:04}")}))
        .collect();
    let batch = serde_json::json!({ "tasks": tasks }).to_string();
    assert_eq!(request(&srv, "POST", "/v1/tasks/batch", &batch).0, 201);
    for i in 0..1050 {
        let beat = r#"{"role": "worker", "queues": ["a"], "concurrency": 1}"#;
        let (status, _) = request(&srv, "PUT", &format!("/v1/workers/w{i:04}"), beat);
        assert_eq!(status, 200);
    }
    let payload = "x".repeat((1 << 20) - 64);
    for i in 0..12 {
        let def = serde_json::json!({
            "name": format!("s{i:02}"), "spec": "0 3 * * *",
            "task": {"kind": "big", "payload": {"data": payload}},
        });
        assert_eq!(
            request(&srv, "POST", "/v1/schedules", &def.to_string()).0,
            201
        );
    }

    // Queues: 100 by default, at most 1,000 a page, every one once over the pages.
    let first = get(&srv, "/v1/queues");
    assert_eq!(first["queues"].as_array().unwrap().len(), 100);
    assert_eq!(first["next_after"], "q0099");
    let big = get(&srv, "/v1/queues?limit=5000");
    assert_eq!(big["queues"].as_array().unwrap().len(), 1000);
    let (queues, pages) = every_page(&srv, "/v1/queues?limit=300", "queues");
    let names: Vec<&str> = queues.iter().map(|q| q["name"].as_str().unwrap()).collect();
    let expected: Vec<String> = (0..1050).map(|i| format!("q{i:04}")).collect();
    assert_eq!(names, expected);
    assert_eq!(pages, 4);
    assert_eq!(queues[1049]["counts"]["available"], 1);

    // Workers: the most recently seen, at most 1,000, and whether more were seen.
    let workers = get(&srv, "/v1/workers");
    assert_eq!(workers["workers"].as_array().unwrap().len(), 100);
    assert_eq!(workers["more"], true);
    let workers = get(&srv, "/v1/workers?limit=5000");
    assert_eq!(workers["workers"].as_array().unwrap().len(), 1000);
    assert_eq!(
        workers["more"], true,
        "1,050 workers and the node were seen"
    );

    // /metrics: the first 1,000 queues by name, and the rest's counters together.
    let (status, text) = request(&srv, "GET", "/metrics", "");
    assert_eq!(status, 200);
    let gauged: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("sked_tasks{"))
        .filter_map(|l| l.split("queue=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(gauged.len(), 1000);
    assert!(gauged.contains("q0999") && !gauged.contains("q1000"));
    assert!(text.contains("sked_queues_truncated 1"), "{text}");
    let other = text
        .lines()
        .find(|l| l.starts_with("sked_enqueued_total{queue=\"/other\"}"))
        .unwrap_or_else(|| panic!("no /other series:\n{text}"));
    assert!(other.ends_with(" 50"), "{other}");
    let enqueued_series = text
        .lines()
        .filter(|l| l.starts_with("sked_enqueued_total{"))
        .count();
    assert_eq!(enqueued_series, 1001, "1,000 queues and /other");

    // A fresh process, so that the peak is the lists'.
    srv.kill_and_restart();
    // Schedules: payloads left out unless asked; asked, a page stops at about 8 MiB.
    let lean = get(&srv, "/v1/schedules?limit=1000");
    let schedules = lean["schedules"].as_array().unwrap();
    assert_eq!(schedules.len(), 12);
    assert!(schedules.iter().all(|s| s["task"].get("payload").is_none()));
    assert_eq!(lean["next_after"], Value::Null);
    let full = get(&srv, "/v1/schedules?limit=1000&include=payload");
    let page = full["schedules"].as_array().unwrap();
    assert_eq!(page.len(), 8, "eight payloads of 1 MiB make a page");
    assert_eq!(
        page[0]["task"]["payload"]["data"].as_str().unwrap().len(),
        payload.len()
    );
    assert_eq!(full["next_after"], "s07");
    let (all, pages) = every_page(&srv, "/v1/schedules?include=payload", "schedules");
    assert_eq!((all.len(), pages), (12, 2));
    let (status, _) = request(&srv, "GET", "/v1/schedules?include=result", "");
    assert_eq!(status, 400);
    let peak = peak_rss(srv.pid());
    eprintln!(
        "server peak RSS after listing schedules of 1 MiB: {} MB",
        peak >> 20
    );
    assert!(peak < 100 << 20, "peak RSS {} MB", peak >> 20);
}
