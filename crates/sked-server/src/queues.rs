//! Queue endpoints: list with counts, pause, resume, concurrency limit.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use sked::api::{QueueLimit, QueueList};
use sked_store::{
    QUEUE_COUNT_LIMIT, QUEUE_COUNT_LIMIT_MAX, QueueInfo, QueueListParams, QueueUpdateParams,
};

use crate::extract::{ApiJson, ApiQuery, NamePath};
use crate::{ApiError, AppState};

type ApiResult<T = QueueInfo> = Result<Json<T>, ApiError>;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// The page's size (default 100, at most 1,000).
    limit: Option<u32>,
    /// The page starts after this name (the previous page's `next_after`).
    after: Option<String>,
    /// Count each queue's tasks of a state up to this many (default 10,000); a state with
    /// more is listed in the queue's `counts_at_least`.
    #[param(minimum = 1, maximum = 10_000_000)]
    count_limit: Option<u64>,
}

/// Whether an action on a queue may set up a queue that no task or setting names yet.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateQuery {
    /// Set up the queue if no task or setting names it yet (to pause or limit it before its
    /// first task). Without it such a name is a 404: a mistyped name is not a new queue.
    create: Option<bool>,
}

/// `GET /v1/queues/{name}`: one queue, with its counts and why its tasks wait (a queue never
/// set or used has no limits and no tasks).
#[utoipa::path(
    get,
    path = "/queues/{name}",
    operation_id = "getQueue",
    summary = "One queue: its limits, counts, and why its tasks wait",
    params(("name" = sked_core::openapi::Name, Path)),
    responses((status = 200, description = "OK (404 when no task or setting names the queue)", body = sked_store::QueueInfo))
)]
pub(crate) async fn get(State(s): State<AppState>, NamePath(name): NamePath) -> ApiResult {
    Ok(Json(s.engine.queue(&name).await?))
}

#[utoipa::path(
    get,
    path = "/queues",
    operation_id = "listQueues",
    summary = "List queues by name with their counts per state, a page at a time",
    params(ListQuery),
    responses((status = 200, description = "OK", body = sked::api::QueueList))
)]
pub(crate) async fn list(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<QueueList> {
    let limit = q.count_limit.unwrap_or(QUEUE_COUNT_LIMIT);
    if !(1..=QUEUE_COUNT_LIMIT_MAX).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "count_limit must be between 1 and {QUEUE_COUNT_LIMIT_MAX}, not {limit}"
        )));
    }
    let page = s
        .engine
        .queue_page(QueueListParams {
            after: q.after,
            limit: sked_store::rules::list_limit(q.limit),
            count_limit: limit,
            now: s.engine.now(),
        })
        .await?;
    Ok(Json(QueueList {
        next_after: page.next_after(),
        queues: page.items,
    }))
}

#[utoipa::path(
    post,
    path = "/queues/{name}/pause",
    operation_id = "pauseQueue",
    summary = "Pause a queue: nothing is claimed from it",
    params(("name" = sked_core::openapi::Name, Path), CreateQuery),
    responses((status = 200, description = "OK (404 when no task or setting names the queue and `create` is not given)", body = sked_store::QueueInfo))
)]
pub(crate) async fn pause(
    State(s): State<AppState>,
    NamePath(name): NamePath,
    ApiQuery(c): ApiQuery<CreateQuery>,
) -> ApiResult {
    let q = s
        .engine
        .queue_update(QueueUpdateParams {
            name,
            must_exist: !c.create.unwrap_or(false),
            paused: Some(true),
            ..Default::default()
        })
        .await?;
    Ok(Json(q))
}

#[utoipa::path(
    post,
    path = "/queues/{name}/resume",
    operation_id = "resumeQueue",
    summary = "Resume a queue",
    params(("name" = sked_core::openapi::Name, Path), CreateQuery),
    responses((status = 200, description = "OK (404 when no task or setting names the queue and `create` is not given)", body = sked_store::QueueInfo))
)]
pub(crate) async fn resume(
    State(s): State<AppState>,
    NamePath(name): NamePath,
    ApiQuery(c): ApiQuery<CreateQuery>,
) -> ApiResult {
    let q = s
        .engine
        .queue_update(QueueUpdateParams {
            name,
            must_exist: !c.create.unwrap_or(false),
            paused: Some(false),
            ..Default::default()
        })
        .await?;
    Ok(Json(q))
}

#[utoipa::path(
    put,
    path = "/queues/{name}/limit",
    operation_id = "limitQueue",
    summary = "Set or remove (null) the queue's concurrency limit",
    params(("name" = sked_core::openapi::Name, Path), CreateQuery),
    request_body = sked::api::QueueLimit,
    responses((status = 200, description = "OK (404 when no task or setting names the queue and `create` is not given)", body = sked_store::QueueInfo))
)]
pub(crate) async fn limit(
    State(s): State<AppState>,
    NamePath(name): NamePath,
    ApiQuery(c): ApiQuery<CreateQuery>,
    ApiJson(body): ApiJson<serde_json::Map<String, serde_json::Value>>,
) -> ApiResult {
    // An object only: serde would also read the fields from an array, in order.
    let l: QueueLimit = serde_json::from_value(serde_json::Value::Object(body))
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    if l.is_empty() {
        return Err(ApiError::invalid(
            "name a limit to set: concurrency (tasks running at once), rate (like \"10/s\"), per_key (tasks of one key running at once), per_key_rate (like \"5/s\") or key_order (\"strict\" or \"priority\"); null removes one",
        ));
    }
    let rate = l.rate_with_burst().map_err(ApiError::invalid)?;
    let per_key_rate = l.per_key_rate().map_err(ApiError::invalid)?;
    let q = s
        .engine
        .queue_update(QueueUpdateParams {
            name,
            concurrency_limit: l.concurrency,
            rate,
            per_key: l.per_key,
            per_key_rate,
            key_order: l.key_order,
            must_exist: !c.create.unwrap_or(false),
            ..Default::default()
        })
        .await?;
    Ok(Json(q))
}

#[utoipa::path(
    put,
    path = "/queues/{name}/retention",
    operation_id = "setQueueRetention",
    summary = "Set how long the queue keeps its ended tasks, by state (null: the server's --retention)",
    params(("name" = sked_core::openapi::Name, Path), CreateQuery),
    request_body = sked::api::QueueRetentionChange,
    responses((status = 200, description = "OK (404 when no task or setting names the queue and `create` is not given)", body = sked_store::QueueInfo))
)]
pub(crate) async fn retention(
    State(s): State<AppState>,
    NamePath(name): NamePath,
    ApiQuery(c): ApiQuery<CreateQuery>,
    ApiJson(body): ApiJson<serde_json::Map<String, serde_json::Value>>,
) -> ApiResult {
    // An object only: serde would also read the fields from an array, in order.
    let r: sked::api::QueueRetentionChange =
        serde_json::from_value(serde_json::Value::Object(body))
            .map_err(|e| ApiError::invalid(e.to_string()))?;
    let retention = r.changes().map_err(ApiError::invalid)?;
    let q = s
        .engine
        .queue_update(QueueUpdateParams {
            name,
            retention,
            must_exist: !c.create.unwrap_or(false),
            ..Default::default()
        })
        .await?;
    Ok(Json(q))
}

#[utoipa::path(
    put,
    path = "/queues/{name}/backoff",
    operation_id = "setQueueBackoff",
    summary = "Set how long the retries of the queue's tasks without a backoff of their own wait (null: the default)",
    params(("name" = sked_core::openapi::Name, Path), CreateQuery),
    request_body = sked::api::QueueBackoffChange,
    responses((status = 200, description = "OK (404 when no task or setting names the queue and `create` is not given)", body = sked_store::QueueInfo))
)]
pub(crate) async fn backoff(
    State(s): State<AppState>,
    NamePath(name): NamePath,
    ApiQuery(c): ApiQuery<CreateQuery>,
    ApiJson(body): ApiJson<sked::api::QueueBackoffChange>,
) -> ApiResult {
    let q = s
        .engine
        .queue_update(QueueUpdateParams {
            name,
            backoff: Some(body.backoff),
            must_exist: !c.create.unwrap_or(false),
            ..Default::default()
        })
        .await?;
    Ok(Json(q))
}

/// `DELETE /v1/queues/{name}`: removes a queue that has no unfinished task.
#[utoipa::path(
    delete,
    path = "/queues/{name}",
    operation_id = "deleteQueue",
    summary = "Remove a queue that has no unfinished task: its ended tasks are deleted, its pause and limits go, and it leaves the list",
    params(("name" = sked_core::openapi::Name, Path)),
    responses((status = 204, description = "Removed (409 while an unfinished task is in the queue, 404 when no task or setting names it)"))
)]
pub(crate) async fn delete(
    State(s): State<AppState>,
    NamePath(name): NamePath,
) -> Result<axum::http::StatusCode, ApiError> {
    s.engine.queue_remove(&name).await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}
