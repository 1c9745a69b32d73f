//! `http`: makes the request `{"method": "POST", "url": "…", "headers": {…}, "body": …}` and
//! succeeds on a 2xx answer. 5xx, 408, 429 and network errors are retried; other statuses are
//! fatal (retrying would get the same answer).

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use sked_core::Task;

use super::{ExecResult, Executor, tail};

const TAIL_BYTES: usize = 4096;

/// The `http` kind: `{"method", "url", "headers", "body"}`; succeeds on a 2xx answer.
#[derive(Debug, Clone)]
pub struct HttpExecutor {
    client: reqwest::Client,
}

impl HttpExecutor {
    /// An executor with its own HTTP client.
    pub fn new() -> HttpExecutor {
        HttpExecutor {
            client: reqwest::Client::new(),
        }
    }
}

impl Default for HttpExecutor {
    fn default() -> Self {
        HttpExecutor::new()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    #[serde(default = "get")]
    method: String,
    url: String,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    body: Option<serde_json::Value>,
}

fn get() -> String {
    "GET".into()
}

#[async_trait]
impl Executor for HttpExecutor {
    fn kind(&self) -> &str {
        "http"
    }

    async fn run(&self, task: &Task) -> ExecResult {
        let fatal = |error: String| ExecResult::Failure {
            error,
            retryable: false,
        };
        let p: Payload = match serde_json::from_value(task.payload.clone()) {
            Ok(p) => p,
            Err(e) => return fatal(format!("invalid http payload: {e}")),
        };
        let Ok(method) = reqwest::Method::from_bytes(p.method.to_ascii_uppercase().as_bytes())
        else {
            return fatal(format!("invalid HTTP method {:?}", p.method));
        };
        let mut req = self.client.request(method, &p.url);
        for (k, v) in &p.headers {
            req = req.header(k, v);
        }
        req = req.header("sked-task-id", task.id.to_string());
        match &p.body {
            Some(serde_json::Value::String(s)) => req = req.body(s.clone()),
            Some(v) => req = req.json(v),
            None => {}
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if e.is_builder() => return fatal(format!("invalid request: {e}")),
            Err(e) => {
                return ExecResult::Failure {
                    error: format!("request failed: {e}"),
                    retryable: true,
                };
            }
        };
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map(|b| tail(&b, TAIL_BYTES))
            .unwrap_or_default();
        if status.is_success() {
            ExecResult::Success(Some(json!({"status": status.as_u16(), "body": body})))
        } else {
            let retryable =
                status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429;
            ExecResult::Failure {
                error: format!("HTTP {status}: {}", tail(body.as_bytes(), 512)),
                retryable,
            }
        }
    }
}
