//! What the tests of the client packages (`clients/python`, `clients/typescript`) share: a
//! copy of a package to install, the quick start of its README made to run against a test
//! server, and the checks of what that quick start did.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::Server;

/// The package `clients/{name}` of the repository.
pub(crate) fn package(name: &str) -> String {
    format!("{}/../../clients/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A copy of `package` in `dir` (installing or building it then leaves nothing in the
/// repository), without its development tools (`node_modules`).
pub(crate) fn copy_of(package: &str, dir: &Path) -> PathBuf {
    let copy = dir.join("sked-client");
    let copied = Command::new("cp")
        .args(["-r", package])
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());
    let _ = std::fs::remove_dir_all(copy.join("node_modules"));
    copy
}

/// The first `lang` block of `package`'s README, pointed at `server`, its `run` call (which
/// would wait for work forever) replaced by `run_once_idle`.
pub(crate) fn quick_start(
    package: &str,
    lang: &str,
    server: &Server,
    (run, run_once_idle): (&str, &str),
) -> String {
    let readme = std::fs::read_to_string(format!("{package}/README.md")).unwrap();
    let fence = format!("```{lang}\n");
    let start = readme.find(&fence).expect("a code block") + fence.len();
    let script = &readme[start..start + readme[start..].find("```").unwrap()];
    assert!(script.contains(run) && script.contains("http://127.0.0.1:7070"));
    script
        .replace("http://127.0.0.1:7070", &server.url)
        .replace(run, run_once_idle)
}

/// Checks that a process succeeded, showing what it printed when it did not.
pub(crate) fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the READMEs' quick starts do: their `email.send` task succeeded with `{"sent": true}`
/// and their schedule `nightly-report` is in Europe/Berlin.
pub(crate) fn quick_start_ran(server: &Server) {
    let listed = server.json(&["task", "ls", "--kind", "email.send"]);
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{listed}");
    let task = server.json(&["task", "get", &tasks[0]["id"].to_string()]);
    assert_eq!(task["state"], "succeeded", "{task}");
    assert_eq!(task["result"], serde_json::json!({"sent": true}), "{task}");
    let schedule = server.json(&["schedule", "get", "nightly-report"]);
    assert_eq!(schedule["tz"], "Europe/Berlin", "{schedule}");
}
