//! `sked bench` as a user runs it: the ceiling and `--vs-ceiling` lines, on SQLite and (with a
//! test database) PostgreSQL, and bad flags refused before anything runs.

use std::process::Command;

use serde_json::Value;
use sked_postgres::testing::database_url;

use crate::common::SKED;

/// Runs `sked bench ARGS`, which must succeed, and reads its one JSON line.
fn bench(args: &[&str]) -> Value {
    let out = Command::new(SKED).arg("bench").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "sked bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
    serde_json::from_str(&stdout).unwrap()
}

fn positive(line: &Value, key: &str) -> f64 {
    let v = line[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} in {line}"));
    assert!(v > 0.0, "{key} in {line}");
    v
}

/// The ratio is the workload's rate over the ceiling's, both measured in the run.
fn check_ratio(line: &Value) {
    let (per_s, ceiling) = (positive(line, "per_s"), positive(line, "ceiling_per_s"));
    let ratio = positive(line, "ratio");
    assert!(
        (ratio - per_s / ceiling).abs() < 0.001,
        "ratio {ratio} is not {per_s}/{ceiling}"
    );
}

fn ceiling_and_ratios(db: &[&str]) {
    let line = bench(&[&["ceiling", "-n", "3000"], db].concat());
    assert_eq!(line["workload"], "ceiling");
    positive(&line, "drain_per_s");
    positive(&line, "drain_kept_per_s");
    positive(&line, "insert_per_s");
    assert_eq!(line["drain_batch"], 1000);
    assert_eq!(line["insert_batch"], 1000);
    let drain = bench(&[&["drain", "-n", "3000", "--vs-ceiling"], db].concat());
    assert_eq!(drain["workload"], "drain");
    check_ratio(&drain);
    // A drain is also set against the bare drain that keeps each outcome.
    let (per_s, kept) = (
        positive(&drain, "per_s"),
        positive(&drain, "kept_ceiling_per_s"),
    );
    let kept_ratio = positive(&drain, "kept_ratio");
    assert!(
        (kept_ratio - per_s / kept).abs() < 0.001,
        "kept_ratio {kept_ratio} is not {per_s}/{kept}"
    );
    let enqueue = bench(&[&["enqueue", "-n", "3000", "-c", "500", "--vs-ceiling"], db].concat());
    check_ratio(&enqueue);
    assert!(enqueue.get("kept_ratio").is_none(), "{enqueue}");
}

#[test]
fn ceiling_and_ratios_on_sqlite() {
    ceiling_and_ratios(&[]);
}

#[test]
fn ceiling_and_ratios_on_postgres() {
    let Some(url) = database_url() else { return };
    ceiling_and_ratios(&["--db", &url]);
}

/// `sked bench ARGS` exits with 2 and a message naming `named`.
fn refused(args: &[&str], named: &str) {
    let out = Command::new(SKED).arg("bench").args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(named), "{args:?}: {stderr}");
}

#[test]
fn vs_ceiling_elsewhere_is_refused_before_running() {
    refused(
        &["latency", "-n", "1000000", "--vs-ceiling"],
        "--vs-ceiling",
    );
}

/// A drain over tasks spread across queues: every task ran (the drain fails otherwise), and
/// the claims over every queue took tasks from each of them.
fn drain_over_queues(db: &[&str]) {
    let line = bench(&[&["drain", "-n", "700", "--queues", "7"], db].concat());
    assert_eq!(line["queues"], 7, "{line}");
    assert_eq!(line["claimed_from_queues"], 7, "{line}");
    positive(&line, "per_s");
    let one = bench(&[&["drain", "-n", "100"], db].concat());
    assert_eq!(one["queues"], 1, "{one}");
    assert!(one.get("claimed_from_queues").is_none(), "{one}");
}

#[test]
fn drain_over_queues_on_sqlite() {
    drain_over_queues(&[]);
}

#[test]
fn drain_over_queues_on_postgres() {
    let Some(url) = database_url() else { return };
    drain_over_queues(&["--db", &url]);
}

/// A drain over keys with a per-key limit, by priority and in strict order: every task ran
/// (the drain fails otherwise, also when a claim finds every key held for a moment).
fn drain_over_keys(db: &[&str]) {
    for order in ["priority", "strict"] {
        let line = bench(
            &[
                &[
                    "drain",
                    "-n",
                    "300",
                    "--keys",
                    "10",
                    "--per-key",
                    "1",
                    "--order",
                    order,
                ],
                db,
            ]
            .concat(),
        );
        assert_eq!(
            (&line["keys"], &line["per_key"], &line["key_order"]),
            (&10.into(), &1.into(), &order.into()),
            "{line}"
        );
        positive(&line, "per_s");
    }
}

#[test]
fn drain_over_keys_on_sqlite() {
    drain_over_keys(&[]);
}

#[test]
fn drain_over_keys_on_postgres() {
    let Some(url) = database_url() else { return };
    drain_over_keys(&["--db", &url]);
}

#[test]
fn keys_elsewhere_or_badly_limited_are_refused_before_running() {
    refused(&["enqueue", "--keys", "10"], "--keys");
    refused(&["drain", "--per-key", "1"], "--per-key");
    refused(&["drain", "--keys", "10", "--order", "strict"], "--order");
    refused(
        &[
            "drain",
            "--keys",
            "10",
            "--per-key",
            "2",
            "--order",
            "strict",
        ],
        "per-key limit of 1",
    );
    refused(
        &["drain", "--keys", "10", "--per-key", "1", "--order", "soon"],
        "--order",
    );
}

/// A drain while readers poll: every task ran, and the readers' polls were timed.
fn drain_observed(db: &[&str]) {
    let line = bench(
        &[
            &[
                "drain",
                "-n",
                "3000",
                "--observers",
                "3",
                "--observe-every",
                "5ms",
            ],
            db,
        ]
        .concat(),
    );
    assert_eq!(line["observers"], 3, "{line}");
    assert_eq!(line["observe_every_ms"], 5, "{line}");
    positive(&line, "observer_polls_per_s");
    let (p50, p99) = (
        positive(&line, "observer_poll_p50_ms"),
        positive(&line, "observer_poll_p99_ms"),
    );
    assert!(p50 <= p99, "{line}");
    positive(&line, "per_s");
}

#[test]
fn drain_observed_on_sqlite() {
    drain_observed(&[]);
}

#[test]
fn drain_observed_on_postgres() {
    let Some(url) = database_url() else { return };
    drain_observed(&["--db", &url]);
}

#[test]
fn observers_elsewhere_are_refused_before_running() {
    refused(
        &["enqueue", "-n", "1000000", "--observers", "2"],
        "--observers",
    );
    refused(
        &[
            "drain",
            "-n",
            "1000000",
            "--observers",
            "2",
            "--observe-every",
            "0s",
        ],
        "observe-every",
    );
}

#[test]
fn queues_elsewhere_or_none_are_refused_before_running() {
    refused(&["drain", "-n", "1000000", "--queues", "0"], "--queues");
    refused(&["latency", "-n", "1000000", "--queues", "3"], "--queues");
    refused(
        &[
            "drain",
            "-n",
            "1000000",
            "--queues",
            "3",
            "--queue-rate",
            "10/s",
        ],
        "--queues",
    );
}

fn held_snapshot(db: &[&str]) {
    let line = bench(&[&["drain", "-n", "2000", "--hold-snapshot"], db].concat());
    assert_eq!(line["held_snapshot"], true, "{line}");
    positive(&line, "per_s");
}

#[test]
#[ignore = "slow tier"]
fn drain_with_a_held_snapshot_on_sqlite() {
    held_snapshot(&[]);
}

#[test]
fn drain_with_a_held_snapshot_on_postgres() {
    let Some(url) = database_url() else { return };
    held_snapshot(&["--db", &url]);
}

#[test]
fn hold_snapshot_elsewhere_is_refused_before_running() {
    refused(
        &["latency", "-n", "1000000", "--hold-snapshot"],
        "--hold-snapshot",
    );
}

/// A short soak: a line per interval, then the summary; every task enqueued ran, and
/// retention keeps the table bounded.
fn soak(db: &[&str]) {
    let args = [
        &["bench", "soak", "--rate", "200", "--duration", "4s"][..],
        &["--interval", "1s", "--retention", "1s"],
        db,
    ]
    .concat();
    let out = Command::new(SKED).args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "four intervals and the summary: {lines:?}");
    for (i, line) in lines[..4].iter().enumerate() {
        assert_eq!(line["t_s"], i as u64 + 1, "{line}");
        positive(line, "per_s");
        positive(line, "rss_mb");
        positive(line, "bytes");
    }
    let summary = &lines[4];
    assert_eq!(summary["summary"], true, "{summary}");
    assert_eq!(summary["enqueued"], 800, "{summary}");
    assert_eq!(summary["done"], 800, "{summary}");
    positive(summary, "p99_first_ms");
    positive(summary, "p99_last_ms");
    // Pruned every second after a second's retention: well under the 800 enqueued.
    let last_tasks = lines[3]["tasks"].as_u64().unwrap();
    assert!(last_tasks < 700, "{}", lines[3]);
}

#[test]
fn soak_on_sqlite() {
    soak(&[]);
}

#[test]
fn soak_on_postgres() {
    let Some(url) = database_url() else { return };
    soak(&["--db", &url]);
}

#[test]
fn soak_with_bad_numbers_is_refused_before_running() {
    for (args, named) in [
        (&["--rate", "0"][..], "--rate"),
        (&["--duration", "0s"], "--duration"),
        (&["--duration", "2s", "--interval", "5s"], "--interval"),
        (&["--retention", "soon"], "--retention"),
    ] {
        refused(&[&["soak"][..], args].concat(), named);
    }
}
