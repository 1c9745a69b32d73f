//! `sked workflow`: a workflow made from a YAML or JSON file runs its tasks in order and is
//! waited for; `get`, `ls` and `task get` show it; a cycle, an unknown name or a missing task
//! exits 2 and makes nothing; `cancel` ends what has not run, and `wait` says how it ended.

use crate::common::{Server, stamp};

/// A workflow whose steps append their names to `log`: extract, two transforms, load.
fn diamond_yaml(log: &std::path::Path) -> String {
    let step = |name: &str| format!("echo {name} >> {}", log.display());
    format!(
        "name: nightly\n\
         tasks:\n\
         - name: load\n  kind: shell\n  payload: {{command: '{}'}}\n  after: [t1, t2]\n\
         - name: extract\n  kind: shell\n  payload: {{command: '{}'}}\n\
         - name: t1\n  kind: shell\n  payload: {{command: 'sleep 0.2; {}'}}\n  after: [extract]\n\
         - name: t2\n  kind: shell\n  payload: {{command: '{}'}}\n  after: [extract]\n",
        step("load"),
        step("extract"),
        step("t1"),
        step("t2"),
    )
}

#[test]
fn a_workflow_from_a_file_runs_in_order_and_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let log = dir.path().join("ran.txt");
    let file = dir.path().join("nightly.yaml");
    std::fs::write(&file, diamond_yaml(&log)).unwrap();
    let id = srv.ok(&["workflow", "add", "-f", file.to_str().unwrap()]);
    let id = id.trim();
    let waited = srv.sked(&["workflow", "wait", id, "--timeout", "30s"]);
    let said = String::from_utf8_lossy(&waited.stdout);
    assert_eq!(waited.status.code(), Some(0), "{said} {waited:?}");
    assert!(
        said.contains(&format!("workflow {id} succeeded (4 succeeded)")),
        "{said}"
    );
    let ran = std::fs::read_to_string(&log).unwrap();
    let ran: Vec<&str> = ran.lines().collect();
    assert_eq!(ran.len(), 4, "{ran:?}");
    assert_eq!((ran[0], ran[3]), ("extract", "load"), "{ran:?}");

    let shown = srv.ok(&["workflow", "get", id]);
    assert!(shown.contains("state     succeeded"), "{shown}");
    assert!(shown.contains("tasks     4 (4 succeeded)"), "{shown}");
    let load = shown.lines().find(|l| l.starts_with("load ")).unwrap();
    assert!(load.ends_with("t1, t2"), "{shown}");
    let json = srv.json(&["workflow", "get", id]);
    let tasks = json["tasks"]["tasks"].as_array().unwrap();
    let by_name = |n: &str| tasks.iter().find(|t| t["name"] == n).unwrap()["id"].to_string();
    // Each step started after every step it waits for had ended.
    let started = |n: &str| stamp(&srv.task(&by_name(n)), "started_at");
    let finished = |n: &str| stamp(&srv.task(&by_name(n)), "finished_at");
    assert!(started("load") >= finished("t1").max(finished("t2")));
    assert!(started("t1") >= finished("extract") && started("t2") >= finished("extract"));
    let step = srv.ok(&["task", "get", &by_name("t2")]);
    assert!(step.contains(&format!("workflow      {id} (t2)")), "{step}");

    let listed = srv.ok(&["workflow", "ls"]);
    let line = listed.lines().nth(1).unwrap_or_default();
    assert!(
        line.starts_with(id)
            && line.contains("nightly")
            && line.contains("succeeded")
            && line.contains("4/4"),
        "{listed}"
    );
    let of_it = srv.json(&["task", "ls", "--workflow", id]);
    assert_eq!(of_it["tasks"].as_array().unwrap().len(), 4);
}

#[test]
fn bad_workflows_exit_2_and_make_nothing_and_cancel_ends_one() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let bad = [
        (
            "cycle.json",
            r#"{"tasks": [{"name": "a", "kind": "k", "after": ["b"]}, {"name": "b", "kind": "k", "after": ["a"]}]}"#,
            "the workflow has a cycle: a → b → a",
        ),
        (
            "unknown.yaml",
            "tasks:\n- name: a\n  kind: k\n  after: [nope]\n",
            "task \"a\" waits for \"nope\", which the workflow does not name",
        ),
        (
            "missing.json",
            r#"{"tasks": [{"name": "a", "kind": "k", "depends_on": [4242]}]}"#,
            "4242",
        ),
        (
            "typo.json",
            r#"{"tasks": [{"name": "a", "kind": "k", "paylod": 1}]}"#,
            "paylod",
        ),
    ];
    for (name, text, needle) in bad {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let out = srv.sked(&["workflow", "add", "-f", file.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
    }
    assert_eq!(
        srv.json(&["workflow", "ls"])["workflows"],
        serde_json::json!([])
    );
    assert_eq!(srv.json(&["task", "ls"])["tasks"], serde_json::json!([]));
    let out = srv.sked(&["workflow", "get", "77"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // Not run yet (no executor here): a wait times out with 3, a cancel ends it, a wait says 1.
    let file = dir.path().join("later.json");
    std::fs::write(
        &file,
        r#"{"tasks": [{"name": "a", "kind": "k"}, {"name": "b", "kind": "k", "after": ["a"]}]}"#,
    )
    .unwrap();
    let id = srv.ok(&["workflow", "add", "-f", file.to_str().unwrap()]);
    let id = id.trim();
    let out = srv.sked(&["workflow", "wait", id, "--timeout", "300ms"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("still active"),
        "{out:?}"
    );
    let cancelled = srv.ok(&["workflow", "cancel", id]);
    assert!(
        cancelled.contains(&format!("workflow {id} cancelled (2 cancelled)")),
        "{cancelled}"
    );
    let out = srv.sked(&["workflow", "wait", id]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}
