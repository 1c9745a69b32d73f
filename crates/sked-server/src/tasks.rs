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
fn continue_trace<'a>(headers: &HeaderMap, tasks: impl IntoIterator<Item = &'a mut NewTask>) {
    if let Some(tp) = traceparent(headers) {
        for t in tasks {
            t.traceparent.get_or_insert_with(|| tp.clone());
        }
    }
}

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

pub(crate) async fn get(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
) -> ApiResult<Json<Task>> {
    Ok(Json(s.engine.task(id).await?))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Comma-separated states.
    state: Option<String>,
    queue: Option<String>,
    kind: Option<String>,
    schedule: Option<String>,
    before: Option<i64>,
    limit: Option<u32>,
    /// Comma-separated: `payload`, `result` (left out of lists otherwise).
    include: Option<String>,
}

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

pub(crate) async fn cancel(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
) -> ApiResult<Json<Task>> {
    Ok(Json(s.engine.cancel(id).await?))
}

pub(crate) async fn retry(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
) -> ApiResult<Json<Task>> {
    Ok(Json(s.engine.retry(id).await?))
}

pub(crate) async fn reschedule(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(r): ApiJson<Reschedule>,
) -> ApiResult<Json<Task>> {
    let at = parse_time(&r.run_at, s.engine.now()).map_err(|e| ApiError::invalid(e.to_string()))?;
    Ok(Json(s.engine.reschedule(id, at).await?))
}

/// `POST /v1/tasks/bulk`: one batch of a retry or cancel by filter, or a dry run's count.
pub(crate) async fn bulk(
    State(s): State<AppState>,
    ApiJson(req): ApiJson<sked::api::BulkRequest>,
) -> Result<Json<sked::api::BulkAnswer>, ApiError> {
    Ok(Json(req.run(&s.engine).await?))
}

/// `GET /v1/tasks/{id}/held`: why an available task waits (`null` when it does not).
pub(crate) async fn held(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
) -> Result<Json<sked::api::TaskHeld>, ApiError> {
    Ok(Json(sked::api::TaskHeld {
        held: s.engine.task_held(id).await?,
    }))
}
