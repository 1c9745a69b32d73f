//! What the tests of the client packages (`clients/python`, `clients/typescript`) share: a
//! copy of a package to install, the quick start of its README made to run against a test
//! server, and the checks of what that quick start did.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::Server;

/// The repository's root.
pub(crate) fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A checkout of the repository in `dir/sked`, as a user's clone would be: the files git
/// tracks or would track (the working tree's versions), committed, so that `git status` in it
/// says what a README's commands left behind.
pub(crate) fn checkout_copy(dir: &Path) -> PathBuf {
    let root = repository();
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(&root)
        .output()
        .unwrap();
    succeeded(&listed);
    let checkout = dir.join("sked");
    for file in listed.stdout.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let file = Path::new(std::str::from_utf8(file).unwrap());
        let from = root.join(file);
        if !from.is_file() {
            continue; // deleted in the working tree
        }
        let to = checkout.join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&from, &to).unwrap();
    }
    for args in [
        &["init", "--quiet"][..],
        &["add", "--all"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "--quiet",
            "-m",
            "c",
        ],
    ] {
        succeeded(
            &Command::new("git")
                .args(args)
                .current_dir(&checkout)
                .output()
                .unwrap(),
        );
    }
    checkout
}

/// Checks that `git status` in `checkout` is empty: nothing written, nothing changed.
pub(crate) fn left_clean(checkout: &Path) {
    let status = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(checkout)
        .output()
        .unwrap();
    succeeded(&status);
    assert!(
        status.stdout.is_empty(),
        "the commands left the checkout changed:\n{}",
        String::from_utf8_lossy(&status.stdout)
    );
}

/// The lines of the `nth` (from 0) `sh` block of the README at `readme`, as written.
pub(crate) fn sh_block(readme: &Path, nth: usize) -> Vec<String> {
    let text = std::fs::read_to_string(readme).unwrap();
    let block = text
        .split("```sh\n")
        .nth(nth + 1)
        .unwrap_or_else(|| panic!("{} has no sh block {nth}", readme.display()));
    let block = &block[..block.find("```").unwrap()];
    block.lines().map(str::to_owned).collect()
}

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

/// A fresh virtualenv in `dir` with `packages` installed (paths or names from PyPI); its
/// directory.
pub(crate) fn venv_with(dir: &Path, packages: &[&Path]) -> PathBuf {
    let venv = dir.join("venv");
    succeeded(
        &Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .unwrap(),
    );
    if packages.is_empty() {
        return venv;
    }
    let pip = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .output()
        .unwrap();
    succeeded(&pip);
    venv
}

/// An empty ES-module project `name` in `dir`, to install packages into.
pub(crate) fn node_project(dir: &Path, name: &str) -> PathBuf {
    let project = dir.join(name);
    std::fs::create_dir(&project).unwrap();
    std::fs::write(
        project.join("package.json"),
        format!(r#"{{"name": "{name}", "type": "module"}}"#),
    )
    .unwrap();
    project
}
