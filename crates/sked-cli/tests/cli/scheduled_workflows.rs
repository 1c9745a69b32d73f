//! A schedule that starts a workflow: `sked schedule add --workflow FILE` and a schedule file's
//! `workflow:` fire a three-step workflow whose steps run in order; bad definitions exit 2 and
//! make nothing.

use std::time::Duration;

use crate::common::{Server, stamp, wait_for};

/// extract → transform → load, each step appending its name to `log`.
fn etl_yaml(log: &std::path::Path) -> String {
    let step = |name: &str| format!("sleep 0.2; echo {name} >> {}", log.display());
    format!(
        "name: etl\n\
         tasks:\n\
         - name: extract\n  kind: shell\n  payload: {{command: '{}'}}\n\
         - name: transform\n  kind: shell\n  payload: {{command: '{}'}}\n  after: [extract]\n\
         - name: load\n  kind: shell\n  payload: {{command: '{}'}}\n  after: [transform]\n",
        step("extract"),
        step("transform"),
        step("load"),
    )
}

fn lines(log: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

#[test]
fn a_schedule_fires_a_three_step_workflow_that_runs_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let log = dir.path().join("ran.txt");
    let file = dir.path().join("etl.yaml");
    std::fs::write(&file, etl_yaml(&log)).unwrap();
    let file = file.to_str().unwrap();
    let said = srv.ok(&[
        "schedule",
        "add",
        "nightly",
        "--cron",
        "*/2 * * * * *",
        "--workflow",
        file,
    ]);
    assert!(said.starts_with("nightly next fire "), "{said}");
    wait_for("a run's three steps", Duration::from_secs(30), || {
        lines(&log).len() >= 3
    });
    srv.ok(&["schedule", "pause", "nightly"]);
    let ran = lines(&log);
    assert_eq!(ran[..3], ["extract", "transform", "load"], "{ran:?}");

    // The run is a workflow of the schedule's occurrence; each step started after its parent
    // ended.
    let workflows = srv.json(&["workflow", "ls"])["workflows"].clone();
    let first = workflows.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&first["name"], &first["schedule"]),
        (&serde_json::json!("etl"), &serde_json::json!("nightly"))
    );
    let id = first["id"].to_string();
    let waited = srv.sked(&["workflow", "wait", &id, "--timeout", "30s"]);
    assert_eq!(waited.status.code(), Some(0), "{waited:?}");
    let graph = srv.json(&["workflow", "get", &id]);
    let tasks = graph["tasks"]["tasks"].as_array().unwrap();
    let task = |n: &str| {
        let t = tasks.iter().find(|t| t["name"] == n).unwrap();
        srv.task(&t["id"].to_string())
    };
    let (extract, transform, load) = (task("extract"), task("transform"), task("load"));
    assert!(stamp(&transform, "started_at") >= stamp(&extract, "finished_at"));
    assert!(stamp(&load, "started_at") >= stamp(&transform, "finished_at"));
    for t in [&extract, &transform, &load] {
        assert_eq!(t["schedule"], "nightly");
        assert_eq!(t["nominal_at"], extract["nominal_at"], "one occurrence");
    }

    // `schedule get` says what each occurrence starts, and its ledger names the first task.
    let shown = srv.ok(&["schedule", "get", "nightly"]);
    let line = shown.lines().find(|l| l.starts_with("workflow "));
    assert_eq!(
        line.map(|l| l["workflow".len()..].trim()),
        Some("etl: extract (shell); transform (shell) after extract; load (shell) after transform"),
        "{shown}"
    );
    let json = srv.json(&["schedule", "get", "nightly"]);
    assert!(json.get("task").is_none(), "{json}");
    assert_eq!(json["workflow"]["tasks"][2]["after"][0], "transform");
    let ledger = json["occurrences"].as_array().unwrap();
    assert!(
        (ledger.iter()).any(|o| o["task_id"] == extract["id"]),
        "{json}"
    );
}

#[test]
fn a_schedule_file_declares_a_workflow_and_bad_ones_make_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let file = dir.path().join("schedules.yaml");
    std::fs::write(
        &file,
        "schedules:\n\
         - name: etl\n  spec: '@daily'\n  workflow:\n    tasks:\n\
         \x20   - {name: a, kind: extract}\n\
         \x20   - {name: b, kind: load, after: [a]}\n",
    )
    .unwrap();
    srv.ok(&["schedule", "apply", "-f", file.to_str().unwrap()]);
    let s = srv.json(&["schedule", "get", "etl"]);
    assert_eq!(s["workflow"]["tasks"][1]["kind"], "load");

    let bad = [
        (
            "cycle.yaml",
            "tasks:\n- {name: a, kind: k, after: [b]}\n- {name: b, kind: k, after: [a]}\n",
            "the workflow has a cycle: a → b → a",
        ),
        (
            "timed.yaml",
            "tasks:\n- {name: a, kind: k, run_at: '2030-01-01T00:00:00Z'}\n",
            "run_at is not allowed",
        ),
        (
            "by_id.yaml",
            "tasks:\n- {name: a, kind: k, depends_on: [1]}\n",
            "not for task ids",
        ),
        (
            "typo.yaml",
            "tasks:\n- {name: a, kind: k, paylod: 1}\n",
            "paylod",
        ),
    ];
    for (name, text, needle) in bad {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let path = path.to_str().unwrap();
        let out = srv.sked(&[
            "schedule",
            "add",
            "bad",
            "--every",
            "1m",
            "--workflow",
            path,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
    }
    // A workflow and a task at once.
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "tasks:\n- {name: a, kind: k}\n").unwrap();
    let out = srv.sked(&[
        "schedule",
        "add",
        "bad",
        "--every",
        "1m",
        "--kind",
        "k",
        "--workflow",
        good.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = srv.sked(&["schedule", "get", "bad"]);
    assert_ne!(out.status.code(), Some(0), "nothing was made");
    assert!(
        srv.json(&["workflow", "ls"])["workflows"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}
