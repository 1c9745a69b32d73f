//! `sked batch`: a batch's callback runs once, after its last task, for 10,000 tasks and for a
//! batch added to in three requests before it is closed; bad input exits 2 and makes nothing.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::Server;
use crate::hostile_cli::request;

/// A shell callback that appends its task id and the batch's counts to `marker`.
fn marking(marker: &std::path::Path) -> String {
    let line = format!(
        "echo \"$SKED_TASK_ID $SKED_BATCH_COUNTS\" >> {}",
        marker.display()
    );
    json!({ "command": line }).to_string()
}

/// Enqueues `n` tasks of kind `k` into batch `batch` with one request.
fn enqueue(srv: &Server, batch: &str, n: usize) {
    let tasks: Vec<Value> = (0..n)
        .map(|i| json!({"kind": "k", "payload": {"i": i}, "batch": batch.parse::<i64>().unwrap()}))
        .collect();
    let (status, body) = request(
        srv,
        "POST",
        "/v1/tasks/batch",
        &json!({ "tasks": tasks }).to_string(),
    );
    assert_eq!(status, 201, "{body}");
}

/// Claims and completes every available task of kind `k` through the worker protocol.
fn complete_all(srv: &Server) -> usize {
    let mut done = 0;
    loop {
        let claim = json!({"worker": "w", "kinds": ["k"], "max": 1000}).to_string();
        let (status, body) = request(srv, "POST", "/v1/claim", &claim);
        assert_eq!(status, 200, "{body}");
        let tasks: Value = serde_json::from_str(&body).unwrap();
        let tasks = tasks["tasks"].as_array().unwrap();
        if tasks.is_empty() {
            return done;
        }
        let results: Vec<Value> = (tasks.iter())
            .map(|t| json!({"id": t["id"], "attempt": t["attempt"], "outcome": "succeeded"}))
            .collect();
        let body = json!({ "results": results }).to_string();
        let (status, answer) = request(srv, "POST", "/v1/finish", &body);
        assert_eq!(status, 200, "{answer}");
        done += tasks.len();
    }
}

/// The callback's lines in `marker` once the batch is done and its callback ran, and half a
/// second after: one line, its task's id and `counts`.
fn ran_once(
    srv: &Server,
    batch: &str,
    which: &str,
    marker: &std::path::Path,
    counts: &str,
) -> Value {
    let waited = srv.sked(&["batch", "wait", batch, "--timeout", "30s"]);
    assert_eq!(waited.status.code(), Some(0), "{waited:?}");
    let b = srv.json(&["batch", "get", batch]);
    assert_eq!(b["state"], "done", "{b}");
    let callback = b[which].to_string();
    let ended = srv.sked(&["task", "wait", &callback, "--timeout", "30s"]);
    assert_eq!(ended.status.code(), Some(0), "{ended:?}");
    std::thread::sleep(Duration::from_millis(500));
    let lines = std::fs::read_to_string(marker).unwrap();
    assert_eq!(
        lines,
        format!("{callback} {counts}\n"),
        "the callback ran once"
    );
    srv.task(&callback)
}

#[test]
fn a_batch_of_ten_thousand_runs_its_callback_once_after_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let marker = dir.path().join("done.txt");
    let batch = srv.ok(&[
        "batch",
        "open",
        "--name",
        "import",
        "--on-success-kind",
        "shell",
        "--on-success-payload",
        &marking(&marker),
    ]);
    let batch = batch.trim();
    for _ in 0..10 {
        enqueue(&srv, batch, 1000);
    }
    let closed = srv.ok(&["batch", "close", batch]);
    assert!(
        closed.contains(&format!("batch {batch} closed (10000 available)")),
        "{closed}"
    );
    // Nine thousand end; the callback waits for the last thousand.
    let claim = json!({"worker": "w", "kinds": ["k"], "max": 1000}).to_string();
    let (_, held) = request(&srv, "POST", "/v1/claim", &claim);
    let held: Value = serde_json::from_str(&held).unwrap();
    assert_eq!(complete_all(&srv), 9000);
    assert_eq!(srv.json(&["batch", "get", batch])["state"], "closed");
    assert!(
        !marker.exists(),
        "the callback ran before the last task ended"
    );
    let results: Vec<Value> = (held["tasks"].as_array().unwrap().iter())
        .map(|t| json!({"id": t["id"], "attempt": t["attempt"], "outcome": "succeeded"}))
        .collect();
    let (status, _) = request(
        &srv,
        "POST",
        "/v1/finish",
        &json!({ "results": results }).to_string(),
    );
    assert_eq!(status, 200);
    let callback = ran_once(
        &srv,
        batch,
        "on_success_task",
        &marker,
        r#"{"succeeded":10000}"#,
    );
    assert_eq!(callback["payload"]["env"]["SKED_BATCH_ID"], batch);
    let shown = srv.ok(&["batch", "get", batch]);
    assert!(
        shown.contains("tasks        10000 (10000 succeeded)"),
        "{shown}"
    );
}

#[test]
fn a_batch_added_to_in_three_requests_then_closed_runs_its_callback_once() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let marker = dir.path().join("complete.txt");
    let batch = srv.ok(&[
        "batch",
        "open",
        "--on-complete-kind",
        "shell",
        "--on-complete-payload",
        &marking(&marker),
    ]);
    let batch = batch.trim();
    // Three requests; the first's tasks all end while the batch is open: nothing runs yet.
    enqueue(&srv, batch, 100);
    assert_eq!(complete_all(&srv), 100);
    enqueue(&srv, batch, 100);
    let one = srv.ok(&["task", "add", "--kind", "k", "--batch", batch]);
    assert!(
        srv.ok(&["task", "get", one.trim()])
            .contains(&format!("batch         {batch}"))
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(!marker.exists(), "a callback ran while the batch was open");
    srv.ok(&["batch", "close", batch]);
    assert_eq!(complete_all(&srv), 101);
    let callback = ran_once(
        &srv,
        batch,
        "on_complete_task",
        &marker,
        r#"{"succeeded":201}"#,
    );
    assert_eq!(callback["payload"]["env"]["SKED_BATCH_ID"], batch);
    let listed = srv.ok(&["batch", "ls"]);
    assert!(
        listed.lines().nth(1).unwrap_or_default().starts_with(batch),
        "{listed}"
    );

    // Done, it takes no more; a batch that does not exist is refused; nothing is made.
    let before = srv.json(&["task", "ls", "--limit", "1000"])["tasks"]
        .as_array()
        .unwrap()
        .len();
    let late = srv.sked(&["task", "add", "--kind", "k", "--batch", batch]);
    assert_eq!(late.status.code(), Some(1), "{late:?}");
    assert!(
        String::from_utf8_lossy(&late.stderr).contains("has ended"),
        "{late:?}"
    );
    let unknown = srv.sked(&["task", "add", "--kind", "k", "--batch", "9999"]);
    assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no batch 9999"),
        "{unknown:?}"
    );
    let after = srv.json(&["task", "ls", "--limit", "1000"])["tasks"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after);
    let bad = srv.sked(&[
        "batch",
        "open",
        "--on-success-kind",
        "k",
        "--on-success-payload",
        "[1]",
    ]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("must be an object"),
        "{bad:?}"
    );
}
