//! Calendar endpoints: dates on which the schedules that skip a calendar do not fire.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sked::api::{CalendarDates, CalendarList};
use sked_store::CalendarInfo;

use crate::extract::{ApiJson, NamePath};
use crate::{ApiError, AppState};

type ApiResult<T = Json<CalendarInfo>> = Result<T, ApiError>;

#[utoipa::path(
    get,
    path = "/calendars",
    operation_id = "listCalendars",
    summary = "Every calendar, by name",
    responses((status = 200, description = "OK", body = sked::api::CalendarList))
)]
pub(crate) async fn list(State(s): State<AppState>) -> ApiResult<Json<CalendarList>> {
    Ok(Json(CalendarList {
        calendars: s.engine.calendars().await?,
    }))
}

#[utoipa::path(
    put,
    path = "/calendars/{name}",
    operation_id = "putCalendar",
    summary = "Create or replace a calendar: dates on which the schedules that skip it do not fire",
    params(("name" = sked_core::openapi::Name, Path)),
    request_body = sked::api::CalendarDates,
    responses((status = 200, description = "OK", body = sked_store::CalendarInfo))
)]
pub(crate) async fn put(
    State(s): State<AppState>,
    NamePath(name): NamePath,
    ApiJson(dates): ApiJson<CalendarDates>,
) -> ApiResult {
    Ok(Json(s.engine.calendar_put(dates.named(&name)).await?))
}

#[utoipa::path(
    get,
    path = "/calendars/{name}",
    operation_id = "getCalendar",
    summary = "A calendar",
    params(("name" = sked_core::openapi::Name, Path)),
    responses((status = 200, description = "OK", body = sked_store::CalendarInfo))
)]
pub(crate) async fn get(State(s): State<AppState>, NamePath(name): NamePath) -> ApiResult {
    Ok(Json(s.engine.calendar(&name).await?))
}

#[utoipa::path(
    delete,
    path = "/calendars/{name}",
    operation_id = "deleteCalendar",
    summary = "Remove a calendar no schedule skips (409 naming those that do)",
    params(("name" = sked_core::openapi::Name, Path)),
    responses((status = 204, description = "Deleted"))
)]
pub(crate) async fn delete(
    State(s): State<AppState>,
    NamePath(name): NamePath,
) -> ApiResult<StatusCode> {
    s.engine.calendar_delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
