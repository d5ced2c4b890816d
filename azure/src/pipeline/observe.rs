//! The seam through which a process watches every HTTP attempt (its metrics): which
//! service, which operation, what status, how long it took. The pipeline calls it; what
//! is counted is the observer's business.

use std::fmt;
use std::time::Duration;

use crate::service::Service;

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The service answered with this HTTP status (success or not).
    Status(u16),
    /// No answer: connection refused or reset, timeout, truncated body.
    Transport,
}

impl AttemptOutcome {
    /// Whether the service asked to slow down (503 ServerBusy, 500 OperationTimedOut
    /// under load, 429).
    pub fn is_throttled(self) -> bool {
        matches!(self, AttemptOutcome::Status(503 | 429))
    }

    /// Whether the attempt failed (transport error or a status of 400 or more).
    pub fn is_failure(self) -> bool {
        match self {
            AttemptOutcome::Status(s) => s >= 400,
            AttemptOutcome::Transport => true,
        }
    }
}

/// Told about each attempt of each request of the clients built with it.
pub trait RequestObserver: Send + Sync + fmt::Debug {
    /// One attempt of `op` on `service` ended after `elapsed`.
    fn on_attempt(
        &self,
        service: Service,
        op: &'static str,
        outcome: AttemptOutcome,
        elapsed: Duration,
    );
}
