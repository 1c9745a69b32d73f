//! `sked task add --after`: a task waits for its parents, says so in `task get` and `task ls`,
//! runs once they succeeded, and is cancelled, naming the parent, when one ends dead (or runs
//! anyway with `--on-parent-failure run`). Bad ids are refused and make nothing. `sked task
//! wait` returns when a task ends, its exit code saying how.

use std::time::Duration;

use crate::common::{Server, wait_for};

fn shell(cmd: &str) -> String {
    serde_json::json!({ "command": cmd }).to_string()
}

#[test]
fn a_task_added_after_others_waits_for_them_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let gate = dir.path().join("gate");
    // Parents that finish once the gate file exists, so the child is seen waiting first.
    let wait_gate = shell(&format!(
        "while [ ! -e {} ]; do sleep 0.05; done",
        gate.display()
    ));
    let add = |args: &[&str]| srv.ok(args).trim().to_owned();
    let a = add(&["task", "add", "--kind", "shell", "--payload", &wait_gate]);
    let b = add(&["task", "add", "--kind", "shell", "--payload", &wait_gate]);
    let after = format!("{a},{b}");
    let child = add(&[
        "task",
        "add",
        "--kind",
        "shell",
        "--payload",
        &shell("true"),
        "--after",
        &after,
    ]);

    let shown = srv.ok(&["task", "get", &child]);
    assert!(shown.contains(&format!("waiting for {a}, {b}")), "{shown}");
    assert!(
        shown.contains(&format!("depends_on    {a}, {b}")),
        "{shown}"
    );
    assert!(
        srv.ok(&["task", "get", &a])
            .contains(&format!("dependents    {child}")),
        "a parent names what waits for it"
    );
    let listed = srv.ok(&["task", "ls", "--state", "waiting"]);
    assert!(
        listed.contains(&format!("waiting for {a}, {b}")),
        "{listed}"
    );
    let json = srv.task(&child);
    assert_eq!(json["state"], "waiting");
    assert_eq!(
        json["waiting_for"],
        serde_json::json!([a.parse::<i64>().unwrap(), b.parse::<i64>().unwrap()])
    );

    std::fs::write(&gate, "").unwrap();
    wait_for(
        "the child to run after its parents",
        Duration::from_secs(20),
        || srv.task(&child)["state"] == "succeeded",
    );
    let started = crate::common::stamp(&srv.task(&child), "started_at");
    for parent in [&a, &b] {
        assert!(crate::common::stamp(&srv.task(parent), "finished_at") <= started);
    }

    // A parent that ends dead cancels the child, naming it; `run` lets another run anyway.
    let dead = add(&[
        "task",
        "add",
        "--kind",
        "shell",
        "--payload",
        &shell("exit 3"),
        "--max-attempts",
        "1",
        "--in",
        "1s",
    ]);
    let after_dead = |more: &[&str]| {
        let payload = shell("true");
        let mut args = vec!["task", "add", "--kind", "shell", "--payload", &payload];
        args.extend(["--after", dead.as_str()]);
        args.extend(more);
        add(&args)
    };
    let cancelled = after_dead(&[]);
    let anyway = after_dead(&["--on-parent-failure", "run"]);
    wait_for(
        "the run-anyway task to run",
        Duration::from_secs(20),
        || srv.task(&anyway)["state"] == "succeeded",
    );
    let c = srv.task(&cancelled);
    assert_eq!(c["state"], "cancelled");
    assert_eq!(c["last_error"], format!("parent {dead} ended dead"));
    let shown = srv.ok(&["task", "get", &anyway]);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("on_parent_failure") && l.trim_end().ends_with(" run")),
        "{shown}"
    );

    // Bad input: exit 2, naming the problem, and no task made.
    let before = srv.json(&["task", "ls", "--limit", "1000"])["tasks"]
        .as_array()
        .unwrap()
        .len();
    for (args, says) in [
        (vec!["--after", "x"], "invalid --after \"x\""),
        (vec!["--after", "99999"], "depends_on: no task 99999"),
        (
            vec!["--after", &a, "--on-parent-failure", "maybe"],
            "cancel or run",
        ),
        (vec!["--after", &format!("{a},{a}")], "twice"),
    ] {
        let mut full = vec!["task", "add", "--kind", "k"];
        full.extend(args.iter().map(|s| &**s));
        let out = srv.sked(&full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{full:?}: {stderr}");
        assert!(stderr.contains(says), "{full:?}: {stderr}");
    }
    let after_bad = srv.json(&["task", "ls", "--limit", "1000"])["tasks"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after_bad, "nothing was made");
}

#[test]
fn task_wait_returns_when_the_task_ends_and_says_how_in_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let add = |cmd: &str, more: &[&str]| {
        let payload = shell(cmd);
        let mut args = vec!["task", "add", "--kind", "shell", "--payload", &payload];
        args.extend(more);
        srv.ok(&args).trim().to_owned()
    };
    let ok = add("sleep 0.3", &[]);
    let started = std::time::Instant::now();
    let out = srv.sked(&["task", "wait", &ok, "--timeout", "20s"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(srv.task(&ok)["state"], "succeeded");

    let dead = add("echo broken >&2; exit 3", &["--max-attempts", "1"]);
    let out = srv.sked(&["task", "wait", &dead, "--timeout", "20s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("task {dead} ended dead")),
        "{stderr}"
    );

    let later = add("true", &["--in", "1h"]);
    let out = srv.sked(&["task", "wait", &later, "--timeout", "300ms"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "a distinct code on timeout: {stderr}"
    );
    assert!(stderr.contains("is still scheduled"), "{stderr}");
    let out = srv.sked(&["task", "wait", &later, "--timeout", "10ms", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["state"], "scheduled",
        "--json prints the task as it is"
    );

    // Bad input: a malformed or too long wait is refused (exit 2, HTTP 422).
    let out = srv.sked(&["task", "wait", &later, "--timeout", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    let url = srv.url.clone();
    let (status, body) =
        crate::common::http_get(&url, &format!("/v1/tasks/{later}?wait=10m")).unwrap();
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("--max-wait"), "{body}");
    let (status, body) =
        crate::common::http_get(&url, &format!("/v1/tasks/{later}?wait=x")).unwrap();
    assert_eq!(status, 422, "{body}");
}
