//! Many nodes on one PostgreSQL: real `sked server` processes, killed with `kill -9` one after
//! another. Needs `SKED_TEST_DATABASE_URL` (skipped without it, except under CI); each test
//! has a schema of its own. The tests run one at a time: they measure failover times.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{SKED, Server, health, wait_for};
use serde_json::Value;
use sked_postgres::testing::{TestSchema, database_url};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The lease TTL the servers run with; failover must take at most this plus a second.
const TTL: Duration = Duration::from_secs(2);

fn cluster(dir: &Path, db: &str, skews: &[&str]) -> Vec<Server> {
    skews
        .iter()
        .enumerate()
        .map(|(i, skew)| {
            let env: Vec<(&str, &str)> = if skew.is_empty() {
                vec![]
            } else {
                vec![("SKED_CLOCK_SKEW", skew)]
            };
            Server::start_on(
                dir,
                db,
                &["--exec", "shell", "--lease-ttl", "2s"],
                &env,
                &format!("server{i}.log"),
            )
        })
        .collect()
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// The server that says it leads (waiting for one to).
fn leader(servers: &[Server]) -> usize {
    let mut found = None;
    wait_for("a leader", Duration::from_secs(10), || {
        found = servers
            .iter()
            .position(|s| s.is_running() && health(&s.url).is_some_and(|h| h["leader"] == true));
        found.is_some()
    });
    found.unwrap()
}

/// One line per run of the tick schedule: nominal time, task id, attempt, start time (ns).
struct Tick {
    nominal_ns: i128,
    task: String,
    started_ns: i128,
}

fn ticks(path: &Path) -> Vec<Tick> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let nominal: jiff::Timestamp = f.first()?.parse().ok()?;
            Some(Tick {
                nominal_ns: nominal.as_nanosecond(),
                task: f.get(1)?.to_string(),
                started_ns: f.get(3)?.parse().ok()?,
            })
        })
        .collect()
}

#[test]
#[ignore = "slow tier"]
fn every_second_cron_survives_kill_9_of_servers_with_skewed_clocks() {
    let Some(url) = database_url() else { return };
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let schema = TestSchema::new(&url);
    let dir = tempfile::tempdir().unwrap();
    // Clocks a minute slow, right, and a minute fast: decisions use the database's clock.
    let mut servers = cluster(dir.path(), &schema.url(), &["-60s", "", "60s"]);
    let log = dir.path().join("ticks.txt");
    let cmd = format!(
        "echo \"$SKED_NOMINAL_AT $SKED_TASK_ID $SKED_ATTEMPT $(date +%s%N)\" >> {}",
        log.display()
    );
    // `allow`: a run stuck on a killed node does not hold the next occurrences back.
    servers[1].ok(&[
        "schedule",
        "add",
        "tick",
        "--cron",
        "* * * * * *",
        "--overlap",
        "allow",
        "--shell",
        &cmd,
    ]);
    wait_for("three ticks", Duration::from_secs(15), || {
        ticks(&log).len() >= 3
    });

    // Kill the leader, then a follower, then the (new) leader; restart each after.
    let mut gaps = Vec::new();
    for round in 0..3 {
        let lead = leader(&servers);
        let victim = if round == 1 { (lead + 1) % 3 } else { lead };
        let killed_at = now_ns();
        servers[victim].kill();
        // The first occurrence due after the kill must start within TTL + 1 s of it.
        let mut first = None;
        wait_for("firing to resume", Duration::from_secs(15), || {
            first = ticks(&log)
                .iter()
                .filter(|t| t.nominal_ns >= killed_at)
                .map(|t| t.started_ns)
                .min();
            first.is_some()
        });
        let gap = Duration::from_nanos((first.unwrap() - killed_at).max(0) as u64);
        eprintln!(
            "round {round}: killed {} server {victim}; firing resumed after {gap:?}",
            if victim == lead {
                "the leader,"
            } else {
                "a follower,"
            }
        );
        assert!(
            gap <= TTL + Duration::from_secs(1),
            "round {round}: firing resumed only {gap:?} after the kill"
        );
        gaps.push(gap);
        servers[victim].spawn();
    }
    std::thread::sleep(Duration::from_secs(2));
    drop(servers);

    let runs = ticks(&log);
    assert!(runs.len() >= 8, "only {} runs", runs.len());
    // Exactly one task per occurrence, whatever the leaders did.
    let mut tasks_per_nominal: BTreeMap<i128, BTreeSet<String>> = BTreeMap::new();
    for t in &runs {
        tasks_per_nominal
            .entry(t.nominal_ns)
            .or_default()
            .insert(t.task.clone());
        // Never early, though one node's clock is a minute fast.
        assert!(
            t.started_ns >= t.nominal_ns - 50_000_000,
            "task {} started {} ms before its time",
            t.task,
            (t.nominal_ns - t.started_ns) / 1_000_000
        );
    }
    for (nominal, tasks) in &tasks_per_nominal {
        assert_eq!(
            tasks.len(),
            1,
            "occurrence {nominal} ran as tasks {tasks:?}"
        );
    }
    // And the store agrees: one task per nominal time.
    let mut check = Server::start_on(dir.path(), &schema.url(), &[], &[], "check.log");
    let listed: Value = check.json(&["task", "ls", "--schedule", "tick", "--limit", "10000"]);
    let mut per_nominal: BTreeMap<String, usize> = BTreeMap::new();
    for t in listed["tasks"].as_array().unwrap() {
        *per_nominal
            .entry(t["nominal_at"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert!(per_nominal.values().all(|&n| n == 1), "{per_nominal:?}");
    check.kill();
    eprintln!(
        "{} occurrences ran, each once; failover gaps {gaps:?}",
        tasks_per_nominal.len()
    );
}

#[test]
#[ignore = "slow tier"]
fn tasks_enqueued_while_servers_are_killed_all_succeed() {
    let Some(url) = database_url() else { return };
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let schema = TestSchema::new(&url);
    let dir = tempfile::tempdir().unwrap();
    let mut servers = cluster(dir.path(), &schema.url(), &["", "", ""]);
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let done = dir.path().join("done.txt");
    let payload = format!(
        r#"{{"command": "sleep 0.2; echo $SKED_TASK_ID >> {}"}}"#,
        done.display()
    );

    // Enqueue 300 tasks through whichever server answers, while servers die and come back.
    let enqueuer = std::thread::spawn(move || {
        let mut acknowledged = Vec::new();
        let mut refused = 0;
        let mut next = 0;
        while acknowledged.len() < 300 {
            let url = &urls[next % urls.len()];
            next += 1;
            let out = std::process::Command::new(SKED)
                .args(["task", "add", "--kind", "shell", "--payload", &payload])
                .env("SKED_URL", url)
                .output()
                .unwrap();
            if out.status.success() {
                acknowledged.push(String::from_utf8(out.stdout).unwrap().trim().to_string());
            } else {
                refused += 1;
            }
            // Spread the enqueues over several kills.
            std::thread::sleep(Duration::from_millis(20));
        }
        (acknowledged, refused)
    });
    let mut kills = 0;
    let start = Instant::now();
    while !enqueuer.is_finished() {
        let victim = kills % 3;
        servers[victim].kill();
        kills += 1;
        std::thread::sleep(Duration::from_millis(700));
        servers[victim].spawn();
        std::thread::sleep(Duration::from_millis(300));
    }
    let (acknowledged, refused) = enqueuer.join().unwrap();
    eprintln!(
        "300 tasks acknowledged in {:?} with {kills} kills; {refused} attempts refused",
        start.elapsed()
    );
    assert!(kills >= 2, "the servers were killed only {kills} times");

    let ids: BTreeSet<String> = acknowledged.into_iter().collect();
    assert_eq!(ids.len(), 300);
    wait_for("every task to succeed", Duration::from_secs(90), || {
        ids.is_subset(&servers[0].succeeded_ids())
    });
    let ran: BTreeSet<String> = std::fs::read_to_string(&done)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let missing: Vec<&String> = ids.difference(&ran).collect();
    assert!(missing.is_empty(), "never ran: {missing:?}");
}

/// `sked worker --db` processes, killed with `kill -9` when dropped.
struct Fleet(Vec<std::process::Child>);

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A fleet of workers alone, no `sked server`: they elect a leader among themselves, so the
/// every-second schedule they declare fires each second once, and a task whose worker was
/// killed is rescued and runs again on another.
#[test]
#[ignore = "slow tier"]
fn a_fleet_of_workers_alone_fires_schedules_and_rescues() {
    let Some(url) = database_url() else { return };
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let schema = TestSchema::new(&url);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ticks.txt");
    let schedules = dir.path().join("schedules.json");
    let tick = format!(
        "echo \"$SKED_NOMINAL_AT $SKED_TASK_ID $SKED_ATTEMPT $(date +%s%N)\" >> {}",
        log.display()
    );
    let declared = serde_json::json!([{
        "name": "tick",
        "spec": "* * * * * *",
        "overlap": "allow",
        "task": {"kind": "shell", "payload": {"command": tick}},
    }]);
    std::fs::write(&schedules, declared.to_string()).unwrap();
    let db = schema.url();
    let spawn = |i: usize| {
        let log = std::fs::File::create(dir.path().join(format!("worker{i}.log"))).unwrap();
        std::process::Command::new(SKED)
            .args([
                "worker",
                "--db",
                &db,
                "--exec",
                "shell",
                "--lease-ttl",
                "2s",
            ])
            .arg("--schedules")
            .arg(&schedules)
            .args(["--schedule-group", "fleet"])
            .env_remove("SKED_URL")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    };
    let mut fleet = Fleet((0..3).map(spawn).collect());
    wait_for("five ticks", Duration::from_secs(20), || {
        ticks(&log).len() >= 5
    });

    // A task that, on its first attempt, tells which worker runs it and then hangs.
    let pid_file = dir.path().join("pid");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt.block_on(async {
        let store = sked::open_store(&db).await.unwrap();
        sked::Engine::new(store, sked::EngineConfig::default())
    });
    let command = format!(
        "if [ \"$SKED_ATTEMPT\" = 1 ]; then echo $PPID > {0}.tmp; mv {0}.tmp {0}; sleep 60; fi; echo done",
        pid_file.display()
    );
    let task = sked::NewTask::new("shell").payload(serde_json::json!({ "command": command }));
    let id = rt.block_on(engine.enqueue(task)).unwrap().id;
    wait_for("the task to start", Duration::from_secs(10), || {
        pid_file.exists()
    });
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let victim = fleet
        .0
        .iter()
        .position(|c| c.id() == pid)
        .unwrap_or_else(|| panic!("pid {pid} is none of the workers"));
    let killed_at = now_ns();
    fleet.0[victim].kill().unwrap();
    fleet.0[victim].wait().unwrap();
    let mut done = None;
    wait_for(
        "the task to be rescued and run again",
        Duration::from_secs(15),
        || {
            done = rt
                .block_on(engine.task(id))
                .ok()
                .filter(|t| t.state == sked::TaskState::Succeeded);
            done.is_some()
        },
    );
    let done = done.unwrap();
    assert_eq!(done.attempt, 2, "{done:?}");
    assert_eq!(
        done.attempts
            .iter()
            .map(|a| a.outcome.as_str())
            .collect::<Vec<_>>(),
        ["rescued", "succeeded"]
    );
    // Firing goes on after the kill (the victim may have been the leader).
    wait_for("firing to go on", Duration::from_secs(10), || {
        ticks(&log)
            .iter()
            .any(|t| t.nominal_ns >= killed_at + 1_000_000_000)
    });
    drop(fleet);

    let runs = ticks(&log);
    let mut per_second: BTreeMap<i128, usize> = BTreeMap::new();
    for t in &runs {
        *per_second.entry(t.nominal_ns).or_default() += 1;
    }
    assert!(
        per_second.values().all(|&n| n == 1),
        "an occurrence ran more than once: {per_second:?}"
    );
    // Every second from the first tick to the kill fired (no node was down then).
    let first = *per_second.keys().next().unwrap();
    let seconds_before_kill: Vec<i128> = per_second
        .keys()
        .copied()
        .filter(|&n| n < killed_at - 1_000_000_000)
        .collect();
    let expected = (killed_at - 1_000_000_000 - first) / 1_000_000_000;
    assert!(
        seconds_before_kill.len() as i128 >= expected,
        "{} of {expected} seconds fired before the kill",
        seconds_before_kill.len()
    );
    eprintln!(
        "{} occurrences ran, each once; the killed worker's task ran again as attempt 2",
        per_second.len()
    );
}

/// Three nodes share one queue rate limit: 100 tasks enqueued at once under `--rate 10/s`
/// start ten to a second, whichever node claims them, and all finish in 9–13 s.
#[test]
#[ignore = "slow tier"]
fn three_nodes_start_no_more_than_one_rate_limit_allows() {
    let Some(url) = database_url() else { return };
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let schema = TestSchema::new(&url);
    let dir = tempfile::tempdir().unwrap();
    let servers = cluster(dir.path(), &schema.url(), &["", "", ""]);
    let set = servers[0].json(&["queue", "limit", "paced", "--rate", "10/s", "--create"]);
    assert_eq!(set["rate"], "10/s", "{set}");
    let ran = dir.path().join("ran.txt");
    let command = format!("echo $SKED_TASK_ID >> {}", ran.display());
    let enqueued = Instant::now();
    common::starts::enqueue(&servers[1], dir.path(), "paced", 100, &command);
    let mut finished = None;
    wait_for("100 tasks to succeed", Duration::from_secs(30), || {
        let listed = servers[2].json(&[
            "task",
            "ls",
            "--queue",
            "paced",
            "--state",
            "succeeded",
            "--limit",
            "1000",
        ]);
        let done = listed["tasks"].as_array().unwrap().len() == 100;
        if done {
            finished = Some(enqueued.elapsed());
        }
        done
    });
    let finished = finished.unwrap();
    let starts = common::starts::of_queue(&servers[0], "paced");
    assert_eq!(starts.len(), 100);
    let busiest = common::starts::busiest(&starts, 1_000_000_000);
    let spread = Duration::from_nanos((starts[99] - starts[0]) as u64);
    // Which worker claimed each task.
    let listed = servers[0].json(&["task", "ls", "--queue", "paced", "--limit", "1000"]);
    let mut workers: BTreeMap<String, usize> = BTreeMap::new();
    for t in listed["tasks"].as_array().unwrap() {
        *workers.entry(t["worker"].to_string()).or_default() += 1;
    }
    eprintln!(
        "100 tasks under 10/s on 3 nodes: busiest second {busiest} starts, first to last start \
         {spread:?}, all finished {finished:?} after the enqueue; claimed by {workers:?}"
    );
    assert!(busiest <= 10, "{busiest} starts in one second");
    assert!(
        finished >= Duration::from_secs(9) && finished <= Duration::from_secs(13),
        "finished after {finished:?}"
    );
    let lines = std::fs::read_to_string(&ran).unwrap().lines().count();
    assert_eq!(lines, 100, "each task ran once");
}

/// Three nodes on one PostgreSQL, a queue with `--per-key 2`: key A's 300 tasks enqueued
/// before key B's 20. Across the nodes no key ever runs more than two at once (each run logs
/// its own start and end), and B's twenty finish long before A's backlog does.
#[test]
fn three_nodes_keep_each_key_to_its_limit_and_take_keys_in_turn() {
    let Some(url) = database_url() else { return };
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let schema = TestSchema::new(&url);
    let dir = tempfile::tempdir().unwrap();
    let servers = cluster(dir.path(), &schema.url(), &["", "", ""]);
    let set = servers[0].json(&["queue", "limit", "tenants", "--per-key", "2", "--create"]);
    assert_eq!(set["per_key"], 2, "{set}");
    servers[0].ok(&["queue", "pause", "tenants"]);
    let ran = dir.path().join("ran.log");
    for (key, n) in [("a", 300), ("b", 20)] {
        // Each run, as it runs: its key, its shell's pid, start or end, the time in ns.
        let log = |what: &str| format!("echo {key} $$ {what} $(date +%s%N) >> {}", ran.display());
        let command = format!("{}; sleep 0.05; {}", log("start"), log("end"));
        let line = serde_json::json!({
            "kind": "shell", "queue": "tenants", "key": key,
            "payload": {"command": command},
        })
        .to_string();
        let file = dir.path().join(format!("{key}.jsonl"));
        std::fs::write(&file, vec![line; n].join("\n")).unwrap();
        servers[1].ok(&["task", "import", file.to_str().unwrap()]);
    }
    servers[2].ok(&["queue", "resume", "tenants"]);
    let tasks = |state: &str| {
        servers[2].json(&[
            "task", "ls", "--queue", "tenants", "--state", state, "--limit", "1000",
        ])["tasks"]
            .as_array()
            .unwrap()
            .clone()
    };
    wait_for("B's 20 to succeed", Duration::from_secs(60), || {
        tasks("succeeded")
            .iter()
            .filter(|t| t["key"] == "b")
            .count()
            == 20
    });
    let done = tasks("succeeded");
    let at = |t: &serde_json::Value, f: &str| {
        t[f].as_str().map(|s| s.parse::<jiff::Timestamp>().unwrap())
    };
    let b_done = done
        .iter()
        .filter(|t| t["key"] == "b")
        .filter_map(|t| at(t, "finished_at"))
        .max()
        .unwrap();
    let a_before = done
        .iter()
        .filter(|t| t["key"] == "a" && at(t, "finished_at").is_some_and(|f| f <= b_done))
        .count();
    // The runs as they ran (a task's stored start and end are taken before its claim waits
    // for the queue's lock and before its ending commits, so they cannot show this exactly):
    // per key, +1 at each start and -1 at each end, ends first at the same instant.
    let mut events: Vec<(String, u128, i32)> = Vec::new();
    for line in std::fs::read_to_string(&ran).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let step = if f[2] == "start" { 1 } else { -1 };
        events.push((f[0].to_string(), f[3].parse().unwrap(), step));
    }
    events.sort_by_key(|(key, at, step)| (key.clone(), *at, *step));
    let (mut most, mut now, mut key) = (0, 0, String::new());
    for (k, _, step) in &events {
        if *k != key {
            (key, now) = (k.clone(), 0);
        }
        now += step;
        most = most.max(now);
    }
    let mut workers = std::collections::BTreeSet::new();
    for state in ["succeeded", "running"] {
        workers.extend(tasks(state).iter().map(|t| t["worker"].to_string()));
    }
    eprintln!(
        "per-key 2 on 3 nodes: A finished {a_before} before B's 20; most of one key at once {most}; \
         {} workers claimed",
        workers.len()
    );
    assert!(most <= 2, "{most} tasks of one key ran at once");
    assert!(a_before < 200, "A finished {a_before} before B's 20");
}
