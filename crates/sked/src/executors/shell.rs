//! `shell`: runs `{"command": "…"}` with `sh -c`, or `{"argv": ["prog", "arg"]}` directly, with
//! optional `env` (object) and `cwd`. Succeeds on exit code 0 and records the exit code and the
//! last 4 KiB of stdout and stderr (read as they come, so any amount of output takes no more
//! memory than that).
//!
//! The command runs in a process group of its own. When the attempt is stopped (timeout,
//! cancel, shutdown) the whole group gets SIGTERM, then SIGKILL if anything in it still runs
//! [`KILL_GRACE`] later, so that children such as `sleep` do not outlive the task. After a
//! command exits by itself, processes it left in the background are left alone; its output is
//! read for at most one more second.

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use sked_core::{ShellCommand, ShellPayload, Task};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{ExecResult, Executor};

/// Bytes kept of each of stdout and stderr.
const TAIL_BYTES: usize = 4096;
/// How long a stopped command's process group has between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// How long output is still read after the command exits (background processes may hold it).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// The `shell` kind: `{"command": "…"}` or `{"argv": […]}`, with optional `env` and `cwd`;
/// records the exit code and the output's tail.
#[derive(Debug, Default, Clone, Copy)]
pub struct ShellExecutor;

/// The last [`TAIL_BYTES`] of a stream.
#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    async fn read_all(&mut self, mut from: impl AsyncRead + Unpin) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    self.0.extend_from_slice(&buf[..n]);
                    if self.0.len() > 2 * TAIL_BYTES {
                        self.0.drain(..self.0.len() - TAIL_BYTES);
                    }
                }
            }
        }
    }

    fn text(&self, max: usize) -> String {
        super::tail(&self.0, max)
    }
}

/// Ends the command's process group when dropped before the command was waited for.
struct Group {
    pgid: Option<rustix::process::Pid>,
}

impl Group {
    /// The command was waited for: its group is no longer ours to end.
    fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let Some(pgid) = self.pgid else { return };
        use rustix::process::{Signal, kill_process_group, test_kill_process_group};
        if kill_process_group(pgid, Signal::TERM).is_err() {
            return;
        }
        // Not waited for, the group leader stays a zombie until tokio reaps it, so the group
        // id cannot be taken by another process meanwhile.
        std::thread::spawn(move || {
            let until = std::time::Instant::now() + KILL_GRACE;
            while std::time::Instant::now() < until {
                if test_kill_process_group(pgid).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = kill_process_group(pgid, Signal::KILL);
        });
    }
}

#[async_trait]
impl Executor for ShellExecutor {
    fn kind(&self) -> &str {
        "shell"
    }

    async fn run(&self, task: &Task) -> ExecResult {
        let fatal = |error: String| ExecResult::Failure {
            error,
            retryable: false,
        };
        // Checked when the task was written; a task written before that check may still be bad.
        let p = match ShellPayload::parse(&task.payload) {
            Ok(p) => p,
            Err(e) => return fatal(e.to_string()),
        };
        let mut cmd = match p.command() {
            Ok(ShellCommand::Line(line)) => {
                let mut cmd = tokio::process::Command::new("sh");
                cmd.arg("-c").arg(line);
                cmd
            }
            Ok(ShellCommand::Argv(program, args)) => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args);
                cmd
            }
            Err(e) => return fatal(e.to_string()),
        };
        cmd.envs(&p.env)
            .env("SKED_TASK_ID", task.id.to_string())
            .env("SKED_ATTEMPT", task.attempt.to_string())
            .env("SKED_SCHEDULE", task.schedule.as_deref().unwrap_or(""))
            .env(
                "SKED_NOMINAL_AT",
                task.nominal_at.map(|t| t.to_string()).unwrap_or_default(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // The trace context of this run, as OpenTelemetry's environment propagation names it.
        if let Some(tp) = &task.traceparent {
            cmd.env("TRACEPARENT", tp);
        }
        if let Some(cwd) = &p.cwd {
            cmd.current_dir(cwd);
        }
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                return ExecResult::Failure {
                    error: format!("cannot start command: {e}"),
                    retryable: true,
                };
            }
        };
        // Declared after `child`, so dropped before it: the group gets SIGTERM before tokio's
        // SIGKILL reaches the leader.
        let mut group = Group {
            pgid: child
                .id()
                .and_then(|id| rustix::process::Pid::from_raw(id as i32)),
        };
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let (mut out, mut err) = (Tail::default(), Tail::default());
        let status = {
            let reading = async {
                if let Some(s) = stdout {
                    out.read_all(s).await;
                }
            };
            let reading_err = async {
                if let Some(s) = stderr {
                    err.read_all(s).await;
                }
            };
            let reading = async { tokio::join!(reading, reading_err) };
            tokio::pin!(reading);
            let mut read = false;
            let status = loop {
                tokio::select! {
                    status = child.wait() => break status,
                    _ = &mut reading, if !read => read = true,
                }
            };
            group.disarm();
            if !read {
                let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, &mut reading).await;
            }
            status
        };
        let status = match status {
            Ok(s) => s,
            Err(e) => {
                return ExecResult::Failure {
                    error: format!("cannot wait for command: {e}"),
                    retryable: true,
                };
            }
        };
        let code = status.code();
        let result = json!({
            "exit_code": code,
            "stdout": out.text(TAIL_BYTES),
            "stderr": err.text(TAIL_BYTES),
        });
        if status.success() {
            ExecResult::Success(Some(result))
        } else {
            let how = match code {
                Some(c) => format!("exit code {c}"),
                None => "killed by a signal".to_string(),
            };
            ExecResult::Failure {
                error: format!("{how}: {}", err.text(1024).trim()),
                retryable: true,
            }
        }
    }
}
