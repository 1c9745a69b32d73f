//! The Python client package (`clients/python`) against a real server: its own tests
//! (`clients/python/tests`) run with the package on `PYTHONPATH`.

use std::process::Command;

use crate::common::Server;

#[test]
fn the_python_clients_tests_pass_against_a_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let package = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/python");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(format!("{package}/tests"))
        .env("SKED_URL", &server.url)
        .env("PYTHONPATH", format!("{package}/src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `pip install ./clients/python` into a fresh virtualenv, then the README's quick start, run
/// against a real server (its worker set to exit once idle): the task it enqueues succeeds.
#[test]
fn the_readme_quick_start_runs_from_a_fresh_virtualenv() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let package = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/python");
    // A copy, so that building it leaves nothing in the repository.
    let copy = dir.path().join("sked-client");
    let copied = Command::new("cp")
        .args(["-r", package])
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());
    let venv = dir.path().join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pip = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        pip.status.success(),
        "{}",
        String::from_utf8_lossy(&pip.stderr)
    );
    let readme = std::fs::read_to_string(format!("{package}/README.md")).unwrap();
    let start = readme.find("```python\n").expect("a python block") + "```python\n".len();
    let script = &readme[start..start + readme[start..].find("```").unwrap()];
    assert!(script.contains("worker.run()") && script.contains("http://127.0.0.1:7070"));
    let script = script
        .replace("http://127.0.0.1:7070", &server.url)
        .replace("worker.run()", "worker.run(exit_when_idle=1.0)");
    let run = Command::new(venv.join("bin/python"))
        .args(["-c", &script])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let listed = server.json(&["task", "ls", "--kind", "email.send"]);
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["state"], "succeeded", "{listed}");
    let task = server.json(&["task", "get", &tasks[0]["id"].to_string()]);
    assert_eq!(task["result"], serde_json::json!({"sent": true}), "{task}");
    let schedule = server.json(&["schedule", "get", "nightly-report"]);
    assert_eq!(schedule["tz"], "Europe/Berlin", "{schedule}");
}
