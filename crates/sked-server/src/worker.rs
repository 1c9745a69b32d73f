//! The worker protocol: claim (long-poll), heartbeat, complete, fail, snooze, and acknowledging
//! a cancel. Every call after claim names the attempt it holds; a stale one gets 409.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use sked::ClaimRequest;
use sked::api::ErrorDetail;
use sked::api::worker::{
    AttemptRef, BatchReply, Claim, Claimed, Complete, Fail, FinishRequest, Finished, Heartbeat,
    HeartbeatRequest, ItemResult, Snooze, WorkQuery, WorkReply,
};
use sked_core::{Task, parse_duration};
use sked_store::{FinishOutcome, HeartbeatReply};

use crate::extract::{ApiJson, ApiQuery, TaskIdPath};
use crate::{ApiError, AppState};

type ApiResult<T> = Result<Json<T>, ApiError>;

/// A duration field of a request (`"30s"`); a bad one is a 422 naming it.
fn duration(s: &str) -> Result<jiff::SignedDuration, ApiError> {
    parse_duration(s).map_err(|e| ApiError::invalid(e.to_string()))
}

fn opt_duration(s: &Option<String>) -> Result<Option<jiff::SignedDuration>, ApiError> {
    s.as_deref().map(duration).transpose()
}

#[utoipa::path(
    post,
    path = "/claim",
    operation_id = "claimTasks",
    summary = "Worker protocol: claim up to max due tasks, waiting up to `wait`",
    request_body = sked::api::worker::Claim,
    responses((status = 200, description = "OK", body = sked::api::worker::Claimed))
)]
pub(crate) async fn claim(
    State(s): State<AppState>,
    ApiJson(c): ApiJson<Claim>,
) -> ApiResult<Claimed> {
    if c.max == 0 || c.max > 1000 {
        return Err(ApiError::invalid("max must be between 1 and 1000"));
    }
    let wait =
        opt_duration(&c.wait)?.map(|w| Duration::try_from(w).unwrap_or_default().min(s.max_wait));
    let lease_ttl = opt_duration(&c.lease_ttl)?;
    if lease_ttl.is_some_and(|t| t < jiff::SignedDuration::from_millis(100)) {
        return Err(ApiError::invalid("lease_ttl must be at least 100ms"));
    }
    let tasks = s
        .engine
        .claim(ClaimRequest {
            worker: c.worker,
            queues: c.queues,
            kinds: c.kinds,
            max: c.max,
            min_priority: c.min_priority,
            wait,
            lease_ttl,
            stop: None,
        })
        .await?;
    Ok(Json(Claimed { tasks }))
}

#[utoipa::path(
    post,
    path = "/tasks/{id}/heartbeat",
    operation_id = "heartbeatTask",
    summary = "Worker protocol: extend the lease; says whether a cancel was requested (409 stale_lease if the lease is gone, or the task ran past its timeout and the server's timeout grace)",
    params(("id" = i64, Path, description = "The task.")),
    request_body = sked::api::worker::Heartbeat,
    responses((status = 200, description = "OK", body = sked_store::HeartbeatReply))
)]
pub(crate) async fn heartbeat(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(h): ApiJson<Heartbeat>,
) -> ApiResult<HeartbeatReply> {
    let ttl = opt_duration(&h.lease_ttl)?;
    Ok(Json(
        s.engine.heartbeat(id, h.attempt, ttl, h.progress).await?,
    ))
}

#[utoipa::path(
    post,
    path = "/tasks/{id}/complete",
    operation_id = "completeTask",
    summary = "Worker protocol: the attempt succeeded",
    params(("id" = i64, Path, description = "The task.")),
    request_body = sked::api::worker::Complete,
    responses((status = 200, description = "OK", body = sked_core::Task))
)]
pub(crate) async fn complete(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(c): ApiJson<Complete>,
) -> ApiResult<Task> {
    end_attempt(
        &s,
        id,
        c.attempt,
        FinishOutcome::Succeeded { result: c.result },
    )
    .await
}

#[utoipa::path(
    post,
    path = "/tasks/{id}/fail",
    operation_id = "failTask",
    summary = "Worker protocol: the attempt failed (retryable or fatal)",
    params(("id" = i64, Path, description = "The task.")),
    request_body = sked::api::worker::Fail,
    responses((status = 200, description = "OK", body = sked_core::Task))
)]
pub(crate) async fn fail(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(f): ApiJson<Fail>,
) -> ApiResult<Task> {
    let outcome = FinishOutcome::Failed {
        error: f.error,
        retryable: f.retryable,
    };
    end_attempt(&s, id, f.attempt, outcome).await
}

#[utoipa::path(
    post,
    path = "/tasks/{id}/snooze",
    operation_id = "snoozeTask",
    summary = "Worker protocol: run again after a delay without spending an attempt",
    params(("id" = i64, Path, description = "The task.")),
    request_body = sked::api::worker::Snooze,
    responses((status = 200, description = "OK", body = sked_core::Task))
)]
pub(crate) async fn snooze(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(z): ApiJson<Snooze>,
) -> ApiResult<Task> {
    let d = duration(&z.delay)?;
    let until = s
        .engine
        .now()
        .checked_add(d)
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    end_attempt(&s, id, z.attempt, FinishOutcome::Snoozed { until }).await
}

#[utoipa::path(
    post,
    path = "/tasks/{id}/release",
    operation_id = "releaseTask",
    summary = "Worker protocol: give a held task back unstarted or unfinished (available at once, no attempt spent)",
    params(("id" = i64, Path, description = "The task.")),
    request_body = sked::api::worker::AttemptRef,
    responses((status = 200, description = "OK", body = sked_core::Task))
)]
pub(crate) async fn release(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(a): ApiJson<AttemptRef>,
) -> ApiResult<Task> {
    end_attempt(&s, id, a.attempt, FinishOutcome::Released).await
}

async fn end_attempt(
    s: &AppState,
    id: i64,
    attempt: i32,
    outcome: FinishOutcome,
) -> ApiResult<Task> {
    Ok(Json(s.engine.finish(id, attempt, outcome).await?))
}

/// The most items one batch call takes (tasks enqueued, heartbeats, endings).
pub(crate) const MAX_BATCH: usize = 10_000;

fn item_error(e: sked::Error) -> ErrorDetail {
    ApiError::from(e).detail()
}

/// `POST /v1/heartbeat`: extends the leases of many held tasks; one result per task.
#[utoipa::path(
    post,
    path = "/heartbeat",
    operation_id = "heartbeatTasks",
    summary = "Worker protocol: extend the leases of many held tasks; {\"results\": [{lease_expires_at, cancel_requested} | {\"error\": {code, message}}]} in order. A task with a timeout is never leased past its start, timeout and the server's timeout grace",
    request_body = sked::api::worker::HeartbeatRequest,
    responses((status = 200, description = "One result per task, in order", body = sked::api::worker::BatchReply<sked_store::HeartbeatReply>))
)]
pub(crate) async fn heartbeat_many(
    State(s): State<AppState>,
    ApiJson(h): ApiJson<HeartbeatRequest>,
) -> ApiResult<BatchReply<HeartbeatReply>> {
    if h.tasks.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "at most {MAX_BATCH} tasks per heartbeat"
        )));
    }
    let ttl = opt_duration(&h.lease_ttl)?;
    let items: Vec<(i64, i32, Option<serde_json::Value>)> = (h.tasks.into_iter())
        .map(|t| (t.id, t.attempt, t.progress))
        .collect();
    let replies = s.engine.heartbeat_many(&items, ttl).await?;
    let results: Vec<ItemResult<HeartbeatReply>> = replies
        .into_iter()
        .map(|r| match r {
            Ok(v) => ItemResult::Ok(v),
            Err(e) => ItemResult::Err {
                error: item_error(e),
            },
        })
        .collect();
    Ok(Json(BatchReply { results }))
}

/// `POST /v1/finish`: ends many attempts; one result per item. The whole batch is checked
/// before anything is recorded, so a malformed item changes nothing.
#[utoipa::path(
    post,
    path = "/finish",
    operation_id = "finishTasks",
    summary = "Worker protocol: end many attempts; {\"results\": [{id, state} | {\"error\": {code, message}}]} in order. A malformed item fails the whole call (422) and records nothing",
    request_body = sked::api::worker::FinishRequest,
    responses((status = 200, description = "One result per item, in order", body = sked::api::worker::BatchReply<sked::api::worker::Finished>))
)]
pub(crate) async fn finish_many(
    State(s): State<AppState>,
    ApiJson(f): ApiJson<FinishRequest>,
) -> ApiResult<BatchReply<Finished>> {
    if f.results.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "at most {MAX_BATCH} results per call"
        )));
    }
    let now = s.engine.now();
    let items = f
        .results
        .iter()
        .map(|item| Ok((item.id, item.attempt, item.ending()?.into_outcome(now))))
        .collect::<Result<Vec<_>, String>>()
        .map_err(ApiError::invalid)?;
    let results: Vec<ItemResult<Finished>> = s
        .engine
        .finish_many(items)
        .await?
        .into_iter()
        .map(|r| match r {
            Ok(t) => ItemResult::Ok(Finished {
                id: t.id,
                state: t.state,
            }),
            Err(e) => ItemResult::Err {
                error: item_error(e),
            },
        })
        .collect();
    Ok(Json(BatchReply { results }))
}

/// `GET /v1/work?after=N&wait=30s`: returns when the work counter passes `after` (tasks may
/// have become claimable) or when the wait is over. It claims nothing, so a client may drop it.
#[utoipa::path(
    get,
    path = "/work",
    operation_id = "waitForWork",
    summary = "Worker protocol: wait until tasks may have become claimable since `after` (the epoch a previous call returned), or `wait` is over: {\"epoch\": N}. Claims nothing, so it is safe to abandon",
    params(sked::api::worker::WorkQuery),
    responses((status = 200, description = "OK", body = sked::api::worker::WorkReply))
)]
pub(crate) async fn work(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<WorkQuery>,
) -> ApiResult<WorkReply> {
    let wait = opt_duration(&q.wait)?
        .map(|w| Duration::try_from(w).unwrap_or_default().min(s.max_wait))
        .unwrap_or_default();
    let epoch = s.engine.work_changed(q.after, wait).await;
    Ok(Json(WorkReply { epoch }))
}

#[utoipa::path(
    post,
    path = "/tasks/{id}/cancelled",
    operation_id = "acknowledgeCancel",
    summary = "Worker protocol: stopped because a cancel was requested",
    params(("id" = i64, Path, description = "The task.")),
    request_body = sked::api::worker::AttemptRef,
    responses((status = 200, description = "OK", body = sked_core::Task))
)]
pub(crate) async fn cancelled(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(a): ApiJson<AttemptRef>,
) -> ApiResult<Task> {
    end_attempt(&s, id, a.attempt, FinishOutcome::Cancelled).await
}
