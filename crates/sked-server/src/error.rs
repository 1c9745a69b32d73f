//! One error type for every handler: a status, a stable code and a message, as
//! `{"error": {"code": "...", "message": "..."}}`. Internal details are logged, not sent.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sked_store::{ErrorKind, StoreError};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
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
            (StoreError::StaleLease { .. }, _) => {
                ApiError::new(StatusCode::CONFLICT, "stale_lease", e.to_string())
            }
            (_, ErrorKind::NotFound) => ApiError::not_found(e.to_string()),
            (_, ErrorKind::Conflict) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            (StoreError::Invalid(m), _) => ApiError::invalid(m.clone()),
            (_, ErrorKind::Unavailable) => {
                tracing::warn!(error = %e, "store unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the store is unavailable; try again",
                )
            }
            _ => internal(e),
        }
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "internal error");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "internal error; see the server log",
    )
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        match r {
            JsonRejection::JsonSyntaxError(e) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                format!("malformed JSON: {}", source_text(&e)),
            ),
            JsonRejection::JsonDataError(e) => {
                ApiError::invalid(format!("invalid request body: {}", source_text(&e)))
            }
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "expected a body with Content-Type: application/json",
            ),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                too_large()
            }
            other => ApiError::new(other.status(), "invalid_request", other.body_text()),
        }
    }
}

pub(crate) fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!(
            "request body is larger than {} bytes",
            crate::MAX_BODY_BYTES
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
