//! Extractors whose rejections are [`ApiError`]s, so every bad request gets the JSON error body.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::ApiError;

/// A JSON body; malformed JSON is 400, well-formed JSON of the wrong shape is 422.
pub(crate) struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let axum::Json(v) = axum::Json::<T>::from_request(req, state).await?;
        Ok(ApiJson(v))
    }
}

pub(crate) struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Query(v) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(v))
    }
}

/// A task id from the path; anything but an integer is an unknown task.
pub(crate) struct TaskIdPath(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for TaskIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(raw) =
            axum::extract::Path::<String>::from_request_parts(parts, state).await?;
        raw.parse().map(TaskIdPath).map_err(|_| {
            ApiError::not_found(format!("task {raw} not found: task ids are integers"))
        })
    }
}

/// A workflow id from the path; anything but an integer is an unknown workflow.
pub(crate) struct IdPath(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(raw) =
            axum::extract::Path::<String>::from_request_parts(parts, state).await?;
        raw.parse().map(IdPath).map_err(|_| {
            ApiError::not_found(format!(
                "workflow {raw} not found: workflow ids are integers"
            ))
        })
    }
}

pub(crate) struct NamePath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for NamePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(name) =
            axum::extract::Path::<String>::from_request_parts(parts, state).await?;
        Ok(NamePath(name))
    }
}

/// Which of `known` a comma-separated `include` names (`?include=payload,result`); any other
/// word is a 400 naming it.
pub(crate) fn includes<const N: usize>(
    asked: Option<&str>,
    known: [&str; N],
) -> Result<[bool; N], ApiError> {
    let mut found = [false; N];
    for part in asked.unwrap_or("").split(',').map(str::trim) {
        if part.is_empty() {
            continue;
        }
        match known.iter().position(|k| *k == part) {
            Some(i) => found[i] = true,
            None => {
                return Err(ApiError::bad_request(format!(
                    "invalid include {part:?}: expected {}, comma-separated",
                    known.join(" or ")
                )));
            }
        }
    }
    Ok(found)
}

/// A page of a list newest first by id (`GET /v1/workflows`, `/v1/batches`).
#[derive(serde::Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    /// Only items with a smaller id: the previous page's `next_before`.
    pub(crate) before: Option<i64>,
    /// At most this many (default 100, at most 1,000).
    pub(crate) limit: Option<u32>,
}
