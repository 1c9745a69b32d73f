//! The Python client package (`clients/python`) against a real server: its own tests
//! (`clients/python/tests`) run with the package on `PYTHONPATH`, and its README's quick start
//! after a `pip install` into a fresh virtualenv.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::client_packages::{copy_of, package, quick_start, quick_start_ran, succeeded};
use crate::common::Server;

#[test]
fn the_python_clients_tests_pass_against_a_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let package = package("python");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(format!("{package}/tests"))
        .env("SKED_URL", &server.url)
        .env("PYTHONPATH", format!("{package}/src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    succeeded(&out);
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
    let pip = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .output()
        .unwrap();
    succeeded(&pip);
    venv
}

/// `pip install ./clients/python` into a fresh virtualenv, then the README's quick start, run
/// against a real server (its worker set to exit once idle): the task it enqueues succeeds.
#[test]
fn the_readme_quick_start_runs_from_a_fresh_virtualenv() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let package = package("python");
    let venv = venv_with(dir.path(), &[&copy_of(&package, dir.path())]);
    let script = quick_start(
        &package,
        "python",
        &server,
        ("worker.run()", "worker.run(exit_when_idle=1.0)"),
    );
    let run = Command::new(venv.join("bin/python"))
        .args(["-c", &script])
        .current_dir(dir.path())
        .output()
        .unwrap();
    succeeded(&run);
    quick_start_ran(&server);
}
