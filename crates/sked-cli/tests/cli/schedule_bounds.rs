//! Schedule bounds through the real binary on SQLite: `--max-runs` ends a schedule after its
//! runs, `--start-at` and `--end-at` keep its occurrences between them, each says why it
//! ended, calendars of dates to skip, and bad bounds or calendars are refused by the CLI
//! (exit 2) and HTTP (422) changing nothing.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::common::{Server, wait_for};
use crate::hostile_cli::request;

/// The schedule's tasks' nominal times, oldest first.
fn nominals(srv: &Server, schedule: &str) -> Vec<Timestamp> {
    let listed = srv.json(&["task", "ls", "--schedule", schedule, "--limit", "1000"]);
    let mut times: Vec<Timestamp> = (listed["tasks"].as_array().expect("a task list").iter())
        .map(|t| t["nominal_at"].as_str().unwrap().parse().unwrap())
        .collect();
    times.sort();
    times
}

fn succeeded(srv: &Server, schedule: &str) -> usize {
    let listed = srv.json(&[
        "task",
        "ls",
        "--schedule",
        schedule,
        "--state",
        "succeeded",
        "--limit",
        "1000",
    ]);
    listed["tasks"].as_array().unwrap().len()
}

#[test]
fn max_runs_ends_the_schedule_after_its_runs_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    srv.ok(&[
        "schedule",
        "add",
        "thrice",
        "--every",
        "1s",
        "--shell",
        "true",
        "--max-runs",
        "3",
    ]);
    wait_for("three runs to succeed", Duration::from_secs(20), || {
        succeeded(&srv, "thrice") >= 3
    });
    // Three occurrences' worth of time later, still three.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(nominals(&srv, "thrice").len(), 3);
    let s = srv.json(&["schedule", "get", "thrice"]);
    assert_eq!(
        (s["runs"].as_u64(), s["max_runs"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(
        s["ended"],
        json!("no more occurrences: it made its max_runs, 3 runs")
    );
    let listed = srv.ok(&["schedule", "ls"]);
    let line = listed.lines().find(|l| l.starts_with("thrice")).unwrap();
    assert!(line.contains("ended"), "{listed}");
    let shown = srv.ok(&["schedule", "get", "thrice"]);
    assert!(shown.contains("3 of max_runs 3"), "{shown}");
    let top = srv.ok(&["top", "--once"]);
    assert!(
        top.lines()
            .any(|l| l.contains("thrice") && l.contains("ended")),
        "{top}"
    );
    // A run by hand is not counted, and does not revive it.
    srv.ok(&["schedule", "trigger", "thrice"]);
    assert_eq!(srv.json(&["schedule", "get", "thrice"])["runs"], json!(3));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(nominals(&srv, "thrice").len(), 4);
}

#[test]
fn start_and_end_keep_the_occurrences_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let before = Timestamp::now();
    srv.ok(&[
        "schedule",
        "add",
        "window",
        "--every",
        "1s",
        "--shell",
        "true",
        "--start-at",
        "+2s",
        "--end-at",
        "+5s",
    ]);
    let s = srv.json(&["schedule", "get", "window"]);
    let start: Timestamp = s["start_at"].as_str().unwrap().parse().unwrap();
    let end: Timestamp = s["end_at"].as_str().unwrap().parse().unwrap();
    assert!(start >= before + Duration::from_secs(2), "{s}");
    assert_eq!(end.duration_since(start).as_secs(), 3, "{s}");
    wait_for("the end to pass", Duration::from_secs(20), || {
        srv.json(&["schedule", "get", "window"])["ended"].is_string()
    });
    std::thread::sleep(Duration::from_secs(2));
    let times = nominals(&srv, "window");
    // An interval counts from the start: start, +1s, +2s, +3s (the end, included).
    let expected: Vec<Timestamp> = (0..4).map(|i| start + Duration::from_secs(i)).collect();
    assert_eq!(times, expected);
    wait_for("the runs to succeed", Duration::from_secs(20), || {
        succeeded(&srv, "window") == 4
    });
    let s = srv.json(&["schedule", "get", "window"]);
    assert_eq!(
        s["ended"],
        json!(format!("no more occurrences: its end_at is {end}"))
    );
    assert_eq!(s["runs"], json!(4));
}

#[test]
fn bad_bounds_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    for (args, needle) in [
        (
            vec![
                "--start-at",
                "2030-01-02T00:00:00Z",
                "--end-at",
                "2030-01-01T00:00:00Z",
            ],
            "end_at",
        ),
        (vec!["--end-at", "tomorrow"], "--end-at"),
        (
            vec!["--start-at", "+1h", "--end-at", "+1h"],
            "must be after start_at",
        ),
        (vec!["--max-runs", "0"], "max_runs"),
        (vec!["--max-runs", "-1"], "--max-runs"),
    ] {
        let mut all = vec!["schedule", "add", "bad", "--kind", "k", "--every", "1s"];
        all.extend(&args);
        let out = srv.sked(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    for body in [
        json!({"name": "bad", "spec": "every 1s", "task": {"kind": "k"},
               "start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}),
        json!({"name": "bad", "spec": "every 1s", "task": {"kind": "k"}, "max_runs": 0}),
        json!({"name": "bad", "spec": "every 1s", "task": {"kind": "k"}, "max_runs": -3}),
        json!({"name": "bad", "spec": "every 1s", "task": {"kind": "k"}, "end_at": "soon"}),
    ] {
        let (status, answer) = request(&srv, "POST", "/v1/schedules", &body.to_string());
        assert_eq!(status, 422, "{body}: {answer}");
        assert!(
            serde_json::from_str::<Value>(&answer).unwrap()["error"].is_object(),
            "{answer}"
        );
    }
    let listed = srv.json(&["schedule", "ls"]);
    assert_eq!(listed["schedules"], json!([]));
}

#[test]
fn a_calendar_date_is_skipped_and_the_ledger_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    // Today and tomorrow, so that midnight during the test changes nothing.
    let today = Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).date();
    let days = format!("{today},{}", today.tomorrow().unwrap());
    let add = [
        "schedule",
        "add",
        "tick",
        "--every",
        "1s",
        "--shell",
        "true",
        "--skip-calendar",
        "off",
    ];
    // A schedule cannot skip a calendar that does not exist: refused, nothing made.
    let out = srv.sked(&add);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("calendar \"off\""), "{err}");
    assert_eq!(srv.json(&["schedule", "ls"])["schedules"], json!([]));
    srv.ok(&["calendar", "add", "off", "--dates", &days, "--tz", "UTC"]);
    srv.ok(&add);
    let ledger = |srv: &Server| {
        let (status, body) = request(srv, "GET", "/v1/schedules/tick/occurrences?limit=1000", "");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["occurrences"]
            .as_array()
            .unwrap()
            .clone()
    };
    wait_for(
        "three excluded occurrences",
        Duration::from_secs(20),
        || ledger(&srv).len() >= 3,
    );
    for line in ledger(&srv) {
        assert_eq!(line["outcome"], "excluded", "{line}");
        assert_eq!(line["detail"], "excluded by calendar off", "{line}");
    }
    assert!(nominals(&srv, "tick").is_empty(), "nothing ran");
    let shown = srv.ok(&["schedule", "get", "tick"]);
    assert!(shown.contains("excluded by calendar off"), "{shown}");
    // Kept while skipped: a conflict naming the schedule.
    let out = srv.sked(&["calendar", "rm", "off"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("schedule tick"),
        "{err}"
    );
    let listed = srv.json(&["calendar", "ls"]);
    assert_eq!(listed["calendars"][0]["dates"].as_array().unwrap().len(), 2);
    // Other dates: the schedule fires again.
    srv.ok(&["calendar", "add", "off", "--dates", "2001-01-01"]);
    wait_for("a run", Duration::from_secs(20), || {
        !nominals(&srv, "tick").is_empty()
    });
    // Bad calendars change nothing.
    for (args, needle) in [
        (vec!["--dates", "2026-02-30"], "--dates"),
        (vec!["--dates", ""], "1 to 10000"),
        (
            vec!["--dates", "2026-12-25", "--tz", "Mars/Olympus"],
            "Mars/Olympus",
        ),
    ] {
        let mut all = vec!["calendar", "add", "off"];
        all.extend(&args);
        let out = srv.sked(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let (status, body) = request(&srv, "PUT", "/v1/calendars/off", r#"{"dates": ["soon"]}"#);
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        srv.json(&["calendar", "get", "off"])["dates"],
        json!(["2001-01-01"])
    );
    srv.ok(&["schedule", "rm", "tick"]);
    srv.ok(&["calendar", "rm", "off"]);
    assert_eq!(srv.json(&["calendar", "ls"])["calendars"], json!([]));
}
