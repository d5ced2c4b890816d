//! Retrying: exponential backoff with jitter (via `backon`), honouring a server-requested
//! delay, and refusing to resend a non-idempotent request unless the service certainly did
//! not apply it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use crate::error::{Error, Result};

/// Whether an operation may be sent twice without changing the outcome.
///
/// Every request declares this: idempotent requests are retried on any transient error,
/// the others only when the service cannot have applied them (connection refused,
/// throttled before processing, a rolled-back change set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idempotency {
    /// Safe to repeat (reads, PUT of a whole resource, deletes, upserts).
    Idempotent,
    /// Repeating may duplicate or conflict (POST inserts, Put Message, Get Messages).
    NotIdempotent,
}

/// Told about every retry, so callers can react to throttling (for example by lowering
/// their concurrency or rate) even though the retry itself happens inside the client.
pub trait RetryObserver: Send + Sync + fmt::Debug {
    /// A request failed with `error` and will be sent again after `delay` (the backoff's,
    /// or the server's `Retry-After`). Returns how long to wait instead: `delay` or
    /// longer (a rate pacer's booked time for the retry), capped by the client at the
    /// policy's `max_delay`.
    fn on_retry(&self, op: &'static str, error: &Error, delay: Duration) -> Duration;
}

/// How many times and how patiently to retry.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: usize,
    /// Delay before the first retry (before jitter).
    pub min_delay: Duration,
    /// Upper bound of any single delay, including server-requested ones.
    pub max_delay: Duration,
    /// Told about each retry.
    pub observer: Option<Arc<dyn RetryObserver>>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 10,
            min_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(30),
            observer: None,
        }
    }
}

impl RetryPolicy {
    /// No retries at all (tests of error paths, probes).
    pub fn none() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..Self::default()
        }
    }

    fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_jitter()
            .with_factor(2.0)
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_retries)
    }

    /// Runs `attempt` until it succeeds, fails for good, or retries run out. `attempt` must
    /// build its request afresh each time (new date, new signature).
    pub async fn run<T, F, Fut>(
        &self,
        op: &'static str,
        idempotency: Idempotency,
        attempt: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let max_delay = self.max_delay;
        let observer = self.observer.clone();
        attempt
            .retry(self.backoff())
            .when(|e: &Error| match idempotency {
                Idempotency::Idempotent => e.is_retryable(),
                Idempotency::NotIdempotent => e.is_safe_to_resend(),
            })
            .adjust(move |e: &Error, planned: Option<Duration>| {
                // `None` means the retry budget is spent: keep it that way.
                planned.map(|d| {
                    let d = match e.retry_after() {
                        Some(asked) => asked.max(d).min(max_delay),
                        None => d,
                    };
                    match &observer {
                        Some(o) => o.on_retry(op, e, d).min(max_delay).max(d),
                        None => d,
                    }
                })
            })
            .notify(|e: &Error, delay: Duration| {
                tracing::warn!(op, delay_ms = delay.as_millis() as u64, error = %e, "retrying");
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn busy(retry_after: Option<Duration>) -> Error {
        Error::Service {
            op: "t",
            status: 503,
            code: Some("ServerBusy".into()),
            message: "busy".into(),
            retry_after,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_then_succeeds() {
        let calls = AtomicUsize::new(0);
        let policy = RetryPolicy::default();
        let out = policy
            .run("t", Idempotency::Idempotent, || async {
                if calls.fetch_add(1, Ordering::SeqCst) < 3 {
                    Err(busy(None))
                } else {
                    Ok(7)
                }
            })
            .await
            .unwrap();
        assert_eq!((out, calls.load(Ordering::SeqCst)), (7, 4));
    }

    #[tokio::test(start_paused = true)]
    async fn honours_server_requested_delay() {
        let calls = AtomicUsize::new(0);
        let start = tokio::time::Instant::now();
        RetryPolicy::default()
            .run("t", Idempotency::Idempotent, || async {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(busy(Some(Duration::from_secs(5))))
                } else {
                    Ok(())
                }
            })
            .await
            .unwrap();
        assert!(
            start.elapsed() >= Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
    }

    /// Asks for `wait` before every retry and counts what it was told.
    #[derive(Debug)]
    struct Pacing {
        wait: Duration,
        told: AtomicUsize,
    }

    impl RetryObserver for Pacing {
        fn on_retry(&self, _op: &'static str, _error: &Error, delay: Duration) -> Duration {
            self.told.fetch_add(1, Ordering::SeqCst);
            self.wait.max(delay)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_observer_can_lengthen_a_retry_delay_up_to_the_policy_maximum() {
        for (asked, expected) in [
            (Duration::from_secs(7), Duration::from_secs(7)),
            (Duration::from_secs(300), Duration::from_secs(30)),
            (Duration::ZERO, Duration::from_millis(200)),
        ] {
            let observer = Arc::new(Pacing {
                wait: asked,
                told: AtomicUsize::new(0),
            });
            let policy = RetryPolicy {
                observer: Some(observer.clone()),
                ..RetryPolicy::default()
            };
            let calls = AtomicUsize::new(0);
            let start = tokio::time::Instant::now();
            policy
                .run("t", Idempotency::Idempotent, || async {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        Err(busy(None))
                    } else {
                        Ok(())
                    }
                })
                .await
                .unwrap();
            let took = start.elapsed();
            assert_eq!(observer.told.load(Ordering::SeqCst), 1);
            // The backoff's own first delay is 200-400 ms (jitter).
            assert!(
                took >= expected && took <= expected.max(Duration::from_millis(400)),
                "asked {asked:?}: waited {took:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn non_idempotent_requests_are_not_resent_after_an_ambiguous_failure() {
        let calls = AtomicUsize::new(0);
        let err = RetryPolicy::default()
            .run("t", Idempotency::NotIdempotent, || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(Error::Service {
                    op: "t",
                    status: 500,
                    code: Some("OperationTimedOut".into()),
                    message: "timed out".into(),
                    retry_after: None,
                })
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(err.status(), Some(500));
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_retries_and_on_final_errors() {
        let calls = AtomicUsize::new(0);
        let policy = RetryPolicy {
            max_retries: 3,
            ..RetryPolicy::default()
        };
        policy
            .run("t", Idempotency::Idempotent, || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(busy(None))
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 4);

        calls.store(0, Ordering::SeqCst);
        policy
            .run("t", Idempotency::Idempotent, || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(Error::Service {
                    op: "t",
                    status: 404,
                    code: Some("TableNotFound".into()),
                    message: "no".into(),
                    retry_after: None,
                })
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
