//! Fault scenarios on real processes, each checked by the history checker
//! (`common/history.rs`): servers and protocol workers killed with `kill -9` and paused with
//! SIGSTOP in a loop while a client enqueues and an every-second schedule fires. Needs
//! `SKED_TEST_DATABASE_URL` (skipped without it); each test has a schema of its own.
//!
//! The protocol workers are this test binary run again as child processes
//! ([`protocol_worker_process`]), so that they can be killed like any worker, and record what
//! they were told.

mod common;
#[path = "common/history.rs"]
mod history;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Server, wait_for};
use history::{Event, Recorder, now_ns};
use serde_json::{Value, json};
use sked_postgres::testing::{TestSchema, database_url};

/// One HTTP/1.0 request with a JSON body; `Err` when the server cannot be reached or does not
/// answer within `timeout` (it was killed meanwhile).
fn http(
    url: &str,
    method: &str,
    path: &str,
    body: &Value,
    timeout: Duration,
) -> std::io::Result<(u16, Value)> {
    let addr = url.trim_start_matches("http://").parse().unwrap();
    let mut sock = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    sock.set_read_timeout(Some(timeout))?;
    sock.set_write_timeout(Some(timeout))?;
    let body = body.to_string();
    let head = format!(
        "{method} {path} HTTP/1.0\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes())?;
    sock.write_all(body.as_bytes())?;
    let mut answer = Vec::new();
    sock.read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no answer: {answer:?}")))?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

fn ns(v: &Value) -> Option<i64> {
    let t: jiff::Timestamp = v.as_str()?.parse().ok()?;
    i64::try_from(t.as_nanosecond()).ok()
}

/// What a protocol worker process is told through `SKED_HISTORY_WORKER`.
#[derive(serde::Serialize, serde::Deserialize)]
struct WorkerArgs {
    name: String,
    servers: Vec<String>,
    log: String,
    /// The kind it claims: `hist` (runs a few milliseconds, up to 10 claimed at once) or
    /// `hist_slow` (runs 3 s, 3 at once, heartbeating every 500 ms).
    kind: String,
}

/// The protocol worker, run as a child process by the fault tests (it does nothing when run
/// as a test): claims tasks of its kind with a long-poll from whichever server answers, "runs"
/// them (heartbeating slow ones), and reports them in one batch. Every claim and every answered
/// completion is recorded.
#[test]
#[ignore = "a child process of the fault tests"]
fn protocol_worker_process() {
    let Ok(args) = std::env::var("SKED_HISTORY_WORKER") else {
        return;
    };
    let args: WorkerArgs = serde_json::from_str(&args).unwrap();
    let rec = Recorder::create(Path::new(&args.log));
    let mut next = 0;
    loop {
        let url = &args.servers[next % args.servers.len()];
        let (max, run) = match args.kind.as_str() {
            "hist_slow" => (3, Duration::from_secs(3)),
            _ => (10, Duration::from_millis(5)),
        };
        let claim = json!({"worker": args.name, "kinds": [args.kind], "max": max, "wait": "1s", "lease_ttl": "2s"});
        let tasks = match http(url, "POST", "/v1/claim", &claim, Duration::from_secs(5)) {
            Ok((200, answer)) => answer["tasks"].as_array().cloned().unwrap_or_default(),
            _ => {
                next += 1;
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let at_ns = now_ns();
        for t in &tasks {
            rec.record(&Event::Claimed {
                id: t["id"].as_i64().unwrap(),
                attempt: t["attempt"].as_i64().unwrap() as i32,
                worker: args.name.clone(),
                run_at_ns: ns(&t["run_at"]).unwrap(),
                started_at_ns: ns(&t["started_at"]).unwrap(),
                schedule: t["schedule"].as_str().map(str::to_string),
                nominal_ns: ns(&t["nominal_at"]),
                at_ns,
            });
        }
        if tasks.is_empty() {
            continue;
        }
        let held: Vec<Value> = tasks
            .iter()
            .map(|t| json!({"id": t["id"], "attempt": t["attempt"]}))
            .collect();
        let began = Instant::now();
        while began.elapsed() < run {
            std::thread::sleep(
                run.saturating_sub(began.elapsed())
                    .min(Duration::from_millis(500)),
            );
            if began.elapsed() < run {
                let beat = json!({"tasks": held, "lease_ttl": "2s"});
                let _ = http(url, "POST", "/v1/heartbeat", &beat, Duration::from_secs(2));
            }
        }
        let results: Vec<Value> = tasks
            .iter()
            .map(|t| json!({"id": t["id"], "attempt": t["attempt"], "outcome": "succeeded"}))
            .collect();
        let sent_ns = now_ns();
        let answer = http(
            url,
            "POST",
            "/v1/finish",
            &json!({"results": results}),
            Duration::from_secs(5),
        );
        // No answer: whether the server took the endings is unknown, so nothing is recorded.
        if let Ok((200, answer)) = answer {
            let at_ns = now_ns();
            for (t, r) in tasks.iter().zip(answer["results"].as_array().unwrap()) {
                rec.record(&Event::Completed {
                    id: t["id"].as_i64().unwrap(),
                    attempt: t["attempt"].as_i64().unwrap() as i32,
                    worker: args.name.clone(),
                    accepted: r.get("state").is_some(),
                    sent_ns,
                    at_ns,
                });
            }
        }
    }
}

/// A protocol worker process: this binary running [`protocol_worker_process`].
struct Worker {
    child: Option<Child>,
    args: String,
}

impl Worker {
    fn start(name: &str, kind: &str, servers: &[String], dir: &Path) -> Worker {
        let args = serde_json::to_string(&WorkerArgs {
            name: name.into(),
            servers: servers.to_vec(),
            log: dir.join(format!("{name}.jsonl")).display().to_string(),
            kind: kind.into(),
        })
        .unwrap();
        let mut w = Worker { child: None, args };
        w.spawn();
        w
    }

    fn spawn(&mut self) {
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "protocol_worker_process",
                "--ignored",
                "--nocapture",
            ])
            .env("SKED_HISTORY_WORKER", &self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn signal(pid: i32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Enqueues `hist` tasks one at a time through the servers in turn until `stop`, recording
/// each answer; at least `at_least` acknowledged.
fn enqueue(urls: Vec<String>, rec: Arc<Recorder>, at_least: usize, stop: Arc<AtomicBool>) -> usize {
    let mut acknowledged = 0;
    let mut next = 0;
    while acknowledged < at_least || !stop.load(Ordering::Relaxed) {
        let url = &urls[next % urls.len()];
        next += 1;
        // Every third task is due in 1.5 s, by this machine's clock (the database's too);
        // one in 80 is slow.
        let task = match next % 3 {
            _ if next % 80 == 1 => json!({"kind": "hist_slow"}),
            0 => {
                let due = jiff::Timestamp::now() + jiff::SignedDuration::from_millis(1500);
                json!({"kind": "hist", "run_at": due.to_string()})
            }
            _ => json!({"kind": "hist"}),
        };
        let answer = http(url, "POST", "/v1/tasks", &task, Duration::from_secs(5));
        let at_ns = now_ns();
        match answer {
            Ok((201, task)) => {
                acknowledged += 1;
                rec.record(&Event::Enqueued {
                    id: task["id"].as_i64().unwrap(),
                    at_ns,
                });
            }
            Ok((status, _)) => rec.record(&Event::EnqueueFailed { status, at_ns }),
            Err(_) => rec.record(&Event::EnqueueFailed { status: 0, at_ns }),
        }
        std::thread::sleep(Duration::from_millis(6));
    }
    acknowledged
}

/// Lists every task page by page and records what the store says of each.
fn record_finals(url: &str, rec: &Recorder) -> usize {
    let mut before = None;
    let mut n = 0;
    loop {
        let path = match before {
            None => "/v1/tasks?limit=1000".to_string(),
            Some(b) => format!("/v1/tasks?limit=1000&before={b}"),
        };
        let mut answer = None;
        wait_for("a page of tasks", Duration::from_secs(10), || {
            answer = http(url, "GET", &path, &Value::Null, Duration::from_secs(10)).ok();
            answer.is_some()
        });
        let (status, page) = answer.unwrap();
        assert_eq!(status, 200, "{page}");
        for t in page["tasks"].as_array().unwrap() {
            n += 1;
            rec.record(&Event::Final {
                id: t["id"].as_i64().unwrap(),
                state: t["state"].as_str().unwrap().to_string(),
                schedule: t["schedule"].as_str().map(str::to_string),
                nominal_ns: ns(&t["nominal_at"]),
            });
        }
        match page["next_before"].as_i64() {
            Some(b) => before = Some(b),
            None => return n,
        }
    }
}

/// Unfinished `hist` tasks, by the queue counts.
fn unfinished(url: &str) -> Option<i64> {
    let (status, queues) = http(
        url,
        "GET",
        "/v1/queues",
        &Value::Null,
        Duration::from_secs(5),
    )
    .ok()?;
    (status == 200).then_some(())?;
    let q = queues["queues"]
        .as_array()?
        .iter()
        .find(|q| q["name"] == "default")?;
    let counts = &q["counts"];
    Some(
        ["scheduled", "available", "running", "retrying"]
            .iter()
            .map(|s| counts[*s].as_i64().unwrap_or(0))
            .sum(),
    )
}

/// Three servers (clocks an hour apart) and seven protocol workers (four fast, three slow) on
/// one PostgreSQL; a client enqueues 2,000+ tasks (some due later, some slow) and an
/// every-second schedule (catch-up `all`) fires, while a server or a worker is killed with
/// `kill -9` (and restarted) every 0.5–1 s, and now and then a slow worker is paused past its
/// leases and resumed, so that its late completions meet the fencing token. Then the history
/// checker: every acknowledged task succeeded after at least one claim, no attempt completed
/// twice, no stale completion accepted, one task per occurrence and every second covered, none
/// started early.
#[test]
fn kill_9_loop_of_servers_and_workers_loses_nothing() {
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let dir = tempfile::tempdir().unwrap();
    let hist = dir.path().join("history");
    std::fs::create_dir(&hist).unwrap();
    let rec = Arc::new(Recorder::create(&hist.join("test.jsonl")));
    // Clocks an hour slow, right and an hour fast: decisions use the database's clock.
    let mut servers: Vec<Server> = ["-1h", "0s", "1h"]
        .iter()
        .enumerate()
        .map(|(i, skew)| {
            Server::start_on(
                dir.path(),
                &schema.url(),
                &["--lease-ttl", "2s"],
                &[("SKED_CLOCK_SKEW", skew)],
                &format!("server{i}.log"),
            )
        })
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let tick = json!({"name": "tick", "spec": "* * * * * *", "overlap": "allow", "catchup": "all",
                      "task": {"kind": "hist"}});
    let (status, answer) = http(
        &urls[0],
        "POST",
        "/v1/schedules",
        &tick,
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(status, 201, "{answer}");
    let span_from = now_ns() + 1_000_000_000;
    let mut workers: Vec<Worker> = (0..7)
        .map(|i| {
            let kind = if i < 4 { "hist" } else { "hist_slow" };
            Worker::start(&format!("worker{i}"), kind, &urls, &hist)
        })
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let enqueuer = {
        let (urls, rec, stop) = (urls.clone(), rec.clone(), stop.clone());
        std::thread::spawn(move || enqueue(urls, rec, 2000, stop))
    };
    let mut rng = fastrand::Rng::with_seed(0xfa017);
    let started = Instant::now();
    let (mut faults, mut kills) = (0, 0);
    while kills < 22 || started.elapsed() < Duration::from_secs(20) {
        let victim = rng.usize(0..servers.len() + workers.len());
        let at_ns = now_ns();
        if victim < servers.len() {
            rec.record(&Event::Fault {
                kind: "kill_server".into(),
                at_ns,
            });
            servers[victim].kill();
            std::thread::sleep(Duration::from_millis(rng.u64(300..700)));
            servers[victim].spawn();
            kills += 1;
        } else if faults % 3 == 2 {
            // A slow worker paused past its 2 s leases: its tasks are rescued and claimed
            // again meanwhile, and what it reports on waking, while the new attempts still
            // run, must be refused.
            let w = &workers[4 + rng.usize(0..3)];
            rec.record(&Event::Fault {
                kind: "pause_worker".into(),
                at_ns,
            });
            signal(w.pid(), "-STOP");
            std::thread::sleep(Duration::from_millis(3500));
            signal(w.pid(), "-CONT");
        } else {
            let w = &mut workers[victim - servers.len()];
            rec.record(&Event::Fault {
                kind: "kill_worker".into(),
                at_ns,
            });
            w.kill();
            std::thread::sleep(Duration::from_millis(rng.u64(100..400)));
            w.spawn();
            kills += 1;
        }
        faults += 1;
        std::thread::sleep(Duration::from_millis(rng.u64(200..500)));
    }
    stop.store(true, Ordering::Relaxed);
    let acknowledged = enqueuer.join().unwrap();
    let faulted_for = started.elapsed();

    // No more faults: the schedule stops, and everything acknowledged finishes.
    let (status, _) = http(
        &urls[0],
        "POST",
        "/v1/schedules/tick/pause",
        &Value::Null,
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(status, 200);
    let span_to = now_ns() - 2_000_000_000;
    rec.record(&Event::EverySecond {
        schedule: "tick".into(),
        from_ns: span_from,
        to_ns: span_to,
    });
    wait_for("every task to finish", Duration::from_secs(60), || {
        unfinished(&urls[1]) == Some(0)
    });
    let listed = record_finals(&urls[2], &rec);
    drop(workers);
    drop(servers);

    let events = history::read_dir(&hist);
    let report = history::check(&events);
    eprintln!("{}", report.line());
    eprintln!(
        "{acknowledged} tasks acknowledged, {listed} listed at the end, {faults} faults in {faulted_for:?}"
    );
    report.assert_clean();
    assert!(acknowledged >= 2000);
    let faults = |kind| report.faults.get(kind).copied().unwrap_or(0);
    let (servers, workers) = (faults("kill_server"), faults("kill_worker"));
    assert!(
        servers + workers >= 20 && servers >= 5 && workers >= 4 && faults("pause_worker") >= 2,
        "too few faults: {}",
        report.line()
    );
    assert!(
        report.rejected >= 1,
        "no late completion met the fencing token: {}",
        report.line()
    );
    assert!(report.occurrences >= 15, "{}", report.line());
}
