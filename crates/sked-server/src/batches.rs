//! Batch endpoints: open, list, get (with a wait), close. Tasks join a batch with `batch` in
//! `POST /v1/tasks`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use sked::api::BatchList;
use sked_core::NewBatch;
use sked_store::BatchInfo;

use crate::extract::{ApiJson, ApiQuery, IdPath, PageQuery};
use crate::{ApiError, AppState};

type ApiResult<T> = Result<T, ApiError>;

#[utoipa::path(
    post,
    path = "/batches",
    operation_id = "openBatch",
    summary = "Open a batch: tasks join it with `batch`; its callbacks run once, when it is closed and they have ended",
    request_body = sked_core::NewBatch,
    responses((status = 201, description = "Opened", body = sked_store::BatchInfo))
)]
pub(crate) async fn open(
    State(s): State<AppState>,
    ApiJson(b): ApiJson<NewBatch>,
) -> ApiResult<(StatusCode, Json<BatchInfo>)> {
    Ok((StatusCode::CREATED, Json(s.engine.batch_open(b).await?)))
}

#[utoipa::path(
    get,
    path = "/batches",
    operation_id = "listBatches",
    summary = "List batches, newest first, each with its tasks counted by state",
    params(PageQuery),
    responses((status = 200, description = "OK", body = sked::api::BatchList))
)]
pub(crate) async fn list(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> ApiResult<Json<BatchList>> {
    let page = s
        .engine
        .batches(q.before, sked_store::rules::list_limit(q.limit))
        .await?;
    let next_before = page.items.last().filter(|_| page.more).map(|b| b.id);
    Ok(Json(BatchList {
        batches: page.items,
        next_before,
    }))
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetQuery {
    /// Wait this long (like `30s`; at most the server's `--max-wait`, 60 s by default) for the
    /// batch to be done (its callbacks enqueued): the answer comes then, or when the wait has
    /// passed, with the batch as it is.
    #[param(value_type = Option<sked_core::openapi::Duration>)]
    wait: Option<String>,
}

#[utoipa::path(
    get,
    path = "/batches/{id}",
    operation_id = "getBatch",
    summary = "A batch with its tasks counted by state and its callbacks; with `wait`, once done or the wait has passed",
    params(("id" = i64, Path, description = "The batch."), GetQuery),
    responses((status = 200, description = "OK", body = sked_store::BatchInfo))
)]
pub(crate) async fn get(
    State(s): State<AppState>,
    IdPath(id): IdPath,
    ApiQuery(q): ApiQuery<GetQuery>,
) -> ApiResult<Json<BatchInfo>> {
    let Some(wait) = q.wait else {
        return Ok(Json(s.engine.batch(id).await?));
    };
    let wait = crate::tasks::wait_for(&s, &wait)?;
    Ok(Json(s.engine.batch_wait(id, wait).await?))
}

#[utoipa::path(
    post,
    path = "/batches/{id}/close",
    operation_id = "closeBatch",
    summary = "Close a batch: its callbacks run once its tasks have ended (at once when they have)",
    params(("id" = i64, Path, description = "The batch.")),
    responses((status = 200, description = "OK", body = sked_store::BatchInfo))
)]
pub(crate) async fn close(
    State(s): State<AppState>,
    IdPath(id): IdPath,
) -> ApiResult<Json<BatchInfo>> {
    Ok(Json(s.engine.batch_close(id).await?))
}
