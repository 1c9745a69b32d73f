//! Concurrency keys through the real binary on SQLite: with `--per-key 2`, a key with a large
//! backlog enqueued first does not hold back another key's few tasks, and no key ever runs
//! more than two at once; bad per-key limits and keys are refused.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::common::{Server, wait_for};
use crate::hostile_cli::request;

/// A claim's start time is taken when the claim is asked for, before it waits its turn for
/// the database, so a task it started may read as starting a little before the end of the one
/// whose place it took. Ends within this much after a start do not count as overlapping it;
/// a real overlap would last a task's length (20–50 ms here).
const GRACE: jiff::SignedDuration = jiff::SignedDuration::from_millis(5);

/// Imports `n` shell tasks of `queue` with concurrency key `key`, in one transaction.
fn enqueue_keyed(srv: &Server, queue: &str, key: &str, n: usize) {
    let line = json!({
        "kind": "shell",
        "queue": queue,
        "key": key,
        "payload": {"command": "sleep 0.02"},
    })
    .to_string();
    let file = srv.dir.join(format!("{key}.jsonl"));
    std::fs::write(&file, vec![line; n].join("\n")).unwrap();
    srv.ok(&["task", "import", file.to_str().unwrap()]);
}

/// Every task of the queue that has started: key, start, end (if it ended).
fn spans(srv: &Server, queue: &str) -> Vec<(String, Timestamp, Option<Timestamp>)> {
    let mut out = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut args = vec!["task", "ls", "--queue", queue, "--limit", "1000"];
        let b;
        if let Some(id) = &before {
            b = id.clone();
            args.extend(["--before", &b]);
        }
        let page = srv.json(&args);
        let tasks = page["tasks"].as_array().unwrap();
        for t in tasks {
            let at = |f: &str| t[f].as_str().map(|s| s.parse::<Timestamp>().unwrap());
            if let Some(started) = at("started_at") {
                let key = t["key"].as_str().unwrap_or("-").to_string();
                out.push((key, started, at("finished_at")));
            }
        }
        match page["next_before"].as_i64() {
            Some(id) if !tasks.is_empty() => before = Some(id.to_string()),
            _ => return out,
        }
    }
}

#[test]
fn a_small_key_is_not_held_back_by_a_large_one() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell", "--concurrency", "8"]);
    let set = srv.ok(&["queue", "limit", "tenants", "--per-key", "2", "--create"]);
    assert!(set.contains("per key 2"), "{set}");
    // Paused while A's 2,000 and then B's 20 go in, so that both wait when work begins.
    srv.ok(&["queue", "pause", "tenants"]);
    enqueue_keyed(&srv, "tenants", "a", 2_000);
    enqueue_keyed(&srv, "tenants", "b", 20);
    srv.ok(&["queue", "resume", "tenants"]);
    wait_for("B's tasks to finish", Duration::from_secs(60), || {
        srv.json(&[
            "task",
            "ls",
            "--queue",
            "tenants",
            "--state",
            "succeeded",
            "--limit",
            "1000",
        ])["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["key"] == "b")
            .count()
            == 20
    });
    let spans = spans(&srv, "tenants");
    let b_done = spans
        .iter()
        .filter(|(k, _, _)| k == "b")
        .filter_map(|(_, _, f)| *f)
        .max()
        .expect("B's tasks ended");
    let a_done_before = spans
        .iter()
        .filter(|(k, _, f)| k == "a" && f.is_some_and(|f| f <= b_done))
        .count();
    assert!(
        a_done_before < 200,
        "A finished {a_done_before} before B's 20 were done"
    );
    // No instant had three tasks of one key running.
    let mut most: HashMap<&str, usize> = HashMap::new();
    for (key, start, _) in &spans {
        let at_once = spans
            .iter()
            .filter(|(k, s, f)| k == key && s <= start && f.is_none_or(|f| f > *start + GRACE))
            .count();
        let m = most.entry(key.as_str()).or_default();
        *m = (*m).max(at_once);
    }
    assert!(most.values().all(|n| *n <= 2), "{most:?}");
    assert_eq!(most.get("b"), Some(&2), "B ran two at once: {most:?}");
    eprintln!("A finished {a_done_before} before B's 20; most at once per key: {most:?}");
    // The queue and a task show the key and the limit.
    let ls = srv.ok(&["queue", "ls"]);
    assert!(ls.contains("PER KEY"), "{ls}");
    let (_, metrics) = crate::common::http_get(&srv.url, "/metrics").unwrap();
    assert!(
        metrics.contains("sked_queue_per_key_limit{queue=\"tenants\"} 2"),
        "{metrics}"
    );
    let any = srv.json(&["task", "ls", "--queue", "tenants", "--limit", "1"])["tasks"][0]["id"]
        .to_string();
    assert!(srv.ok(&["task", "get", &any]).contains("key "));
}

#[test]
fn a_per_key_rate_paces_each_key_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell", "--concurrency", "8"]);
    srv.ok(&[
        "queue",
        "limit",
        "paced",
        "--per-key-rate",
        "5/s",
        "--create",
    ]);
    srv.ok(&["queue", "pause", "paced"]);
    enqueue_keyed(&srv, "paced", "a", 15);
    enqueue_keyed(&srv, "paced", "b", 15);
    srv.ok(&["queue", "resume", "paced"]);
    wait_for("every task to start", Duration::from_secs(20), || {
        spans(&srv, "paced").len() == 30
    });
    let spans = spans(&srv, "paced");
    for key in ["a", "b"] {
        let starts: Vec<i128> = {
            let mut s: Vec<i128> = spans
                .iter()
                .filter(|(k, _, _)| k == key)
                .map(|(_, s, _)| s.as_nanosecond())
                .collect();
            s.sort();
            s
        };
        let busiest = crate::common::starts::busiest(&starts, 1_000_000_000);
        assert_eq!(busiest, 5, "key {key}: busiest second");
        // 15 starts at 5 a second: the last at least two seconds after the first.
        let took = starts[14] - starts[0];
        assert!(took >= 1_990_000_000, "key {key}: {took} ns");
    }
    let ls = srv.ok(&["queue", "ls"]);
    assert!(ls.contains("5/s"), "{ls}");
    let (_, metrics) = crate::common::http_get(&srv.url, "/metrics").unwrap();
    for series in [
        "sked_queue_per_key_rate_limit{queue=\"paced\"} 5",
        "sked_queue_per_key_rate_period_seconds{queue=\"paced\"} 1",
    ] {
        assert!(metrics.contains(series), "no {series} in\n{metrics}");
    }
}

#[test]
fn a_task_held_back_by_its_key_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    srv.ok(&["queue", "limit", "hold", "--per-key", "1", "--create"]);
    let add = || {
        srv.ok(&[
            "task",
            "add",
            "--kind",
            "shell",
            "--queue",
            "hold",
            "--key",
            "k",
            "--payload",
            r#"{"command": "sleep 5"}"#,
        ])
        .trim()
        .to_string()
    };
    let first = add();
    wait_for("the first task to run", Duration::from_secs(10), || {
        srv.task(&first)["state"] == "running"
    });
    let second = add();
    let shown = srv.ok(&["task", "get", &second]);
    assert!(
        shown.contains("held by key k of queue hold: per_key"),
        "{shown}"
    );
    let (status, body) = request(&srv, "GET", &format!("/v1/tasks/{second}/held"), "");
    assert_eq!(status, 200, "{body}");
    let held: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(held["held"]["by"], "per_key", "{held}");
    // A running task is not held: it has nothing to wait for.
    let (_, body) = request(&srv, "GET", &format!("/v1/tasks/{first}/held"), "");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["held"],
        Value::Null
    );
}

#[test]
fn a_limited_queue_starts_the_next_task_as_soon_as_one_ends() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    srv.ok(&["queue", "limit", "conc", "--concurrency", "2", "--create"]);
    srv.ok(&["queue", "pause", "conc"]);
    let line = json!({"kind": "shell", "queue": "conc", "payload": {"command": "sleep 0.05"}});
    let file = srv.dir.join("conc.jsonl");
    std::fs::write(&file, vec![line.to_string(); 10].join("\n")).unwrap();
    srv.ok(&["task", "import", file.to_str().unwrap()]);
    srv.ok(&["queue", "resume", "conc"]);
    wait_for("the ten tasks to succeed", Duration::from_secs(20), || {
        srv.json(&["task", "ls", "--queue", "conc", "--state", "succeeded"])["tasks"]
            .as_array()
            .unwrap()
            .len()
            == 10
    });
    let spans = spans(&srv, "conc");
    for (_, start, _) in &spans {
        let at_once = spans
            .iter()
            .filter(|(_, s, f)| s <= start && f.is_none_or(|f| f > *start + GRACE))
            .count();
        assert!(at_once <= 2, "{at_once} running at {start}");
    }
    // Each of the last eight started when one before it ended, not at a claim's poll a
    // second later (which made five rounds take five seconds, thirty on PostgreSQL): by the
    // server's clock, the typical wait from an ending to the next start is well under that.
    let mut ends: Vec<Timestamp> = spans.iter().filter_map(|(_, _, f)| *f).collect();
    let mut starts: Vec<Timestamp> = spans.iter().map(|(_, s, _)| *s).collect();
    ends.sort();
    starts.sort();
    let mut waits: Vec<jiff::SignedDuration> = starts[2..]
        .iter()
        .zip(&ends)
        .map(|(start, end)| start.duration_since(*end))
        .collect();
    waits.sort();
    let median = waits[waits.len() / 2];
    assert!(median < jiff::SignedDuration::from_millis(500), "{waits:?}");
}

#[test]
fn bad_per_key_limits_and_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    for args in [
        vec!["queue", "limit", "q", "--per-key", "-1"],
        vec!["queue", "limit", "q", "--per-key", "two"],
        vec!["queue", "limit", "q", "--per-key-rate", "0/s"],
        vec!["queue", "limit", "q", "--per-key-rate", "5/s burst 2"],
    ] {
        let out = srv.sked(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("per-key"), "{args:?}: {err}");
    }
    let long = "k".repeat(513);
    let out = srv.sked(&["task", "add", "--kind", "k", "--key", &long]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("key must be 1 to 512"));
    for body in [
        json!({"per_key": -1}),
        json!({"per_key": "two"}),
        json!({"per_key_rate": "0/s"}),
        json!({"per_key_rate": "5/s burst 2"}),
    ] {
        let (status, answer) = request(&srv, "PUT", "/v1/queues/q/limit", &body.to_string());
        assert_eq!(status, 422, "{body}: {answer}");
    }
    let (status, answer) = request(
        &srv,
        "POST",
        "/v1/tasks",
        &json!({"kind": "k", "key": ""}).to_string(),
    );
    assert_eq!(status, 422, "{answer}");
    // Nothing changed: no queue q, no task.
    let queues: Value = srv.json(&["queue", "ls"]);
    assert!(
        queues["queues"]
            .as_array()
            .unwrap()
            .iter()
            .all(|q| q["name"] != "q"),
        "{queues}"
    );
    assert!(
        srv.json(&["task", "ls"])["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}
