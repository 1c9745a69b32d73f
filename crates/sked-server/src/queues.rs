//! Queue endpoints: list with counts, pause, resume, concurrency limit.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use sked_store::QueueUpdateParams;

use crate::extract::{ApiJson, NamePath};
use crate::{ApiError, AppState};

type ApiResult = Result<Json<Value>, ApiError>;

pub(crate) async fn list(State(s): State<AppState>) -> ApiResult {
    Ok(Json(json!({"queues": s.engine.queues().await?})))
}

pub(crate) async fn pause(State(s): State<AppState>, NamePath(name): NamePath) -> ApiResult {
    let q = s
        .engine
        .queue_update(QueueUpdateParams {
            name,
            paused: Some(true),
            ..Default::default()
        })
        .await?;
    Ok(Json(json!(q)))
}

pub(crate) async fn resume(State(s): State<AppState>, NamePath(name): NamePath) -> ApiResult {
    let q = s
        .engine
        .queue_update(QueueUpdateParams {
            name,
            paused: Some(false),
            ..Default::default()
        })
        .await?;
    Ok(Json(json!(q)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Limit {
    /// Tasks of this queue running at once; `null` removes the limit.
    limit: Option<u32>,
}

pub(crate) async fn limit(
    State(s): State<AppState>,
    NamePath(name): NamePath,
    ApiJson(l): ApiJson<Limit>,
) -> ApiResult {
    let q = s
        .engine
        .queue_update(QueueUpdateParams {
            name,
            concurrency_limit: Some(l.limit),
            ..Default::default()
        })
        .await?;
    Ok(Json(json!(q)))
}
