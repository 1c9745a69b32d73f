//! A queue name that no task or setting knows is a likely typo: `sked queue pause`, `resume`
//! and `limit` refuse it (exit 2, with what to do) and create nothing, unless `--create` asks
//! for it; `sked queue rm` removes a queue that has no unfinished task, with its ended tasks;
//! `sked queue retention` sets how long a queue keeps its ended tasks, state by state;
//! `sked queue backoff` how long the retries of its tasks wait.

use crate::common::Server;

#[test]
fn a_mistyped_queue_is_refused_and_an_empty_one_can_be_removed() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    srv.ok(&[
        "task", "add", "--kind", "report", "--queue", "mail", "--in", "1h",
    ]);
    for command in [
        &["queue", "pause", "mial"][..],
        &["queue", "resume", "mial"],
        &["queue", "limit", "mial", "3"],
    ] {
        let out = srv.sked(command);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {said}");
        assert!(
            said.contains("no queue \"mial\"") && said.contains("--create"),
            "{command:?}: {said}"
        );
    }
    let names = || -> Vec<String> {
        let listed = srv.json(&["queue", "ls"]);
        listed["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(), ["mail"], "nothing created");

    // A queue with a task is known; a new one is set up with --create.
    assert!(srv.ok(&["queue", "pause", "mail"]).contains("mail paused"));
    assert!(
        srv.ok(&["queue", "pause", "reports", "--create"])
            .contains("reports paused")
    );
    assert_eq!(names(), ["mail", "reports"]);

    // Removed when it holds no task; refused (and kept, its ended tasks too) while it holds
    // an unfinished one; removed with its ended tasks once none is unfinished.
    assert_eq!(
        srv.ok(&["queue", "rm", "reports"]).trim(),
        "reports removed"
    );
    assert_eq!(names(), ["mail"]);
    let ended = srv.ok(&["task", "add", "--kind", "k", "--queue", "mail"]);
    srv.ok(&["task", "cancel", ended.trim()]);
    let out = srv.sked(&["queue", "rm", "mail"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("has 1 unfinished tasks"), "{said}");
    assert_eq!(srv.json(&["queue", "ls"])["queues"][0]["paused"], true);
    assert_eq!(
        srv.task(ended.trim())["state"],
        "cancelled",
        "an ended task went"
    );
    let unfinished = srv.json(&["task", "ls", "--queue", "mail", "--state", "scheduled"]);
    let id = unfinished["tasks"][0]["id"].to_string();
    srv.ok(&["task", "cancel", &id]);
    assert_eq!(srv.ok(&["queue", "rm", "mail"]).trim(), "mail removed");
    assert!(names().is_empty(), "{:?}", names());
    let (status, _) = crate::hostile_cli::request(&srv, "GET", &format!("/v1/tasks/{id}"), "");
    assert_eq!(status, 404, "its ended tasks were deleted");
    let out = srv.sked(&["queue", "rm", "reports"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sked queue retention` sets how long a queue keeps its ended tasks, state by state, shows
/// it, puts a state back to the server's with `none`, and refuses bad input changing nothing.
#[test]
fn a_queue_keeps_ended_tasks_as_its_retention_says() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let set = ["queue", "retention", "mail"];
    let out = srv.sked(&[&set[..], &["--succeeded", "1h"]].concat());
    assert_eq!(out.status.code(), Some(2), "an unknown queue is refused");
    let q = srv.json(
        &[
            &set[..],
            &["--succeeded", "1h", "--dead", "30d", "--create"],
        ]
        .concat(),
    );
    assert_eq!(
        q["retention"],
        serde_json::json!({"succeeded": "1h", "dead": "30d"}),
        "{q}"
    );
    let shown = srv.ok(&[&set[..], &["--expired", "1d"]].concat());
    assert!(
        shown.contains("succeeded 1h, dead 30d, expired 1d"),
        "{shown}"
    );
    let q = srv.json(&[&set[..], &["--succeeded", "none"]].concat());
    assert_eq!(
        q["retention"],
        serde_json::json!({"dead": "30d", "expired": "1d"}),
        "{q}"
    );
    for (bad, said) in [
        (vec!["--dead", "0s"], "must be positive"),
        (vec!["--dead", "-1d"], "invalid duration"),
        (vec!["--dead", "soon"], "invalid duration"),
        (vec![], "name a state"),
    ] {
        let out = srv.sked(&[&set[..], &bad].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(err.contains(said), "{bad:?}: {err}");
    }
    let (status, answer) = crate::hostile_cli::request(
        &srv,
        "PUT",
        "/v1/queues/mail/retention",
        r#"{"running": "1h"}"#,
    );
    assert_eq!(status, 422, "{answer}");
    let listed = srv.json(&["queue", "ls"]);
    let mail = (listed["queues"].as_array().unwrap().iter())
        .find(|q| q["name"] == "mail")
        .unwrap();
    assert_eq!(
        mail["retention"],
        serde_json::json!({"dead": "30d", "expired": "1d"})
    );
}

#[test]
fn a_queue_backoff_times_the_retries_of_its_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let out = srv.sked(&["queue", "backoff", "flaky", "fixed:1s"]);
    assert_eq!(out.status.code(), Some(2), "an unknown queue is refused");
    let q = srv.json(&["queue", "backoff", "flaky", "fixed:1s", "--create"]);
    assert_eq!(q["backoff"], "fixed:1s", "{q}");
    let shown = srv.ok(&["queue", "backoff", "flaky", "fixed:1s"]);
    assert!(shown.contains("wait: fixed:1s"), "{shown}");
    for (bad, said) in [
        ("fixed:0s", "invalid backoff"),
        ("sometimes", "invalid backoff"),
    ] {
        let out = srv.sked(&["queue", "backoff", "flaky", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains(said), "{bad}: {err}");
    }
    let (status, body) = crate::hostile_cli::request(
        &srv,
        "PUT",
        "/v1/queues/flaky/backoff",
        r#"{"backoff": "fixed:0s"}"#,
    );
    assert_eq!(status, 422, "{body}");
    // Three attempts a second apart: dead within seconds, where the default backoff would
    // wait at least 24 s (8 s, then 16 s, at the jitter's low end).
    let started = std::time::Instant::now();
    let added = srv.json(&[
        "task",
        "add",
        "--queue",
        "flaky",
        "--kind",
        "shell",
        "--payload",
        r#"{"command": "exit 1"}"#,
        "--max-attempts",
        "3",
    ]);
    let id = added["id"].to_string();
    let id = id.as_str();
    let out = srv.sked(&["task", "wait", id, "--timeout", "20s"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    let t = srv.json(&["task", "get", id]);
    assert_eq!(
        (t["state"].as_str(), t["attempt"].as_i64()),
        (Some("dead"), Some(3)),
        "{t}"
    );
    let q = srv.json(&["queue", "backoff", "flaky", "none"]);
    assert!(q.get("backoff").is_none(), "{q}");
}
