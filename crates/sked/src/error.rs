//! Engine errors: invalid input (nothing was changed) or a store failure.

use sked_core::{SpecError, TransitionError};
use sked_store::{ErrorKind, StoreError};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An error answered by a remote sked server (or reaching it failed).
    #[error("{message}")]
    Remote {
        kind: ErrorKind,
        /// The API's error code (`not_found`, `stale_lease`, `unavailable`, …).
        code: String,
        message: String,
    },
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::Store(e) => e.kind(),
            Error::Remote { kind, .. } => *kind,
        }
    }

    /// An error from the API's code and message.
    pub(crate) fn remote(code: &str, message: impl Into<String>) -> Error {
        let kind = match code {
            "not_found" => ErrorKind::NotFound,
            "stale_lease" | "conflict" => ErrorKind::Conflict,
            "unavailable" => ErrorKind::Unavailable,
            "internal" => ErrorKind::Internal,
            _ => ErrorKind::Invalid,
        };
        Error::Remote {
            kind,
            code: code.to_string(),
            message: message.into(),
        }
    }
}

impl From<SpecError> for Error {
    fn from(e: SpecError) -> Error {
        Error::Invalid(e.message().to_string())
    }
}

impl From<TransitionError> for Error {
    fn from(e: TransitionError) -> Error {
        Error::Store(StoreError::Transition(e))
    }
}
