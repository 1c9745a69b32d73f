//! A load of clients that record what they did and what they were told (see
//! `history.rs`), shared by the fault tests: an enqueuer, protocol worker processes, and the
//! final listing of every task.
//!
//! The protocol workers are the test binary run again as child processes, so that they can be
//! killed like any worker: a test binary that starts them has an ignored test named
//! `protocol_worker_process` that calls [`worker_main`].
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Server, wait_for};
use crate::history::{Event, Recorder, now_ns};

/// One HTTP/1.0 request with a JSON body; `Err` when the server cannot be reached or does not
/// answer within `timeout` (it was killed meanwhile).
pub fn http(
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

pub fn ns(v: &Value) -> Option<i64> {
    let t: jiff::Timestamp = v.as_str()?.parse().ok()?;
    i64::try_from(t.as_nanosecond()).ok()
}

/// What a protocol worker process is told through `SKED_HISTORY_WORKER`.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct WorkerArgs {
    pub name: String,
    pub servers: Vec<String>,
    pub log: String,
    /// The kind it claims: `hist` (runs a few milliseconds, up to 10 claimed at once),
    /// `hist_slow…` (runs 3 s, 3 at once, heartbeating every 500 ms) or `hist_steady` (runs
    /// 500 ms, 3 at once).
    pub kind: String,
}

/// The protocol worker, run as a child process by the fault tests (it does nothing when run
/// as a test): claims tasks of its kind with a long-poll from whichever server answers, "runs"
/// them (heartbeating slow ones), and reports them in one batch to the server it claimed them
/// from, again until that server answers. Every claim, every answered
/// completion and every answer other than 200 is recorded.
pub fn worker_main() {
    let Ok(args) = std::env::var("SKED_HISTORY_WORKER") else {
        return;
    };
    let args: WorkerArgs = serde_json::from_str(&args).unwrap();
    let rec = Recorder::create(Path::new(&args.log));
    let mut next = 0;
    loop {
        let url = &args.servers[next % args.servers.len()];
        let (max, run) = match args.kind.as_str() {
            k if k.starts_with("hist_slow") => (3, Duration::from_secs(3)),
            "hist_steady" => (3, Duration::from_millis(500)),
            _ => (10, Duration::from_millis(5)),
        };
        let claim = json!({"worker": args.name, "kinds": [args.kind], "max": max, "wait": "1s", "lease_ttl": "2s"});
        let sent_ns = now_ns();
        let tasks = match http(url, "POST", "/v1/claim", &claim, Duration::from_secs(5)) {
            Ok((200, answer)) => answer["tasks"].as_array().cloned().unwrap_or_default(),
            other => {
                refused(&rec, "claim", &other);
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
                server: url.clone(),
                run_at_ns: ns(&t["run_at"]).unwrap(),
                started_at_ns: ns(&t["started_at"]).unwrap(),
                schedule: t["schedule"].as_str().map(str::to_string),
                nominal_ns: ns(&t["nominal_at"]),
                sent_ns,
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
                let answer = http(url, "POST", "/v1/heartbeat", &beat, Duration::from_secs(2));
                if !matches!(answer, Ok((200, _))) {
                    refused(&rec, "heartbeat", &answer);
                }
            }
        }
        let results: Vec<Value> = tasks
            .iter()
            .map(|t| json!({"id": t["id"], "attempt": t["attempt"], "outcome": "succeeded"}))
            .collect();
        // Unavailable or no answer: sent again to the same server, as a worker keeps its
        // results until they are taken, for up to a minute. Without an answer whether the
        // server took them is unknown, so no completion is recorded.
        let given_up = Instant::now() + Duration::from_secs(60);
        let (sent_ns, answer) = loop {
            let sent_ns = now_ns();
            let body = json!({"results": results});
            let answer = http(url, "POST", "/v1/finish", &body, Duration::from_secs(5));
            if matches!(answer, Ok((200, _))) {
                break (sent_ns, answer);
            }
            refused(&rec, "finish", &answer);
            let again = matches!(answer, Ok((503, _)) | Err(_));
            if !again || Instant::now() > given_up {
                break (sent_ns, answer);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        if let Ok((200, answer)) = answer {
            let at_ns = now_ns();
            for (t, r) in tasks.iter().zip(answer["results"].as_array().unwrap()) {
                rec.record(&Event::Completed {
                    id: t["id"].as_i64().unwrap(),
                    attempt: t["attempt"].as_i64().unwrap() as i32,
                    worker: args.name.clone(),
                    server: url.clone(),
                    accepted: r.get("state").is_some(),
                    sent_ns,
                    at_ns,
                });
            }
        }
    }
}

/// Records an answer other than 200 (`status` 0: no answer at all).
fn refused(rec: &Recorder, op: &str, answer: &std::io::Result<(u16, Value)>) {
    rec.record(&Event::Failed {
        request: op.into(),
        status: answer.as_ref().map_or(0, |(status, _)| *status),
        at_ns: now_ns(),
    });
}

/// A protocol worker process: this binary running its `protocol_worker_process` test.
pub struct Worker {
    child: Option<Child>,
    args: String,
}

impl Worker {
    pub fn start(name: &str, kind: &str, servers: &[String], dir: &Path) -> Worker {
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

    pub fn spawn(&mut self) {
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

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn kill(&mut self) {
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

pub fn signal(pid: i32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Enqueues `hist` tasks one at a time through the servers in turn until `stop`, recording
/// each answer; at least `at_least` acknowledged.
pub fn enqueue(
    urls: Vec<String>,
    rec: Arc<Recorder>,
    at_least: usize,
    stop: Arc<AtomicBool>,
) -> usize {
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
pub fn record_finals(url: &str, rec: &Recorder) -> usize {
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
                made_ns: ns(&t["created_at"]).max(ns(&t["run_at"])),
                finished_ns: ns(&t["finished_at"]),
                expires_ns: ns(&t["expires_at"]),
            });
        }
        match page["next_before"].as_i64() {
            Some(b) => before = Some(b),
            None => return n,
        }
    }
}

/// Unfinished `hist` tasks, by the queue counts.
pub fn unfinished(url: &str) -> Option<i64> {
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

/// Adds the every-second schedule the fault tests run, `tick` (catch-up `all`, overlap
/// allowed, tasks of kind `hist`); returns the first nominal time it must cover.
pub fn add_tick(url: &str) -> i64 {
    let tick = json!({"name": "tick", "spec": "* * * * * *", "overlap": "allow", "catchup": "all",
                      "task": {"kind": "hist"}});
    let (status, answer) =
        http(url, "POST", "/v1/schedules", &tick, Duration::from_secs(5)).unwrap();
    assert_eq!(status, 201, "{answer}");
    now_ns() + 1_000_000_000
}

/// After the faults: pauses `tick`, records the span it had to cover (from `span_from` to two
/// seconds ago), waits until every task has finished, and records what the store says of each
/// (through `urls[0]`). Returns how many tasks it listed.
pub fn settle(urls: &[String], rec: &Recorder, span_from: i64) -> usize {
    let (status, _) = http(
        &urls[0],
        "POST",
        "/v1/schedules/tick/pause",
        &Value::Null,
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(status, 200);
    rec.record(&Event::EverySecond {
        schedule: "tick".into(),
        from_ns: span_from,
        to_ns: now_ns() - 2_000_000_000,
    });
    wait_for("every task to finish", Duration::from_secs(60), || {
        unfinished(&urls[urls.len() - 1]) == Some(0)
    });
    record_finals(&urls[0], rec)
}

/// The fault tests' `sked server` node number `i` on `db` (lease TTL 2 s, the leader lease's
/// too), logging to `server<i>.log` in `dir`.
pub fn node(dir: &Path, db: &str, env: &[(&str, &str)], i: usize) -> Server {
    Server::start_on(
        dir,
        db,
        &["--lease-ttl", "2s"],
        env,
        &format!("server{i}.log"),
    )
}

/// `n` nodes on `db` ([`node`]), with their URLs.
pub fn nodes(dir: &Path, db: &str, n: usize) -> (Vec<Server>, Vec<String>) {
    let servers: Vec<Server> = (0..n).map(|i| node(dir, db, &[], i)).collect();
    let urls = servers.iter().map(|s| s.url.clone()).collect();
    (servers, urls)
}

/// Where a scenario keeps its history: `dir/history/`, with the test's own events in
/// `test.jsonl` (its path and recorder returned); workers write their files beside it.
pub fn history_in(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, Arc<Recorder>) {
    let hist = dir.join("history");
    std::fs::create_dir(&hist).unwrap();
    let log = hist.join("test.jsonl");
    let rec = Arc::new(Recorder::create(&log));
    (hist, log, rec)
}
