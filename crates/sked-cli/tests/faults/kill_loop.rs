//! Servers and protocol workers killed with `kill -9` and paused with SIGSTOP in a loop, on
//! PostgreSQL (`SKED_TEST_DATABASE_URL`; each run has a schema of its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::Server;
use crate::history::{self, Event, now_ns};
use crate::load::{self, Worker, enqueue, signal};
use sked_postgres::testing::{TestSchema, database_url};

/// Three servers (clocks an hour apart) and seven protocol workers (four fast, three slow) on
/// one PostgreSQL; a client enqueues 2,000+ tasks (some due later, some slow) and an
/// every-second schedule (catch-up `all`) fires, while a server or a worker is killed with
/// `kill -9` (and restarted) every 0.5–1 s, and now and then a slow worker is paused past its
/// leases and resumed, so that its late completions meet the fencing token. Then the history
/// checker: every acknowledged task succeeded after at least one claim, no attempt completed
/// twice, no stale completion accepted, one task per occurrence and every second covered, none
/// reached its worker early, and each start within its claim.
#[test]
#[ignore = "slow tier"]
fn kill_9_loop_of_servers_and_workers_loses_nothing() {
    let Some(url) = database_url() else { return };
    let _alone = crate::alone();
    let schema = TestSchema::new(&url);
    let dir = tempfile::tempdir().unwrap();
    let (hist, _, rec) = load::history_in(dir.path());
    // Clocks an hour slow, right and an hour fast: decisions use the database's clock.
    let mut servers: Vec<Server> = ["-1h", "0s", "1h"]
        .iter()
        .enumerate()
        .map(|(i, skew)| load::node(dir.path(), &schema.url(), &[("SKED_CLOCK_SKEW", skew)], i))
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let span_from = load::add_tick(&urls[0]);
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
    let listed = load::settle(&urls, &rec, span_from);
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
