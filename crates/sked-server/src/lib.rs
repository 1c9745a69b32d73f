//! sked's HTTP API: JSON under `/v1`, the worker protocol, `/openapi.json`, `/metrics`,
//! `/healthz` and the dashboard at `/`.
//! [`router`] builds the whole API; it is tested with in-process requests.

mod auth;
mod batches;
mod calendars;
mod connections;
mod cross_site;
mod dashboard;
mod error;
mod extract;
mod include_fields;
mod observe;
mod openapi;
mod queues;
mod schedules;
mod service;
mod tasks;
mod worker;
mod workflows;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

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
    /// The longest a long-poll (a claim's `wait`, `GET /v1/work`) holds its request.
    pub max_wait: std::time::Duration,
}

impl AppState {
    /// The API of `engine`, without a token, long-polls held up to [`Limits::default`]'s.
    pub fn new(engine: sked::Engine) -> AppState {
        AppState {
            engine,
            tokens: None,
            max_wait: Limits::default().max_wait,
        }
    }
}

/// The operations behind the token (when one is set): `/v1`, `/openapi.json` and `/metrics`.
fn api_routes() -> OpenApiRouter<AppState> {
    // Writes of many schedules take larger bodies than the rest.
    let bulk = || DefaultBodyLimit::max(MAX_BULK_BODY_BYTES);
    let v1 = OpenApiRouter::new()
        .routes(routes!(tasks::enqueue, tasks::list))
        .routes(routes!(tasks::enqueue_batch))
        .routes(routes!(tasks::bulk))
        .routes(routes!(tasks::get, tasks::delete))
        .routes(routes!(tasks::cancel))
        .routes(routes!(tasks::retry))
        .routes(routes!(tasks::held))
        .routes(routes!(tasks::reschedule))
        .routes(routes!(workflows::create, workflows::list).layer(bulk()))
        .routes(routes!(workflows::get))
        .routes(routes!(workflows::tasks))
        .routes(routes!(workflows::cancel))
        .routes(routes!(batches::open, batches::list))
        .routes(routes!(batches::get))
        .routes(routes!(batches::close))
        .routes(routes!(worker::claim))
        .routes(routes!(worker::heartbeat))
        .routes(routes!(worker::complete))
        .routes(routes!(worker::fail))
        .routes(routes!(worker::snooze))
        .routes(routes!(worker::cancelled))
        .routes(routes!(worker::release))
        .routes(routes!(worker::heartbeat_many))
        .routes(routes!(worker::finish_many))
        .routes(routes!(worker::work))
        .routes(routes!(schedules::declare).layer(bulk()))
        .routes(routes!(schedules::list, schedules::create))
        .routes(routes!(schedules::apply).layer(bulk()))
        .routes(routes!(schedules::get, schedules::put, schedules::delete))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(schedules::trigger))
        .routes(routes!(schedules::backfill))
        .routes(routes!(schedules::occurrences))
        .routes(routes!(queues::list))
        .routes(routes!(queues::get, queues::delete))
        .routes(routes!(queues::pause))
        .routes(routes!(queues::resume))
        .routes(routes!(queues::limit))
        .routes(routes!(queues::retention))
        .routes(routes!(queues::backoff))
        .routes(routes!(schedules::cron_next))
        .routes(routes!(calendars::list))
        .routes(routes!(calendars::get, calendars::put, calendars::delete))
        .routes(routes!(observe::workers))
        .routes(routes!(observe::beat))
        .routes(routes!(observe::cluster))
        .routes(routes!(observe::activity))
        .routes(routes!(observe::kinds));
    OpenApiRouter::new()
        .nest("/v1", v1)
        .routes(routes!(openapi::serve))
        .routes(routes!(metrics))
}

/// The dashboard: the page holds no data; what it shows comes from /v1, with the token.
fn page_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(dashboard::index))
        .routes(routes!(dashboard::app_js))
        .routes(routes!(dashboard::app_css))
}

/// What needs neither token nor same-site request: the health check.
fn open_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(healthz))
}

/// The OpenAPI document of every route [`router`] serves: what `/openapi.json` answers.
pub fn openapi() -> serde_json::Value {
    let mut doc = api_routes().into_openapi();
    doc.merge(page_routes().into_openapi());
    doc.merge(open_routes().into_openapi());
    openapi::complete(doc)
}

/// The whole HTTP API.
pub fn router(state: AppState) -> Router {
    let api: Router<AppState> = api_routes().into();
    api.layer(middleware::from_fn_with_state(state.clone(), auth::check))
        .merge(Router::from(page_routes()))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            cross_site::same_site,
        ))
        .merge(Router::from(open_routes()))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(reject_large_bodies))
        .with_state(state)
}

/// Liveness: it does not touch the database. Who this node is (its id, whether it leads, its
/// backend) only to a trusted client: one with the token, or, without a token, one that
/// reached the server by a loopback name (a page that rebinds its own name gets `status`).
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "health",
    summary = "Liveness (does not touch the database); needs no token",
    security(()),
    responses((status = 200, description = "OK", body = sked::api::Health))
)]
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
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    summary = "Prometheus metrics (text exposition format 0.0.4): tasks by queue and state (from the database, the same on every node), and this node's claims, endings by outcome, enqueue-to-start, due-to-start and run-time histograms, rescues, schedule occurrences by outcome, leadership. Needs the token when one is set.",
    responses((status = 200, description = "OK", body = String, content_type = "text/plain; version=0.0.4"))
)]
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
