//! Task endpoints: enqueue (one and batch), get, list, cancel, retry, reschedule.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use sked::TaskFilter;
use sked_core::{NewTask, TaskState, parse_time};

use crate::extract::{ApiJson, ApiQuery, TaskIdPath};
use crate::{ApiError, AppState};

type ApiResult<T = Json<Value>> = Result<T, ApiError>;

pub(crate) async fn enqueue(
    State(s): State<AppState>,
    ApiJson(task): ApiJson<NewTask>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let ins = s.engine.enqueue(task).await?;
    let status = if ins.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(json!(ins))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Batch {
    tasks: Vec<NewTask>,
}

pub(crate) async fn enqueue_batch(
    State(s): State<AppState>,
    ApiJson(b): ApiJson<Batch>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let ins = s.engine.enqueue_many(b.tasks).await?;
    Ok((StatusCode::CREATED, Json(json!({"tasks": ins}))))
}

pub(crate) async fn get(State(s): State<AppState>, TaskIdPath(id): TaskIdPath) -> ApiResult {
    Ok(Json(json!(s.engine.task(id).await?)))
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
}

pub(crate) async fn list(State(s): State<AppState>, ApiQuery(q): ApiQuery<ListQuery>) -> ApiResult {
    let states = match &q.state {
        Some(list) => list
            .split(',')
            .filter(|s| !s.is_empty())
            .map(TaskState::parse)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => Vec::new(),
    };
    let tasks = s
        .engine
        .tasks({
            let mut f = TaskFilter::new();
            f.states = states;
            f.queue = q.queue;
            f.kind = q.kind;
            f.schedule = q.schedule;
            f.before = q.before;
            f.limit = q.limit;
            f
        })
        .await?;
    Ok(Json(json!({"tasks": tasks})))
}

pub(crate) async fn cancel(State(s): State<AppState>, TaskIdPath(id): TaskIdPath) -> ApiResult {
    Ok(Json(json!(s.engine.cancel(id).await?)))
}

pub(crate) async fn retry(State(s): State<AppState>, TaskIdPath(id): TaskIdPath) -> ApiResult {
    Ok(Json(json!(s.engine.retry(id).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reschedule {
    /// RFC 3339, or `+DURATION` from now.
    run_at: String,
}

pub(crate) async fn reschedule(
    State(s): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    ApiJson(r): ApiJson<Reschedule>,
) -> ApiResult {
    let at = parse_time(&r.run_at, s.engine.now()).map_err(|e| ApiError::invalid(e.to_string()))?;
    Ok(Json(json!(s.engine.reschedule(id, at).await?)))
}
