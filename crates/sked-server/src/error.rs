//! One error type for every handler: a status, a stable code and a message, as
//! `{"error": {"code": "...", "message": "..."}}`. Internal details are logged, not sent.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sked::api::{ErrorBody, ErrorCode, ErrorDetail};
use sked_store::{ErrorKind, StoreError};

/// A failed request: its code (which decides the status, see [`ErrorCode::status`]) and a
/// message for people.
#[derive(Debug)]
pub struct ApiError {
    /// What failed.
    pub code: ErrorCode,
    /// For people.
    pub message: String,
}

impl ApiError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
        }
    }

    /// A malformed request (400).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::InvalidRequest, message)
    }

    /// Invalid input (422).
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::InvalidInput, message)
    }

    /// Nothing there (404).
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::NotFound, message)
    }

    /// The body of the answer, as the API sends it.
    pub fn detail(self) -> ErrorDetail {
        ErrorDetail {
            code: self.code,
            message: self.message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorBody {
            error: self.detail(),
        };
        (status, Json(body)).into_response()
    }
}

impl From<sked::Error> for ApiError {
    fn from(e: sked::Error) -> ApiError {
        match e {
            sked::Error::Invalid(m) => ApiError::invalid(m),
            sked::Error::Store(s) => s.into(),
            other => internal(other),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match (&e, e.kind()) {
            (StoreError::StaleLease { .. } | StoreError::TimedOut { .. }, _) => {
                ApiError::new(ErrorCode::StaleLease, e.to_string())
            }
            (_, ErrorKind::NotFound) => ApiError::not_found(e.to_string()),
            (_, ErrorKind::Conflict) => ApiError::new(ErrorCode::Conflict, e.to_string()),
            (StoreError::Invalid(m), _) => ApiError::invalid(m.clone()),
            (_, ErrorKind::Unavailable) => {
                tracing::warn!(error = %e, "store unavailable");
                ApiError::new(
                    ErrorCode::Unavailable,
                    "the store is unavailable; try again",
                )
            }
            _ => internal(e),
        }
    }
}

pub(crate) fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "internal error");
    ApiError::new(ErrorCode::Internal, "internal error; see the server log")
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        match r {
            JsonRejection::JsonSyntaxError(e) => ApiError::new(
                ErrorCode::InvalidJson,
                format!("malformed JSON: {}", source_text(&e)),
            ),
            JsonRejection::JsonDataError(e) => {
                ApiError::invalid(format!("invalid request body: {}", source_text(&e)))
            }
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "expected a body with Content-Type: application/json",
            ),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                too_large()
            }
            other => ApiError::new(
                ErrorCode::from_status(other.status().as_u16()),
                other.body_text(),
            ),
        }
    }
}

pub(crate) fn too_large() -> ApiError {
    ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!(
            "request body is larger than {} bytes ({} for a write of many schedules)",
            crate::MAX_BODY_BYTES,
            crate::MAX_BULK_BODY_BYTES
        ),
    )
}

/// The innermost cause: serde's message, which names the field and position.
fn source_text(e: &dyn std::error::Error) -> String {
    let mut cur: &dyn std::error::Error = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::bad_request(format!("invalid query string: {}", source_text(&r)))
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> ApiError {
        ApiError::bad_request(r.body_text())
    }
}
