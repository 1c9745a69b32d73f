//! sked's HTTP API: JSON under `/v1`, the worker protocol, `/openapi.json`, `/metrics`,
//! `/healthz` and the dashboard at `/`.
//! [`router`] builds the whole API; it is tested with in-process requests.

mod auth;
mod connections;
mod cross_site;
mod dashboard;
mod error;
mod extract;
mod include_fields;
mod observe;
mod queues;
mod schedules;
mod service;
mod tasks;
mod worker;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};

pub use auth::{Scope, Token, Tokens};
pub use connections::Limits;
pub use error::ApiError;
pub use service::{HttpService, serve};

/// The largest request body accepted (a task payload may be up to 1 MiB, JSON-escaped).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// The largest body of a write of many schedules (`PUT /v1/schedules`,
/// `PUT /v1/declared/{group}`): a few hundred thousand definitions.
pub const MAX_BULK_BODY_BYTES: usize = 64 * 1024 * 1024;

/// What every handler shares.
#[derive(Clone, Debug)]
pub struct AppState {
    pub engine: sked::Engine,
    /// When set, every request but `/healthz` and the dashboard's page must carry
    /// `Authorization: Bearer <secret>` of one of them, with the scope its route needs.
    pub tokens: Option<Arc<Tokens>>,
}

/// The whole HTTP API.
pub fn router(state: AppState) -> Router {
    // Writes of many schedules take larger bodies than the rest.
    let bulk = DefaultBodyLimit::max(MAX_BULK_BODY_BYTES);
    let v1 = Router::new()
        .route("/tasks", post(tasks::enqueue).get(tasks::list))
        .route("/tasks/batch", post(tasks::enqueue_batch))
        .route("/tasks/bulk", post(tasks::bulk))
        .route("/tasks/{id}", get(tasks::get))
        .route("/tasks/{id}/cancel", post(tasks::cancel))
        .route("/tasks/{id}/retry", post(tasks::retry))
        .route("/tasks/{id}/held", get(tasks::held))
        .route("/tasks/{id}/reschedule", post(tasks::reschedule))
        .route("/claim", post(worker::claim))
        .route("/tasks/{id}/heartbeat", post(worker::heartbeat))
        .route("/tasks/{id}/complete", post(worker::complete))
        .route("/tasks/{id}/fail", post(worker::fail))
        .route("/tasks/{id}/snooze", post(worker::snooze))
        .route("/tasks/{id}/cancelled", post(worker::cancelled))
        .route("/tasks/{id}/release", post(worker::release))
        .route("/heartbeat", post(worker::heartbeat_many))
        .route("/finish", post(worker::finish_many))
        .route("/work", get(worker::work))
        .route("/declared/{group}", put(schedules::declare).layer(bulk))
        .route("/schedules", get(schedules::list).post(schedules::create))
        .route("/schedules", put(schedules::apply).layer(bulk))
        .route(
            "/schedules/{name}",
            get(schedules::get)
                .put(schedules::put)
                .delete(schedules::delete),
        )
        .route("/schedules/{name}/pause", post(schedules::pause))
        .route("/schedules/{name}/resume", post(schedules::resume))
        .route("/schedules/{name}/trigger", post(schedules::trigger))
        .route("/schedules/{name}/backfill", post(schedules::backfill))
        .route("/schedules/{name}/occurrences", get(schedules::occurrences))
        .route("/queues", get(queues::list))
        .route("/queues/{name}", get(queues::get))
        .route("/queues/{name}/pause", post(queues::pause))
        .route("/queues/{name}/resume", post(queues::resume))
        .route("/queues/{name}/limit", put(queues::limit))
        .route("/cron/next", get(schedules::cron_next))
        .route("/workers", get(observe::workers))
        .route("/workers/{id}", put(observe::beat))
        .route("/cluster", get(observe::cluster))
        .route("/activity", get(observe::activity));
    Router::new()
        .nest("/v1", v1)
        .route("/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(state.clone(), auth::check))
        // The page itself holds no data; what it shows comes from /v1, with the token.
        .route("/", get(dashboard::index))
        .route("/dashboard/app.js", get(dashboard::app_js))
        .route("/dashboard/app.css", get(dashboard::app_css))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            cross_site::same_site,
        ))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(reject_large_bodies))
        .with_state(state)
}

/// Liveness: it does not touch the database. Who this node is (its id, whether it leads, its
/// backend) only to a trusted client: one with the token, or, without a token, one that
/// reached the server by a loopback name (a page that rebinds its own name gets `status`).
async fn healthz(State(state): State<AppState>, headers: HeaderMap) -> Json<sked::api::Health> {
    let trusted = match &state.tokens {
        Some(tokens) => tokens.find(&headers).is_some(),
        None => headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .is_none_or(cross_site::is_local_host),
    };
    let engine = &state.engine;
    Json(sked::api::Health {
        status: "ok".into(),
        node: trusted.then(|| engine.config().node_id.clone()),
        leader: trusted.then(|| engine.is_leader()),
        backend: trusted.then(|| engine.store().backend().into()),
    })
}

/// Prometheus text exposition format 0.0.4.
async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = state.engine.metrics_text().await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
        .into_response()
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint; see /openapi.json")
}

/// Refuses a body whose declared length is over the limit before reading any of it; bodies
/// without a length are cut off by the extractor's limit while streaming.
async fn reject_large_bodies(req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let bulk = req.method() == axum::http::Method::PUT
        && (req.uri().path() == "/v1/schedules" || req.uri().path().starts_with("/v1/declared/"));
    let limit = if bulk {
        MAX_BULK_BODY_BYTES
    } else {
        MAX_BODY_BYTES
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return error::too_large().into_response();
    }
    next.run(req).await
}
