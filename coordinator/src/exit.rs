//! What a command's failure means, as an exit code scripts can act on.

use std::fmt;

/// Exit codes of `tablevault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Success.
    Ok = 0,
    /// Something failed that may work if tried again (service errors, network).
    Failed = 1,
    /// The command line or configuration is wrong (also clap's usage errors).
    Usage = 2,
    /// The job finished but is incomplete: some tasks were poisoned.
    Incomplete = 3,
    /// Verification found differences or corrupt data.
    Mismatch = 4,
    /// Interrupted by the user; the job can be resumed.
    Interrupted = 130,
}

/// A command failure with its exit code and a message for the user.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: ExitCode,
    /// What went wrong and, where possible, what to do.
    pub message: String,
}

impl Failure {
    /// A usage or configuration error.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: ExitCode::Usage,
            message: message.into(),
        }
    }

    /// A failure that may go away on a retry.
    pub fn failed(message: impl Into<String>) -> Self {
        Failure {
            code: ExitCode::Failed,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl From<tablevault_common::Error> for Failure {
    fn from(e: tablevault_common::Error) -> Self {
        use tablevault_common::Error as E;
        let code = match &e {
            E::Config(_) | E::InvalidRequest { .. } => ExitCode::Usage,
            E::Service {
                status: 401 | 403, ..
            } => ExitCode::Usage,
            _ => ExitCode::Failed,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

impl From<tablevault_common::ConfigError> for Failure {
    fn from(e: tablevault_common::ConfigError) -> Self {
        Failure::usage(e.to_string())
    }
}

/// Shorthand for command results.
pub type CmdResult<T> = Result<T, Failure>;
