//! What operators look at: the workers and nodes alive, the leader, ended work per minute.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use sked::api::{Ack, Activity, Beat, Cluster, WorkerList, WorkerView};

use crate::extract::{ApiJson, ApiQuery, NamePath};
use crate::{ApiError, AppState};

type ApiResult<T> = Result<Json<T>, ApiError>;

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkersQuery {
    limit: Option<u32>,
}

/// Workers and nodes seen in the last day, each with `alive`: the `limit` seen most recently.
#[utoipa::path(
    get,
    path = "/workers",
    operation_id = "listWorkers",
    summary = "Workers and nodes seen in the last day, most recently seen first, each with role, queues, concurrency, running (leases held now), started_at, last_seen_at, stopped_at and alive (seen within 3 minutes and not stopped)",
    params(WorkersQuery),
    responses((status = 200, description = "OK", body = sked::api::WorkerList))
)]
pub(crate) async fn workers(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<WorkersQuery>,
) -> ApiResult<WorkerList> {
    let page = s
        .engine
        .worker_page(sked_store::rules::list_limit(q.limit))
        .await?;
    let workers = page
        .items
        .into_iter()
        .map(|w| WorkerView {
            alive: s.engine.is_alive(&w),
            worker: w,
        })
        .collect();
    Ok(Json(WorkerList {
        workers,
        more: page.more,
    }))
}

/// A worker's sign of life (the worker protocol's presence beat).
#[utoipa::path(
    put,
    path = "/workers/{id}",
    operation_id = "workerBeat",
    summary = "A worker's sign of life (send every minute; a claim counts too), or with stopping=true its goodbye",
    params(("id" = sked_core::openapi::Name, Path, description = "The worker.")),
    request_body = sked::api::Beat,
    responses((status = 200, description = "OK", body = sked::api::Ack))
)]
pub(crate) async fn beat(
    State(s): State<AppState>,
    NamePath(id): NamePath,
    ApiJson(b): ApiJson<Beat>,
) -> ApiResult<Ack> {
    sked_core::validate_name("worker", &id).map_err(|e| ApiError::invalid(e.to_string()))?;
    if b.role != "worker" && b.role != "node" {
        return Err(ApiError::invalid(format!(
            "role must be worker or node, got {:?}",
            b.role
        )));
    }
    if b.queues.len() > sked::MAX_CLAIM_NAMES {
        return Err(ApiError::invalid(format!(
            "a worker names at most {} queues, not {}",
            sked::MAX_CLAIM_NAMES,
            b.queues.len()
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
    Ok(Json(Ack { ok: true }))
}

/// This node, the leader, and the backend.
#[utoipa::path(
    get,
    path = "/cluster",
    operation_id = "cluster",
    summary = "The node answering, the holder of the leader lease (null while none) and until when, and the backend",
    responses((status = 200, description = "OK", body = sked::api::Cluster))
)]
pub(crate) async fn cluster(State(s): State<AppState>) -> ApiResult<Cluster> {
    Ok(Json(s.engine.cluster().await?))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ActivityQuery {
    /// Minutes back from now (default 15, 1 to 1440).
    #[param(minimum = 1, maximum = 1440)]
    minutes: Option<u32>,
}

/// A window of `minutes` back from now (`default` when not given): 1 to 1440.
fn window(minutes: Option<u32>, default: u32) -> Result<u32, ApiError> {
    let minutes = minutes.unwrap_or(default);
    if !(1..=1440).contains(&minutes) {
        return Err(ApiError::invalid(format!(
            "minutes must be between 1 and 1440, got {minutes}"
        )));
    }
    Ok(minutes)
}

/// Ended work per minute over the last `minutes` (default 15, at most 1440).
#[utoipa::path(
    get,
    path = "/activity",
    operation_id = "activity",
    summary = "Ended work per minute over the last minutes, across all nodes: succeeded, failed (attempts retried), dead, cancelled, expired; every minute present, oldest first",
    params(ActivityQuery),
    responses((status = 200, description = "OK", body = sked::api::Activity))
)]
pub(crate) async fn activity(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<ActivityQuery>,
) -> ApiResult<Activity> {
    let minutes = window(q.minutes, 15)?;
    Ok(Json(Activity {
        bucket: "1m".into(),
        buckets: s.engine.activity(minutes).await?,
    }))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct KindsQuery {
    /// Minutes back from now (default 60, 1 to 1440).
    #[param(minimum = 1, maximum = 1440)]
    minutes: Option<u32>,
}

/// Figures per task kind over the last `minutes` (default 60, at most 1440).
#[utoipa::path(
    get,
    path = "/kinds",
    operation_id = "kindStats",
    summary = "Per task kind over the last minutes, across all nodes: runs, failures, cancellations, runs per minute, failure rate, run time at p50 and p95 (ms); of a sample when more than 10,000 tasks ended",
    params(KindsQuery),
    responses((status = 200, description = "OK", body = sked::api::KindStatsList))
)]
pub(crate) async fn kinds(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<KindsQuery>,
) -> ApiResult<sked::api::KindStatsList> {
    Ok(Json(s.engine.kind_stats(window(q.minutes, 60)?).await?))
}
