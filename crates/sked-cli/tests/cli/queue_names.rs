//! A queue name that no task or setting knows is a likely typo: `sked queue pause`, `resume`
//! and `limit` refuse it (exit 2, with what to do) and create nothing, unless `--create` asks
//! for it; `sked queue rm` removes a queue that has no unfinished task, with its ended tasks.

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
