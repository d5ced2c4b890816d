//! tablevault's stateless worker: claims tasks from the queue, keeps each claimed message
//! invisible while it works, runs one attempt of the task, and settles the message only
//! once the task is committed, given back or poisoned. Any number of workers on any number
//! of machines can share a queue; adding workers adds throughput.
//!
//! The same [`Worker`] runs inside `tablevault backup --workers N` and as the
//! `tablevault-worker` daemon.

pub mod accounts;
pub mod args;
pub mod attempt;
pub mod auth;
mod beats;
mod dispatch;
pub mod fleet;
mod group;
mod jobs;
pub mod lease;
pub mod limiter;
pub mod metrics;
pub mod pacer;
pub mod process;
pub mod serve;
pub mod settle;
mod worker;

use tablevault_azure::Error;
use tablevault_core::store::StoreError;
use tokio_util::sync::CancellationToken;

pub use accounts::AccountSet;
pub use jobs::StoreFactory;
pub use tablevault_core::stats::WorkerStats;
pub use worker::{MAX_POLL_INTERVAL, Worker, WorkerBackends, WorkerConfig};

/// How a task attempt ended when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskError {
    /// The queue message was lost to another worker: stop, touch nothing.
    Lost,
    /// The worker is shutting down: give the message back at once.
    Shutdown,
    /// May succeed later (throttling, timeouts, a broken connection).
    Transient(String),
    /// Can never succeed as things are (missing table, no access, corrupt data).
    Permanent(String),
}

impl From<Error> for TaskError {
    fn from(e: Error) -> Self {
        match e {
            Error::LostOwnership { .. } => TaskError::Lost,
            Error::Cancelled { .. } => TaskError::Shutdown,
            // No token from the identity provider: it may answer the next time (an
            // endpoint down for a minute poisoned tasks on their first delivery). A
            // refusal of the token itself is a 403 from storage, and final.
            e @ Error::Auth(_) => TaskError::Transient(e.to_string()),
            e if e.is_retryable() => TaskError::Transient(e.to_string()),
            e => TaskError::Permanent(e.to_string()),
        }
    }
}

impl From<StoreError> for TaskError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Storage(e) => e.into(),
            StoreError::Corrupt(why) => TaskError::Permanent(why),
        }
    }
}

/// Why an attempt must stop now, if it must: its message went to another worker, or this
/// worker is shutting down.
pub(crate) fn stop_requested(
    lost: &CancellationToken,
    shutdown: &CancellationToken,
) -> Result<(), TaskError> {
    if lost.is_cancelled() {
        Err(TaskError::Lost)
    } else if shutdown.is_cancelled() {
        Err(TaskError::Shutdown)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_classified() {
        let busy = tablevault_core::testing::busy("x");
        assert!(matches!(TaskError::from(busy), TaskError::Transient(_)));
        let missing = tablevault_core::testing::service("x", 404, "TableNotFound");
        assert!(matches!(TaskError::from(missing), TaskError::Permanent(_)));
        let lost = Error::LostOwnership {
            op: "x",
            message_id: "m".into(),
            code: "MessageNotFound".into(),
        };
        assert_eq!(TaskError::from(lost), TaskError::Lost);
        assert!(matches!(
            TaskError::from(StoreError::Corrupt("bad".into())),
            TaskError::Permanent(_)
        ));
        // Regression: a token the identity provider failed to hand out once poisoned
        // the task on its first delivery; the next delivery may get one.
        let no_token = Error::Auth("cannot get a token: identity endpoint down".into());
        assert!(matches!(TaskError::from(no_token), TaskError::Transient(_)));
        let refused =
            tablevault_core::testing::service("x", 403, "AuthorizationPermissionMismatch");
        assert!(matches!(TaskError::from(refused), TaskError::Permanent(_)));
    }
}
