//! Dedup windows and debounce through the CLI and HTTP on SQLite: a key held for its window
//! after its enqueue, past its task's end and not past the window while the task waits, and
//! five debounced enqueues 200 ms apart that run once, with the last payload; invalid
//! combinations refused.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Server, stamp, wait_for};
use crate::hostile_cli::request;

fn add(srv: &Server, extra: &[&str]) -> Value {
    let mut args = vec!["task", "add", "--kind", "shell"];
    args.extend_from_slice(extra);
    srv.json(&args)
}

/// Sleeps until the window of `ms` of task `id` has closed: it runs from the enqueue as the
/// server saw it (the task's creation).
fn sleep_until_closed(srv: &Server, id: &str, ms: i64) {
    let created = srv.task(id)["created_at"].as_str().unwrap().to_string();
    let closes =
        created.parse::<jiff::Timestamp>().unwrap() + jiff::SignedDuration::from_millis(ms + 10);
    if let Ok(wait) = Duration::try_from(closes - jiff::Timestamp::now()) {
        std::thread::sleep(wait);
    }
}

#[test]
fn a_duplicate_enqueue_says_it_is_one_and_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let args = |payload: &str| {
        let payload = format!("{{\"n\": {payload}}}");
        srv.ok(&[
            "task",
            "add",
            "--kind",
            "report",
            "--payload",
            &payload,
            "--unique-key",
            "report-42",
        ])
    };
    let first = args("1");
    let id: u64 = first
        .trim()
        .parse()
        .expect("the first enqueue prints only its id");
    assert_eq!(
        args("2").trim(),
        format!("{id} (already enqueued: unique key report-42)")
    );
    // The first payload stands: the second made nothing.
    assert_eq!(srv.task(&id.to_string())["payload"], json!({"n": 1}));
    let digest = [
        "task",
        "add",
        "--kind",
        "digest",
        "--in",
        "1h",
        "--unique-key",
        "digest",
        "--debounce",
        "1m",
    ];
    let id: u64 = srv.ok(&digest).trim().parse().unwrap();
    let again = srv.ok(&digest);
    assert_eq!(
        again.trim(),
        format!("{id} (debounced: the waiting task took this payload and run time)")
    );
}

#[test]
fn a_dedup_window_returns_the_first_task_until_it_closes() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let payload = json!({"command": "true"}).to_string();
    let window = [
        "--payload",
        &payload,
        "--unique-key",
        "k",
        "--unique-for",
        "4s",
    ];
    let added = Instant::now();
    let first = add(&srv, &window);
    assert_eq!(first["duplicate"], false, "{first}");
    // It runs and finishes at once; the key stays held.
    let id = first["id"].to_string();
    wait_for("the first task to succeed", Duration::from_secs(10), || {
        srv.task(&id)["state"] == "succeeded"
    });
    let again = add(&srv, &window);
    assert_eq!(
        (again["id"].clone(), again["duplicate"].clone()),
        (first["id"].clone(), json!(true))
    );
    assert!(
        added.elapsed() < Duration::from_secs(4),
        "too slow to test the window"
    );
    sleep_until_closed(&srv, &id, 4_000);
    let later = add(&srv, &window);
    assert_eq!(later["duplicate"], false, "{later}");
    assert_ne!(later["id"], first["id"]);
}

#[test]
fn a_dedup_window_frees_the_key_when_it_closes_though_its_task_has_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    // Due in an hour: unfinished for the whole test.
    let payload = json!({"command": "true"}).to_string();
    let window = [
        "--payload",
        &payload,
        "--in",
        "1h",
        "--unique-key",
        "k",
        "--unique-for",
        "2s",
    ];
    let first = add(&srv, &window);
    assert_eq!(first["duplicate"], false, "{first}");
    let again = add(&srv, &window);
    assert_eq!(
        (again["id"].clone(), again["duplicate"].clone()),
        (first["id"].clone(), json!(true))
    );
    let id = first["id"].to_string();
    sleep_until_closed(&srv, &id, 2_000);
    let later = add(&srv, &window);
    assert_eq!(later["duplicate"], false, "{later}");
    assert_ne!(later["id"], first["id"]);
    assert_eq!(
        srv.task(&id)["state"],
        "scheduled",
        "the first task is still to run"
    );
}

#[test]
fn five_debounced_enqueues_run_once_with_the_last_payload() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    let ran = dir.path().join("ran.txt");
    let mut ids = Vec::new();
    for n in 1..=5 {
        let payload = json!({"command": format!("echo {n} >> {}", ran.display())}).to_string();
        let added = add(
            &srv,
            &[
                "--payload",
                &payload,
                "--unique-key",
                "rebuild",
                "--debounce",
                "1s",
            ],
        );
        ids.push(added["id"].clone());
        if n > 1 {
            assert_eq!(added["debounced"], true, "{added}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let id = ids[0].to_string();
    wait_for(
        "the debounced task to succeed",
        Duration::from_secs(10),
        || srv.task(&id)["state"] == "succeeded",
    );
    let lines = std::fs::read_to_string(&ran).unwrap();
    assert_eq!(lines.trim(), "5", "ran: {lines:?}");
    // Due a second after the last enqueue (0.8 s or more after the first), not after the
    // first: by the server's clock, it started at least 1.8 s after it was created.
    let t = srv.task(&id);
    let at = |field: &str| stamp(&t, field);
    let took = at("started_at").duration_since(at("created_at"));
    assert!(
        took >= jiff::SignedDuration::from_millis(1_800),
        "ran after {took:?}: {t}"
    );
}

#[test]
fn dedup_options_that_do_not_fit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    for bad in [
        vec!["--unique-for", "10m"],
        vec!["--debounce", "1s"],
        vec!["--unique-key", "k", "--unique-for", "0s"],
        vec!["--unique-key", "k", "--unique-for", "soon"],
        vec![
            "--unique-key",
            "k",
            "--unique-for",
            "1m",
            "--debounce",
            "1s",
        ],
    ] {
        let mut args = vec!["task", "add", "--kind", "k"];
        args.extend(&bad);
        let out = srv.sked(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(!stderr.trim().is_empty(), "{bad:?} says nothing");
    }
    for bad in [
        json!({"kind": "k", "unique_for": "10m"}),
        json!({"kind": "k", "unique_key": "k", "debounce": "-1s"}),
        json!({"kind": "k", "unique_key": "k", "unique_for": "1m", "debounce": "1s"}),
    ] {
        let (status, body) = request(&srv, "POST", "/v1/tasks", &bad.to_string());
        assert_eq!(status, 422, "{bad}: {body}");
    }
    let listed = srv.json(&["task", "ls"]);
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 0, "{listed}");
}
