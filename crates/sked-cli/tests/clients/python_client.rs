//! The Python client package (`clients/python`) against a real server, installed with `pip`
//! into a fresh virtualenv: its README's quick start and its own tests
//! (`clients/python/tests`) run with the installed package.

use std::process::Command;

use crate::client_packages::{
    checkout_copy, left_clean, package, quick_start, quick_start_ran, sh_block, succeeded,
    venv_with,
};
use crate::common::Server;

/// The README's install line, as written, from a project beside a checkout into the project's
/// fresh virtualenv (the checkout left as it was); then, with the installed package
/// (not the source tree), the README's quick start (its worker set to exit once idle: the task
/// it enqueues succeeds and its schedule exists) and the package's own scenario
/// (`clients/python/tests`: a task completed, one failed retryably, one fatally, a slow one
/// heartbeated past its lease, each end state read back through the API).
#[test]
#[ignore = "slow tier"]
fn the_installed_package_runs_its_quick_start_and_its_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let package = package("python");
    let checkout = checkout_copy(dir.path());
    let venv = venv_with(dir.path(), &[]);
    let project = dir.path().join("my-app");
    std::fs::create_dir(&project).unwrap();
    let install = &sh_block(&checkout.join("clients/python/README.md"), 0)[0];
    assert!(install.starts_with("pip install "), "{install}");
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    let installed = Command::new("sh")
        .args(["-c", install])
        .env("PATH", path)
        .env("VIRTUAL_ENV", &venv)
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .current_dir(&project)
        .output()
        .unwrap();
    succeeded(&installed);
    left_clean(&checkout);
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
    let scenario = Command::new(venv.join("bin/python"))
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(format!("{package}/tests"))
        .env("SKED_URL", &server.url)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(dir.path())
        .output()
        .unwrap();
    succeeded(&scenario);
    let said = String::from_utf8_lossy(&scenario.stderr);
    assert!(
        said.contains("test_a_worker_completes_fails_and_heartbeats") && said.contains("\nOK"),
        "{said}"
    );
}
