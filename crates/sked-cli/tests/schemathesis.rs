//! Schemathesis against a real `sked server`: requests generated from the OpenAPI document
//! (`/openapi.json`) with every check on (`--checks all`: no server error, answers as
//! documented, what the document allows taken, what it forbids refused, the token enforced),
//! on a fixed seed with a bounded budget, so that the document and the server cannot drift
//! apart. Schemathesis comes from PyPI at the versions pinned in
//! `tests/support/schemathesis-requirements.txt` (`.ci/run` installs them); found through
//! `SKED_SCHEMATHESIS` (the `st` command) or on the PATH, and skipped without it unless `CI`
//! is set. Its own binary: it keeps a core busy for a couple of minutes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Server;

const TOKEN: &str = "schemathesis-token";

fn schemathesis() -> Option<PathBuf> {
    if let Some(st) = std::env::var_os("SKED_SCHEMATHESIS") {
        return Some(PathBuf::from(st));
    }
    let on_path = Command::new("st").arg("--version").output();
    if on_path.is_ok_and(|o| o.status.success()) {
        return Some(PathBuf::from("st"));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "schemathesis (st) is missing, and CI must run this test: see tests/support/schemathesis-requirements.txt"
    );
    eprintln!("no schemathesis: skipping");
    None
}

#[test]
#[ignore = "slow tier"]
fn generated_requests_agree_with_the_openapi_document() {
    let Some(st) = schemathesis() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // A claim's wait holds its request at most 1 s here, below schemathesis's 10-s timeout.
    let srv = Server::start(dir.path(), &["--token", TOKEN, "--max-wait", "1s"]);
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/schemathesis.toml");
    let report = dir.path().join("report.json");
    let started = std::time::Instant::now();
    let out = Command::new(&st)
        .arg("--config-file")
        .arg(&config)
        .args(["--no-color", "run"])
        .arg(format!("{}/openapi.json", srv.url))
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .args([
            "--checks",
            "all",
            // See `use_after_free` in the configuration file: a queue deleted may be made again.
            "--exclude-checks",
            "use_after_free",
            "--seed",
            "20261124",
            "--max-examples",
            "25",
        ])
        // One worker: CPython 3.11's parser is not safe to use from several threads at once,
        // and schemathesis compiles code as it goes.
        .args(["--workers", "1", "--generation-database", "none"])
        .args(["--report", "json", "--report-json-path"])
        .arg(&report)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" generated, ") || l.starts_with("===") && l.contains(" in "))
        .collect();
    eprintln!(
        "schemathesis: {} in {:.0?}",
        summary.join(" / "),
        started.elapsed()
    );
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(srv.is_running(), "the server died under schemathesis");
    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    assert!(!log.contains("panicked"), "{log}");
}
