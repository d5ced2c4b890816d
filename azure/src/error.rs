//! The error type every Azure Storage call returns, and the one question callers ask of
//! it: can retrying help?
//!
//! Errors name the operation, carry the HTTP status and the service's `x-ms-error-code`,
//! and never contain a URL query string, so a SAS signature cannot leak through them.

use std::time::Duration;

use crate::config::ConfigError;

/// Everything that can go wrong talking to Azure Storage.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The service answered with a non-success status.
    #[error("{op}: HTTP {status}{}: {message}", code_suffix(.code))]
    Service {
        /// The operation that failed, e.g. `"Put Block"`.
        op: &'static str,
        /// HTTP status code.
        status: u16,
        /// The service's `x-ms-error-code` (or the code from the error body).
        code: Option<String>,
        /// The service's message, first line only.
        message: String,
        /// A server-requested delay (`x-ms-retry-after-ms` or `Retry-After`).
        retry_after: Option<Duration>,
    },
    /// The request could not be sent or its response could not be read.
    #[error("{op}: {kind}: {detail}")]
    Transport {
        /// The operation that failed.
        op: &'static str,
        /// What broke, which decides whether a non-idempotent call may be retried.
        kind: TransportKind,
        /// The transport's description, with any URL removed.
        detail: String,
    },
    /// A queue message's pop receipt is no longer valid: another consumer dequeued it, or
    /// it was deleted. The holder must stop working on it.
    #[error("{op}: lost ownership of queue message {message_id} ({code})")]
    LostOwnership {
        /// The operation that noticed.
        op: &'static str,
        /// The message that was lost.
        message_id: String,
        /// The service code that said so (`MessageNotFound`, or `PopReceiptMismatch` on Azurite).
        code: String,
    },
    /// One operation of an entity group transaction failed; the service rolled back the rest.
    #[error(
        "{op}: operation {} of the batch failed with HTTP {status}{}: {message}",
        index.map_or_else(|| "?".to_string(), |i| i.to_string()), code_suffix(.code)
    )]
    BatchOperation {
        /// The operation that failed.
        op: &'static str,
        /// Zero-based index of the failing operation, when the service said which.
        index: Option<usize>,
        /// Status of the failing operation.
        status: u16,
        /// Its error code.
        code: Option<String>,
        /// Its message.
        message: String,
    },
    /// A successful response's body was larger than the request allowed
    /// ([`crate::table::Query::page_bytes`]); it was not read. Not retried: the same
    /// request would get the same answer.
    #[error("{op}: the response holds more than {limit} bytes")]
    ResponseTooLarge {
        /// The operation that failed.
        op: &'static str,
        /// The most bytes the request allowed.
        limit: usize,
    },
    /// The service answered success but the body was not what the protocol promises.
    #[error("{op}: unexpected response: {detail}")]
    InvalidResponse {
        /// The operation that failed.
        op: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A request could not be built from the caller's input (bad name, oversized message...).
    #[error("{op}: invalid request: {detail}")]
    InvalidRequest {
        /// The operation that was refused.
        op: &'static str,
        /// Why.
        detail: String,
    },
    /// The operation did not succeed before its deadline, every retry included.
    #[error("{op} to {host}: no success within {} s, giving up (last error: {last})", after.as_secs())]
    Deadline {
        /// The operation that failed.
        op: &'static str,
        /// `host:port` of the endpoint.
        host: String,
        /// The deadline.
        after: Duration,
        /// The last attempt's error, or that no answer came.
        last: String,
    },
    /// The operation was cancelled (the user pressed Ctrl-C, the worker is stopping).
    #[error("{op}: cancelled")]
    Cancelled {
        /// The operation that was cancelled.
        op: &'static str,
    },
    /// The account description is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A credential could not produce an authorization (e.g. a token provider failed).
    #[error("authorization: {0}")]
    Auth(String),
}

fn code_suffix(code: &Option<String>) -> String {
    code.as_deref().map(|c| format!(" {c}")).unwrap_or_default()
}

/// How a transport failure happened; it decides whether a non-idempotent request may have
/// reached the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// The connection was never established: the request certainly did not arrive.
    Connect,
    /// The request timed out; it may or may not have been applied.
    Timeout,
    /// The connection broke while sending the request or reading the response.
    Interrupted,
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransportKind::Connect => "connection failed",
            TransportKind::Timeout => "timed out",
            TransportKind::Interrupted => "connection interrupted",
        })
    }
}

/// HTTP statuses that mean "the service is overloaded or hiccuped; the same request may
/// succeed later": 408, 429, 500 (OperationTimedOut, InternalError), 502, 503 (ServerBusy), 504.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

/// Statuses that mean the service refused the request before doing any work, so even a
/// non-idempotent request is safe to send again.
pub fn is_throttle_status(status: u16) -> bool {
    matches!(status, 429 | 503)
}

impl Error {
    /// Whether sending the same request again could succeed (throttling, timeouts,
    /// broken connections). Ownership loss, bad input and 4xx answers are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Service { status, .. } | Error::BatchOperation { status, .. } => {
                is_retryable_status(*status)
            }
            Error::Transport { .. } | Error::Deadline { .. } => true,
            _ => false,
        }
    }

    /// Whether a request that is *not* idempotent may be sent again after this error:
    /// only when the service certainly did not apply it.
    pub fn is_safe_to_resend(&self) -> bool {
        match self {
            Error::Service { status, .. } => is_throttle_status(*status),
            // A failed change set is rolled back as a whole, so nothing was applied.
            Error::BatchOperation { status, .. } => is_retryable_status(*status),
            Error::Transport { kind, .. } => *kind == TransportKind::Connect,
            _ => false,
        }
    }

    /// The HTTP status, when the service answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Service { status, .. } | Error::BatchOperation { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The service's error code (`x-ms-error-code`), when it gave one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Service { code, .. } | Error::BatchOperation { code, .. } => code.as_deref(),
            Error::LostOwnership { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether the service said this with the given error code.
    pub fn has_code(&self, wanted: &str) -> bool {
        self.code() == Some(wanted)
    }

    /// A delay the service asked for before the next attempt.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Service { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub(crate) fn invalid_response(op: &'static str, detail: impl Into<String>) -> Self {
        Error::InvalidResponse {
            op,
            detail: detail.into(),
        }
    }

    pub(crate) fn invalid_request(op: &'static str, detail: impl Into<String>) -> Self {
        Error::InvalidRequest {
            op,
            detail: detail.into(),
        }
    }

    /// Converts a reqwest error, dropping its URL (which may hold a SAS signature).
    pub(crate) fn from_reqwest(op: &'static str, host: &str, err: reqwest::Error) -> Self {
        let kind = if err.is_connect() {
            TransportKind::Connect
        } else if err.is_timeout() {
            TransportKind::Timeout
        } else {
            TransportKind::Interrupted
        };
        let detail = describe_reqwest(host, err);
        Error::Transport { op, kind, detail }
    }
}

/// A reqwest failure as `host: error: cause: …`, without its URL (which may hold a SAS
/// signature), each cause redacted: the TLS or connection cause is what tells a user
/// what to fix (`invalid peer certificate: UnknownIssuer`).
pub(crate) fn describe_reqwest(host: &str, err: reqwest::Error) -> String {
    let err = err.without_url();
    let mut detail = format!("{host}: {err}");
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&crate::redact::redact_text(&s.to_string()));
        source = s.source();
    }
    detail
}

/// Shorthand for results of storage calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_classification() {
        let busy = Error::Service {
            op: "x",
            status: 503,
            code: Some("ServerBusy".into()),
            message: "busy".into(),
            retry_after: None,
        };
        assert!(busy.is_retryable() && busy.is_safe_to_resend());
        let timeout = Error::Service {
            op: "x",
            status: 500,
            code: Some("OperationTimedOut".into()),
            message: "t".into(),
            retry_after: None,
        };
        assert!(timeout.is_retryable() && !timeout.is_safe_to_resend());
        let conflict = Error::Service {
            op: "x",
            status: 409,
            code: Some("EntityAlreadyExists".into()),
            message: "e".into(),
            retry_after: None,
        };
        assert!(!conflict.is_retryable());
        assert!(conflict.has_code("EntityAlreadyExists"));
        let reset = Error::Transport {
            op: "x",
            kind: TransportKind::Interrupted,
            detail: "reset".into(),
        };
        assert!(reset.is_retryable() && !reset.is_safe_to_resend());
        assert_eq!(
            busy.to_string(),
            "x: HTTP 503 ServerBusy: busy",
            "display names op, status and code"
        );
    }
}
