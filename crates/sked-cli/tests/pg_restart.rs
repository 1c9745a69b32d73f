//! PostgreSQL restarted under load: a private PostgreSQL cluster (made with `initdb` in a
//! temporary directory, so nothing else on the machine notices) is stopped the hard way
//! (`pg_ctl stop -m immediate`, as a crash) and started again while two servers take tasks.
//! Every acknowledged task must survive and run; requests during the outage fail fast with a
//! clear "unavailable" (HTTP 503); the servers recover without a restart.
//!
//! Needs PostgreSQL's server binaries; skipped without them unless `CI` is set.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::private_pg::PrivatePg;
use common::{SKED, Server, wait_for};

#[derive(Default)]
struct Enqueued {
    acknowledged: Vec<String>,
    refusals: Vec<String>,
    slowest: Duration,
    acknowledged_after_restart: usize,
}

fn enqueue_until(
    urls: Vec<String>,
    payload: String,
    stop: Instant,
    restarted: &'static std::sync::OnceLock<Instant>,
) -> Enqueued {
    let mut e = Enqueued::default();
    let mut next = 0;
    while Instant::now() < stop {
        let url = &urls[next % urls.len()];
        next += 1;
        let started = Instant::now();
        let out = Command::new(SKED)
            .args(["task", "add", "--kind", "shell", "--payload", &payload])
            .env("SKED_URL", url)
            .output()
            .unwrap();
        e.slowest = e.slowest.max(started.elapsed());
        if out.status.success() {
            e.acknowledged
                .push(String::from_utf8(out.stdout).unwrap().trim().to_string());
            if restarted.get().is_some_and(|at| started > *at) {
                e.acknowledged_after_restart += 1;
            }
        } else {
            e.refusals
                .push(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    e
}

static RESTARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

#[test]
#[ignore = "slow tier"]
fn postgres_crash_and_restart_under_load_loses_no_acknowledged_task() {
    let Some(pg) = PrivatePg::start_new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = pg.url();
    let servers: Vec<Server> = (0..2)
        .map(|i| {
            Server::start_on(
                dir.path(),
                &db,
                &["--exec", "shell", "--lease-ttl", "2s"],
                &[],
                &format!("server{i}.log"),
            )
        })
        .collect();
    let done = dir.path().join("done.txt");
    let payload = format!(
        r#"{{"command": "echo $SKED_TASK_ID >> {}"}}"#,
        done.display()
    );
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let stop = Instant::now() + Duration::from_secs(10);
    let load = std::thread::spawn(move || enqueue_until(urls, payload, stop, &RESTARTED));

    std::thread::sleep(Duration::from_secs(3));
    let before = std::fs::read_to_string(&done)
        .unwrap_or_default()
        .lines()
        .count();
    assert!(before > 0, "no task ran before the crash");
    pg.crash();
    std::thread::sleep(Duration::from_secs(2));
    pg.start();
    RESTARTED.set(Instant::now()).unwrap();
    let e = load.join().unwrap();
    eprintln!(
        "{} acknowledged ({} after the restart), {} refused, slowest answer {:?}",
        e.acknowledged.len(),
        e.acknowledged_after_restart,
        e.refusals.len(),
        e.slowest
    );
    assert!(!e.refusals.is_empty(), "the outage was not noticed");
    eprintln!("a refusal: {}", e.refusals[0]);
    assert!(
        e.refusals.iter().all(|r| r.contains("unavailable")),
        "refusals were not a clear 'unavailable': {:?}",
        e.refusals
    );
    assert!(
        e.slowest < Duration::from_secs(15),
        "a request hung for {:?}",
        e.slowest
    );
    assert!(
        e.acknowledged_after_restart > 0,
        "the servers did not recover by themselves"
    );

    let ids: BTreeSet<String> = e.acknowledged.into_iter().collect();
    let ran = |done: &Path| -> BTreeSet<String> {
        std::fs::read_to_string(done)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    wait_for(
        "every acknowledged task to run",
        Duration::from_secs(60),
        || ids.is_subset(&ran(&done)),
    );
    let succeeded = servers[0].succeeded_ids();
    let not_succeeded: Vec<&String> = ids.difference(&succeeded).collect();
    assert!(not_succeeded.is_empty(), "not succeeded: {not_succeeded:?}");
}
