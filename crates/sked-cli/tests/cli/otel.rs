//! OpenTelemetry: with `--otlp-endpoint`, a task enqueued with a `traceparent` header yields
//! `sked.enqueue`, `sked.claim` and `sked.run` spans in the caller's trace, in that order, the
//! claim and the run children of the enqueue; the shell command sees the run's context in
//! `TRACEPARENT`. Without the flag nothing is exported and the caller's context still reaches
//! the command.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::otlp_receiver::{Receiver, one};
use crate::common::{Server, http_call, wait_for};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

/// `POST path` with a JSON body and extra headers: the status and the answer as JSON.
fn post(server: &Server, path: &str, headers: &[(&str, &str)], body: &Value) -> (u16, Value) {
    http_call(&server.url, "POST", path, headers, &body.to_string())
}

/// Enqueues a shell task that writes `$TRACEPARENT` to `out`, inside the caller's trace;
/// returns the task once it succeeded.
fn run_traced_shell(server: &Server, out: &Path) -> Value {
    let task = json!({
        "kind": "shell",
        "payload": {"command": format!("printf %s \"$TRACEPARENT\" > {}", out.display())},
    });
    let caller = format!("00-{TRACE}-{CALLER}-01");
    let (status, added) = post(server, "/v1/tasks", &[("traceparent", &caller)], &task);
    assert_eq!(status, 201, "{added}");
    let id = added["id"].as_i64().unwrap().to_string();
    let mut got = Value::Null;
    wait_for("the shell task to succeed", Duration::from_secs(30), || {
        got = server.task(&id);
        got["state"] == "succeeded"
    });
    got
}

#[test]
fn a_traced_enqueue_yields_enqueue_claim_and_run_spans_in_the_callers_trace() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let server = receiver.server(dir.path(), &["--exec", "shell"]);
    let out = dir.path().join("traceparent");
    let task = run_traced_shell(&server, &out);

    let spans = receiver.trace(TRACE, &["sked.enqueue", "sked.claim", "sked.run shell"]);
    let (enqueue, claim, run) = (
        one(&spans, "sked.enqueue"),
        one(&spans, "sked.claim"),
        one(&spans, "sked.run shell"),
    );
    assert_eq!(
        enqueue.parent_id, CALLER,
        "the enqueue continues the caller's span"
    );
    assert_eq!(
        claim.parent_id, enqueue.span_id,
        "the claim is the task's child"
    );
    assert_eq!(
        run.parent_id, enqueue.span_id,
        "the run is the task's child"
    );
    assert!(
        enqueue.start_ns <= claim.start_ns && claim.start_ns <= run.start_ns,
        "in order: {spans:#?}"
    );
    assert!(run.end_ns >= run.start_ns);
    assert_eq!(enqueue.service, "sked");
    let id = task["id"].as_i64().unwrap().to_string();
    for span in [claim, run] {
        assert_eq!(
            span.attribute("sked.task.id"),
            Some(id.as_str()),
            "{span:?}"
        );
        assert_eq!(span.attribute("sked.queue"), Some("default"));
    }
    assert_eq!(run.attribute("sked.outcome"), Some("succeeded"));
    assert_eq!(
        task["traceparent"],
        format!("00-{TRACE}-{}-01", enqueue.span_id),
        "the task carries its enqueue span's context"
    );
    let seen = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        seen,
        format!("00-{TRACE}-{}-01", run.span_id),
        "the command runs inside the run's span"
    );

    // An invalid header is ignored (the task is enqueued, untraced by the caller).
    let (status, added) = post(
        &server,
        "/v1/tasks",
        &[("traceparent", "00-not-a-trace-01")],
        &json!({"kind": "later", "run_at": "2099-01-01T00:00:00Z"}),
    );
    assert_eq!(status, 201, "{added}");
    // A traceparent in the body that is not one is invalid input.
    let (status, refused) = post(
        &server,
        "/v1/tasks",
        &[],
        &json!({"kind": "later", "traceparent": "00-xyz"}),
    );
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("traceparent"),
        "{refused}"
    );
}

#[test]
fn without_the_flag_nothing_is_exported_and_the_context_still_reaches_the_command() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    // The receiver is there, but nothing names it.
    let server = Server::start(dir.path(), &["--exec", "shell"]);
    let out = dir.path().join("traceparent");
    let task = run_traced_shell(&server, &out);
    let caller = format!("00-{TRACE}-{CALLER}-01");
    assert_eq!(task["traceparent"], caller);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), caller);
    std::thread::sleep(Duration::from_millis(300));
    assert!(receiver.spans().is_empty());
}

#[test]
fn a_bad_endpoint_is_refused_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(crate::common::SKED)
        .args(["server", "--otlp-endpoint", "collector:4318", "--db"])
        .arg(format!("sqlite://{}", dir.path().join("sked.db").display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--otlp-endpoint"), "{err}");
    assert!(!dir.path().join("sked.db").exists(), "nothing was created");
}

/// A remote `sked worker` with `--otlp-endpoint`: the claim answer hands it the task's
/// context, so its run span (exported under its own service name) is the task's child, and
/// what it has buffered goes out when it stops.
#[test]
fn a_remote_worker_exports_its_runs_as_children_of_the_task() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let server = receiver.server(dir.path(), &[]);
    let log = std::fs::File::create(dir.path().join("worker.log")).unwrap();
    let mut worker = std::process::Command::new(crate::common::SKED)
        .args(["worker", "--server", &server.url, "--exec", "shell"])
        .args(["--otlp-endpoint", &receiver.url])
        // Long enough that only the stop sends its span.
        .env("OTEL_BSP_SCHEDULE_DELAY", "600000")
        .env("OTEL_SERVICE_NAME", "sked-worker")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let out = dir.path().join("traceparent");
    run_traced_shell(&server, &out);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        receiver.spans().iter().all(|s| s.service != "sked-worker"),
        "nothing from the worker before it stops"
    );
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    assert!(worker.wait().unwrap().success());

    let spans = receiver.trace(TRACE, &["sked.enqueue", "sked.claim", "sked.run shell"]);
    let (enqueue, run) = (one(&spans, "sked.enqueue"), one(&spans, "sked.run shell"));
    assert_eq!(run.service, "sked-worker");
    assert_eq!(enqueue.service, "sked");
    assert_eq!(run.parent_id, enqueue.span_id);
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!("00-{TRACE}-{}-01", run.span_id)
    );
}
