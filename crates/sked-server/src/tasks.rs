//! Task endpoints: enqueue (one and batch), get, list, cancel, retry, reschedule.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use sked::TaskFilter;
use sked::api::{Reschedule, TaskBatch, TaskList, TasksInserted};
use sked_core::{NewTask, Task, TaskState, parse_time};
use sked_store::TaskInserted;

use crate::extract::{ApiJson, ApiQuery, TaskIdPath};
use crate::{ApiError, AppState};

type ApiResult<T> = Result<T, ApiError>;

/// The caller's trace context: a valid `traceparent` header. An invalid one is ignored, as
/// the W3C Trace Context recommendation asks of a receiver (the request goes on untraced).
fn traceparent(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("traceparent")?.to_str().ok()?.trim();
    sked_core::check_traceparent(value)
        .is_ok()
        .then(|| value.to_string())
}

/// The tasks of a request that give no trace context of their own continue its header's.
pub(crate) fn continue_trace<'a>(
    headers: &HeaderMap,
    tasks: impl IntoIterator<Item = &'a mut NewTask>,
) {
    if let Some(tp) = traceparent(headers) {
        for t in tasks {
            t.traceparent.get_or_insert_with(|| tp.clone());
        }
    }
}

#[utoipa::path(
    post,
    path = "/tasks",
    operation_id = "enqueueTask",
    summary = "Enqueue a task (201; 200 with duplicate=true when its unique key is held)",
    params(("traceparent" = Option<String>, Header, description = "W3C trace context: the tasks of this request that give none continue this trace (an invalid value is ignored)")),
    request_body = sked_core::NewTask,
    responses((status = 201, description = "Enqueued", body = sked_store::TaskInserted), (status = 200, description = "A task with this unique key is held: the existing one, duplicate true", body = sked_store::TaskInserted))
)]
pub(crate) async fn enqueue(
    State(s): State<AppState>,
    headers: HeaderMap,
    ApiJson(mut task): ApiJson<NewTask>,
) -> ApiResult<(StatusCode, Json<TaskInserted>)> {
    continue_trace(&headers, [&mut task]);
    let ins = s.engine.enqueue(task).await?;
    let status = if ins.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(ins)))
}

#[utoipa::path(
    post,
    path = "/tasks/batch",
    operation_id = "enqueueTasks",
    summary = "Enqueue many tasks in one transaction",
    params(("traceparent" = Option<String>, Header, description = "W3C trace context: the tasks of this request that give none continue this trace (an invalid value is ignored)")),
    request_body = sked::api::TaskBatch,
    responses((status = 201, description = "Enqueued, one line per task in order", body = sked::api::TasksInserted))
)]
pub(crate) async fn enqueue_batch(
    State(s): State<AppState>,
    headers: HeaderMap,
    ApiJson(mut b): ApiJson<TaskBatch>,
) -> ApiResult<(StatusCode, Json<TasksInserted>)> {
    let max = crate::worker::MAX_BATCH;
    if b.tasks.len() > max {
        return Err(ApiError::invalid(format!(
            "at most {max} tasks per batch, not {}",
            b.tasks.len()
        )));
    }
    continue_trace(&headers, &mut b.tasks);
    let tasks = s.engine.enqueue_many(b.tasks).await?;
    Ok((StatusCode::CREATED, Json(TasksInserted { tasks })))
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetQuery {
    /// Wait this long (like `30s`; at most the server's `--max-wait`, 60 s by default) for the
    /// task to end: the answer comes when it has ended, or when the wait has passed, with the
    /// task as it is then.
    #[param(value_type = Option<sked_core::openapi::Duration>)]
    wait: Option<String>,
}

#[utoipa::path(
    get,
    path = "/tasks/{id}",
    operation_id = "getTask",
    summary = "A task with its attempts; with `wait`, once it has ended or the wait has passed",
    params(("id" = i64, Path, description = "The task."), GetQuery),
    responses((status = 200, description = "OK", body = sked_core::Task))
)]
pub(crate) async fn get(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiQuery(q): ApiQuery<GetQuery>,
) -> ApiResult<Json<Task>> {
    let Some(wait) = q.wait else {
        return Ok(Json(s.engine.task(id).await?));
    };
    Ok(Json(s.engine.task_wait(id, wait_for(&s, &wait)?).await?))
}

/// A long poll's `wait`: a duration up to the server's `--max-wait`, else a 422.
pub(crate) fn wait_for(s: &AppState, wait: &str) -> ApiResult<std::time::Duration> {
    let wait =
        sked_core::parse_duration(wait).map_err(|e| ApiError::invalid(format!("wait: {e}")))?;
    let max = s.max_wait;
    std::time::Duration::try_from(wait)
        .ok()
        .filter(|w| *w <= max)
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "wait must be between 0s and {} (the server's --max-wait)",
                sked_core::format_duration(jiff::SignedDuration::try_from(max).unwrap_or_default())
            ))
        })
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Comma-separated states.
    #[param(
        pattern = r"^(?:(?:waiting|scheduled|available|running|retrying|succeeded|dead|cancelled|expired)?,)*(?:waiting|scheduled|available|running|retrying|succeeded|dead|cancelled|expired)?$"
    )]
    state: Option<String>,
    queue: Option<String>,
    kind: Option<String>,
    schedule: Option<String>,
    /// Only tasks of this concurrency key.
    key: Option<String>,
    /// Only tasks of this unique key.
    unique_key: Option<String>,
    /// Only tasks of this workflow.
    workflow: Option<i64>,
    /// Only tasks enqueued at or after this instant (RFC 3339).
    since: Option<jiff::Timestamp>,
    /// Only tasks enqueued before this instant (RFC 3339).
    until: Option<jiff::Timestamp>,
    /// Only tasks with a smaller id: the previous page's `next_before`.
    before: Option<i64>,
    limit: Option<u32>,
    /// Comma-separated: `payload`, `result` (left out of lists otherwise).
    #[param(pattern = r"^\s*(?:payload|result)?\s*(?:,\s*(?:payload|result)?\s*)*$")]
    include: Option<String>,
}

#[utoipa::path(
    get,
    path = "/tasks",
    operation_id = "listTasks",
    summary = "List tasks, newest first, a page at a time",
    params(ListQuery),
    responses((status = 200, description = "OK", body = sked::api::TaskList))
)]
pub(crate) async fn list(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Response> {
    let [payload, result] = crate::extract::includes(q.include.as_deref(), ["payload", "result"])?;
    let states = match &q.state {
        Some(list) => list
            .split(',')
            .filter(|s| !s.is_empty())
            .map(TaskState::parse)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => Vec::new(),
    };
    let page = s
        .engine
        .task_page({
            let mut f = TaskFilter::new();
            f.states = states;
            f.queue = q.queue;
            f.kind = q.kind;
            f.schedule = q.schedule;
            f.key = q.key;
            f.unique_key = q.unique_key;
            f.workflow = q.workflow;
            f.since = q.since;
            f.until = q.until;
            f.before = q.before;
            f.limit = q.limit;
            f.with_payloads = payload || result;
            f
        })
        .await?;
    let next_before = page.next_before();
    if payload && result {
        return Ok(Json(TaskList {
            next_before,
            tasks: page.items,
        })
        .into_response());
    }
    /// [`TaskList`], its tasks without what was not asked for.
    #[derive(serde::Serialize)]
    struct Trimmed<'a> {
        tasks: crate::include_fields::Trimmed<'a, Task>,
        next_before: Option<sked_core::TaskId>,
    }
    // What was not asked for is left out, not shown as null (a payload may be null).
    let trim = |fields: &mut serde_json::Map<String, serde_json::Value>| {
        if !payload {
            fields.remove("payload");
        }
        if !result {
            fields.remove("result");
        }
    };
    Ok(Json(Trimmed {
        tasks: crate::include_fields::Trimmed {
            items: &page.items,
            trim: &trim,
        },
        next_before,
    })
    .into_response())
}

/// `DELETE /v1/tasks/{id}`: deletes a task that has ended.
#[utoipa::path(
    delete,
    path = "/tasks/{id}",
    operation_id = "deleteTask",
    summary = "Delete a task that has ended (succeeded, dead, cancelled or expired), with its attempts",
    params(("id" = i64, Path, description = "The task.")),
    responses((status = 204, description = "Deleted (409 while the task has not ended: cancel it first; 404 when there is no such task)"))
)]
pub(crate) async fn delete(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
) -> Result<axum::http::StatusCode, ApiError> {
    s.engine.task_delete(id).await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post,
    path = "/tasks/{id}/cancel",
    operation_id = "cancelTask",
    summary = "Cancel: never runs if not started; a running task is told at its next heartbeat",
    params(("id" = i64, Path, description = "The task.")),
    responses((status = 200, description = "OK", body = sked_core::Task))
)]
pub(crate) async fn cancel(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
) -> ApiResult<Json<Task>> {
    Ok(Json(s.engine.cancel(id).await?))
}

#[utoipa::path(
    post,
    path = "/tasks/{id}/retry",
    operation_id = "retryTask",
    summary = "Run a finished task again",
    params(("id" = i64, Path, description = "The task.")),
    responses((status = 200, description = "OK", body = sked_core::Task))
)]
pub(crate) async fn retry(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
) -> ApiResult<Json<Task>> {
    Ok(Json(s.engine.retry(id).await?))
}

#[utoipa::path(
    post,
    path = "/tasks/{id}/reschedule",
    operation_id = "rescheduleTask",
    summary = "Move run_at of a task that has not started",
    params(("id" = i64, Path, description = "The task.")),
    request_body = sked::api::Reschedule,
    responses((status = 200, description = "OK", body = sked_core::Task))
)]
pub(crate) async fn reschedule(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(r): ApiJson<Reschedule>,
) -> ApiResult<Json<Task>> {
    let at = parse_time(&r.run_at, s.engine.now()).map_err(|e| ApiError::invalid(e.to_string()))?;
    Ok(Json(s.engine.reschedule(id, at).await?))
}

/// `POST /v1/tasks/bulk`: one batch of a retry or cancel by filter, or a dry run's count.
#[utoipa::path(
    post,
    path = "/tasks/bulk",
    operation_id = "bulkTasks",
    summary = "Retry or cancel every task a filter matches, one bounded batch per call",
    request_body = sked::api::BulkRequest,
    responses((status = 200, description = "OK", body = sked::api::BulkAnswer))
)]
pub(crate) async fn bulk(
    State(s): State<AppState>,
    ApiJson(req): ApiJson<sked::api::BulkRequest>,
) -> Result<Json<sked::api::BulkAnswer>, ApiError> {
    Ok(Json(req.run(&s.engine).await?))
}

/// `GET /v1/tasks/{id}/held`: why an available task waits (`null` when it does not).
#[utoipa::path(
    get,
    path = "/tasks/{id}/held",
    operation_id = "taskHeld",
    summary = "Why an available task waits",
    params(("id" = i64, Path, description = "The task.")),
    responses((status = 200, description = "OK: held is null when the task does not wait (or is not available)", body = sked::api::TaskHeld))
)]
pub(crate) async fn held(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
) -> Result<Json<sked::api::TaskHeld>, ApiError> {
    Ok(Json(sked::api::TaskHeld {
        held: s.engine.task_held(id).await?,
    }))
}
