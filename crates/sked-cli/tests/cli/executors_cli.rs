//! The built-in executors in a real server and worker: a huge answer or huge output leaves the
//! process small, and a shell task's children end when it times out, is cancelled or its
//! worker shuts down.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Server, wait_for};

/// The peak resident memory of a process, in bytes.
pub(crate) fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kb * 1024
}

/// An HTTP server on loopback whose answer is `size` bytes; returns its address.
fn huge_answer_server(size: u64) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(mut sock) = sock else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                let _ = sock.read(&mut buf);
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\n\r\n");
                if sock.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let chunk = vec![b'x'; 1 << 20];
                let mut left = size;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if sock.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });
    addr
}

fn add(server: &Server, args: &[&str]) -> String {
    let mut all = vec!["task", "add"];
    all.extend_from_slice(args);
    server.ok(&all).trim().to_string()
}

fn wait_finished(server: &Server, id: &str, limit: Duration) -> serde_json::Value {
    let mut task = serde_json::Value::Null;
    wait_for("the task to finish", limit, || {
        task = server.task(id);
        matches!(
            task["state"].as_str(),
            Some("succeeded" | "dead" | "cancelled")
        )
    });
    task
}

/// A 300 MB answer and 400 MB of output go through the server's executors without the server
/// growing past 100 MB.
#[test]
fn huge_answers_and_output_leave_the_server_small() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--exec", "shell,http", "--http-allow", "127.0.0.1"],
    );
    let big = huge_answer_server(300_000_000);
    let http = add(
        &server,
        &[
            "--kind",
            "http",
            "--payload",
            &serde_json::json!({"url": format!("http://{big}/")}).to_string(),
        ],
    );
    let shell = add(
        &server,
        &[
            "--kind",
            "shell",
            "--payload",
            r#"{"command": "head -c 400000000 /dev/zero | tr '\\0' 'y'; echo; echo end"}"#,
        ],
    );
    let limit = Duration::from_secs(120);
    let h = wait_finished(&server, &http, limit);
    assert_eq!(h["state"], "succeeded", "{h}");
    assert_eq!(h["result"]["truncated"], true);
    assert_eq!(h["result"]["body"].as_str().unwrap().len(), 4096);
    let s = wait_finished(&server, &shell, limit);
    assert_eq!(s["state"], "succeeded", "{s}");
    let out = s["result"]["stdout"].as_str().unwrap();
    assert_eq!(out.len(), 4096);
    assert!(out.ends_with("yyy\nend\n"), "{out}");
    let peak = peak_rss(server.pid());
    eprintln!(
        "server peak RSS after a 300 MB answer and 400 MB of output: {} MB",
        peak >> 20
    );
    assert!(peak < 100 << 20, "peak RSS {} MB", peak >> 20);
}

/// The ids of processes a shell task recorded in `file`, once it has.
fn recorded_pids(file: &Path) -> Vec<u32> {
    wait_for("the command to start", Duration::from_secs(20), || {
        std::fs::read_to_string(file).is_ok_and(|s| s.ends_with('\n'))
    });
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

fn gone_within(what: &str, pids: &[u32], limit: Duration) -> Duration {
    let started = Instant::now();
    wait_for(what, limit, || pids.iter().all(|&p| !alive(p)));
    started.elapsed()
}

/// A command that leaves a `sleep` child and records its id in `file`.
fn with_child(file: &Path) -> String {
    serde_json::json!({
        "command": format!("sleep 600 & echo $! > {}; wait", file.display())
    })
    .to_string()
}

#[test]
fn shell_children_end_on_timeout_cancel_and_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--exec",
            "shell",
            "--queues",
            "default",
            "--lease-ttl",
            "3s",
        ],
    );
    let grace = sked::executors::KILL_GRACE + Duration::from_secs(2);

    let file = dir.path().join("timeout.pid");
    let id = add(
        &server,
        &[
            "--kind",
            "shell",
            "--payload",
            &with_child(&file),
            "--timeout",
            "1s",
            "--max-attempts",
            "1",
        ],
    );
    let pids = recorded_pids(&file);
    let took = gone_within(
        "the timed-out task's child to end",
        &pids,
        grace + Duration::from_secs(1),
    );
    let t = wait_finished(&server, &id, Duration::from_secs(10));
    assert!(
        t["last_error"].as_str().unwrap().contains("timed out"),
        "{t}"
    );
    eprintln!("timeout: the child ended {took:?} after it was seen");

    let file = dir.path().join("cancel.pid");
    let id = add(
        &server,
        &["--kind", "shell", "--payload", &with_child(&file)],
    );
    let pids = recorded_pids(&file);
    server.ok(&["task", "cancel", &id]);
    // The worker hears of the cancel at its next heartbeat (a third of the lease).
    let took = gone_within(
        "the cancelled task's child to end",
        &pids,
        grace + Duration::from_secs(2),
    );
    eprintln!("cancel: the child ended {took:?} after the cancel");

    let file = dir.path().join("shutdown.pid");
    let db = format!("sqlite://{}", dir.path().join("sked.db").display());
    let mut worker = crate::worker_cli::worker(
        dir.path(),
        &[
            "--db",
            &db,
            "--exec",
            "shell",
            "--queues",
            "batch",
            "--shutdown-grace",
            "1s",
        ],
        "worker.log",
    );
    add(
        &server,
        &[
            "--kind",
            "shell",
            "--queue",
            "batch",
            "--payload",
            &with_child(&file),
        ],
    );
    let pids = recorded_pids(&file);
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    let took = gone_within(
        "the shut-down worker's task's child to end",
        &pids,
        Duration::from_secs(1) + grace,
    );
    eprintln!("shutdown: the child ended {took:?} after SIGTERM (grace 1s)");
    let status = worker.wait().unwrap();
    assert!(status.success(), "{status:?}");
}
