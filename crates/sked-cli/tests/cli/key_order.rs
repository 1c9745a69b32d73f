//! Strict order per key through the real binary on SQLite: with `--per-key 1 --order strict` a
//! key runs one task at a time and a task that started keeps its key until it ends well: one
//! waiting to retry holds its key's next tasks back, a dead one stops the key until it is
//! deleted, and another key is not delayed. Bad settings are refused.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::json;

use crate::common::{Server, wait_for};
use crate::hostile_cli::request;

fn at(v: &serde_json::Value) -> Timestamp {
    v.as_str().expect("a time").parse().unwrap()
}

#[test]
fn a_keys_next_task_waits_for_the_one_before_it_to_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell", "--concurrency", "4"]);
    let set = srv.ok(&[
        "queue",
        "limit",
        "ordered",
        "--per-key",
        "1",
        "--order",
        "strict",
        "--create",
    ]);
    assert!(set.contains("strict order per key"), "{set}");
    let add = |key: &str, command: &str, extra: &[&str]| -> String {
        let payload = json!({ "command": command }).to_string();
        let mut args = vec![
            "task",
            "add",
            "--kind",
            "shell",
            "--queue",
            "ordered",
            "--key",
            key,
            "--payload",
            &payload,
        ];
        args.extend_from_slice(extra);
        srv.ok(&args).trim().to_string()
    };
    // A's first task fails twice, then succeeds; each retry waits 2 s.
    let count = dir.path().join("a1-runs");
    let flaky = format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; [ $n -ge 3 ]",
        c = count.display()
    );
    let a1 = add(
        "a",
        &flaky,
        &["--max-attempts", "5", "--backoff", "fixed:2s"],
    );
    let a2 = add("a", "true", &[]);
    let bs: Vec<String> = (0..3).map(|_| add("b", "sleep 0.1", &[])).collect();

    // While A's first waits to retry, A's second is held and says by which task; B goes on.
    wait_for(
        "A's first task to fail once",
        Duration::from_secs(20),
        || srv.task(&a1)["state"] == "retrying",
    );
    assert_eq!(srv.task(&a2)["state"], "available");
    let held = srv.ok(&["task", "get", &a2]);
    assert!(
        held.contains(&format!("key_order: waits for task {a1} (retrying)")),
        "{held}"
    );
    let (status, body) = request(&srv, "GET", &format!("/v1/tasks/{a2}/held"), "");
    assert_eq!(status, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["held"]["by"], "key_order", "{body}");
    assert_eq!(body["held"]["behind"]["id"].to_string(), a1, "{body}");

    wait_for(
        "A's second task to succeed",
        Duration::from_secs(30),
        || srv.task(&a2)["state"] == "succeeded",
    );
    let first = srv.task(&a1);
    assert_eq!(first["state"], "succeeded");
    assert_eq!(first["attempt"], 3, "{first}");
    let second = srv.task(&a2);
    assert!(
        at(&second["started_at"]) >= at(&first["finished_at"]),
        "A's second started at {} before the first succeeded at {}",
        second["started_at"],
        first["finished_at"]
    );
    // B's tasks ran one after another while A's first was still failing: B was not delayed.
    let first_failure = at(&first["attempts"][0]["finished_at"]);
    let second_start = at(&first["attempts"][1]["started_at"]);
    for b in &bs {
        let t = srv.task(b);
        assert_eq!(t["state"], "succeeded", "{t}");
        assert!(
            at(&t["finished_at"]) < second_start,
            "B's task {b} ended at {}, after A's first ran again at {second_start} \
             (it first failed at {first_failure})",
            t["finished_at"]
        );
    }

    // A dead task stops its key until it is deleted; the queue and the metrics say so.
    let a3 = add("a", "exit 1", &["--max-attempts", "1"]);
    wait_for("A's third task to die", Duration::from_secs(20), || {
        srv.task(&a3)["state"] == "dead"
    });
    let a4 = add("a", "true", &[]);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        srv.task(&a4)["state"],
        "available",
        "held behind the dead one"
    );
    let q = srv.ok(&["queue", "get", "ordered"]);
    assert!(q.contains("1 key stopped by a dead task"), "{q}");
    let (_, metrics) = crate::common::http_get(&srv.url, "/metrics").unwrap();
    assert!(
        metrics.contains("sked_queue_keys_stopped{queue=\"ordered\"} 1"),
        "{metrics}"
    );
    srv.ok(&["task", "rm", &a3]);
    wait_for("A's fourth task to run", Duration::from_secs(20), || {
        srv.task(&a4)["state"] == "succeeded"
    });
}

#[test]
fn bad_key_orders_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let refused = |args: &[&str], says: &str| {
        let out = srv.sked(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(
        &[
            "queue",
            "limit",
            "q",
            "--per-key",
            "2",
            "--order",
            "strict",
            "--create",
        ],
        "per-key limit of 1",
    );
    refused(
        &["queue", "limit", "q", "--order", "strict", "--create"],
        "per-key limit of 1 (it has none)",
    );
    refused(
        &["queue", "limit", "q", "--order", "sideways", "--create"],
        "unknown key order \"sideways\"",
    );
    // Nothing was created.
    refused(&["queue", "get", "q"], "no queue");
    // A strict queue keeps its limit of 1.
    srv.ok(&[
        "queue",
        "limit",
        "s",
        "--per-key",
        "1",
        "--order",
        "strict",
        "--create",
    ]);
    refused(
        &["queue", "limit", "s", "--per-key", "3"],
        "per-key limit of 1 (it is 3)",
    );
    refused(
        &["queue", "limit", "s", "--per-key", "none"],
        "per-key limit of 1",
    );
    for body in [
        r#"{"key_order": "strict", "per_key": 3}"#,
        r#"{"key_order": "bogus"}"#,
        r#"{"key_order": 1}"#,
        r#"{"per_key": 2}"#,
    ] {
        let (status, answer) = request(&srv, "PUT", "/v1/queues/s/limit", body);
        assert_eq!(status, 422, "{body}: {answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert!(answer["error"]["code"].is_string(), "{answer}");
    }
    let q = srv.json(&["queue", "get", "s"]);
    assert_eq!(
        (q["per_key"].as_u64(), q["key_order"].as_str()),
        (Some(1), Some("strict"))
    );
    // Back to the order by priority: then any per-key limit goes.
    srv.ok(&[
        "queue",
        "limit",
        "s",
        "--order",
        "priority",
        "--per-key",
        "3",
    ]);
    let q = srv.json(&["queue", "get", "s"]);
    assert_eq!(q["per_key"], 3);
    assert!(q.get("key_order").is_none(), "{q}");
}
