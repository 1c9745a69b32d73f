//! `http`: makes the request `{"method": "POST", "url": "…", "headers": {…}, "body": …}` and
//! succeeds on a 2xx answer. 5xx, 408, 429 and network errors (timeouts too) are retried; other
//! statuses are fatal (retrying would get the same answer).
//!
//! Limits: the request takes at most the task's timeout (or the executor's default when the
//! task has none), connecting at most 10 s of it; redirects are not followed unless the payload
//! says `"follow_redirects": true` (then at most 10, each checked against the [`HttpPolicy`]);
//! only the first 4 KiB of the answer are read and kept. No proxy is used, so that the policy
//! applies to the address actually reached.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use sked_core::{HttpPayload, Task};

use super::policy::{GuardedResolver, HttpPolicy, Refused, refusal};
use super::{ExecResult, Executor, tail};

/// Bytes of the answer read and kept in the result.
const BODY_KEEP: usize = 4096;
/// Redirects followed at most, when a task asks for them.
const MAX_REDIRECTS: usize = 10;
/// The longest a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a request of a task without a timeout may take, unless the executor is told
/// otherwise.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(300);

/// The `http` kind: `{"method", "url", "headers", "body", "follow_redirects"}`; succeeds on a
/// 2xx answer.
#[derive(Debug, Clone)]
pub struct HttpExecutor {
    policy: Arc<HttpPolicy>,
    direct: reqwest::Client,
    redirecting: reqwest::Client,
    default_timeout: Duration,
}

impl HttpExecutor {
    /// An executor with the default [`HttpPolicy`] (no loopback, no link-local).
    pub fn new() -> HttpExecutor {
        HttpExecutor::with_policy(HttpPolicy::default())
    }

    /// An executor that connects only where `policy` allows.
    pub fn with_policy(policy: HttpPolicy) -> HttpExecutor {
        let policy = Arc::new(policy);
        let client = |redirect| {
            reqwest::Client::builder()
                .dns_resolver(Arc::new(GuardedResolver(policy.clone())))
                .no_proxy()
                .connect_timeout(CONNECT_TIMEOUT)
                .redirect(redirect)
                .build()
                .expect("an HTTP client with rustls and no proxy builds")
        };
        let checked = policy.clone();
        let follow = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            match literal_ip(attempt.url()).map(|ip| checked.check(ip)) {
                Some(Err(e)) => attempt.error(Refused(e)),
                _ => attempt.follow(),
            }
        });
        HttpExecutor {
            direct: client(reqwest::redirect::Policy::none()),
            redirecting: client(follow),
            policy,
            default_timeout: DEFAULT_HTTP_TIMEOUT,
        }
    }

    /// How long a request of a task without its own timeout may take (default 5 minutes).
    pub fn default_timeout(mut self, timeout: Duration) -> HttpExecutor {
        self.default_timeout = timeout;
        self
    }
}

impl Default for HttpExecutor {
    fn default() -> Self {
        HttpExecutor::new()
    }
}

/// The address written in a URL, if it names one rather than a host name (such a URL does not
/// go through the resolver).
fn literal_ip(url: &reqwest::Url) -> Option<std::net::IpAddr> {
    let host = url.host_str()?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// Reads at most [`BODY_KEEP`] bytes of the answer; says whether there was more.
async fn read_head(resp: &mut reqwest::Response) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        let room = BODY_KEEP - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
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
        // Checked when the task was written; a task written before that check may still be bad.
        let p = match HttpPayload::parse(&task.payload) {
            Ok(p) => p,
            Err(e) => return fatal(e.to_string()),
        };
        let Ok(method) = reqwest::Method::from_bytes(p.method.to_ascii_uppercase().as_bytes())
        else {
            return fatal(format!("invalid HTTP method {:?}", p.method));
        };
        let url = match reqwest::Url::parse(&p.url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            Ok(u) => {
                return fatal(format!(
                    "invalid url {:?}: scheme {:?} is not http or https",
                    p.url,
                    u.scheme()
                ));
            }
            Err(e) => return fatal(format!("invalid url {:?}: {e}", p.url)),
        };
        if let Some(Err(e)) = literal_ip(&url).map(|ip| self.policy.check(ip)) {
            return fatal(e);
        }
        let timeout = task
            .timeout
            .and_then(|t| Duration::try_from(t).ok())
            .unwrap_or(self.default_timeout);
        let client = if p.follow_redirects {
            &self.redirecting
        } else {
            &self.direct
        };
        let mut req = client.request(method, url);
        for (k, v) in &p.headers {
            req = req.header(k, v);
        }
        req = req.header("sked-task-id", task.id.to_string());
        // The trace context of this run, unless the payload gives its own.
        if let Some(tp) = &task.traceparent
            && !p
                .headers
                .keys()
                .any(|k| k.eq_ignore_ascii_case("traceparent"))
        {
            req = req.header("traceparent", tp);
        }
        match &p.body {
            Some(serde_json::Value::String(s)) => req = req.body(s.clone()),
            Some(v) => req = req.json(v),
            None => {}
        }
        let work = async {
            let mut resp = req.send().await?;
            let head = read_head(&mut resp).await?;
            Ok::<_, reqwest::Error>((resp.status(), head))
        };
        let (status, (body, truncated)) = match tokio::time::timeout(timeout, work).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) if e.is_builder() => return fatal(format!("invalid request: {e}")),
            Ok(Err(e)) => {
                return match refusal(&e) {
                    Some(why) => fatal(format!("request refused: {why}")),
                    None => ExecResult::Failure {
                        error: format!("request failed: {}", crate::error::with_causes(&e)),
                        retryable: true,
                    },
                };
            }
            Err(_) => return timed_out(timeout),
        };
        let text = String::from_utf8_lossy(&body).into_owned();
        if status.is_success() {
            let mut result = json!({"status": status.as_u16(), "body": text});
            if truncated {
                result["truncated"] = json!(true);
            }
            ExecResult::Success(Some(result))
        } else {
            let retryable =
                status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429;
            ExecResult::Failure {
                error: format!("HTTP {status}: {}", tail(text.as_bytes(), 512)),
                retryable,
            }
        }
    }
}

fn timed_out(after: Duration) -> ExecResult {
    ExecResult::Failure {
        error: format!("request timed out after {:.1}s", after.as_secs_f64()),
        retryable: true,
    }
}
