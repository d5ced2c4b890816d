//! What an outcome or a failure means as an exit code scripts can act on. This is the
//! only place exit codes are decided.

use tablevault_coordinator::Error;
use tablevault_coordinator::verify::VerifyStatus;
use tablevault_core::protocol::JobStatus;

use crate::commands::Outcome;

/// Exit codes of `tablevault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Success.
    Ok = 0,
    /// Something failed that may work if tried again (service errors, network).
    Failed = 1,
    /// The command line or configuration is wrong (also clap's usage errors).
    Usage = 2,
    /// The job finished but is incomplete: some tasks were poisoned or batches failed.
    Incomplete = 3,
    /// Verification found differences or corrupt data, or a backup file is damaged.
    Mismatch = 4,
    /// Interrupted by the user; the job can be resumed.
    Interrupted = 130,
}

/// The exit code of a command that ran to an outcome.
pub fn outcome_code(outcome: &Outcome) -> ExitCode {
    match outcome {
        Outcome::Backup(r) => match r.status {
            JobStatus::Incomplete
            | JobStatus::Failed
            | JobStatus::Cancelled
            | JobStatus::Deleting => ExitCode::Incomplete,
            JobStatus::Mismatch | JobStatus::Damaged => ExitCode::Mismatch,
            JobStatus::Interrupted => ExitCode::Interrupted,
            JobStatus::Complete | JobStatus::InProgress => ExitCode::Ok,
        },
        Outcome::Restore(r) => match r.status {
            JobStatus::Complete => ExitCode::Ok,
            JobStatus::Interrupted => ExitCode::Interrupted,
            JobStatus::Mismatch | JobStatus::Damaged => ExitCode::Mismatch,
            JobStatus::InProgress => ExitCode::Ok,
            JobStatus::Incomplete
            | JobStatus::Failed
            | JobStatus::Cancelled
            | JobStatus::Deleting => ExitCode::Incomplete,
        },
        Outcome::Verify(r) => match r.status {
            VerifyStatus::Ok => ExitCode::Ok,
            VerifyStatus::Mismatch => ExitCode::Mismatch,
        },
        Outcome::RestoreStatus(r) => match r.status {
            JobStatus::Incomplete
            | JobStatus::Failed
            | JobStatus::Cancelled
            | JobStatus::Deleting => ExitCode::Incomplete,
            JobStatus::Mismatch | JobStatus::Damaged => ExitCode::Mismatch,
            JobStatus::Complete | JobStatus::InProgress | JobStatus::Interrupted => ExitCode::Ok,
        },
        Outcome::List { .. } | Outcome::RestorePlan(_) | Outcome::Cancelled(_) => ExitCode::Ok,
        Outcome::Retention(r) if r.failed.is_empty() => ExitCode::Ok,
        Outcome::Retention(_) => ExitCode::Failed,
    }
}

/// The exit code of a command that failed.
pub fn error_code(e: &Error) -> ExitCode {
    use tablevault_azure::Error as Storage;
    match e.root() {
        Error::Invalid(_) | Error::Config(_) => ExitCode::Usage,
        Error::Storage(Storage::Cancelled { .. }) => ExitCode::Interrupted,
        Error::Storage(Storage::Config(_) | Storage::InvalidRequest { .. }) => ExitCode::Usage,
        Error::Storage(s) if matches!(s.status(), Some(401 | 403)) => ExitCode::Usage,
        // A wrong secret, tenant or federation, or `az` not signed in: no retry mends it.
        Error::Storage(Storage::Auth(why)) if tablevault_azure::identity::misconfigured(why) => {
            ExitCode::Usage
        }
        // A damaged backup file: retrying will not mend it.
        Error::Corrupt(_) => ExitCode::Mismatch,
        Error::Storage(_)
        | Error::Internal(_)
        | Error::Stalled(_)
        | Error::Removed(_)
        | Error::Step { .. } => ExitCode::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_what_the_user_can_do() {
        assert_eq!(error_code(&Error::invalid("x")), ExitCode::Usage);
        let denied = Storage::Service {
            op: "x",
            status: 403,
            code: Some("AuthorizationFailure".into()),
            message: String::new(),
            retry_after: None,
        };
        assert_eq!(error_code(&Error::Storage(denied)), ExitCode::Usage);
        let busy = Storage::Service {
            op: "x",
            status: 503,
            code: Some("ServerBusy".into()),
            message: String::new(),
            retry_after: None,
        };
        assert_eq!(error_code(&Error::Storage(busy)), ExitCode::Failed);
        assert_eq!(error_code(&Error::Corrupt("x".into())), ExitCode::Mismatch);
        let wrong_secret =
            Storage::Auth("cannot get a token: AADSTS7000215: Invalid client secret".into());
        assert_eq!(error_code(&Error::Storage(wrong_secret)), ExitCode::Usage);
        let endpoint_down = Storage::Auth("cannot get a token: connection refused".into());
        assert_eq!(error_code(&Error::Storage(endpoint_down)), ExitCode::Failed);
    }

    /// `cancel` did what it was asked, so it succeeds; `status` of the cancelled
    /// restore still says it did not write everything.
    #[test]
    fn a_cancel_that_cancelled_succeeds() {
        let cancelled: tablevault_coordinator::report::RestoreReport =
            serde_json::from_value(serde_json::json!({
                "restore_id": "r", "backup_id": "b", "status": "cancelled", "mode": "upsert",
                "target_account": "a", "target_endpoint": "http://x", "created_at": "",
                "entities": 10, "deleted": 0, "verification": null, "tables": [],
                "written": 3, "failures": [], "poisoned": [], "duration_seconds": 1.0,
                "entities_per_second": 3.0, "peak_rss_bytes": null
            }))
            .unwrap();
        assert_eq!(
            outcome_code(&Outcome::Cancelled(cancelled.clone())),
            ExitCode::Ok
        );
        assert_eq!(
            outcome_code(&Outcome::RestoreStatus(cancelled)),
            ExitCode::Incomplete
        );
    }

    use tablevault_azure::Error as Storage;
}
