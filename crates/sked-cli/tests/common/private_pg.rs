//! A PostgreSQL cluster of a test's own: made with `initdb` in a temporary directory, so
//! nothing else on the machine notices, run as the `postgres` user when the test is root.
//! Needs PostgreSQL's server binaries; a test that asks for one is skipped without them
//! unless `CI` is set.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct PrivatePg {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
}

pub fn pg_bin_dir() -> Option<PathBuf> {
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

/// Skips a test for want of `what` (`None`), or fails it under CI, which must run it.
pub fn missing<T>(what: &str) -> Option<T> {
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} missing, and CI must run this test"
    );
    eprintln!("{what} missing: skipping");
    None
}

/// A temporary directory that the `postgres` user owns when the test runs as root.
pub fn postgres_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if is_root() {
        let ok = Command::new("chown")
            .args(["-R", "postgres:", &dir.path().display().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot hand the directory to the postgres user");
    }
    dir
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl PrivatePg {
    /// A new cluster, started.
    pub fn start_new() -> Option<PrivatePg> {
        let pg = PrivatePg::init()?;
        pg.start();
        Some(pg)
    }

    /// A new cluster, not started yet, so that its configuration can be changed first.
    pub fn init() -> Option<PrivatePg> {
        let Some(bin) = pg_bin_dir() else {
            return missing("PostgreSQL's server binaries (initdb, pg_ctl)");
        };
        let dir = postgres_dir();
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
        Some(pg)
    }

    pub fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// Writes a file into the data directory, readable by the server only.
    pub fn write_data_file(&self, name: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = Path::new(&self.data()).join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        if is_root() {
            let ok = Command::new("chown")
                .args(["postgres:", &path.display().to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "cannot hand {} to the postgres user", path.display());
        }
        path
    }

    /// Appends settings to `postgresql.conf`.
    pub fn configure(&self, settings: &str) {
        let path = Path::new(&self.data()).join("postgresql.conf");
        let mut conf = std::fs::read_to_string(&path).unwrap();
        conf.push('\n');
        conf.push_str(settings);
        conf.push('\n');
        std::fs::write(&path, conf).unwrap();
    }

    pub fn run(&self, tool: &str, args: &[&str]) -> String {
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
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs SQL as the superuser over the cluster's Unix socket; its rows, unaligned.
    pub fn psql(&self, sql: &str) -> String {
        let socket_dir = self.dir.path().display().to_string();
        let port = self.port.to_string();
        self.run(
            "psql",
            &[
                "-h",
                &socket_dir,
                "-p",
                &port,
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-Atc",
                sql,
            ],
        )
    }

    pub fn start(&self) {
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
    pub fn crash(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }

    pub fn url(&self) -> String {
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
