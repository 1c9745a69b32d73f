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
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::Store(e) => e.kind(),
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
