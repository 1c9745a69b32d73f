//! A pg_auto_failover formation of a test's own: a monitor and two PostgreSQL nodes (a primary
//! and a synchronous secondary), each a `pg_autoctl … --run` process with its own data
//! directory and port in a temporary directory, run as the `postgres` user (the test runs as
//! root). Needs Debian's `pg-auto-failover-cli` and `postgresql-15-auto-failover` (`.ci/run`
//! installs them); a test that asks for a formation is skipped without them unless `CI` is set.
//!
//! Dropping the formation kills every process it started (each `pg_autoctl` leads a process
//! group holding its PostgreSQL).
#![allow(dead_code, unreachable_pub)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::private_pg::{is_root, missing, pg_bin_dir, postgres_dir};
use crate::common::{free_port, wait_for};

pub struct Formation {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// The `postgres` user's ids.
    user: (u32, u32),
    pub monitor_port: u16,
    /// The data nodes' ports, `n1` then `n2`.
    pub ports: [u16; 2],
    keepers: Vec<Child>,
}

fn id_of(flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, "postgres"])
        .output()
        .unwrap();
    assert!(out.status.success(), "no postgres user");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

impl Formation {
    /// A formation with a primary and a secondary in sync, or `None` (the test is skipped)
    /// where pg_auto_failover is not installed and `CI` is not set.
    pub fn start() -> Option<Formation> {
        let installed = Command::new("pg_autoctl")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        // As root, its PostgreSQL instances run as the `postgres` user, who may write their
        // sockets to /var/run/postgresql.
        let bin = pg_bin_dir().filter(|_| installed && is_root());
        let Some(bin) = bin else {
            return missing("pg_autoctl, PostgreSQL's server binaries or root");
        };
        let dir = postgres_dir();
        let user = (id_of("-u"), id_of("-g"));
        let mut f = Formation {
            dir,
            bin,
            user,
            monitor_port: free_port(),
            ports: [free_port(), free_port()],
            keepers: Vec::new(),
        };
        let monitor = f.pgdata("monitor");
        let port = f.monitor_port.to_string();
        f.keep(
            "monitor",
            &["create", "monitor", "--pgdata", &monitor, "--pgport", &port],
        );
        let mut uri = String::new();
        wait_for("the monitor's PostgreSQL", Duration::from_secs(60), || {
            f.psql(f.monitor_port, "SELECT 1").is_some()
        });
        // Failure detection in seconds rather than the defaults' 50: the monitor checks each
        // node every second and fails a silent primary over after 5 s, and the new primary
        // takes writes 10 s later (it waits that long for the old one to have demoted itself,
        // in case it was only cut off).
        for setting in [
            "pgautofailover.health_check_period = 1000",
            "pgautofailover.health_check_timeout = 1000",
            "pgautofailover.health_check_retry_delay = 500",
            "pgautofailover.health_check_max_retries = 2",
            "pgautofailover.node_considered_unhealthy_timeout = 5000",
            "pgautofailover.primary_demote_timeout = 10000",
        ] {
            f.psql(f.monitor_port, &format!("ALTER SYSTEM SET {setting}"))
                .expect("the monitor takes its settings");
        }
        f.psql(f.monitor_port, "SELECT pg_reload_conf()")
            .expect("the monitor reloads its settings");
        wait_for("the monitor", Duration::from_secs(60), || {
            let out = f
                .command(&[
                    "show",
                    "uri",
                    "--pgdata",
                    &monitor,
                    "--formation",
                    "monitor",
                ])
                .output()
                .unwrap();
            uri = String::from_utf8_lossy(&out.stdout).trim().to_string();
            out.status.success() && uri.starts_with("postgres://")
        });
        for (i, port) in f.ports.into_iter().enumerate() {
            let name = format!("n{}", i + 1);
            let (data, port) = (f.pgdata(&name), port.to_string());
            f.keep(
                &name,
                &[
                    "create",
                    "postgres",
                    "--pgdata",
                    &data,
                    "--pgport",
                    &port,
                    "--name",
                    &name,
                    "--monitor",
                    &uri,
                ],
            );
            // The first node registers as the primary before the second one asks.
            if i == 0 {
                wait_for("the first node", Duration::from_secs(60), || {
                    f.states().iter().any(|n| n.reported == "single")
                });
            }
        }
        f.wait_stable(Duration::from_secs(90));
        Some(f)
    }

    fn pgdata(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// `pg_autoctl` with the formation's environment, as the `postgres` user.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("pg_autoctl");
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let home = self.dir.path();
        cmd.args(args)
            .env("PATH", path)
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("XDG_RUNTIME_DIR", home.join("run"))
            .env("PG_CONFIG", self.bin.join("pg_config"))
            .current_dir(home);
        cmd.uid(self.user.0).gid(self.user.1);
        cmd
    }

    /// Starts `pg_autoctl <args> --auth trust --no-ssl --run` as a process group of its own.
    fn keep(&mut self, name: &str, args: &[&str]) {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let common = [
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
            "--pgctl",
        ];
        let pg_ctl = self.bin.join("pg_ctl").display().to_string();
        let child = self
            .command(args)
            .args(common)
            .args([pg_ctl.as_str(), "--run"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        self.keepers.push(child);
    }

    /// Runs SQL as the superuser on the PostgreSQL at `port`; its rows, unaligned, or `None`
    /// when it fails.
    pub fn psql(&self, port: u16, sql: &str) -> Option<String> {
        let mut psql = Command::new(self.bin.join("psql"));
        psql.args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
        ])
        .args(["-v", "ON_ERROR_STOP=1", "-Atc", sql])
        .current_dir(self.dir.path());
        psql.uid(self.user.0).gid(self.user.1);
        let out = psql.output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The data nodes as the monitor sees them.
    pub fn states(&self) -> Vec<NodeState> {
        let monitor = self.pgdata("monitor");
        let out = self
            .command(&["show", "state", "--pgdata", &monitor, "--json"])
            .output()
            .unwrap();
        let nodes: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        nodes
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| NodeState {
                name: n["nodename"].as_str().unwrap_or("").into(),
                port: n["nodeport"].as_u64().unwrap_or(0) as u16,
                reported: n["current_group_state"].as_str().unwrap_or("").into(),
                assigned: n["assigned_group_state"].as_str().unwrap_or("").into(),
            })
            .collect()
    }

    /// Waits until one node is the primary and the other a secondary in sync, each in the
    /// state the monitor assigned.
    pub fn wait_stable(&self, limit: Duration) {
        wait_for("a primary and a secondary", limit, || {
            let nodes = self.states();
            let settled = |state: &str| {
                nodes
                    .iter()
                    .any(|n| n.reported == state && n.assigned == state)
            };
            nodes.len() == 2 && settled("primary") && settled("secondary")
        });
    }

    /// The index (into [`Formation::ports`]) of the node the monitor calls primary.
    pub fn primary(&self) -> usize {
        let nodes = self.states();
        let primary = nodes
            .iter()
            .find(|n| n.reported == "primary")
            .unwrap_or_else(|| panic!("no primary: {nodes:?}"));
        self.ports.iter().position(|p| *p == primary.port).unwrap()
    }

    /// `pg_autoctl perform failover`: the monitor demotes the primary and promotes the
    /// secondary; returns once the command does.
    pub fn perform_failover(&self) {
        let monitor = self.pgdata("monitor");
        let out = self
            .command(&["perform", "failover", "--pgdata", &monitor])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_autoctl perform failover: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kill -9` of a node's postmaster (its backends die with it; its keeper lives on).
    pub fn kill_postmaster(&self, node: usize) {
        let pid = std::fs::read_to_string(
            Path::new(&self.pgdata(&format!("n{}", node + 1))).join("postmaster.pid"),
        )
        .unwrap();
        let pid = pid.lines().next().unwrap().trim();
        let ok = Command::new("kill")
            .args(["-9", pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -9 {pid}");
    }

    /// `kill -9` of a node's keeper and its PostgreSQL together, as when its machine dies:
    /// nothing restarts it, and the monitor fails over to the other node.
    pub fn kill_node(&mut self, node: usize) {
        let keeper = &mut self.keepers[node + 1];
        let group = format!("-{}", keeper.id());
        let ok = Command::new("kill")
            .args(["-9", "--", &group])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -9 {group}");
        let _ = keeper.wait();
    }

    /// A multi-host URL of both nodes that connects to whichever one takes writes.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.ports[0], self.ports[1]
        )
    }

    /// The monitor's last events (state changes and their reasons, with times), for a
    /// failing test's message.
    pub fn events(&self) -> String {
        let monitor = self.pgdata("monitor");
        let out = self
            .command(&["show", "events", "--pgdata", &monitor, "--count", "80"])
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// The keepers' and monitor's logs, for a failing test's message.
    pub fn logs(&self) -> String {
        ["monitor", "n1", "n2"]
            .iter()
            .map(|n| {
                let text = std::fs::read_to_string(self.dir.path().join(format!("{n}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {n}\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[derive(Debug, Clone)]
pub struct NodeState {
    pub name: String,
    pub port: u16,
    pub reported: String,
    pub assigned: String,
}

impl Drop for Formation {
    fn drop(&mut self) {
        for keeper in &mut self.keepers {
            let group = format!("-{}", keeper.id());
            let _ = Command::new("kill")
                .args(["-9", "--", &group])
                .stderr(Stdio::null())
                .status();
            let _ = keeper.wait();
        }
        // A PostgreSQL that a keeper restarted in another group, if any (checked to be that
        // data directory's postmaster, not a process that took over a stale pid).
        for name in ["monitor", "n1", "n2"] {
            let data = self.pgdata(name);
            let pidfile = Path::new(&data).join("postmaster.pid");
            let Some(pid) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.lines().next().map(|l| l.trim().to_string()))
            else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&data) {
                let _ = Command::new("kill").args(["-9", &pid]).status();
            }
        }
        // A PostgreSQL child that outlives its killed postmaster (the monitor's health check
        // worker does, checking nodes that are gone every second): every process still
        // working in one of the formation's data directories.
        let root = self.dir.path().display().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let pid = entry.file_name().to_string_lossy().to_string();
            if !pid.chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            let cwd = std::fs::read_link(entry.path().join("cwd")).unwrap_or_default();
            if cwd.display().to_string().starts_with(&root) {
                let _ = Command::new("kill").args(["-9", &pid]).status();
            }
        }
    }
}
