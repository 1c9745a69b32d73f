//! The stdlib-only Python worker in examples/ processes tasks end to end through the
//! documented worker protocol: results, a fatal failure, and a cancellation seen through its
//! heartbeat.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Server, wait_for};

fn python() -> Option<&'static str> {
    let found = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is needed for the Python worker test in CI"
        );
        eprintln!("skipping: python3 not found");
        return None;
    }
    Some("python3")
}

#[test]
fn python_example_worker_processes_tasks() {
    let Some(py) = python() else { return };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/python/worker.py"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let add = |kind: &str, payload: &str| -> String {
        server
            .ok(&["task", "add", "--kind", kind, "--payload", payload])
            .trim()
            .to_string()
    };
    let sums: Vec<(String, i64)> = (0..20)
        .map(|i| {
            (
                add("py.add", &format!(r#"{{"a": {i}, "b": 100}}"#)),
                i + 100,
            )
        })
        .collect();
    let rejected = add("py.reject", r#"{"why": "no"}"#);
    let waiting = add("py.wait", r#"{"seconds": 60}"#);
    let log = std::fs::File::create(dir.path().join("python.log")).unwrap();
    let mut child = Command::new(py)
        .args([
            script,
            "--server",
            &server.url,
            "--lease-ttl",
            "3",
            "--exit-when-idle",
            "2",
        ])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    for (id, sum) in &sums {
        wait_for("a py.add task", Duration::from_secs(30), || {
            server.task(id)["state"] == "succeeded"
        });
        let t = server.task(id);
        assert_eq!(t["result"]["sum"], *sum, "{t}");
        assert!(
            t["attempts"][0]["worker"]
                .as_str()
                .unwrap()
                .starts_with("python-")
        );
    }
    wait_for("the rejected task", Duration::from_secs(10), || {
        server.task(&rejected)["state"] == "dead"
    });
    let t = server.task(&rejected);
    assert_eq!(t["attempt"], 1, "a fatal failure is not retried");
    assert_eq!(t["last_error"], "cannot handle {'why': 'no'}");
    // Cancelling the running task reaches the handler through the next heartbeat.
    wait_for("the waiting task to run", Duration::from_secs(10), || {
        server.task(&waiting)["state"] == "running"
    });
    let asked = Instant::now();
    server.ok(&["task", "cancel", &waiting]);
    wait_for("the cancellation", Duration::from_secs(10), || {
        server.task(&waiting)["state"] == "cancelled"
    });
    assert!(asked.elapsed() < Duration::from_secs(5));
    // Idle now: it exits by itself, cleanly.
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the worker did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(dir.path().join("python.log")).unwrap();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("'succeeded': 20, 'failed': 1, 'snoozed': 0, 'cancelled': 1"),
        "{log}"
    );
}
