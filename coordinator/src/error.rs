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
    /// A step of a job failed; the message says which job and what to do next, and the
    /// cause says why.
    #[error("{context}: {source}")]
    Step {
        /// Which job, what failed and how to carry on.
        context: String,
        /// Why it failed.
        source: Box<Error>,
    },
    /// Nothing is working on the job (no worker, or every in-process worker stopped); the
    /// message says what to start and how to carry on.
    #[error("{0}")]
    Stalled(String),
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

    /// This error as the failure of a step of a job, explained by `context`.
    pub fn in_step(self, context: impl Into<String>) -> Self {
        Error::Step {
            context: context.into(),
            source: Box::new(self),
        }
    }

    /// The underlying cause, past any step context.
    pub fn root(&self) -> &Error {
        match self {
            Error::Step { source, .. } => source.root(),
            e => e,
        }
    }
}

/// Shorthand for control-plane results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Refuses a `--max-rate` of zero for a backup or a restore: a fleet held to nothing
/// would never finish.
pub(crate) fn check_max_rate(max_rate: Option<u32>) -> Result<()> {
    if max_rate == Some(0) {
        return Err(Error::invalid(
            "--max-rate must be at least 1 entity per second",
        ));
    }
    Ok(())
}
