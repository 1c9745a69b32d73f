//! `sked worker` as a process: SIGTERM, `--max-runtime`, remote mode, declared schedules
//! (twenty workers starting at once), and bad flags.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{SKED, Server, wait_for};
use serde_json::Value;
use sked_postgres::testing::{TestSchema, database_url};

pub(crate) fn worker(dir: &Path, args: &[&str], log: &str) -> Child {
    let log = std::fs::File::create(dir.join(log)).unwrap();
    Command::new(SKED)
        .arg("worker")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn sigterm(child: &Child) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
}

/// Waits for the process to exit, at most `limit`; its exit code.
fn exit_within(child: &mut Child, limit: Duration) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        assert!(
            start.elapsed() < limit,
            "the worker did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn add_shell(server: &Server, cmd: &str) -> String {
    let payload = serde_json::json!({ "command": cmd }).to_string();
    server
        .ok(&["task", "add", "--kind", "shell", "--payload", &payload])
        .trim()
        .to_string()
}

fn count(server: &Server, state: &str) -> usize {
    server.json(&["task", "ls", "--state", state, "--limit", "1000"])["tasks"]
        .as_array()
        .unwrap()
        .len()
}

/// Remote (`--server`) and embedded (`--db`, the server's SQLite file) workers alike: SIGTERM
/// lets the running task finish, then the worker exits 0 with nothing left running.
#[test]
fn sigterm_lets_the_running_task_finish_then_the_worker_exits() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let db = format!("sqlite://{}", dir.path().join("sked.db").display());
    for (mode, flag, target) in [
        ("remote", "--server", &server.url),
        ("embedded", "--db", &db),
    ] {
        let mut w = worker(
            dir.path(),
            &[flag, target, "--exec", "shell"],
            &format!("worker-{mode}.log"),
        );
        // `running` also covers a task claimed into the prefetch buffer, which shutdown gives
        // back: wait until the command itself has started.
        let started = dir.path().join(format!("started-{mode}"));
        let id = add_shell(
            &server,
            &format!("touch {}; sleep 1; echo done", started.display()),
        );
        wait_for("the task to start", Duration::from_secs(15), || {
            started.exists()
        });
        let asked = Instant::now();
        sigterm(&w);
        assert_eq!(exit_within(&mut w, Duration::from_secs(10)), 0, "{mode}");
        let t = server.task(&id);
        assert_eq!(t["state"], "succeeded", "{mode}: {t}");
        assert_eq!(t["result"]["stdout"], "done\n");
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{mode}: exit took {:?}",
            asked.elapsed()
        );
        assert_eq!(
            count(&server, "running"),
            0,
            "{mode}: nothing is left running"
        );
    }
}

/// Past the grace period, what still runs is stopped and given back: available at once.
#[test]
fn sigterm_past_the_grace_period_releases_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut w = worker(
        dir.path(),
        &[
            "--server",
            &server.url,
            "--exec",
            "shell",
            "--shutdown-grace",
            "1s",
        ],
        "worker.log",
    );
    let id = add_shell(&server, "sleep 60");
    wait_for("the task to run", Duration::from_secs(15), || {
        server.task(&id)["state"] == "running"
    });
    sigterm(&w);
    assert_eq!(exit_within(&mut w, Duration::from_secs(5)), 0);
    let t = server.task(&id);
    assert_eq!(t["state"], "available", "{t}");
    assert_eq!(t["attempts"][0]["outcome"], "released");
}

#[test]
fn max_runtime_exits_in_time_having_worked() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let tasks: Vec<Value> = (0..100)
        .map(|_| serde_json::json!({"kind": "shell", "payload": {"command": "sleep 1"}}))
        .collect();
    for t in &tasks {
        server.ok(&[
            "task",
            "add",
            "--kind",
            "shell",
            "--payload",
            &t["payload"].to_string(),
        ]);
    }
    let db = format!("sqlite://{}", dir.path().join("sked.db").display());
    let started = Instant::now();
    let mut w = worker(
        dir.path(),
        &["--db", &db, "--exec", "shell", "--max-runtime", "6s"],
        "worker.log",
    );
    let code = exit_within(&mut w, Duration::from_secs(10));
    let took = started.elapsed();
    assert_eq!(code, 0);
    assert!(took < Duration::from_secs(6), "the worker ran {took:?}");
    let done = count(&server, "succeeded");
    assert!(done >= 10, "only {done} tasks done");
    assert!(done < 100, "more work than fits in 6s");
    assert_eq!(count(&server, "running"), 0, "nothing is left running");
    assert_eq!(count(&server, "available"), 100 - done);
    eprintln!("--max-runtime 6s: exited after {took:?} with {done} one-second tasks done");
}

/// `--initial-estimate` is what the worker expects of a task before any has run: at 10 s,
/// nothing fits in a 4 s run, so the worker claims nothing and exits at once; at 1 s it works.
#[test]
fn max_runtime_takes_the_initial_estimate_and_tolerance() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    for _ in 0..5 {
        add_shell(&server, "true");
    }
    let db = format!("sqlite://{}", dir.path().join("sked.db").display());
    let bounded = ["--db", &db, "--exec", "shell", "--max-runtime", "4s"];
    let started = Instant::now();
    let mut w = worker(
        dir.path(),
        &[&bounded[..], &["--initial-estimate", "10s"]].concat(),
        "worker.log",
    );
    assert_eq!(exit_within(&mut w, Duration::from_secs(10)), 0);
    let took = started.elapsed();
    assert_eq!(
        count(&server, "succeeded"),
        0,
        "a 10 s task does not fit in 4 s"
    );
    assert_eq!(count(&server, "available"), 5);
    assert!(
        took < Duration::from_secs(4),
        "it waited {took:?} for nothing"
    );

    let mut w = worker(
        dir.path(),
        &[
            &bounded[..],
            &["--initial-estimate", "1s", "--tolerance", "2"],
        ]
        .concat(),
        "worker2.log",
    );
    assert_eq!(exit_within(&mut w, Duration::from_secs(10)), 0);
    assert_eq!(count(&server, "succeeded"), 5);
}

/// Worker processes that are killed when the test ends early (it failed), not left running.
struct Reaped(Vec<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn declare_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("schedules.json");
    let defs = serde_json::json!([
        {"name": "nightly-report", "spec": "0 3 * * *", "tz": "Europe/Paris",
         "task": {"kind": "shell", "payload": {"command": "echo report"}}},
        {"name": "every-5m", "spec": "*/5 * * * *", "task": {"kind": "shell", "payload": {"command": "true"}}},
        {"name": "hourly", "spec": "every 1h", "task": {"kind": "shell", "payload": {"command": "true"}}}
    ]);
    std::fs::write(&path, defs.to_string()).unwrap();
    path
}

/// Twenty worker processes started at once with the same declared schedules leave exactly
/// one copy of each.
fn twenty_workers_declare_once(server: &Server, db: &str) {
    let dir = &server.dir;
    let file = declare_file(dir);
    let mut workers = Reaped(
        (0..20)
            .map(|i| {
                worker(
                    dir,
                    &[
                        "--db",
                        db,
                        "--exec",
                        "shell",
                        "--concurrency",
                        "1",
                        "--schedules",
                        file.to_str().unwrap(),
                        "--schedule-group",
                        "reports",
                    ],
                    &format!("worker-{i}.log"),
                )
            })
            .collect(),
    );
    let synced = |i: usize| {
        std::fs::read_to_string(dir.join(format!("worker-{i}.log")))
            .unwrap_or_default()
            .contains("declared schedules in sync")
    };
    wait_for("every worker to sync", Duration::from_secs(60), || {
        (0..20).all(synced)
    });
    for w in &workers.0 {
        sigterm(w);
    }
    for w in &mut workers.0 {
        assert_eq!(exit_within(w, Duration::from_secs(10)), 0);
    }
    let listed = server.json(&["schedule", "ls"]);
    let mut names: Vec<&str> = listed["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, vec!["every-5m", "hourly", "nightly-report"]);
    // Each was created by exactly one of the twenty.
    let created: usize = (0..20)
        .map(|i| {
            let log = std::fs::read_to_string(dir.join(format!("worker-{i}.log"))).unwrap();
            let line = log
                .lines()
                .find(|l| l.contains("declared schedules in sync"))
                .unwrap()
                .to_string();
            let list = line
                .split("created=[")
                .nth(1)
                .unwrap()
                .split(']')
                .next()
                .unwrap();
            list.matches('"').count() / 2
        })
        .sum();
    assert_eq!(created, 3);
}

#[test]
fn twenty_workers_declare_schedules_once_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let db = format!("sqlite://{}", dir.path().join("sked.db").display());
    twenty_workers_declare_once(&server, &db);
}

#[test]
fn twenty_workers_declare_schedules_once_on_postgres() {
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_on(dir.path(), &schema.url(), &[], &[], "server.log");
    twenty_workers_declare_once(&server, &schema.url());
}

#[test]
fn bad_worker_flags_exit_2_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let bad_cron = dir.path().join("bad.json");
    std::fs::write(
        &bad_cron,
        r#"[{"name": "x", "spec": "61 * * * *", "task": {"kind": "shell"}}]"#,
    )
    .unwrap();
    let bounded = |flag, value| vec!["--exec", "shell", "--max-runtime", "5s", flag, value];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--exec", "shell", "--max-runtime", "soon"],
            "--max-runtime",
        ),
        (bounded("--tolerance", "0.5"), "invalid --tolerance"),
        (bounded("--tolerance", "ten"), "invalid --tolerance"),
        (
            bounded("--initial-estimate", "soon"),
            "invalid --initial-estimate",
        ),
        (
            vec!["--exec", "shell", "--tolerance", "2"],
            "only with --max-runtime",
        ),
        (
            vec!["--exec", "shell", "--schedules", "missing.json"],
            "missing.json",
        ),
        (
            vec!["--exec", "shell", "--schedules", bad_cron.to_str().unwrap()],
            "schedule \"x\"",
        ),
        (
            vec!["--exec", "shell", "--server", "localhost:7070"],
            "server URL",
        ),
        (vec![], "--exec"),
        (
            vec!["--exec", "shell", "--http-allow", "10.0.0.0/8"],
            "--exec http",
        ),
        (
            vec!["--exec", "http", "--http-allow", "10.0.0.0/33"],
            "invalid --http-allow",
        ),
        (
            vec!["--exec", "http", "--http-allow", "intranet"],
            "invalid --http-allow",
        ),
        (
            vec!["--exec", "http", "--http-timeout", "soon"],
            "invalid --http-timeout",
        ),
    ];
    for (args, expect) in cases {
        let out = Command::new(SKED)
            .arg("worker")
            .args(&args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: {err}");
    }
    assert!(
        !dir.path().join("sked.db").exists(),
        "bad flags must not create a database"
    );
}
