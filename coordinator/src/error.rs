//! What can go wrong in the control plane, typed by what the user can do about it. The
//! command line maps these to exit codes; nothing here decides one.

use tablevault_azure::ConfigError;
use tablevault_core::store::StoreError;

/// A control-plane failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request cannot be carried out as given: a bad option, an unknown backup or
    /// table, an incomplete backup, an unsupported format. Retrying will not help;
    /// changing the request will.
    #[error("{0}")]
    Invalid(String),
    /// An account description or setting is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Storage failed; the error says whether retrying can help.
    #[error(transparent)]
    Storage(#[from] tablevault_azure::Error),
    /// A file of the backup is damaged or unreadable.
    #[error("{0}")]
    Corrupt(String),
    /// The job reached a state the protocol does not allow (a bug).
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Storage(e) => Error::Storage(e),
            StoreError::Corrupt(why) => Error::Corrupt(why),
        }
    }
}

impl Error {
    /// An invalid request, with what to change.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }
}

/// Shorthand for control-plane results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
