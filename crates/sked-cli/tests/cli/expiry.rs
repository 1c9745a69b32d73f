//! Deadlines to start through the CLI and HTTP on SQLite: a task with `--ttl 1s` in a paused
//! queue ends expired within a rescue pass of its deadline and never runs; deadlines that
//! could never be met are refused, with nothing made; a schedule's runs take `--run-ttl`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{Server, wait_for};
use crate::hostile_cli::request;

/// The leader's pass that ends expired tasks runs every tenth of the lease (30 s by default),
/// at most every 3 s.
const RESCUE_INTERVAL: Duration = Duration::from_secs(3);

fn count(srv: &Server) -> usize {
    srv.json(&["task", "ls"])["tasks"].as_array().unwrap().len()
}

#[test]
fn a_task_not_started_by_its_ttl_expires_and_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    srv.ok(&["queue", "pause", "digests", "--create"]);
    let added = Instant::now();
    let id = srv.ok(&[
        "task", "add", "--kind", "digest", "--queue", "digests", "--ttl", "1s",
    ]);
    let id = id.trim();
    let task = srv.task(id);
    let created: jiff::Timestamp = task["created_at"].as_str().unwrap().parse().unwrap();
    let deadline: jiff::Timestamp = task["expires_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        deadline.duration_since(created),
        jiff::SignedDuration::from_secs(1)
    );
    wait_for("the task to expire", Duration::from_secs(10), || {
        srv.task(id)["state"] == "expired"
    });
    let took = added.elapsed();
    assert!(
        took < Duration::from_secs(1) + RESCUE_INTERVAL + Duration::from_secs(1),
        "expired {took:?} after it was added"
    );
    let task = srv.task(id);
    assert_eq!(task["attempt"], 0, "{task}");
    assert_eq!(task["started_at"], serde_json::Value::Null, "{task}");
    assert_eq!(task["attempts"], json!([]), "{task}");
    assert!(
        srv.ok(&["task", "get", id])
            .contains("not started by its deadline")
    );
    // Resuming the queue runs nothing.
    srv.ok(&["queue", "resume", "digests"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(srv.task(id)["state"], "expired");
    // Waiting for it says how it ended, with the exit code of a failure.
    let out = srv.sked(&["task", "wait", id, "--timeout", "5s"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ended expired"));
    let listed = srv.json(&["task", "ls", "--state", "expired"]);
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 1, "{listed}");
    let queues = srv.json(&["queue", "ls"]);
    let digests = (queues["queues"].as_array().unwrap().iter())
        .find(|q| q["name"] == "digests")
        .unwrap();
    assert_eq!(digests["counts"]["expired"], 1, "{queues}");
}

#[test]
fn a_deadline_that_could_never_be_met_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let past = (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60)).to_string();
    let later = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600)).to_string();
    for (args, said) in [
        (vec!["--ttl", "-5s"], "invalid --ttl"),
        (vec!["--ttl", "0s"], "ttl must be positive"),
        (vec!["--expires-at", &past], "could never run"),
        (
            vec!["--ttl", "5s", "--expires-at", &later],
            "cannot be used with",
        ),
        (
            vec!["--in", "2h", "--expires-at", &later],
            "not after its run time",
        ),
    ] {
        let all = [&["task", "add", "--kind", "k"][..], &args].concat();
        let out = srv.sked(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
    for body in [
        json!({"kind": "k", "ttl": "-1s"}),
        json!({"kind": "k", "expires_at": past}),
        json!({"kind": "k", "ttl": "1m", "expires_at": later}),
    ] {
        let (status, answer) = request(&srv, "POST", "/v1/tasks", &body.to_string());
        assert_eq!(status, 422, "{body}: {answer}");
        assert!(answer.contains("\"code\""), "{answer}");
    }
    assert_eq!(count(&srv), 0, "a refused task was made");
    // A task cannot be moved past its deadline.
    let id = srv.ok(&["task", "add", "--kind", "k", "--in", "1m", "--ttl", "10m"]);
    let out = srv.sked(&["task", "reschedule", id.trim(), "--at", "+1h"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("would never run"));
}

#[test]
fn a_schedule_gives_its_runs_a_deadline_from_their_occurrence() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let add = [
        "schedule",
        "add",
        "digest",
        "--cron",
        "0 9 * * *",
        "--kind",
        "digest",
    ];
    srv.ok(&[&add[..], &["--run-ttl", "30m"]].concat());
    let detail = srv.json(&["schedule", "get", "digest"]);
    assert_eq!(detail["task"]["ttl"], "30m", "{detail}");
    let triggered = srv.json(&["schedule", "trigger", "digest"]);
    let run = srv.task(&triggered["id"].to_string());
    let nominal: jiff::Timestamp = run["nominal_at"].as_str().unwrap().parse().unwrap();
    let deadline: jiff::Timestamp = run["expires_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        deadline.duration_since(nominal),
        jiff::SignedDuration::from_mins(30),
        "{run}"
    );
    let out = srv.sked(&[&add[..], &["--run-ttl", "-1m"]].concat());
    assert_eq!(out.status.code(), Some(2));
}
