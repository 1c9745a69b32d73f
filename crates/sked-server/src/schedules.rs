//! Schedule endpoints, and `GET /v1/cron/next` for trying an expression out.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use sked::api::{BackfillRequest, CronNext, OccurrenceList, ScheduleList, ScheduleView, Triggered};
use sked_core::{CronExpr, DstPolicy, ScheduleDef, parse_time, parse_zone};
use sked_store::{BackfillReport, ScheduleFilter, ScheduleListParams, ScheduleSyncReport};

use crate::extract::{ApiJson, ApiQuery, NamePath};
use crate::{ApiError, AppState};

type ApiResult<T = Json<ScheduleView>> = Result<T, ApiError>;

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// The page's size (default 100, at most 1,000).
    limit: Option<u32>,
    /// The page starts after this name (the previous page's `next_after`).
    after: Option<String>,
    /// Only names that start with this.
    prefix: Option<String>,
    /// Only paused (`true`) or unpaused (`false`) schedules.
    paused: Option<bool>,
    /// Only failing schedules (`true`): a run waiting to retry, or the last run dead.
    failing: Option<bool>,
    /// `payload`: the templates' payloads (left out of lists otherwise); `count`: how many
    /// schedules the filter takes in all.
    #[param(pattern = r"^\s*(?:payload|count)?\s*(?:,\s*(?:payload|count)?\s*)*$")]
    include: Option<String>,
    /// How far to count (default 10,000): counting costs what it counts.
    count_limit: Option<u64>,
}

/// A page of schedules by name, their templates' payloads left out unless asked for.
#[utoipa::path(
    get,
    path = "/schedules",
    operation_id = "listSchedules",
    summary = "List schedules by name, a page at a time, filtered by prefix, paused or failing",
    params(ListQuery),
    responses((status = 200, description = "OK", body = sked::api::ScheduleList))
)]
pub(crate) async fn list(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Response> {
    let [payload, with_count] =
        crate::extract::includes(q.include.as_deref(), ["payload", "count"])?;
    let filter = ScheduleFilter {
        prefix: q.prefix,
        paused: q.paused,
        failing: q.failing.unwrap_or(false),
    };
    let cap = q
        .count_limit
        .unwrap_or(sked::api::SCHEDULE_COUNT_LIMIT)
        .clamp(1, sked::api::SCHEDULE_COUNT_LIMIT_MAX);
    let counted = match with_count {
        true => Some(s.engine.schedule_count(filter.clone(), cap).await?),
        false => None,
    };
    let count = counted.map(|n| n.min(cap));
    let count_at_least = counted.is_some_and(|n| n > cap);
    let page = s
        .engine
        .schedule_page(ScheduleListParams {
            after: q.after,
            limit: sked_store::rules::list_limit(q.limit),
            with_payloads: payload,
            filter,
        })
        .await?;
    let next_after = page.next_after();
    let schedules: Vec<ScheduleView> = page.items.into_iter().map(ScheduleView::from).collect();
    if payload {
        return Ok(Json(ScheduleList {
            schedules,
            next_after,
            count,
            count_at_least,
        })
        .into_response());
    }
    /// [`ScheduleList`], its schedules' tasks without their payloads.
    #[derive(serde::Serialize)]
    struct Trimmed<'a> {
        schedules: crate::include_fields::Trimmed<'a, ScheduleView>,
        next_after: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        count: Option<u64>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        count_at_least: bool,
    }
    // What was not asked for is left out, not shown as null (a payload may be null).
    let trim = |fields: &mut serde_json::Map<String, serde_json::Value>| {
        if let Some(task) = fields.get_mut("task").and_then(|t| t.as_object_mut()) {
            task.remove("payload");
        }
    };
    Ok(Json(Trimmed {
        schedules: crate::include_fields::Trimmed {
            items: &schedules,
            trim: &trim,
        },
        next_after,
        count,
        count_at_least,
    })
    .into_response())
}

/// `POST /v1/schedules` with the whole definition: creates or replaces.
#[utoipa::path(
    post,
    path = "/schedules",
    operation_id = "createSchedule",
    summary = "Create or replace a schedule",
    request_body = sked_core::ScheduleDef,
    responses((status = 201, description = "Created or replaced", body = sked::api::ScheduleView))
)]
pub(crate) async fn create(
    State(s): State<AppState>,
    ApiJson(def): ApiJson<ScheduleDef>,
) -> ApiResult<(StatusCode, Json<ScheduleView>)> {
    Ok((
        StatusCode::CREATED,
        Json(s.engine.schedule_put(def).await?.into()),
    ))
}

/// `PUT /v1/schedules/{name}`: the name in the path wins; the body's must match if given.
#[utoipa::path(
    put,
    path = "/schedules/{name}",
    operation_id = "putSchedule",
    summary = "Create or replace the named schedule",
    params(("name" = sked_core::openapi::Name, Path)),
    request_body = sked_core::ScheduleDef,
    responses((status = 200, description = "OK", body = sked::api::ScheduleView))
)]
pub(crate) async fn put(
    State(s): State<AppState>,
    NamePath(name): NamePath,
    ApiJson(mut body): ApiJson<Value>,
) -> ApiResult {
    if let Some(obj) = body.as_object_mut() {
        match obj.get("name") {
            Some(Value::String(n)) if *n != name => {
                return Err(ApiError::invalid(format!(
                    "the body names schedule {n:?} but the path names {name:?}"
                )));
            }
            _ => {
                obj.insert("name".into(), Value::String(name));
            }
        }
    }
    let def: ScheduleDef = serde_json::from_value(body)
        .map_err(|e| ApiError::invalid(format!("invalid schedule: {e}")))?;
    Ok(Json(s.engine.schedule_put(def).await?.into()))
}

#[utoipa::path(
    get,
    path = "/schedules/{name}",
    operation_id = "getSchedule",
    summary = "A schedule",
    params(("name" = sked_core::openapi::Name, Path)),
    responses((status = 200, description = "OK", body = sked::api::ScheduleView))
)]
pub(crate) async fn get(State(s): State<AppState>, NamePath(name): NamePath) -> ApiResult {
    Ok(Json(s.engine.schedule(&name).await?.into()))
}

#[utoipa::path(
    delete,
    path = "/schedules/{name}",
    operation_id = "deleteSchedule",
    summary = "Remove a schedule (its tasks stay)",
    params(("name" = sked_core::openapi::Name, Path)),
    responses((status = 204, description = "Deleted"))
)]
pub(crate) async fn delete(
    State(s): State<AppState>,
    NamePath(name): NamePath,
) -> ApiResult<StatusCode> {
    s.engine.schedule_delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post,
    path = "/schedules/{name}/pause",
    operation_id = "pauseSchedule",
    summary = "Pause a schedule",
    params(("name" = sked_core::openapi::Name, Path)),
    responses((status = 200, description = "OK", body = sked::api::ScheduleView))
)]
pub(crate) async fn pause(State(s): State<AppState>, NamePath(name): NamePath) -> ApiResult {
    Ok(Json(s.engine.schedule_pause(&name).await?.into()))
}

#[utoipa::path(
    post,
    path = "/schedules/{name}/resume",
    operation_id = "resumeSchedule",
    summary = "Resume; the next fire time counts from now",
    params(("name" = sked_core::openapi::Name, Path)),
    responses((status = 200, description = "OK", body = sked::api::ScheduleView))
)]
pub(crate) async fn resume(State(s): State<AppState>, NamePath(name): NamePath) -> ApiResult {
    Ok(Json(s.engine.schedule_resume(&name).await?.into()))
}

#[utoipa::path(
    post,
    path = "/schedules/{name}/trigger",
    operation_id = "triggerSchedule",
    summary = "Enqueue a run now",
    params(("name" = sked_core::openapi::Name, Path)),
    responses((status = 201, description = "Enqueued", body = sked::api::Triggered))
)]
pub(crate) async fn trigger(
    State(s): State<AppState>,
    NamePath(name): NamePath,
) -> ApiResult<(StatusCode, Json<Triggered>)> {
    let id = s.engine.schedule_trigger(&name).await?;
    Ok((StatusCode::CREATED, Json(Triggered { id })))
}

/// `POST /v1/schedules/{name}/backfill`: enqueues the range's past occurrences that have no
/// run yet.
#[utoipa::path(
    post,
    path = "/schedules/{name}/backfill",
    operation_id = "backfillSchedule",
    summary = "Enqueue each past occurrence in a range that has no run yet",
    params(("name" = sked_core::openapi::Name, Path)),
    request_body = sked::api::BackfillRequest,
    responses((status = 200, description = "OK", body = sked_store::BackfillReport))
)]
pub(crate) async fn backfill(
    State(s): State<AppState>,
    NamePath(name): NamePath,
    ApiJson(b): ApiJson<BackfillRequest>,
) -> ApiResult<Json<BackfillReport>> {
    Ok(Json(s.engine.schedule_backfill(&name, b.from, b.to).await?))
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct Limit {
    limit: Option<u32>,
}

#[utoipa::path(
    get,
    path = "/schedules/{name}/occurrences",
    operation_id = "scheduleOccurrences",
    summary = "The occurrence ledger: enqueued, skipped, buffered, missed",
    params(("name" = sked_core::openapi::Name, Path), Limit),
    responses((status = 200, description = "OK", body = sked::api::OccurrenceList))
)]
pub(crate) async fn occurrences(
    State(s): State<AppState>,
    NamePath(name): NamePath,
    ApiQuery(q): ApiQuery<Limit>,
) -> ApiResult<Json<OccurrenceList>> {
    let occurrences = s
        .engine
        .occurrences(&name, sked_store::rules::list_limit(q.limit))
        .await?;
    Ok(Json(OccurrenceList { occurrences }))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct CronNextQuery {
    expr: String,
    tz: Option<String>,
    after: Option<String>,
    n: Option<u32>,
    /// How a fixed-time job meets DST changes: `debian` (the default), `skip` or `twice`.
    #[param(value_type = Option<sked_core::DstPolicy>)]
    dst: Option<String>,
}

#[utoipa::path(
    get,
    path = "/cron/next",
    operation_id = "cronNext",
    summary = "Next fire times of a cron expression",
    params(CronNextQuery),
    responses((status = 200, description = "OK", body = sked::api::CronNext))
)]
pub(crate) async fn cron_next(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<CronNextQuery>,
) -> ApiResult<Json<CronNext>> {
    let invalid = |e: sked_core::SpecError| ApiError::invalid(e.to_string());
    let dst: DstPolicy = q
        .dst
        .as_deref()
        .unwrap_or("debian")
        .parse()
        .map_err(invalid)?;
    let cron = CronExpr::parse(&q.expr).map_err(invalid)?.with_dst(dst);
    let tz_name = q.tz.unwrap_or_else(|| "UTC".into());
    let tz = parse_zone(&tz_name).map_err(invalid)?;
    let mut t = match &q.after {
        Some(a) => parse_time(a, s.engine.now()).map_err(invalid)?,
        None => s.engine.now(),
    };
    let n = q.n.unwrap_or(5).clamp(1, 1000);
    let mut times = Vec::new();
    for _ in 0..n {
        match cron.next_after(t, &tz) {
            Some(next) => {
                times.push(
                    next.to_zoned(tz.clone())
                        .strftime("%Y-%m-%dT%H:%M:%S%:z")
                        .to_string(),
                );
                t = next;
            }
            None => break,
        }
    }
    Ok(Json(CronNext {
        expr: q.expr,
        tz: tz_name,
        times,
    }))
}

/// The body of a write of many schedules as it comes: each definition read on its own, so
/// that every bad one is named.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyBody {
    schedules: Vec<Value>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    prune: bool,
    #[serde(default)]
    dry_run: bool,
}

/// `PUT /v1/schedules`: many schedules written in one transaction, all or none (a 422 names
/// each bad one); with a group, `prune` deletes its schedules missing from the set.
#[utoipa::path(
    put,
    path = "/schedules",
    operation_id = "applySchedules",
    summary = "Write many schedules in one transaction, all or none (a 422 names each invalid one). Those equal to the stored ones are left as they are. With `group`, each joins the group and one that exists keeps its paused flag; `prune` deletes the group's schedules missing from the list; `dry_run` answers what would change and changes nothing. Body up to 64 MiB. Answers {created, updated, unchanged, removed}",
    request_body = sked::api::SchedulesApply,
    responses((status = 200, description = "OK", body = sked_store::ScheduleSyncReport))
)]
pub(crate) async fn apply(
    State(s): State<AppState>,
    ApiJson(b): ApiJson<ApplyBody>,
) -> ApiResult<Json<ScheduleSyncReport>> {
    let defs = sked::api::schedule_defs(b.schedules).map_err(ApiError::invalid)?;
    let options = sked::ApplyOptions {
        group: b.group,
        prune: b.prune,
        dry_run: b.dry_run,
    };
    Ok(Json(s.engine.schedules_apply(defs, options).await?))
}

/// The body of `PUT /v1/declared/{group}`, each definition read on its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeclaredBody {
    schedules: Vec<Value>,
}

/// `PUT /v1/declared/{group}`: the schedules a group of code declares (see the worker's
/// declared schedules): created, updated, or removed when no longer declared.
#[utoipa::path(
    put,
    path = "/declared/{group}",
    operation_id = "declareSchedules",
    summary = "Declared schedules: make the schedules `group` declares exist as given; those it declared before and no longer does are deleted; an operator's pause is kept. Answers {created, updated, unchanged, removed}",
    params(("group" = sked_core::openapi::Name, Path)),
    request_body = sked::api::Declared,
    responses((status = 200, description = "OK", body = sked_store::ScheduleSyncReport))
)]
pub(crate) async fn declare(
    State(s): State<AppState>,
    NamePath(group): NamePath,
    ApiJson(d): ApiJson<DeclaredBody>,
) -> ApiResult<Json<ScheduleSyncReport>> {
    let defs = sked::api::schedule_defs(d.schedules).map_err(ApiError::invalid)?;
    Ok(Json(s.engine.schedules_sync(&group, defs).await?))
}
