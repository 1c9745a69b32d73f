//! The API's errors: a stable [`ErrorCode`] per failure, the HTTP status it goes with and the
//! [`ErrorKind`] a caller branches on, decided here once for the server, the remote client
//! and the CLI.

use serde::{Deserialize, Serialize};
use sked_store::ErrorKind;

/// Every error code the API answers with, in `{"error": {"code": …, "message": …}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// A malformed request: a bad query string or path (400).
    InvalidRequest,
    /// A body that is not JSON (400).
    InvalidJson,
    /// Well-formed but invalid input: an unknown field, a bad cron expression (422).
    InvalidInput,
    /// No such task, schedule or endpoint (404).
    NotFound,
    /// The request conflicts with the current state, like an invalid transition (409).
    Conflict,
    /// The attempt's lease was taken over: the worker's result is not recorded (409).
    StaleLease,
    /// A missing or wrong API token (401).
    Unauthorized,
    /// A cross-site request, or a host name refused without a token (403).
    Forbidden,
    /// A body over the size limit (413).
    PayloadTooLarge,
    /// A body that is not `application/json` (415).
    UnsupportedMediaType,
    /// The store cannot be reached now; try again (503).
    Unavailable,
    /// A bug; the server logged it (500).
    Internal,
    /// A code this version does not know (from a newer server).
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The HTTP status the code is answered with.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest | ErrorCode::InvalidJson => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict | ErrorCode::StaleLease => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::InvalidInput => 422,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal | ErrorCode::Unknown => 500,
        }
    }

    /// What the caller can do about it: fix the input, look elsewhere, try again later.
    pub fn kind(self) -> ErrorKind {
        match self {
            ErrorCode::NotFound => ErrorKind::NotFound,
            ErrorCode::Conflict | ErrorCode::StaleLease => ErrorKind::Conflict,
            ErrorCode::Unavailable => ErrorKind::Unavailable,
            ErrorCode::Internal | ErrorCode::Unknown => ErrorKind::Internal,
            ErrorCode::InvalidRequest
            | ErrorCode::InvalidJson
            | ErrorCode::InvalidInput
            | ErrorCode::Unauthorized
            | ErrorCode::Forbidden
            | ErrorCode::PayloadTooLarge
            | ErrorCode::UnsupportedMediaType => ErrorKind::Invalid,
        }
    }

    /// The code for an answer without a readable error body, from its status alone.
    pub fn from_status(status: u16) -> ErrorCode {
        match status {
            401 => ErrorCode::Unauthorized,
            403 => ErrorCode::Forbidden,
            404 => ErrorCode::NotFound,
            409 => ErrorCode::Conflict,
            413 => ErrorCode::PayloadTooLarge,
            415 => ErrorCode::UnsupportedMediaType,
            422 => ErrorCode::InvalidInput,
            503 => ErrorCode::Unavailable,
            400..=499 => ErrorCode::InvalidRequest,
            _ => ErrorCode::Internal,
        }
    }

    /// The code as it is written on the wire: `not_found`, `stale_lease`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::StaleLease => "stale_lease",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of every error answer: `{"error": {"code": …, "message": …}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Error))]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// An error's code and message (also one failed item of a batch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// What failed, stable across versions.
    pub code: ErrorCode,
    /// For people.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_agree_with_their_status() {
        let all = [
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidInput,
            ErrorCode::NotFound,
            ErrorCode::Conflict,
            ErrorCode::StaleLease,
            ErrorCode::Unauthorized,
            ErrorCode::Forbidden,
            ErrorCode::PayloadTooLarge,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::Unavailable,
            ErrorCode::Internal,
        ];
        for code in all {
            let wire = serde_json::to_string(&code).unwrap();
            assert_eq!(wire, format!("\"{}\"", code.as_str()));
            assert_eq!(serde_json::from_str::<ErrorCode>(&wire).unwrap(), code);
            let back = ErrorCode::from_status(code.status());
            assert_eq!(back.status(), code.status(), "{code}");
            assert_eq!(back.kind(), code.kind(), "{code}");
        }
        let newer: ErrorCode = serde_json::from_str("\"rate_limited\"").unwrap();
        assert_eq!(newer, ErrorCode::Unknown);
    }
}
