//! Engine errors: invalid input (nothing was changed) or a store failure.

use sked_core::{SpecError, TransitionError};
use sked_store::{ErrorKind, StoreError};

use crate::api::ErrorCode;

/// The result of sked's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong; [`Error::kind`] says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Invalid input: nothing was changed.
    #[error("{0}")]
    Invalid(String),
    /// A bug: a part of sked panicked.
    #[error("{0}")]
    Internal(String),
    /// The store failed or refused (not found, conflict, unavailable, …).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An error answered by a remote sked server (or reaching it failed).
    #[error("{message}")]
    Remote {
        /// The kind, from the code.
        kind: ErrorKind,
        /// The API's error code (`not_found`, `stale_lease`, `unavailable`, …).
        code: ErrorCode,
        /// The server's message.
        message: String,
    },
}

impl Error {
    /// Invalid input, not found, conflict (a stale lease, say), unavailable (try again
    /// later) or internal.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::Internal(_) => ErrorKind::Internal,
            Error::Store(e) => e.kind(),
            Error::Remote { kind, .. } => *kind,
        }
    }

    /// An error from the API's code and message.
    #[cfg(feature = "remote")]
    pub(crate) fn remote(code: ErrorCode, message: impl Into<String>) -> Error {
        Error::Remote {
            kind: code.kind(),
            code,
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

/// An error with its causes, `outer: inner: innermost` (many libraries' own messages omit
/// them, like reqwest's "error sending request").
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
