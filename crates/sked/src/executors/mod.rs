//! Executors run a task's work. The built-in ones, `shell` and `http`, are opt-in per process
//! (`--exec shell,http`); Rust services add their own.

#[cfg(feature = "http-executor")]
mod http;
#[cfg(feature = "http-executor")]
mod policy;
mod shell;

use async_trait::async_trait;
use jiff::SignedDuration;
use sked_core::Task;

#[cfg(feature = "http-executor")]
pub use http::{DEFAULT_HTTP_TIMEOUT, HttpExecutor};
#[cfg(feature = "http-executor")]
pub use policy::HttpPolicy;
pub use shell::{KILL_GRACE, ShellExecutor};

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ExecResult {
    /// It succeeded, with this result to store.
    Success(Option<serde_json::Value>),
    /// It failed.
    Failure {
        /// What went wrong, kept in the attempt history.
        error: String,
        /// Whether another attempt may succeed (else the task is dead at once).
        retryable: bool,
    },
    /// Run again after this long without spending an attempt.
    Snooze(SignedDuration),
}

/// Runs tasks of one kind. The future is dropped when the task times out or is cancelled, so
/// an executor must stop its work when dropped (e.g. kill its child process).
#[async_trait]
pub trait Executor: Send + Sync + 'static {
    /// The task kind it runs.
    fn kind(&self) -> &str;
    /// Runs one attempt of `task`.
    async fn run(&self, task: &Task) -> ExecResult;
}

/// How the built-in executors are set up.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct BuiltinOptions {
    /// Where `http` tasks may connect.
    #[cfg(feature = "http-executor")]
    pub http_policy: HttpPolicy,
    /// How long an `http` task without a timeout may take (default [`DEFAULT_HTTP_TIMEOUT`]).
    #[cfg(feature = "http-executor")]
    pub http_timeout: Option<std::time::Duration>,
}

/// The built-in executors named in `--exec` (comma-separated `shell`, `http`).
pub fn builtin(
    names: &str,
    options: &BuiltinOptions,
) -> Result<Vec<std::sync::Arc<dyn Executor>>, String> {
    let mut out: Vec<std::sync::Arc<dyn Executor>> = Vec::new();
    for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match name {
            "shell" => out.push(std::sync::Arc::new(ShellExecutor)),
            #[cfg(feature = "http-executor")]
            "http" => out.push(std::sync::Arc::new(
                HttpExecutor::with_policy(options.http_policy.clone())
                    .default_timeout(options.http_timeout.unwrap_or(DEFAULT_HTTP_TIMEOUT)),
            )),
            #[cfg(not(feature = "http-executor"))]
            "http" => {
                let _ = options;
                return Err("this build of sked has no http executor (cargo feature \
                    `http-executor` of the sked crate)"
                    .into());
            }
            other => {
                return Err(format!(
                    "unknown executor {other:?}: expected shell or http"
                ));
            }
        }
    }
    Ok(out)
}

/// The last `max` bytes of `bytes` as text.
pub(crate) fn tail(bytes: &[u8], max: usize) -> String {
    let start = bytes.len().saturating_sub(max);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}
