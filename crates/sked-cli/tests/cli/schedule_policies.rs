//! Schedule policies through the real binary on SQLite: intervals counted from the last run's
//! end, bounded overlap, pausing after dead runs, backfill through the ledger, `cron next
//! --dst`, and invalid policies refused by the CLI (exit 2) and HTTP (422) changing nothing.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::common::{SKED, Server, wait_for};
use crate::hostile_cli::request;

fn ts(v: &Value) -> Option<Timestamp> {
    v.as_str().map(|s| s.parse().unwrap())
}

/// The schedule's tasks, oldest first.
fn tasks_of(srv: &Server, schedule: &str) -> Vec<Value> {
    let listed = srv.json(&["task", "ls", "--schedule", schedule, "--limit", "1000"]);
    let mut tasks = listed["tasks"].as_array().expect("a task list").clone();
    tasks.reverse();
    tasks
}

fn ledger(srv: &Server, schedule: &str) -> Vec<Value> {
    let (status, body) = request(
        srv,
        "GET",
        &format!("/v1/schedules/{schedule}/occurrences?limit=1000"),
        "",
    );
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["occurrences"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn from_last_finish_starts_each_run_an_interval_after_the_previous_ended() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    srv.ok(&[
        "schedule",
        "add",
        "sync",
        "--every",
        "3s",
        "--from",
        "last-finish",
        "--shell",
        "sleep 2",
    ]);
    wait_for("three runs to start", Duration::from_secs(30), || {
        tasks_of(&srv, "sync")
            .iter()
            .filter(|t| !t["started_at"].is_null())
            .count()
            >= 3
    });
    let tasks = tasks_of(&srv, "sync");
    let starts: Vec<Timestamp> = tasks.iter().filter_map(|t| ts(&t["started_at"])).collect();
    for pair in starts.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(
            gap >= jiff::SignedDuration::from_secs(5),
            "starts {} and {} are {gap} apart",
            pair[0],
            pair[1]
        );
        // Not much later either: an interval after the end, give or take the scheduler.
        assert!(gap < jiff::SignedDuration::from_millis(6_500), "{gap}");
    }
    let shown = srv.ok(&["schedule", "get", "sync"]);
    assert!(shown.contains("last_finish"), "{shown}");
}

#[test]
fn overlap_allow_two_runs_at_most_two_and_records_the_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    srv.ok(&[
        "schedule",
        "add",
        "slow",
        "--every",
        "1s",
        "--overlap",
        "allow:2",
        "--shell",
        "sleep 5",
    ]);
    let mut most = 0;
    let until = std::time::Instant::now() + Duration::from_secs(8);
    while std::time::Instant::now() < until {
        let running = srv.json(&["task", "ls", "--state", "running"])["tasks"]
            .as_array()
            .unwrap()
            .len();
        most = most.max(running);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(most, 2, "at most two at once, and two did run together");
    // Checked again from the record: no instant had three runs unfinished.
    let tasks = tasks_of(&srv, "slow");
    let spans: Vec<(Timestamp, Option<Timestamp>)> = tasks
        .iter()
        .filter_map(|t| Some((ts(&t["started_at"])?, ts(&t["finished_at"]))))
        .collect();
    for (start, _) in &spans {
        let at_once = spans
            .iter()
            .filter(|(s, f)| s <= start && f.is_none_or(|f| f > *start))
            .count();
        assert!(at_once <= 2, "{at_once} running at {start}");
    }
    let skipped: Vec<Value> = ledger(&srv, "slow")
        .into_iter()
        .filter(|o| o["outcome"] == "skipped")
        .collect();
    assert!(skipped.len() >= 3, "{skipped:?}");
    assert!(
        skipped[0]["detail"].as_str().unwrap().contains("allow:2"),
        "{skipped:?}"
    );
}

#[test]
fn a_schedule_pauses_itself_after_its_runs_die_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    srv.ok(&[
        "schedule",
        "add",
        "broken",
        "--every",
        "1s",
        "--shell",
        "exit 3",
        "--max-attempts",
        "1",
        "--pause-after-failures",
        "2",
    ]);
    wait_for("the schedule to pause", Duration::from_secs(20), || {
        srv.json(&["schedule", "get", "broken"])["paused"] == true
    });
    let s = srv.json(&["schedule", "get", "broken"]);
    assert_eq!(
        s["paused_reason"],
        "paused itself: its last 2 runs in a row ended dead"
    );
    let dead: Vec<Value> = tasks_of(&srv, "broken");
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead.iter().all(|t| t["state"] == "dead"));
    let shown = srv.ok(&["schedule", "get", "broken"]);
    assert!(shown.contains("true (paused itself"), "{shown}");
}

#[test]
fn a_backfill_enqueues_only_the_occurrences_that_did_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    srv.ok(&[
        "schedule",
        "add",
        "tick",
        "--cron",
        "*/2 * * * * *",
        "--shell",
        "true",
        "--overlap",
        "allow",
    ]);
    wait_for("two occurrences to run", Duration::from_secs(20), || {
        ledger(&srv, "tick").len() >= 2
    });
    srv.ok(&["schedule", "pause", "tick"]);
    let fired: Vec<Timestamp> = ledger(&srv, "tick")
        .iter()
        .map(|o| ts(&o["nominal_at"]).unwrap())
        .collect();
    let (first, last) = (*fired.iter().min().unwrap(), *fired.iter().max().unwrap());
    // From ten seconds before the first run to the last: five before, the rest ran.
    let from = first - jiff::SignedDuration::from_secs(10);
    let report = srv.json(&[
        "schedule",
        "backfill",
        "tick",
        "--from",
        &from.to_string(),
        "--to",
        &last.to_string(),
    ]);
    let enqueued: Vec<Timestamp> = report["enqueued"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| ts(&r["nominal_at"]).unwrap())
        .collect();
    let expected: Vec<Timestamp> = (1..=5)
        .rev()
        .map(|k| first - jiff::SignedDuration::from_secs(2 * k))
        .collect();
    assert_eq!(enqueued, expected);
    assert_eq!(report["already"], json!(fired.len()));
    // One task per occurrence, each recorded once.
    let lines = ledger(&srv, "tick");
    assert_eq!(lines.len(), fired.len() + 5);
    let tasks = tasks_of(&srv, "tick");
    let mut nominals: Vec<String> = tasks
        .iter()
        .map(|t| t["nominal_at"].as_str().unwrap().to_string())
        .collect();
    nominals.sort();
    nominals.dedup();
    assert_eq!(nominals.len(), tasks.len(), "one task per occurrence");
    // Again: nothing left to enqueue; the text form says so.
    let again = srv.ok(&[
        "schedule",
        "backfill",
        "tick",
        "--from",
        &from.to_string(),
        "--to",
        &last.to_string(),
    ]);
    assert!(
        again.contains(&format!(
            "enqueued 0 occurrences; {} already had a run",
            fired.len() + 5
        )),
        "{again}"
    );
}

#[test]
fn cron_next_takes_a_dst_policy() {
    let next = |dst: &str, after: &str| {
        let out = std::process::Command::new(SKED)
            .args([
                "cron",
                "next",
                "30 2 * * *",
                "--tz",
                "Europe/Berlin",
                "--after",
                after,
                "-n",
                "3",
                "--dst",
                dst,
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        next("skip", "2026-03-27T12:00:00Z"),
        "2026-03-28 02:30:00+01:00\n2026-03-30 02:30:00+02:00\n2026-03-31 02:30:00+02:00\n"
    );
    assert_eq!(
        next("debian", "2026-03-27T12:00:00Z"),
        "2026-03-28 02:30:00+01:00\n2026-03-29 03:00:00+02:00\n2026-03-30 02:30:00+02:00\n"
    );
    assert_eq!(
        next("twice", "2026-10-24T12:00:00Z"),
        "2026-10-25 02:30:00+02:00\n2026-10-25 02:30:00+01:00\n2026-10-26 02:30:00+01:00\n"
    );
    assert_eq!(
        next("skip", "2026-10-24T12:00:00Z"),
        "2026-10-25 02:30:00+02:00\n2026-10-26 02:30:00+01:00\n2026-10-27 02:30:00+01:00\n"
    );
}

#[test]
fn invalid_schedule_policies_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    for (args, needle) in [
        (vec!["--every", "1s", "--overlap", "allow:0"], "allow:N"),
        (vec!["--every", "1s", "--overlap", "allow:two"], "allow:N"),
        (vec!["--every", "1s", "--jitter", "0s"], "jitter"),
        (
            vec!["--every", "1s", "--pause-after-failures", "0"],
            "pause_after_failures",
        ),
        (
            vec!["--cron", "* * * * *", "--from", "last-start"],
            "needs an interval",
        ),
        (vec!["--every", "1s", "--from", "sometimes"], "sometimes"),
        (vec!["--cron", "* * * * *", "--dst", "never"], "never"),
    ] {
        let mut all = vec!["schedule", "add", "bad", "--kind", "k"];
        all.extend(&args);
        let out = srv.sked(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    for body in [
        json!({"name": "bad", "spec": "every 1s", "task": {"kind": "k"}, "overlap": "allow:0"}),
        json!({"name": "bad", "spec": "every 1s", "task": {"kind": "k"}, "from": "last_start", "dst": "skip"}),
        json!({"name": "bad", "spec": "* * * * *", "task": {"kind": "k"}, "from": "last_finish"}),
        json!({"name": "bad", "spec": "every 1s", "task": {"kind": "k"}, "jitter": "0s"}),
        json!({"name": "bad", "spec": "every 1s", "task": {"kind": "k"}, "pause_after_failures": 0}),
    ] {
        let (status, answer) = request(&srv, "POST", "/v1/schedules", &body.to_string());
        assert_eq!(status, 422, "{body}: {answer}");
        assert!(
            serde_json::from_str::<Value>(&answer).unwrap()["error"].is_object(),
            "{answer}"
        );
    }
    // A backfill of a range not yet past, or reversed, is refused too.
    srv.ok(&["schedule", "add", "ok", "--every", "1h", "--kind", "k"]);
    let out = srv.sked(&["schedule", "backfill", "ok", "--from", "-1h", "--to", "+1h"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = srv.sked(&["schedule", "backfill", "ok", "--from", "-1h", "--to", "-2h"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let names: Vec<String> = srv.json(&["schedule", "ls"])["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["ok"]);
    assert!(ledger(&srv, "ok").is_empty());
}

#[test]
fn schedule_get_shows_the_limits_its_runs_meet() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    srv.ok(&[
        "queue",
        "limit",
        "mail",
        "--rate",
        "10/s",
        "--per-key",
        "2",
        "--create",
    ]);
    srv.ok(&[
        "schedule", "add", "digest", "--every", "1h", "--kind", "k", "--queue", "mail", "--key",
        "tenant-7",
    ]);
    let shown = srv.ok(&["schedule", "get", "digest"]);
    assert!(
        shown.contains("queue_limits          rate 10/s, per key 2"),
        "{shown}"
    );
    assert!(shown.contains("\"key\":\"tenant-7\""), "{shown}");
    let (status, body) = request(&srv, "GET", "/v1/queues/mail", "");
    assert_eq!(status, 200, "{body}");
    let q: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (q["per_key"].clone(), q["rate"].clone()),
        (json!(2), json!("10/s"))
    );
}

/// A failing job with the defaults (overlap skip, 25 attempts, backoff) still gets a run for
/// each occurrence: a run's retries end when the next occurrence is planned, and `schedule get`
/// says the last run died.
#[test]
fn a_failing_job_gets_a_run_for_every_occurrence() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    srv.ok(&[
        "schedule", "add", "failing", "--every", "2s", "--shell", "exit 1",
    ]);
    wait_for("four runs to start", Duration::from_secs(30), || {
        tasks_of(&srv, "failing")
            .iter()
            .filter(|t| !t["started_at"].is_null())
            .count()
            >= 4
    });
    srv.ok(&["schedule", "pause", "failing"]);
    let lines = ledger(&srv, "failing");
    assert!(
        lines.iter().all(|o| o["outcome"] == "enqueued"),
        "no occurrence skipped: {lines:?}"
    );
    let tasks = tasks_of(&srv, "failing");
    // Every run but the newest ended dead, its retries cut short by the next occurrence.
    let ended: Vec<&Value> = tasks.iter().rev().skip(1).collect();
    assert!(ended.len() >= 3, "{tasks:?}");
    assert!(ended.iter().all(|t| t["state"] == "dead"), "{tasks:?}");
    assert!(
        lines.iter().any(|o| o["detail"]
            .as_str()
            .unwrap_or("")
            .contains("stopped retrying")),
        "{lines:?}"
    );
    let s = srv.json(&["schedule", "get", "failing"]);
    assert_eq!(s["last_outcome"], "dead", "{s}");
    // `schedule ls` says so: the last outcome failed, and a run waiting to retry is unfinished.
    let listed = srv.ok(&["schedule", "ls"]);
    let row = listed.lines().find(|l| l.starts_with("failing")).unwrap();
    assert!(row.ends_with("dead") || row.ends_with("failed"), "{row}");
    if let Some(r) = s["retrying"].as_object() {
        assert!(
            row.contains(&format!("retrying {}/25", r["attempt"])),
            "{row}"
        );
    }
}

#[test]
fn keep_retrying_lets_a_failed_run_retry_and_skips_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    srv.ok(&[
        "schedule",
        "add",
        "keeper",
        "--every",
        "2s",
        "--shell",
        "exit 1",
        "--keep-retrying",
    ]);
    assert_eq!(
        srv.json(&["schedule", "get", "keeper"])["keep_retrying"],
        true
    );
    // The first run fails and waits to retry (10 s backoff); the next occurrences come and
    // are skipped, each naming the run it waited for.
    wait_for("an occurrence skipped", Duration::from_secs(20), || {
        ledger(&srv, "keeper")
            .iter()
            .any(|o| o["outcome"] == "skipped")
    });
    let first = &tasks_of(&srv, "keeper")[0];
    let id = first["id"].as_i64().unwrap();
    let lines = ledger(&srv, "keeper");
    let skipped = lines.iter().find(|o| o["outcome"] == "skipped").unwrap();
    let detail = skipped["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("skipped: the previous run had not finished (task ")
            && detail.contains(&id.to_string()),
        "{detail}"
    );
    let first = srv.task(&id.to_string());
    assert_eq!(first["state"], "retrying", "{first}");
    let listed = srv.ok(&["schedule", "ls", "--failing"]);
    assert!(
        listed.contains("keeper") && listed.contains("retrying 1/25"),
        "{listed}"
    );
}
