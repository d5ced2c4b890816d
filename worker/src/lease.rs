//! Ownership of a claimed queue message while its task runs.
//!
//! A keeper extends the message's visibility at a third of the timeout and holds the
//! latest pop receipt. If the service says the receipt is stale, or the keeper cannot
//! prove ownership before the timeout would lapse, the lease is lost: the task must stop,
//! because another worker may already have the message. Each extension is one bounded
//! try; the keeper does its own retrying against the deadline. An extension whose outcome
//! is unknown may have replaced the receipt: a stale answer after one is not proof of
//! loss, so the attempt goes on without extending (its commit is create-only anyway).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablevault_azure::Error;
use tablevault_core::queue::{ReceivedMessage, TaskQueue};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::WorkerMetrics;

/// The fewest seconds a claimed task may stay hidden between extensions, for the
/// coordinator's in-process workers and the worker daemon alike (the same option, the
/// same queue: a value one took and the other refused left a pool of daemons that
/// exited at start while the coordinator waited).
pub const MIN_VISIBILITY_SECONDS: u64 = 5;

/// The most seconds a claimed task may stay hidden between extensions.
pub const MAX_VISIBILITY_SECONDS: u64 = 3600;

/// A claimed message, kept invisible to others while work goes on.
pub struct Lease {
    queue: Arc<dyn TaskQueue>,
    message_id: String,
    receipt: Arc<Mutex<String>>,
    lost: CancellationToken,
    stop: CancellationToken,
    keeper: JoinHandle<()>,
}

impl Lease {
    /// Starts keeping `message`, claimed for `claimed_for`, invisible in steps of
    /// `visibility`.
    pub fn start(
        queue: Arc<dyn TaskQueue>,
        message: &ReceivedMessage,
        claimed_for: Duration,
        visibility: Duration,
    ) -> Lease {
        Self::start_counted(queue, message, claimed_for, visibility, None)
    }

    /// [`Lease::start`], counting extensions in `metrics`.
    pub fn start_counted(
        queue: Arc<dyn TaskQueue>,
        message: &ReceivedMessage,
        claimed_for: Duration,
        visibility: Duration,
        metrics: Option<Arc<WorkerMetrics>>,
    ) -> Lease {
        let receipt = Arc::new(Mutex::new(message.pop_receipt.clone()));
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let keeper = tokio::spawn(keep(
            Keeper {
                queue: queue.clone(),
                message_id: message.message_id.clone(),
                receipt: receipt.clone(),
                metrics,
            },
            claimed_for,
            visibility,
            lost.clone(),
            stop.clone(),
        ));
        Lease {
            queue,
            message_id: message.message_id.clone(),
            receipt,
            lost,
            stop,
            keeper,
        }
    }

    /// Cancelled when ownership is lost.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    async fn stop_keeper(&mut self) -> String {
        self.stop.cancel();
        let _ = (&mut self.keeper).await;
        self.receipt.lock().expect("receipt lock").clone()
    }

    /// Stops keeping the message and returns its current pop receipt, for whoever settles
    /// it next (a poison move, a hand-back).
    pub async fn stop(mut self) -> String {
        self.stop_keeper().await
    }

    /// The work is done: deletes the message. A stale receipt here means another worker
    /// holds the message; it will find the task committed and delete it itself.
    pub async fn complete(mut self) -> Result<(), Error> {
        let receipt = self.stop_keeper().await;
        match self.queue.delete(&self.message_id, &receipt).await {
            Ok(()) | Err(Error::LostOwnership { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Gives the message back: visible again after `delay`, optionally with new text (to
    /// carry the last error to the next attempt).
    pub async fn release(mut self, delay: Duration, new_text: Option<&str>) -> Result<(), Error> {
        let receipt = self.stop_keeper().await;
        match self
            .queue
            .update(&self.message_id, &receipt, delay, new_text)
            .await
        {
            Ok(_) | Err(Error::LostOwnership { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What the keeper works on: the message, where its current receipt is kept, and who
/// counts extensions.
struct Keeper {
    queue: Arc<dyn TaskQueue>,
    message_id: String,
    receipt: Arc<Mutex<String>>,
    metrics: Option<Arc<WorkerMetrics>>,
}

async fn keep(
    keeper: Keeper,
    claimed_for: Duration,
    visibility: Duration,
    lost: CancellationToken,
    stop: CancellationToken,
) {
    let Keeper {
        queue,
        message_id,
        receipt,
        metrics,
    } = keeper;
    // The message stays invisible until this instant unless extended.
    let mut deadline = Instant::now() + claimed_for;
    let mut next = Instant::now() + claimed_for / 3;
    // The window the message was last made invisible for: the claim's, then each
    // extension's. The margin kept before the deadline is a sixth of it; a sixth of the
    // extensions' own (10 s of 60) left a claim of 15 s, checked at 5 s, no time to be
    // extended, and every task that ran past 5 s was given up.
    let mut window = claimed_for;
    // Set after an extension whose outcome is unknown: it may have landed, replacing the
    // receipt we hold with one we never saw.
    let mut uncertain = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(next) => {}
        }
        let margin = window / 6;
        let left = deadline.saturating_duration_since(Instant::now());
        if left <= margin {
            tracing::warn!(
                message_id,
                "cannot extend the queue message before it reappears; stopping this attempt"
            );
            lost.cancel();
            return;
        }
        let current = receipt.lock().expect("receipt lock").clone();
        let asked_at = Instant::now();
        // One try, bounded by the time left: the keeper retries itself, and must not sit
        // in a long retry while the message reappears.
        let answer = tokio::time::timeout(
            (left - margin).min(visibility / 3),
            queue.update(&message_id, &current, visibility, None),
        )
        .await;
        match answer {
            Ok(Ok(new_receipt)) => {
                *receipt.lock().expect("receipt lock") = new_receipt;
                if let Some(m) = &metrics {
                    m.lease_renewed();
                }
                deadline = asked_at + visibility;
                window = visibility;
                next = asked_at + visibility / 3;
                uncertain = false;
            }
            Ok(Err(Error::LostOwnership { code, .. })) if uncertain => {
                // Our own unanswered extension may have replaced the receipt. Whether we
                // still own the message cannot be known; the attempt goes on (its commit
                // is create-only, so a second worker on the task is harmless), without
                // extending further.
                tracing::warn!(
                    message_id,
                    code,
                    "lost track of the queue message's receipt after an unanswered extension; carrying on without extending it"
                );
                return;
            }
            Ok(Err(Error::LostOwnership { code, .. })) => {
                tracing::warn!(
                    message_id,
                    code,
                    "lost the task's queue message; stopping this attempt"
                );
                lost.cancel();
                return;
            }
            failed => {
                let certainly_not_applied = matches!(&failed, Ok(Err(e)) if e.is_safe_to_resend());
                uncertain |= !certainly_not_applied;
                match failed {
                    Ok(Err(e)) => {
                        tracing::debug!(message_id, error = %e, "extending visibility failed; retrying")
                    }
                    _ => tracing::debug!(message_id, "extending visibility timed out; retrying"),
                }
                next = Instant::now() + (visibility / 12).max(Duration::from_millis(200));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablevault_core::testing::{MemoryQueue, Op, Strike, busy, reset};

    const VISIBILITY: Duration = Duration::from_secs(30);

    async fn claimed(queue: &Arc<MemoryQueue>) -> ReceivedMessage {
        queue.put("task", None).await.unwrap();
        queue.receive(1, VISIBILITY).await.unwrap().remove(0)
    }

    #[tokio::test(start_paused = true)]
    async fn keeps_the_message_invisible_for_as_long_as_the_work_takes() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let message = claimed(&queue).await;
        let lease = Lease::start(queue.clone(), &message, VISIBILITY, VISIBILITY);
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(!lease.lost().is_cancelled());
        assert_eq!(queue.snapshot(), vec![("task".into(), 1, false)]);
        assert!(queue.calls(Op::Update) >= 9, "extended every 10 s");
        lease.complete().await.unwrap();
        assert!(queue.texts().is_empty(), "completed: deleted");
    }

    /// Regression: a message claimed for less than the visibility (the worker claims
    /// for 15 s, then extends by 60) was given up at the first check, 5 s in, with 10 s
    /// left against a margin of a sixth of 60: every task that ran longer was lost.
    #[tokio::test(start_paused = true)]
    async fn a_short_claim_is_extended_to_the_full_visibility() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let message = claimed(&queue).await;
        let lease = Lease::start(
            queue.clone(),
            &message,
            Duration::from_secs(15),
            Duration::from_secs(60),
        );
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(!lease.lost().is_cancelled(), "the lease was given up");
        assert_eq!(queue.snapshot(), vec![("task".into(), 1, false)]);
        lease.complete().await.unwrap();
        assert!(queue.texts().is_empty(), "completed: deleted");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_receipt_means_the_lease_is_lost() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let message = claimed(&queue).await;
        let lease = Lease::start(queue.clone(), &message, VISIBILITY, VISIBILITY);
        // Someone else claimed it: the next extension finds its receipt stale.
        queue.fail(
            Op::Update,
            "",
            Strike::Before,
            Error::LostOwnership {
                op: "Update Message",
                message_id: message.message_id.clone(),
                code: "PopReceiptMismatch".into(),
            },
        );
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(lease.lost().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_that_cannot_be_extended_in_time_is_given_up() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let message = claimed(&queue).await;
        for _ in 0..100 {
            queue.fail(Op::Update, "", Strike::Before, busy("Update Message"));
        }
        let lease = Lease::start(queue.clone(), &message, VISIBILITY, VISIBILITY);
        // The message would reappear at 30 s; the attempt must have stopped before.
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert!(
            lease.lost().is_cancelled(),
            "stopped before the message could reappear"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_extension_does_not_outlive_the_visibility() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let message = claimed(&queue).await;
        for _ in 0..100 {
            queue.fail(Op::Update, "", Strike::Hang, busy("Update Message"));
        }
        let lease = Lease::start(queue.clone(), &message, VISIBILITY, VISIBILITY);
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert!(
            lease.lost().is_cancelled(),
            "the attempt stops before the message can reappear"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_extension_that_landed_unanswered_does_not_kill_the_attempt() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let message = claimed(&queue).await;
        // The first extension lands but its answer (the new receipt) is lost; the next
        // one, with the old receipt, is refused as stale.
        queue.fail(Op::Update, "", Strike::After, reset("Update Message"));
        let lease = Lease::start(queue.clone(), &message, VISIBILITY, VISIBILITY);
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(
            !lease.lost().is_cancelled(),
            "whether we still own the message is unknown, so the attempt goes on: its \
             commit is create-only whoever else works on the task"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn release_makes_the_message_visible_again_with_new_text() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let message = claimed(&queue).await;
        let lease = Lease::start(queue.clone(), &message, VISIBILITY, VISIBILITY);
        lease
            .release(Duration::from_secs(5), Some("task+error"))
            .await
            .unwrap();
        assert_eq!(queue.snapshot(), vec![("task+error".into(), 1, false)]);
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(queue.snapshot(), vec![("task+error".into(), 1, true)]);
    }
}
