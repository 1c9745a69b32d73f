//! What operators look at: the workers and nodes alive, the leader, ended work per minute.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::extract::{ApiJson, ApiQuery, NamePath};
use crate::{ApiError, AppState};

type ApiResult = Result<Json<Value>, ApiError>;

/// Workers and nodes seen in the last day, each with `alive`.
pub(crate) async fn workers(State(s): State<AppState>) -> ApiResult {
    let list: Vec<Value> = s
        .engine
        .workers()
        .await?
        .into_iter()
        .map(|w| {
            let alive = s.engine.is_alive(&w);
            let mut v = json!(w);
            v["alive"] = json!(alive);
            v
        })
        .collect();
    Ok(Json(json!({"workers": list})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Beat {
    #[serde(default = "worker_role")]
    role: String,
    #[serde(default)]
    queues: Vec<String>,
    concurrency: Option<u32>,
    #[serde(default)]
    stopping: bool,
}

fn worker_role() -> String {
    "worker".into()
}

/// A worker's sign of life (the worker protocol's presence beat).
pub(crate) async fn beat(
    State(s): State<AppState>,
    NamePath(id): NamePath,
    ApiJson(b): ApiJson<Beat>,
) -> ApiResult {
    sked_core::validate_name("worker", &id).map_err(|e| ApiError::invalid(e.to_string()))?;
    if b.role != "worker" && b.role != "node" {
        return Err(ApiError::invalid(format!(
            "role must be worker or node, got {:?}",
            b.role
        )));
    }
    for q in &b.queues {
        sked_core::validate_name("queue", q).map_err(|e| ApiError::invalid(e.to_string()))?;
    }
    s.engine
        .beat(&sked::Presence {
            id,
            role: b.role,
            queues: b.queues,
            concurrency: b.concurrency,
            stopping: b.stopping,
        })
        .await;
    Ok(Json(json!({"ok": true})))
}

/// This node, the leader, and the backend.
pub(crate) async fn cluster(State(s): State<AppState>) -> ApiResult {
    Ok(Json(json!(s.engine.cluster().await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ActivityQuery {
    minutes: Option<u32>,
}

/// Ended work per minute over the last `minutes` (default 15, at most 1440).
pub(crate) async fn activity(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<ActivityQuery>,
) -> ApiResult {
    let minutes = q.minutes.unwrap_or(15);
    if !(1..=1440).contains(&minutes) {
        return Err(ApiError::invalid(format!(
            "minutes must be between 1 and 1440, got {minutes}"
        )));
    }
    Ok(Json(json!({
        "bucket": "1m",
        "buckets": s.engine.activity(minutes).await?,
    })))
}
