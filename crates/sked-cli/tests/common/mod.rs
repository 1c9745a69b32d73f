//! Helpers shared by the end-to-end tests: the real `sked` binary as a child process.
#![allow(dead_code, unreachable_pub)]

pub mod otlp_receiver;
pub mod private_pg;
pub mod starts;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const SKED: &str = env!("CARGO_BIN_EXE_sked");

pub struct Server {
    child: Option<Child>,
    pub url: String,
    pub dir: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: String,
}

impl Server {
    /// Starts `sked server` in `dir` on a temporary SQLite file with the given extra flags.
    pub fn start(dir: &Path, extra: &[&str]) -> Server {
        let db = format!("sqlite://{}", dir.join("sked.db").display());
        Server::start_on(dir, &db, extra, &[], "server.log")
    }

    /// Starts `sked server` in `dir` on a free port, on database `db`, with extra flags and
    /// environment; its log goes to `log` in `dir`.
    pub fn start_on(
        dir: &Path,
        db: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        log: &str,
    ) -> Server {
        let mut args = vec!["--db", db];
        args.extend(extra);
        Server::start_with(dir, &args, env, log)
    }

    /// Starts `sked server` in `dir` on a port the system chooses, with the given flags (which
    /// name the database) and environment; its log goes to `log` in `dir`.
    pub fn start_with(dir: &Path, flags: &[&str], env: &[(&str, &str)], log: &str) -> Server {
        let mut args = vec![
            "server".to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ];
        args.extend(flags.iter().map(|s| s.to_string()));
        let mut s = Server {
            child: None,
            url: String::new(),
            dir: dir.to_path_buf(),
            args,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log: log.to_string(),
        };
        s.spawn();
        s
    }

    /// Starts the server again with the same arguments. The first start binds port 0 and
    /// learns the port from the log; later starts take that port again.
    pub fn spawn(&mut self) {
        let log_path = self.dir.join(&self.log);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let logged_before = log.metadata().unwrap().len() as usize;
        let child = Command::new(SKED)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.url.is_empty() {
                let text = std::fs::read(&log_path).unwrap_or_default();
                let text = String::from_utf8_lossy(&text[logged_before.min(text.len())..]);
                if let Some(addr) = listening_address(&text) {
                    self.url = format!("http://{addr}");
                    let listen = self.args.iter().position(|a| a == "--listen").unwrap();
                    self.args[listen + 1] = addr;
                }
            }
            if !self.url.is_empty() && http_ok(&self.url) {
                return;
            }
            let exited = self.child.as_mut().unwrap().try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!("the server did not answer /healthz ({exited:?}); its log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9`, then start again on the same database and port.
    pub fn kill_and_restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// `kill -9`; [`Server::spawn`] starts it again.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("the server is running");
        Command::new("kill")
            .args(["-9", &child.id().to_string()])
            .status()
            .unwrap();
        child.wait().unwrap();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server is running").id()
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the process started last is still alive (it has not exited by itself).
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    pub fn sked(&self, args: &[&str]) -> Output {
        Command::new(SKED)
            .args(args)
            .env("SKED_URL", &self.url)
            .current_dir(&self.dir)
            .output()
            .unwrap()
    }

    /// Runs a CLI command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.sked(args);
        assert!(
            out.status.success(),
            "sked {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    /// The ids of the tasks that succeeded (up to 10,000).
    pub fn succeeded_ids(&self) -> std::collections::BTreeSet<String> {
        let listed = self.json(&["task", "ls", "--state", "succeeded", "--limit", "10000"]);
        listed["tasks"]
            .as_array()
            .expect("a task list")
            .iter()
            .map(|t| t["id"].to_string())
            .collect()
    }

    pub fn task(&self, id: &str) -> Value {
        self.json(&["task", "get", id])
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A plain HTTP/1.0 GET without a client library: the status and body, `None` when the
/// server cannot be reached.
pub fn http_get(url: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split(' ').nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// One HTTP/1.0 request without a client library, with extra headers and a JSON body: the
/// status and the answer as JSON (null when it is none).
pub fn http_call(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{extra}Content-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// The address in a server log's "sked server listening addr=HOST:PORT" line (text or JSON logs).
pub fn listening_address(log: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains("sked server listening"))?;
    let rest = &line[line.find("addr")? + 4..];
    let rest = rest.trim_start_matches(['=', '"', ':']);
    let end = rest.find([' ', '"', ',']).unwrap_or(rest.len());
    Some(rest[..end].to_string())
}

/// A loopback port nothing listens on at the moment (for processes other than `sked server`,
/// which binds port 0 and names the port it got in its log).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// True when `/healthz` answers 200.
pub fn http_ok(url: &str) -> bool {
    http_get(url, "/healthz").is_some_and(|(status, _)| status == 200)
}

/// What `/healthz` says, when the server answers.
pub fn health(url: &str) -> Option<Value> {
    let (status, body) = http_get(url, "/healthz")?;
    (status == 200).then(|| serde_json::from_str(&body).ok())?
}

/// A time field of a task's JSON (`run_at`, `started_at`, …), as the server stamped it.
#[track_caller]
pub fn stamp(task: &Value, field: &str) -> jiff::Timestamp {
    let text = task[field].as_str();
    let text = text.unwrap_or_else(|| panic!("{field} is not a time: {task}"));
    text.parse().unwrap()
}

#[track_caller]
pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
