//! Half-open connections against a server with few file descriptors: a binary of its own, so
//! that its thousand sockets and its one-second bound run beside no other test.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{SKED, free_port};
use serde_json::Value;

/// 140 sockets that sent half a request line held their connections forever, and with a small
/// descriptor limit no other client got in. Now: 1,000 of them against a server limited to
/// 256 descriptors, a normal request is still answered within a second, and the half-open
/// connections are closed by the header timeout.
#[test]
#[ignore = "slow tier"]
fn half_open_connections_neither_lock_others_out_nor_stay() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = Command::new("sh")
        .args([
            "-c",
            &format!(
                "ulimit -n 256 && exec {SKED} server --db sqlite://sked.db \
                 --listen 127.0.0.1:{port} --header-timeout 2s"
            ),
        ])
        .current_dir(dir.path())
        .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    common::wait_for("the server", Duration::from_secs(20), || {
        common::http_ok(&url)
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/half_open.py");
    let out = Command::new("python3")
        .args([script, "127.0.0.1", &port.to_string(), "1000", "3"])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{got}");
    assert_eq!(got["normal_status"], 200, "{got}");
    assert!(got["normal_ms"].as_f64().unwrap() < 1000.0, "{got}");
    assert_eq!(got["closed"], 1000, "{got}");
}
