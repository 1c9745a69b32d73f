//! `shell`: runs `{"command": "…"}` with `sh -c`, or `{"argv": ["prog", "arg"]}` directly, with
//! optional `env` (object) and `cwd`. Succeeds on exit code 0 and records the exit code and the
//! tail of stdout and stderr. The child is killed if the task times out or is cancelled.

use std::process::Stdio;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use sked_core::Task;

use super::{ExecResult, Executor, tail};

const TAIL_BYTES: usize = 4096;

/// The `shell` kind: `{"command": "…"}` or `{"argv": […]}`, with optional `env` and `cwd`;
/// records the exit code and the output's tail.
#[derive(Debug, Default, Clone, Copy)]
pub struct ShellExecutor;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    command: Option<String>,
    argv: Option<Vec<String>>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    cwd: Option<String>,
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
        let p: Payload = match serde_json::from_value(task.payload.clone()) {
            Ok(p) => p,
            Err(e) => return fatal(format!("invalid shell payload: {e}")),
        };
        let mut cmd = match (&p.command, &p.argv) {
            (Some(c), None) => {
                let mut cmd = tokio::process::Command::new("sh");
                cmd.arg("-c").arg(c);
                cmd
            }
            (None, Some(argv)) if !argv.is_empty() => {
                let mut cmd = tokio::process::Command::new(&argv[0]);
                cmd.args(&argv[1..]);
                cmd
            }
            _ => {
                return fatal(
                    "shell payload needs exactly one of \"command\" or a non-empty \"argv\"".into(),
                );
            }
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
            .kill_on_drop(true);
        if let Some(cwd) = &p.cwd {
            cmd.current_dir(cwd);
        }
        let out = match cmd.output().await {
            Ok(out) => out,
            Err(e) => {
                return ExecResult::Failure {
                    error: format!("cannot start command: {e}"),
                    retryable: true,
                };
            }
        };
        let code = out.status.code();
        let result = json!({
            "exit_code": code,
            "stdout": tail(&out.stdout, TAIL_BYTES),
            "stderr": tail(&out.stderr, TAIL_BYTES),
        });
        if out.status.success() {
            ExecResult::Success(Some(result))
        } else {
            let how = match code {
                Some(c) => format!("exit code {c}"),
                None => "killed by a signal".to_string(),
            };
            let stderr = tail(&out.stderr, 1024);
            ExecResult::Failure {
                error: format!("{how}: {}", stderr.trim()),
                retryable: true,
            }
        }
    }
}
