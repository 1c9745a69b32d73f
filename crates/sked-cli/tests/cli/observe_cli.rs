//! Operators' commands and signals as processes: `sked task import` (checked whole before
//! anything is enqueued), `sked top --once`, JSON logs, and workers appearing in
//! `/v1/workers` while they run and marked stopped after SIGTERM.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{SKED, Server, http_get, wait_for};
use serde_json::Value;

fn queue_count(server: &Server, queue: &str) -> u64 {
    let queues = server.json(&["queue", "ls"]);
    queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == queue)
        .map(|q| {
            q["counts"]
                .as_object()
                .unwrap()
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn import_checks_every_line_first_then_enqueues_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let lines: Vec<String> = (0..2500)
        .map(|i| {
            serde_json::json!({
                "kind": "imported", "queue": "bulk", "payload": {"i": i},
                "unique_key": format!("k{}", i % 2000),
            })
            .to_string()
        })
        .collect();
    let good = dir.path().join("tasks.jsonl");
    std::fs::write(&good, lines.join("\n") + "\n\n").unwrap();
    let out = server.json(&["task", "import", good.to_str().unwrap(), "--batch", "700"]);
    assert_eq!(out["imported"], 2000, "{out}");
    assert_eq!(out["duplicates"], 500, "{out}");
    assert_eq!(queue_count(&server, "bulk"), 2000);

    // A bad line anywhere: exit 2 naming file and line, and nothing from the file is enqueued.
    let mut bad_lines = lines.clone();
    bad_lines[1700] = r#"{"kind": "", "queue": "bulk"}"#.into();
    for (i, l) in bad_lines.iter_mut().enumerate() {
        *l = l.replace("\"unique_key\":\"k", &format!("\"unique_key\":\"b{i}-"));
    }
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, bad_lines.join("\n")).unwrap();
    let out = server.sked(&["task", "import", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.jsonl:1701:") && err.contains("kind"),
        "{err}"
    );
    let not_json = dir.path().join("not.jsonl");
    std::fs::write(&not_json, "{\"kind\": \"a\"}\n{oops\n").unwrap();
    let out = server.sked(&["task", "import", not_json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not.jsonl:2:"));
    assert_eq!(
        queue_count(&server, "bulk"),
        2000,
        "the bad files changed nothing"
    );
    assert_eq!(queue_count(&server, "default"), 0);

    // From stdin.
    let mut child = Command::new(SKED)
        .args(["task", "import", "-", "--json"])
        .env("SKED_URL", &server.url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"{\"kind\": \"a\", \"queue\": \"piped\"}\n{\"kind\": \"b\", \"queue\": \"piped\"}\n",
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["imported"], 2);
    assert_eq!(queue_count(&server, "piped"), 2);
}

#[test]
fn top_once_shows_queues_schedules_workers_and_the_leader() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--exec", "shell"]);
    server.ok(&["task", "add", "--kind", "report", "--queue", "reports"]);
    server.ok(&[
        "schedule",
        "add",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
        "--kind",
        "report",
    ]);
    let node = crate::common::health(&server.url).unwrap()["node"]
        .as_str()
        .unwrap()
        .to_string();
    let out = server.ok(&["top", "--once"]);
    assert!(out.contains(&format!("leader {node}")), "{out}");
    assert!(out.contains("reports"), "{out}");
    assert!(
        out.contains("nightly") && out.contains("03:00:00+01:00"),
        "{out}"
    );
    assert!(
        out.contains(&format!("{node}-exec")),
        "the server's executor is a worker: {out}"
    );
    let bad = server.sked(&["top", "--interval", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--interval"));
}

#[test]
fn logs_are_json_lines_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("sked.db").display());
    let server = Server::start_on(dir.path(), &db, &[], &[("SKED_LOG_JSON", "1")], "json.log");
    server.ok(&["queue", "ls"]);
    wait_for("a log line", Duration::from_secs(10), || {
        std::fs::read_to_string(dir.path().join("json.log")).is_ok_and(|l| l.contains("leader"))
    });
    let log = std::fs::read_to_string(dir.path().join("json.log")).unwrap();
    let mut lines = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
        lines += 1;
    }
    assert!(lines >= 1);
}

#[test]
fn a_worker_is_listed_while_it_runs_and_stopped_after_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let log = std::fs::File::create(dir.path().join("worker.log")).unwrap();
    let mut w = Command::new(SKED)
        .args([
            "worker",
            "--server",
            &server.url,
            "--exec",
            "shell",
            "--queues",
            "q1,q2",
            "--concurrency",
            "3",
        ])
        .stderr(log)
        .spawn()
        .unwrap();
    let find = || -> Option<Value> {
        let (_, body) = http_get(&server.url, "/v1/workers")?;
        let v: Value = serde_json::from_str(&body).ok()?;
        v["workers"]
            .as_array()?
            .iter()
            .find(|x| x["role"] == "worker" && x["queues"] == serde_json::json!(["q1", "q2"]))
            .cloned()
    };
    wait_for("the worker to be listed", Duration::from_secs(15), || {
        find().is_some_and(|x| x["alive"] == true)
    });
    let me = find().unwrap();
    assert_eq!(me["concurrency"], 3, "{me}");
    Command::new("kill")
        .args(["-TERM", &w.id().to_string()])
        .status()
        .unwrap();
    assert!(w.wait().unwrap().success());
    let me = find().unwrap();
    assert_eq!(me["alive"], false, "{me}");
    assert!(me["stopped_at"].is_string(), "{me}");
}
