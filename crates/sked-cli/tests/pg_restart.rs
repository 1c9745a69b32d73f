//! PostgreSQL restarted under load: a private PostgreSQL cluster (made with `initdb` in a
//! temporary directory, so nothing else on the machine notices) is stopped the hard way
//! (`pg_ctl stop -m immediate`, as a crash) and started again while two servers take tasks.
//! Every acknowledged task must survive and run; requests during the outage fail fast with a
//! clear "unavailable" (HTTP 503); the servers recover without a restart.
//!
//! Needs PostgreSQL's server binaries; skipped without them unless `CI` is set.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{SKED, Server, wait_for};

/// A PostgreSQL cluster of the test's own, run as the `postgres` user when the test is root.
struct PrivatePg {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

fn pg_bin_dir() -> Option<PathBuf> {
    let out = Command::new("pg_config").arg("--bindir").output().ok();
    let from_config = out
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let candidates = from_config.into_iter().chain(
        std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin")),
    );
    candidates
        .into_iter()
        .find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl PrivatePg {
    fn start_new() -> Option<PrivatePg> {
        let Some(bin) = pg_bin_dir() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "PostgreSQL's server binaries (initdb, pg_ctl) are missing, and CI must run this test"
            );
            eprintln!("no initdb/pg_ctl: skipping");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            let ok = Command::new("chown")
                .args(["-R", "postgres:", &dir.path().display().to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "cannot hand the directory to the postgres user");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = PrivatePg { dir, bin, port };
        let data = pg.data();
        pg.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        pg.start();
        Some(pg)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd.args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn start(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("postgres.log").display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-l", &log, "-o", &opts, "-w", "start"],
        );
    }

    /// Stops at once, without a checkpoint: the next start recovers from the WAL, as after a crash.
    fn crash(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let data = self.data();
        let exe = self.bin.join("pg_ctl");
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let _ = cmd.args(["-D", &data, "-m", "immediate", "stop"]).output();
    }
}

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
