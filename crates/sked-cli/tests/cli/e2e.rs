//! End-to-end: the real `sked` binary on a temporary SQLite file, driven through the CLI and
//! HTTP. Waits poll with deadlines instead of sleeping fixed times.

use std::process::Command;
use std::time::Duration;

use crate::common::{SKED, Server, stamp, wait_for};
use crate::hostile_cli::request;

#[test]
fn shell_task_two_seconds_ahead_runs_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let marker = dir.path().join("ran.txt");
    let payload = format!(r#"{{"command": "echo run >> {}"}}"#, marker.display());
    let before = jiff::Timestamp::now();
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
    wait_for("the task to succeed", Duration::from_secs(10), || {
        srv.task(&id)["state"] == "succeeded"
    });
    // Started at or after its time, which is two seconds after the command was given. The
    // CLI reads the clock, so the server's `created_at` may be a few milliseconds later.
    let t = srv.task(&id);
    let at = |field: &str| stamp(&t, field);
    assert!(at("started_at") >= at("run_at"), "ran before its time: {t}");
    assert!(
        at("run_at") >= before + jiff::SignedDuration::from_secs(2),
        "{t}"
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
fn cron_next_prints_times_with_the_zone_offset_and_rfc3339_in_json() {
    let next = |extra: &[&str]| {
        let out = Command::new(SKED)
            .args(["cron", "next", "30 2 * * *", "--tz", "Europe/Berlin"])
            .args(["--after", "2026-03-28T12:00:00Z", "-n", "3"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        next(&[]),
        "2026-03-29 03:00:00+02:00\n2026-03-30 02:30:00+02:00\n2026-03-31 02:30:00+02:00\n"
    );
    let json: Vec<String> = serde_json::from_str(&next(&["--json"])).unwrap();
    assert_eq!(
        json,
        [
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00",
            "2026-03-31T02:30:00+02:00"
        ]
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

/// Every client command's `--json` is the API's value: it reads back as the wire type of
/// `sked::api`, and it equals what the typed client gets from the server right after.
#[test]
fn every_commands_json_is_the_wire_type() {
    use sked::api::{
        ImportReport, Overview, QueueList, ScheduleDetail, ScheduleList, ScheduleView, TaskList,
        Triggered,
    };
    use sked::{QueueInfo, Task, TaskFilter, TaskInserted};

    fn typed<T: serde::de::DeserializeOwned>(srv: &Server, args: &[&str]) -> T {
        let out = srv.ok(args);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("sked {args:?} --json is not the wire type: {e}\n{out}"))
    }

    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = sked::Client::remote(&srv.url).unwrap();
    let get = |id: i64| rt.block_on(client.task(id)).unwrap();

    // Tasks. `--json` goes before or after the subcommand.
    let added: TaskInserted = typed(
        &srv,
        &["--json", "task", "add", "--kind", "k", "--in", "1h"],
    );
    assert!(!added.duplicate);
    assert_eq!(get(added.id).state, added.state);
    let shown: Task = typed(&srv, &["task", "get", &added.id.to_string(), "--json"]);
    assert_eq!(shown, get(added.id));
    let listed: TaskList = typed(&srv, &["task", "ls", "--json"]);
    let expected = rt
        .block_on(client.tasks(TaskFilter::new().limit(50)))
        .unwrap();
    assert_eq!(listed.tasks, expected);
    let id = added.id.to_string();
    let moved: Task = typed(&srv, &["task", "reschedule", &id, "--at", "+2h", "--json"]);
    assert_eq!(moved, get(added.id));
    let cancelled: Task = typed(&srv, &["task", "cancel", &id, "--json"]);
    assert_eq!(cancelled, get(added.id));
    let retried: Task = typed(&srv, &["task", "retry", &id, "--json"]);
    assert_eq!(retried, get(added.id));
    let file = dir.path().join("tasks.jsonl");
    std::fs::write(&file, "{\"kind\": \"a\"}\n{\"kind\": \"b\"}\n").unwrap();
    let imported: ImportReport = typed(&srv, &["task", "import", file.to_str().unwrap(), "--json"]);
    assert_eq!((imported.imported, imported.duplicates), (2, 0));

    // Schedules. The schedule fires twelve hours from now: within the planning horizon
    // the scheduler would look at it at once and write its row between two reads.
    let hour = (jiff::Zoned::now().in_tz("UTC").unwrap().hour() + 12) % 24;
    let cron = format!("0 {hour} * * *");
    let made: ScheduleView = typed(
        &srv,
        &[
            "schedule",
            "add",
            "nightly",
            "--cron",
            &cron,
            "--kind",
            "k",
            "--payload",
            r#"{"n": 1}"#,
            "--json",
        ],
    );
    let schedule = |name: &str| rt.block_on(client.schedule(name)).unwrap();
    assert_eq!(made, schedule("nightly"));
    let all: ScheduleList = typed(&srv, &["schedule", "ls", "--json"]);
    assert_eq!(all.schedules, rt.block_on(client.schedules()).unwrap());
    assert_eq!(
        all.schedules[0].task.as_ref().unwrap().payload,
        serde_json::json!({"n": 1})
    );
    let paused: ScheduleView = typed(&srv, &["schedule", "pause", "nightly", "--json"]);
    assert_eq!(paused, schedule("nightly"));
    assert!(paused.paused);
    let resumed: ScheduleView = typed(&srv, &["schedule", "resume", "nightly", "--json"]);
    assert_eq!(resumed, schedule("nightly"));
    let triggered: Triggered = typed(&srv, &["schedule", "trigger", "nightly", "--json"]);
    assert_eq!(get(triggered.id).schedule.as_deref(), Some("nightly"));
    let detail: ScheduleDetail = typed(&srv, &["schedule", "get", "nightly", "--json"]);
    assert_eq!(detail.schedule, schedule("nightly"));
    assert_eq!(
        detail.occurrences,
        rt.block_on(client.occurrences("nightly", 20)).unwrap()
    );
    assert_eq!(srv.ok(&["schedule", "rm", "nightly", "--json"]), "");
    let gone = rt.block_on(client.schedule("nightly")).unwrap_err();
    assert_eq!(gone.kind(), sked::store::ErrorKind::NotFound);

    // Queues.
    let queues = || rt.block_on(client.queues(10_000)).unwrap();
    let listed: QueueList = typed(&srv, &["queue", "ls", "--json"]);
    assert_eq!(listed.queues, queues());
    let find = |name: &str| queues().into_iter().find(|q| q.name == name).unwrap();
    let paused: QueueInfo = typed(&srv, &["queue", "pause", "default", "--json"]);
    assert_eq!(paused, find("default"));
    let resumed: QueueInfo = typed(&srv, &["queue", "resume", "default", "--json"]);
    assert_eq!(resumed, find("default"));
    let limited: QueueInfo = typed(&srv, &["queue", "limit", "default", "3", "--json"]);
    assert_eq!(limited, find("default"));
    assert_eq!(limited.concurrency_limit, Some(3));

    // The overview `sked top` draws.
    let overview: Overview = typed(&srv, &["top", "--json"]);
    assert_eq!(overview.cluster, rt.block_on(client.cluster()).unwrap());
    assert_eq!(overview.queues, queues());
    // Without the templates' payloads: an overview does not move them.
    let lean = rt.block_on(client.schedules_with(false)).unwrap();
    assert_eq!(overview.schedules, lean);
    assert!(
        lean.iter()
            .all(|s| s.task.as_ref().unwrap().payload.is_null())
    );
    assert_eq!(overview.activity.buckets.len(), 15);
}

/// Times are shown one way to people: `schedule ls`, `schedule get` (fields and ledger) and
/// `cron next` show a schedule's times in its zone, to the second, with the offset, the same
/// text for the same instant; tasks' times are in UTC the same way (`…Z`).
#[test]
fn times_are_shown_one_way_in_the_schedule_s_zone() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let spec = ["--cron", "0 3 * * *", "--tz", "Europe/Berlin"];
    let mut add = vec!["schedule", "add", "backup", "--kind", "report"];
    add.extend(spec);
    srv.ok(&add);
    srv.ok(&["schedule", "trigger", "backup"]);
    let next = srv.ok(&[
        "cron",
        "next",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
        "-n",
        "1",
    ]);
    let next = next.trim();
    let human = is_human_time(next);
    assert!(human, "cron next: {next}");
    assert!(
        next.ends_with("+01:00") || next.ends_with("+02:00"),
        "{next}"
    );
    let ls = srv.ok(&["schedule", "ls"]);
    assert!(ls.contains(next), "schedule ls shows {next}:\n{ls}");
    let get = srv.ok(&["schedule", "get", "backup"]);
    let field = |name: &str| {
        get.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in\n{get}"))[name.len()..]
            .trim()
            .to_owned()
    };
    assert_eq!(field("next_fire_at"), next, "{get}");
    // The ledger's triggered occurrence: Berlin time too, to the second.
    let ledger = get
        .lines()
        .skip_while(|l| !l.starts_with("NOMINAL"))
        .nth(1)
        .unwrap();
    let nominal: String = ledger.chars().take(25).collect();
    assert!(
        is_human_time(&nominal) && !nominal.ends_with('Z'),
        "{ledger}"
    );
    let task = srv.ok(&["task", "ls"]);
    let row = task.lines().nth(1).unwrap();
    let run_at = row
        .split("  ")
        .map(str::trim)
        .find(|c| c.ends_with('Z'))
        .unwrap();
    assert!(is_human_time(run_at), "{task}");
}

/// `2026-11-29 03:00:00+01:00` or `2026-11-29 02:00:00Z`: the shape of a time shown to people.
fn is_human_time(t: &str) -> bool {
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    let base = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b' '
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    base && (t[19..] == *"Z"
        || (t.len() == 25 && (b[19] == b'+' || b[19] == b'-') && b[22] == b':'))
}

/// `sked task add --backoff SHAPE` sets how long the task's retries wait, in each shape, and
/// the task's JSON gives it back as its spec; the API takes the spec or the exponential shape's
/// object; a malformed or impossible one is refused before anything is made.
#[test]
fn task_add_takes_a_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    for (given, stored) in [
        ("2s..1m", "exp:2s..1m"),
        ("exp:500ms..10s", "exp:500ms..10s"),
        ("fixed:30s", "fixed:30s"),
        ("linear:10s..5m", "linear:10s..5m"),
        ("10s,1m,10m,1h", "10s,1m,10m,1h"),
    ] {
        let id = srv.ok(&["task", "add", "--kind", "k", "--backoff", given]);
        let task = srv.task(id.trim());
        assert_eq!(task["backoff"], stored, "{task}");
    }
    let body = serde_json::json!({"kind": "k", "backoff": {"base": "1s", "max": "1m"}});
    let (status, answer) = request(&srv, "POST", "/v1/tasks", &body.to_string());
    assert_eq!(status, 201, "{answer}");
    let id = serde_json::from_str::<serde_json::Value>(&answer).unwrap()["id"].to_string();
    assert_eq!(srv.task(&id)["backoff"], "exp:1s..1m");
    for (bad, said) in [
        ("10s..", "invalid duration"),
        ("1m..10s", "max >= base"),
        ("0s..10s", "base > 0"),
        ("soon..later", "invalid --backoff"),
        ("cubic:1s..2s", "expected exp:BASE..MAX, fixed:D"),
        ("fixed:0s", "above zero"),
        ("linear:1m..10s", "not be shorter"),
    ] {
        let out = srv.sked(&["task", "add", "--kind", "k", "--backoff", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains(said), "{bad}: {err}");
    }
    let body = serde_json::json!({"kind": "k", "backoff": "linear:1s"});
    let (status, answer) = request(&srv, "POST", "/v1/tasks", &body.to_string());
    assert_eq!(status, 422, "{answer}");
    assert_eq!(
        srv.json(&["task", "ls"])["tasks"].as_array().unwrap().len(),
        6
    );
    // A schedule's runs take its backoff.
    let add = [
        "schedule",
        "add",
        "weekly",
        "--cron",
        "0 4 * * 1",
        "--kind",
        "k",
    ];
    srv.ok(&[&add[..], &["--backoff", "fixed:1m"]].concat());
    let detail = srv.json(&["schedule", "get", "weekly"]);
    assert_eq!(detail["task"]["backoff"], "fixed:1m", "{detail}");
    let triggered = srv.json(&["schedule", "trigger", "weekly"]);
    let run = srv.task(&triggered["id"].to_string());
    assert_eq!(run["backoff"], "fixed:1m", "{run}");
    let out = srv.sked(&[&add[..], &["--backoff", "fixed:never"]].concat());
    assert_eq!(out.status.code(), Some(2));
}
