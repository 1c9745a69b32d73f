//! A built-in kind's payload is checked when it is written, not when it runs: a `shell` task
//! with `{"cmd": …}` or an `http` task without a URL is refused by `sked task add`, by a
//! schedule (`schedule add`, `schedule apply`) and by the API, naming the field, and nothing is
//! made, whether or not the server runs that executor.

use crate::common::Server;
use crate::hostile_cli::request;

#[test]
fn a_bad_built_in_payload_is_refused_when_written_and_nothing_is_made() {
    let dir = tempfile::tempdir().unwrap();
    // No --exec: the check does not depend on running the executor here.
    let srv = Server::start(dir.path(), &[]);
    let refused = |args: &[&str], said: &str| {
        let out = srv.sked(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    };
    refused(
        &[
            "task",
            "add",
            "--kind",
            "shell",
            "--payload",
            r#"{"cmd": "echo"}"#,
        ],
        "unknown field `cmd`",
    );
    refused(
        &[
            "task",
            "add",
            "--kind",
            "shell",
            "--payload",
            r#"{"argv": []}"#,
        ],
        "non-empty \"argv\"",
    );
    refused(
        &[
            "task",
            "add",
            "--kind",
            "http",
            "--payload",
            r#"{"uri": "https://x"}"#,
        ],
        "unknown field `uri`",
    );
    refused(
        &[
            "task",
            "add",
            "--kind",
            "http",
            "--payload",
            r#"{"url": "ftp://x"}"#,
        ],
        "scheme",
    );
    refused(
        &[
            "schedule",
            "add",
            "nightly",
            "--cron",
            "30 2 * * *",
            "--kind",
            "shell",
            "--payload",
            r#"{"cmd": "pg_dump"}"#,
        ],
        "unknown field `cmd`",
    );
    let file = dir.path().join("schedules.yaml");
    std::fs::write(
        &file,
        "- name: nightly\n  spec: 30 2 * * *\n  task:\n    kind: shell\n    payload: {cmd: pg_dump}\n",
    )
    .unwrap();
    refused(
        &["schedule", "apply", "-f", file.to_str().unwrap()],
        "unknown field `cmd`",
    );
    let (status, body) = request(
        &srv,
        "POST",
        "/v1/tasks",
        r#"{"kind": "shell", "payload": {"cmd": "echo"}}"#,
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("invalid_input") && body.contains("cmd"),
        "{body}"
    );
    let (status, body) = request(
        &srv,
        "POST",
        "/v1/tasks/batch",
        r#"{"tasks": [{"kind": "report"}, {"kind": "shell", "payload": {"cmd": "echo"}}]}"#,
    );
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("task 1") && body.contains("cmd"), "{body}");

    assert_eq!(srv.json(&["task", "ls"])["tasks"], serde_json::json!([]));
    assert_eq!(
        srv.json(&["schedule", "ls"])["schedules"],
        serde_json::json!([])
    );
    // A good one is taken, and other kinds' payloads are their handlers' business.
    srv.ok(&[
        "task",
        "add",
        "--kind",
        "shell",
        "--payload",
        r#"{"command": "true"}"#,
    ]);
    srv.ok(&[
        "task",
        "add",
        "--kind",
        "report",
        "--payload",
        r#"{"cmd": 1}"#,
    ]);
}
