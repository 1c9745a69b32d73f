//! The worker protocol: claim (long-poll), heartbeat, complete, fail, snooze, and acknowledging
//! a cancel. Every call after claim names the attempt it holds; a stale one gets 409.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use sked::ClaimRequest;
use sked_core::parse_duration;
use sked_store::FinishOutcome;

use crate::extract::{ApiJson, TaskIdPath};
use crate::{ApiError, AppState};

type ApiResult = Result<Json<Value>, ApiError>;

/// The longest a claim may wait for work.
const MAX_WAIT: Duration = Duration::from_secs(60);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Claim {
    worker: String,
    #[serde(default)]
    queues: Vec<String>,
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default = "one")]
    max: u32,
    /// Long-poll: how long to wait for a task (`"30s"`); none means answer at once.
    wait: Option<String>,
    /// Lease length (`"30s"`); the server's default when absent.
    lease_ttl: Option<String>,
}

/// A duration field of a request (`"30s"`); a bad one is a 422 naming it.
fn duration(s: &str) -> Result<jiff::SignedDuration, ApiError> {
    parse_duration(s).map_err(|e| ApiError::invalid(e.to_string()))
}

fn opt_duration(s: &Option<String>) -> Result<Option<jiff::SignedDuration>, ApiError> {
    s.as_deref().map(duration).transpose()
}

fn one() -> u32 {
    1
}

pub(crate) async fn claim(State(s): State<AppState>, ApiJson(c): ApiJson<Claim>) -> ApiResult {
    sked_core::validate_name("worker", &c.worker).map_err(|e| ApiError::invalid(e.to_string()))?;
    if c.max == 0 || c.max > 1000 {
        return Err(ApiError::invalid("max must be between 1 and 1000"));
    }
    let wait =
        opt_duration(&c.wait)?.map(|w| Duration::try_from(w).unwrap_or_default().min(MAX_WAIT));
    let lease_ttl = opt_duration(&c.lease_ttl)?;
    if lease_ttl.is_some_and(|t| t < jiff::SignedDuration::from_secs(1)) {
        return Err(ApiError::invalid("lease_ttl must be at least 1s"));
    }
    let tasks = s
        .engine
        .claim(ClaimRequest {
            worker: c.worker,
            queues: c.queues,
            kinds: c.kinds,
            max: c.max,
            wait,
            lease_ttl,
        })
        .await?;
    Ok(Json(json!({"tasks": tasks})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Heartbeat {
    attempt: i32,
    lease_ttl: Option<String>,
}

pub(crate) async fn heartbeat(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(h): ApiJson<Heartbeat>,
) -> ApiResult {
    let ttl = opt_duration(&h.lease_ttl)?;
    Ok(Json(json!(s.engine.heartbeat(id, h.attempt, ttl).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Complete {
    attempt: i32,
    result: Option<Value>,
}

pub(crate) async fn complete(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(c): ApiJson<Complete>,
) -> ApiResult {
    let t = s
        .engine
        .finish(id, c.attempt, FinishOutcome::Succeeded { result: c.result })
        .await?;
    Ok(Json(json!(t)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Fail {
    attempt: i32,
    error: String,
    /// `false` ends the task as dead at once.
    #[serde(default = "yes")]
    retryable: bool,
}

fn yes() -> bool {
    true
}

pub(crate) async fn fail(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(f): ApiJson<Fail>,
) -> ApiResult {
    let t = s
        .engine
        .finish(
            id,
            f.attempt,
            FinishOutcome::Failed {
                error: f.error,
                retryable: f.retryable,
            },
        )
        .await?;
    Ok(Json(json!(t)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Snooze {
    attempt: i32,
    /// How long to wait (`"5m"`).
    delay: String,
}

pub(crate) async fn snooze(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(z): ApiJson<Snooze>,
) -> ApiResult {
    let d = duration(&z.delay)?;
    let until = s
        .engine
        .now()
        .checked_add(d)
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    Ok(Json(json!(
        s.engine
            .finish(id, z.attempt, FinishOutcome::Snoozed { until })
            .await?
    )))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Attempt {
    attempt: i32,
}

pub(crate) async fn cancelled(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(a): ApiJson<Attempt>,
) -> ApiResult {
    Ok(Json(json!(
        s.engine
            .finish(id, a.attempt, FinishOutcome::Cancelled)
            .await?
    )))
}
