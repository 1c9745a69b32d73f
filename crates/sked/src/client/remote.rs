//! The remote side of [`super::Client`]: the HTTP API of a `sked server`, through reqwest.

use std::time::Duration;

use jiff::SignedDuration;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sked_core::{Task, TaskId, format_duration};
use sked_store::HeartbeatReply;

use crate::api::worker::{
    BatchReply, Claim, Claimed, Ending, FinishItem, FinishRequest, Finished, HeartbeatRequest,
    Held, ItemResult, WorkReply,
};
use crate::api::{ErrorBody, ErrorCode};
use crate::{ClaimRequest, Error, Result};

/// Where the server is and how to reach it.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Like `http://127.0.0.1:7070`.
    pub url: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub token: Option<String>,
    /// Longest wait for an answer, beyond a long-poll's own wait.
    pub timeout: Duration,
}

impl RemoteOptions {
    /// Options for the server at `url`: no token, a 30 s timeout.
    pub fn new(url: impl Into<String>) -> RemoteOptions {
        RemoteOptions {
            url: url.into(),
            token: None,
            timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug)]
pub(super) struct Remote {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    timeout: Duration,
}

/// Escapes one path segment, so any name is safe in a URL.
pub fn path_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What [`unreachable`] says first, so that a command can add what to do about it.
pub const UNREACHABLE: &str = "cannot reach the sked server";

/// Failing to reach the server is "unavailable": the call may work later. The message names
/// the server and the first cause (`Connection refused`, a timeout), not only the request.
fn unreachable(base: &str, e: reqwest::Error) -> Error {
    let mut cause: &dyn std::error::Error = &e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let cause = if e.is_timeout() {
        "no answer in time".to_string()
    } else {
        cause.to_string()
    };
    Error::remote(
        ErrorCode::Unavailable,
        format!("{UNREACHABLE} at {base}: {cause}"),
    )
}

impl Remote {
    pub(super) fn new(o: RemoteOptions) -> Result<Remote> {
        let base = o.url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Invalid(format!(
                "invalid server URL {:?}: expected http://HOST:PORT",
                o.url
            )));
        }
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(8)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| Error::Invalid(format!("cannot build an HTTP client: {e}")))?;
        Ok(Remote {
            http,
            base,
            token: o.token.filter(|t| !t.is_empty()),
            timeout: o.timeout,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .timeout(self.timeout);
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn send<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> Result<T> {
        let resp = req.send().await.map_err(|e| unreachable(&self.base, e))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| unreachable(&self.base, e))?;
        if status.is_success() {
            let body = if bytes.is_empty() {
                &b"null"[..]
            } else {
                &bytes[..]
            };
            return serde_json::from_slice(body).map_err(|e| {
                Error::remote(
                    ErrorCode::Internal,
                    format!("unexpected answer from the server: {e}"),
                )
            });
        }
        Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(b) => Error::remote(b.error.code, b.error.message),
            Err(_) => Error::remote(ErrorCode::from_status(status.as_u16()), status.to_string()),
        })
    }

    pub(super) async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T> {
        self.send(self.request(reqwest::Method::GET, path).query(query))
            .await
    }

    /// Every item of a list read page by page by name: each page is as large as the server
    /// allows, and asks for the next with the previous page's `next_after`.
    pub(super) async fn every_page<L: DeserializeOwned, T>(
        &self,
        path: &str,
        query: &[(&str, String)],
        split: impl Fn(L) -> (Vec<T>, Option<String>),
    ) -> Result<Vec<T>> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut q = query.to_vec();
            q.push(("limit", sked_store::rules::LIST_LIMIT_MAX.to_string()));
            q.extend(after.take().map(|a| ("after", a)));
            let (items, next) = split(self.get(path, &q).await?);
            all.extend(items);
            match next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    pub(super) async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T> {
        self.send(self.request(reqwest::Method::POST, path).json(body))
            .await
    }

    pub(super) async fn put<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T> {
        self.send(self.request(reqwest::Method::PUT, path).json(body))
            .await
    }

    pub(super) async fn delete(&self, path: &str) -> Result<()> {
        let _: serde_json::Value = self
            .send(self.request(reqwest::Method::DELETE, path))
            .await?;
        Ok(())
    }

    pub(super) async fn claim(&self, req: ClaimRequest) -> Result<Vec<Task>> {
        let body = Claim {
            worker: req.worker,
            queues: req.queues,
            kinds: req.kinds,
            max: req.max,
            min_priority: req.min_priority,
            wait: req.wait.map(|w| format!("{}ms", w.as_millis())),
            lease_ttl: req.lease_ttl.map(format_duration),
        };
        let wait = req.wait.unwrap_or_default();
        let reply: Claimed = self
            .send(
                self.request(reqwest::Method::POST, "/v1/claim")
                    .timeout(self.timeout + wait)
                    .json(&body),
            )
            .await?;
        Ok(reply.tasks)
    }

    /// `GET /v1/tasks/{id}?wait=…`: the task once it ended, or when `wait` has passed.
    pub(super) async fn task_wait(&self, id: TaskId, wait: Duration) -> Result<Task> {
        self.wait(&format!("/v1/tasks/{id}"), wait).await
    }

    /// `GET path?wait=…`: a long poll, given `wait` beyond the usual timeout.
    pub(super) async fn wait<T: DeserializeOwned>(&self, path: &str, wait: Duration) -> Result<T> {
        let query = [("wait", format!("{}ms", wait.as_millis()))];
        self.send(
            self.request(reqwest::Method::GET, path)
                .query(&query)
                .timeout(self.timeout + wait),
        )
        .await
    }

    pub(super) async fn heartbeat_many(
        &self,
        held: &[Held],
        lease_ttl: Option<SignedDuration>,
    ) -> Result<Vec<Result<HeartbeatReply>>> {
        let body = HeartbeatRequest {
            tasks: held.to_vec(),
            lease_ttl: lease_ttl.map(format_duration),
        };
        let reply: BatchReply<HeartbeatReply> = self.post("/v1/heartbeat", &body).await?;
        Ok(items(reply))
    }

    pub(super) async fn finish_many(
        &self,
        items_in: Vec<(TaskId, i32, Ending)>,
    ) -> Result<Vec<Result<Finished>>> {
        let body = FinishRequest {
            results: items_in
                .iter()
                .map(|(id, attempt, end)| FinishItem::new(*id, *attempt, end))
                .collect(),
        };
        let reply: BatchReply<Finished> = self.post("/v1/finish", &body).await?;
        Ok(items(reply))
    }

    pub(super) async fn work_changed(&self, after: u64, timeout: Duration) -> Result<u64> {
        let query = [
            ("after", after.to_string()),
            ("wait", format!("{}ms", timeout.as_millis())),
        ];
        let reply: WorkReply = self
            .send(
                self.request(reqwest::Method::GET, "/v1/work")
                    .timeout(self.timeout + timeout)
                    .query(&query),
            )
            .await?;
        Ok(reply.epoch)
    }
}

fn items<T>(reply: BatchReply<T>) -> Vec<Result<T>> {
    reply
        .results
        .into_iter()
        .map(|r| match r {
            ItemResult::Ok(v) => Ok(v),
            ItemResult::Err { error } => Err(Error::remote(error.code, error.message)),
        })
        .collect()
}

/// `/v1/schedules/{name}{rest}`, the name escaped.
pub(super) fn schedule_path(name: &str, rest: &str) -> String {
    format!("/v1/schedules/{}{rest}", path_segment(name))
}
