//! End-to-end: the real `sked` binary on a temporary SQLite file, driven through the CLI and
//! HTTP. Waits poll with deadlines instead of sleeping fixed times.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{SKED, Server, wait_for};

#[test]
fn shell_task_two_seconds_ahead_runs_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let marker = dir.path().join("ran.txt");
    let payload = format!(r#"{{"command": "echo run >> {}"}}"#, marker.display());
    let id = srv
        .ok(&[
            "task",
            "add",
            "--kind",
            "shell",
            "--payload",
            &payload,
            "--in",
            "2s",
        ])
        .trim()
        .to_string();
    assert_eq!(srv.task(&id)["state"], "scheduled");
    let added = Instant::now();
    wait_for("the task to succeed", Duration::from_secs(10), || {
        srv.task(&id)["state"] == "succeeded"
    });
    assert!(
        added.elapsed() >= Duration::from_millis(1900),
        "ran before its time"
    );
    // Give a second run every chance to happen, then check there was none.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "run\n");
    let t = srv.task(&id);
    assert_eq!(t["attempt"], 1);
    assert_eq!(t["attempts"].as_array().unwrap().len(), 1);
    let listed = srv.ok(&["task", "ls", "--state", "succeeded"]);
    assert!(
        listed.contains("succeeded") && listed.contains(&id),
        "{listed}"
    );
}

#[test]
fn every_second_cron_runs_once_per_second() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let ticks = dir.path().join("ticks.txt");
    let cmd = format!("echo $SKED_TASK_ID >> {}", ticks.display());
    srv.ok(&[
        "schedule",
        "add",
        "tick",
        "--cron",
        "* * * * * *",
        "--shell",
        &cmd,
    ]);
    wait_for("five runs", Duration::from_secs(15), || {
        std::fs::read_to_string(&ticks)
            .map(|s| s.lines().count() >= 5)
            .unwrap_or(false)
    });
    srv.ok(&["schedule", "pause", "tick"]);
    let tasks = srv.json(&["task", "ls", "--schedule", "tick", "--limit", "1000"]);
    let mut nominal: Vec<i64> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["nominal_at"]
                .as_str()
                .unwrap()
                .parse::<jiff::Timestamp>()
                .unwrap()
                .as_second()
        })
        .collect();
    nominal.sort();
    let n = nominal.len();
    nominal.dedup();
    assert_eq!(nominal.len(), n, "no second ran twice");
    assert!(n >= 5);
    for w in nominal.windows(2) {
        assert_eq!(
            w[1] - w[0],
            1,
            "one run per second, none skipped: {nominal:?}"
        );
    }
    let ls = srv.ok(&["schedule", "ls"]);
    assert!(
        ls.contains("tick") && ls.contains("paused") && ls.contains("succeeded"),
        "{ls}"
    );
}

#[test]
fn kill_9_loses_nothing_and_a_running_task_is_rescued() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = Server::start(dir.path(), &["--exec", "shell", "--lease-ttl", "2s"]);
    let started = dir.path().join("started.txt");
    let payload = format!(
        r#"{{"command": "echo $SKED_ATTEMPT >> {}; sleep 1"}}"#,
        started.display()
    );
    let running = srv
        .ok(&["task", "add", "--kind", "shell", "--payload", &payload])
        .trim()
        .to_string();
    let later = srv
        .ok(&["task", "add", "--kind", "report", "--in", "1h"])
        .trim()
        .to_string();
    srv.ok(&[
        "schedule",
        "add",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
        "--kind",
        "report",
    ]);
    wait_for("the task to be running", Duration::from_secs(10), || {
        srv.task(&running)["state"] == "running"
    });

    srv.kill_and_restart();

    assert_eq!(srv.task(&later)["state"], "scheduled");
    let sched = srv.json(&["schedule", "get", "nightly"]);
    assert_eq!(sched["tz"], "Europe/Berlin");
    // The interrupted run's lease expires and the task runs again to completion.
    wait_for(
        "the running task to be rescued and complete",
        Duration::from_secs(20),
        || srv.task(&running)["state"] == "succeeded",
    );
    let t = srv.task(&running);
    assert_eq!(t["attempt"], 2);
    let outcomes: Vec<&str> = t["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["rescued", "succeeded"]);
}

#[test]
fn bad_input_exits_2_with_a_message_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "schedule",
                "add",
                "s",
                "--cron",
                "61 * * * *",
                "--kind",
                "k",
            ],
            "minute value 61",
        ),
        (
            &[
                "schedule",
                "add",
                "s",
                "--cron",
                "0 0 * * *",
                "--tz",
                "Mars/Base",
                "--kind",
                "k",
            ],
            "unknown time zone",
        ),
        (
            &[
                "schedule",
                "add",
                "s",
                "--cron",
                "0 0 30 2 *",
                "--kind",
                "k",
            ],
            "can never fire",
        ),
        (
            &["task", "add", "--kind", "k", "--payload", "{not json"],
            "invalid --payload JSON",
        ),
        (&["task", "get", "424242"], "task 424242 not found"),
        (&["task", "get", "abc"], "invalid task id"),
        (&["task", "cancel", "424242"], "not found"),
        (
            &["task", "add", "--kind", "k", "--in", "soon"],
            "invalid duration",
        ),
        (&["cron", "next", "* * *"], "has 3 fields"),
        (
            &["cron", "next", "@daily", "--tz", "Nowhere/Town"],
            "unknown time zone",
        ),
        (&["task", "frobnicate"], "unrecognized subcommand"),
    ];
    for (args, needle) in cases {
        let out = srv.sked(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "sked {args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "sked {args:?}: {stderr:?} should mention {needle:?}"
        );
    }
    assert_eq!(
        srv.json(&["schedule", "ls"])["schedules"],
        serde_json::json!([])
    );
    assert_eq!(srv.json(&["task", "ls"])["tasks"], serde_json::json!([]));
    // A 3 MB body is refused from its Content-Length, before the body is sent or read.
    {
        use std::io::{Read, Write};
        let mut sock = std::net::TcpStream::connect(srv.url.trim_start_matches("http://")).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let head = "POST /v1/tasks HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 3145728\r\n\r\n";
        sock.write_all(head.as_bytes()).unwrap();
        let mut answer = vec![0u8; 4096];
        let n = sock.read(&mut answer).unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.contains("payload_too_large"), "{answer}");
    }
    // A server that is not there is a runtime failure: exit 1.
    let out = Command::new(SKED)
        .args(["task", "ls", "--server", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the sked server"));
    // Listening beyond loopback without a token is refused.
    let out = Command::new(SKED)
        .args(["server", "--listen", "0.0.0.0:0", "--db", "sqlite://x.db"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("requires an API token"));
}

#[test]
fn cron_next_prints_rfc3339_with_the_zone_offset() {
    let out = Command::new(SKED)
        .args([
            "cron",
            "next",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "--after",
            "2026-03-28T12:00:00Z",
            "-n",
            "3",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "2026-03-29T03:00:00+02:00\n2026-03-30T02:30:00+02:00\n2026-03-31T02:30:00+02:00\n"
    );
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    use std::io::{BufRead, BufReader};
    // `sked … | head -1`: the reader goes away after one line.
    let mut child = Command::new(SKED)
        .args(["cron", "next", "* * * * * *", "-n", "100000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("20"), "{first}");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
