//! Workflow endpoints: create, list, get (with a wait), the tasks' graph, cancel.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use sked::api::{WorkflowCreated, WorkflowList, WorkflowTaskList};
use sked_core::NewWorkflow;
use sked_store::WorkflowInfo;

use crate::extract::{ApiJson, ApiQuery, IdPath, PageQuery};
use crate::{ApiError, AppState};

type ApiResult<T> = Result<T, ApiError>;

#[utoipa::path(
    post,
    path = "/workflows",
    operation_id = "createWorkflow",
    summary = "Create a workflow: tasks that wait for one another by name, made all or none",
    params(("traceparent" = Option<String>, Header, description = "W3C trace context: the tasks of this request that give none continue this trace (an invalid value is ignored)")),
    request_body = sked_core::NewWorkflow,
    responses((status = 201, description = "Created", body = sked::api::WorkflowCreated))
)]
pub(crate) async fn create(
    State(s): State<AppState>,
    headers: HeaderMap,
    ApiJson(mut w): ApiJson<NewWorkflow>,
) -> ApiResult<(StatusCode, Json<WorkflowCreated>)> {
    crate::tasks::continue_trace(&headers, w.tasks.iter_mut().map(|t| &mut t.task));
    let made = s.engine.workflow_create(w).await?;
    Ok((StatusCode::CREATED, Json(made.into())))
}

#[utoipa::path(
    get,
    path = "/workflows",
    operation_id = "listWorkflows",
    summary = "List workflows, newest first, each with its tasks counted by state",
    params(PageQuery),
    responses((status = 200, description = "OK", body = sked::api::WorkflowList))
)]
pub(crate) async fn list(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> ApiResult<Json<WorkflowList>> {
    let limit = sked_store::rules::list_limit(q.limit);
    let page = s.engine.workflows(q.before, limit).await?;
    let next_before = page.items.last().filter(|_| page.more).map(|w| w.id);
    Ok(Json(WorkflowList {
        workflows: page.items,
        next_before,
    }))
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetQuery {
    /// Wait this long (like `30s`; at most the server's `--max-wait`, 60 s by default) for
    /// every task of the workflow to end: the answer comes when they have, or when the wait
    /// has passed, with the workflow as it is then.
    #[param(value_type = Option<sked_core::openapi::Duration>)]
    wait: Option<String>,
}

#[utoipa::path(
    get,
    path = "/workflows/{id}",
    operation_id = "getWorkflow",
    summary = "A workflow with its tasks counted by state; with `wait`, once done or the wait has passed",
    params(("id" = i64, Path, description = "The workflow."), GetQuery),
    responses((status = 200, description = "OK", body = sked_store::WorkflowInfo))
)]
pub(crate) async fn get(
    State(s): State<AppState>,
    IdPath(id): IdPath,
    ApiQuery(q): ApiQuery<GetQuery>,
) -> ApiResult<Json<WorkflowInfo>> {
    let Some(wait) = q.wait else {
        return Ok(Json(s.engine.workflow(id).await?));
    };
    let wait = crate::tasks::wait_for(&s, &wait)?;
    Ok(Json(s.engine.workflow_wait(id, wait).await?))
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct TasksQuery {
    /// Only tasks with a larger id: the previous page's `next_after`.
    after: Option<i64>,
    /// At most this many (default 100, at most 1,000).
    limit: Option<u32>,
}

#[utoipa::path(
    get,
    path = "/workflows/{id}/tasks",
    operation_id = "listWorkflowTasks",
    summary = "A workflow's tasks in the order they were made, each with what it waits for by name",
    params(("id" = i64, Path, description = "The workflow."), TasksQuery),
    responses((status = 200, description = "OK", body = sked::api::WorkflowTaskList))
)]
pub(crate) async fn tasks(
    State(s): State<AppState>,
    IdPath(id): IdPath,
    ApiQuery(q): ApiQuery<TasksQuery>,
) -> ApiResult<Json<WorkflowTaskList>> {
    let limit = sked_store::rules::list_limit(q.limit);
    let page = s.engine.workflow_tasks(id, q.after, limit).await?;
    let next_after = page.items.last().filter(|_| page.more).map(|n| n.id);
    Ok(Json(WorkflowTaskList {
        tasks: page.items,
        next_after,
    }))
}

#[utoipa::path(
    post,
    path = "/workflows/{id}/cancel",
    operation_id = "cancelWorkflow",
    summary = "Cancel every task of the workflow that has not ended (running ones are told)",
    params(("id" = i64, Path, description = "The workflow.")),
    responses((status = 200, description = "OK", body = sked_store::WorkflowInfo))
)]
pub(crate) async fn cancel(
    State(s): State<AppState>,
    IdPath(id): IdPath,
) -> ApiResult<Json<WorkflowInfo>> {
    Ok(Json(s.engine.workflow_cancel(id).await?))
}
