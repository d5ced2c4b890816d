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
    /// The job was removed (by `prune` or `forget`) while it ran: nothing of it can be
    /// used, and carrying it on cannot help.
    #[error("{0}")]
    Removed(String),
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

/// A failure of a job that exists (`job`: `backup <id>`), named with the command that
/// carries it on (`command`: `status <id> --wait`), unless it says how already: an
/// interrupted or failed command printed no id, and the job could only be found by
/// comparing `tablevault list` before and after.
pub fn carry_on_hint(e: Error, job: &str, command: &str) -> Error {
    match e {
        // These say what to do already (a stalled job names its resume command).
        Error::Step { .. }
        | Error::Invalid(_)
        | Error::Config(_)
        | Error::Stalled(_)
        | Error::Removed(_) => e,
        e => e.in_step(format!("{job} (carry it on with `tablevault {command}`)")),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's failure names the job and how to carry it on, once; its exit code still
    /// comes from the cause.
    #[test]
    fn a_failed_job_is_named_with_how_to_carry_it_on() {
        let cancelled = Error::Storage(tablevault_azure::Error::Cancelled { op: "Put Blob" });
        let e = carry_on_hint(cancelled, "backup b1", "status b1 --wait");
        assert!(
            e.to_string()
                .starts_with("backup b1 (carry it on with `tablevault status b1 --wait`)"),
            "{e}"
        );
        assert!(matches!(
            e.root(),
            Error::Storage(tablevault_azure::Error::Cancelled { .. })
        ));
        let told = Error::Internal("x".into()).in_step("already said how");
        let e = carry_on_hint(told, "backup b1", "status b1 --wait");
        assert_eq!(e.to_string(), "already said how: internal error: x");
        let invalid = carry_on_hint(Error::invalid("bad"), "backup b1", "status b1 --wait");
        assert_eq!(invalid.to_string(), "bad");
        let stalled = carry_on_hint(Error::Stalled("then resume".into()), "b", "status b");
        assert_eq!(stalled.to_string(), "then resume");
    }
}
