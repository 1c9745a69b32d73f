//! A task that succeeded after a failed attempt is a success: `sked task get` shows the
//! earlier error as history, `task ls` shows no error for it, and `sked task retry` runs it
//! again only when asked to (`--yes`; away from a terminal it refuses and says so).

use std::time::Duration;

use crate::common::{Server, wait_for};

#[test]
fn a_succeeded_task_shows_no_failure_and_runs_again_only_when_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let marker = dir.path().join("ran-once");
    let command = format!(
        "test -e {m} || {{ touch {m}; echo boom >&2; exit 1; }}",
        m = marker.display()
    );
    let payload = serde_json::json!({ "command": command }).to_string();
    let id = srv.ok(&[
        "task",
        "add",
        "--kind",
        "shell",
        "--payload",
        &payload,
        "--max-attempts",
        "1",
    ]);
    let id = id.trim();
    let state = |srv: &Server| srv.task(id)["state"].as_str().unwrap().to_owned();
    wait_for("the first attempt to fail", Duration::from_secs(20), || {
        state(&srv) == "dead"
    });
    srv.ok(&["task", "retry", id]); // dead: runs again without a question
    wait_for(
        "the second attempt to succeed",
        Duration::from_secs(20),
        || state(&srv) == "succeeded",
    );

    let shown = srv.ok(&["task", "get", id]);
    let line = |name: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(name))
            .map(str::to_owned)
    };
    assert!(
        line("earlier_error").is_some_and(|l| l.contains("boom")),
        "{shown}"
    );
    assert_eq!(line("last_error"), None, "{shown}");
    let listed = srv.ok(&["task", "ls", "--state", "succeeded"]);
    let row = listed.lines().find(|l| l.starts_with(id)).unwrap();
    assert!(
        !row.contains("boom") && row.trim_end().ends_with('-'),
        "{listed}"
    );
    assert_eq!(
        srv.task(id)["last_error"]
            .as_str()
            .map(|e| e.contains("boom")),
        Some(true)
    );

    // Not at a terminal: refused, saying how, and nothing changes.
    let out = srv.sked(&["task", "retry", id]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("succeeded") && said.contains("--yes"),
        "{said}"
    );
    assert_eq!(state(&srv), "succeeded");
    assert_eq!(srv.task(id)["attempt"], 2);
    // Confirmed: it runs again.
    srv.ok(&["task", "retry", id, "--yes"]);
    wait_for("the third attempt", Duration::from_secs(20), || {
        let t = srv.task(id);
        t["attempt"] == 3 && t["state"] == "succeeded"
    });
}
