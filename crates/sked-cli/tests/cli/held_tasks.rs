//! A worker cannot hold a task forever: one that ignores a task's timeout but keeps
//! heartbeating loses the task at its timeout and the server's grace, and its late ending is
//! refused.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Server, wait_for};
use crate::hostile_cli::request;

fn post(srv: &Server, path: &str, body: Value) -> (u16, Value) {
    let (status, text) = request(srv, "POST", path, &body.to_string());
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[test]
fn a_worker_that_ignores_the_timeout_loses_the_task() {
    let dir = tempfile::tempdir().unwrap();
    // A rescuer pass every second (a tenth of the lease, at least 250 ms).
    let srv = Server::start(dir.path(), &["--lease-ttl", "10s", "--timeout-grace", "1s"]);
    let (status, task) = post(&srv, "/v1/tasks", json!({"kind": "slow", "timeout": "1s"}));
    assert_eq!(status, 201, "{task}");
    let id = task["id"].as_i64().unwrap();
    let (status, claim) = post(
        &srv,
        "/v1/claim",
        json!({"worker": "rogue", "kinds": ["slow"], "max": 1}),
    );
    let claimed_at = Instant::now();
    assert_eq!(status, 200, "{claim}");
    let held = &claim["tasks"][0];
    assert_eq!(held["id"].as_i64(), Some(id));
    let lease: jiff::Timestamp = held["lease_expires_at"].as_str().unwrap().parse().unwrap();
    let started: jiff::Timestamp = held["started_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        lease.duration_since(started),
        jiff::SignedDuration::from_secs(2),
        "the claim leases it until its timeout and the grace, not the 10 s lease"
    );

    // The rogue worker heartbeats every 200 ms and never stops the work.
    let path = format!("/v1/tasks/{id}/heartbeat");
    let (refused, answer) = loop {
        let (status, answer) = post(&srv, &path, json!({"attempt": 1, "lease_ttl": "10s"}));
        if status != 200 {
            break (status, answer);
        }
        let lease: jiff::Timestamp = answer["lease_expires_at"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(lease.duration_since(started) <= jiff::SignedDuration::from_secs(2));
        assert!(
            claimed_at.elapsed() < Duration::from_secs(10),
            "heartbeats are still accepted after {:?}",
            claimed_at.elapsed()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let refused_after = claimed_at.elapsed();
    eprintln!("heartbeat refused {refused_after:?} after the claim: {answer}");
    assert_eq!(refused, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "stale_lease", "{answer}");
    // Refused by the timeout rule; or, when a rescuer pass came between the deadline and the
    // heartbeat, because the task was given back meanwhile (the rescue says why, below).
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("timeout of 1s") || message.contains("no longer held"),
        "{answer}"
    );
    assert!(
        refused_after >= Duration::from_millis(1800) && refused_after < Duration::from_millis(2600),
        "refused at timeout + grace (2 s), not {refused_after:?}"
    );

    // The rescuer gives it back; it says why.
    wait_for("the task to be rescued", Duration::from_secs(5), || {
        srv.task(&id.to_string())["state"] == "available"
    });
    let task = srv.task(&id.to_string());
    let last_error = task["last_error"].as_str().unwrap_or_default();
    assert!(last_error.starts_with("timed out"), "{task}");
    eprintln!("rescued {:?} after the claim", claimed_at.elapsed());

    // Its late ending is refused and changes nothing.
    let (status, answer) = post(
        &srv,
        &format!("/v1/tasks/{id}/complete"),
        json!({"attempt": 1}),
    );
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "stale_lease");
    assert_eq!(srv.task(&id.to_string())["state"], "available");

    // A task without a timeout keeps the lease it asks for.
    let (_, plain) = post(&srv, "/v1/tasks", json!({"kind": "plain"}));
    let (_, claim) = post(
        &srv,
        "/v1/claim",
        json!({"worker": "w", "kinds": ["plain"], "max": 1, "lease_ttl": "10s"}),
    );
    assert_eq!(claim["tasks"][0]["id"], plain["id"]);
    let lease: jiff::Timestamp = claim["tasks"][0]["lease_expires_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let started: jiff::Timestamp = claim["tasks"][0]["started_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        lease.duration_since(started),
        jiff::SignedDuration::from_secs(10)
    );
}
