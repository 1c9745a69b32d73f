//! The README's quick start as a new user runs it, in a checkout of the repository: its first
//! command (which builds and installs `sked`, then starts the server) and every command of the
//! block that follows it, as written, then the checkout is as it was.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::client_packages::{checkout_copy, left_clean, repository, sh_block, succeeded};
use crate::common::{health, wait_for};

/// The quick start listens where the README says, so nothing else may.
const URL: &str = "http://127.0.0.1:7070";

/// The set-up block's first line (`cargo install … && sked server …`) starts the scheduler; the
/// second (`cargo test --workspace`) is what this suite is, and is not run again here. The
/// install goes to a root of the test's own, put first on `PATH` as `~/.cargo/bin` is for a
/// rustup user. The release profile is made cheap to build (no optimisation): the commands are
/// the README's, what they build is the same code.
#[test]
#[ignore = "slow tier"]
fn the_quick_start_runs_as_written_and_leaves_the_checkout_clean() {
    assert!(
        health(URL).is_none(),
        "something already listens on {URL}, where the quick start's server must"
    );
    let dir = tempfile::tempdir().unwrap();
    let checkout = checkout_copy(dir.path());
    let readme = checkout.join("README.md");
    let setup = sh_block(&readme, 0);
    assert_eq!(setup.len(), 2, "two commands: {setup:?}");
    assert!(setup[0].contains("sked server"), "{}", setup[0]);
    assert!(
        setup[1].starts_with("cargo test --workspace"),
        "{}",
        setup[1]
    );
    let root = dir.path().join("cargo");
    let path = format!(
        "{}:{}",
        root.join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    let target = repository().join("target/readme-quick-start");
    let shell = |line: &str| {
        let mut command = Command::new("sh");
        command
            .args(["-c", line])
            .current_dir(&checkout)
            .env("PATH", &path)
            .env("CARGO_INSTALL_ROOT", &root)
            .env("CARGO_TARGET_DIR", &target)
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
            .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "false")
            .env_remove("SKED_URL")
            .env_remove("SKED_DB");
        command
    };
    let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
    let mut server = shell(&setup[0])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0)
        .spawn()
        .unwrap();
    let stop = |server: &mut std::process::Child| {
        let _ = Command::new("kill")
            .args(["-s", "TERM", "--", &format!("-{}", server.id())])
            .status();
        let _ = server.wait();
    };
    let mut ended = None;
    wait_for(
        "the quick start's server",
        Duration::from_secs(1800),
        || {
            if let Ok(Some(status)) = server.try_wait() {
                ended = Some(status);
                return true;
            }
            health(URL).is_some()
        },
    );
    if let Some(status) = ended {
        let said = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
        panic!("the first command ended ({status}) before serving:\n{said}");
    }
    let next = sh_block(&readme, 1);
    assert!(next.len() >= 5, "{next:?}");
    let mut outputs = Vec::new();
    for line in &next {
        let out = shell(line).stdin(Stdio::null()).output().unwrap();
        if !out.status.success() {
            stop(&mut server);
        }
        succeeded(&out);
        outputs.push((line, String::from_utf8_lossy(&out.stdout).into_owned()));
    }
    stop(&mut server);
    let said = |command: &str| {
        &outputs
            .iter()
            .find(|(line, _)| line.starts_with(command))
            .unwrap_or_else(|| panic!("no `{command}` in the quick start"))
            .1
    };
    assert_eq!(said("sked task add").trim(), "1");
    assert!(
        said("sked task get 1").contains("shell"),
        "{}",
        said("sked task get 1")
    );
    assert!(
        said("sked schedule ls").contains("backup"),
        "{}",
        said("sked schedule ls")
    );
    assert_eq!(
        said("sked cron next").lines().count(),
        3,
        "{}",
        said("sked cron next")
    );
    assert!(checkout.join("sked.db").exists());
    left_clean(&checkout);
}
