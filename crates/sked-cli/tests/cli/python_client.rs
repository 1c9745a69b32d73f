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
