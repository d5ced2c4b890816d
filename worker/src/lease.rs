//! Ownership of a claimed queue message while its task runs.
//!
//! A keeper extends the message's visibility at a third of the timeout and holds the
//! latest pop receipt. If the service says the receipt is stale, or the keeper cannot
//! prove ownership before the timeout would lapse, the lease is lost: the task must stop,
//! because another worker may already have the message.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablevault_azure::Error;
use tablevault_core::queue::{ReceivedMessage, TaskQueue};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
    /// Starts keeping `message` (claimed with `visibility`) invisible.
    pub fn start(
        queue: Arc<dyn TaskQueue>,
        message: &ReceivedMessage,
        visibility: Duration,
    ) -> Lease {
        let receipt = Arc::new(Mutex::new(message.pop_receipt.clone()));
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let keeper = tokio::spawn(keep(
            queue.clone(),
            message.message_id.clone(),
            receipt.clone(),
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

async fn keep(
    queue: Arc<dyn TaskQueue>,
    message_id: String,
    receipt: Arc<Mutex<String>>,
    visibility: Duration,
    lost: CancellationToken,
    stop: CancellationToken,
) {
    let period = visibility / 3;
    // The message stays invisible until this instant unless extended.
    let mut deadline = Instant::now() + visibility;
    let mut next = Instant::now() + period;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(next) => {}
        }
        let current = receipt.lock().expect("receipt lock").clone();
        let asked_at = Instant::now();
        match queue.update(&message_id, &current, visibility, None).await {
            Ok(new_receipt) => {
                *receipt.lock().expect("receipt lock") = new_receipt;
                deadline = asked_at + visibility;
                next = asked_at + period;
            }
            Err(Error::LostOwnership { code, .. }) => {
                tracing::warn!(
                    message_id,
                    code,
                    "lost the task's queue message; stopping this attempt"
                );
                lost.cancel();
                return;
            }
            Err(e) => {
                // Keep trying while there is time; a lease we cannot prove is a lost lease.
                let left = deadline.saturating_duration_since(Instant::now());
                if left < period / 2 {
                    tracing::warn!(message_id, error = %e, "cannot extend the queue message before it reappears; stopping this attempt");
                    lost.cancel();
                    return;
                }
                tracing::debug!(message_id, error = %e, "extending visibility failed; retrying");
                next = Instant::now() + (period / 4).max(Duration::from_millis(200));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablevault_core::testing::{MemoryQueue, Op, Strike, busy};

    const VISIBILITY: Duration = Duration::from_secs(30);

    async fn claimed(queue: &Arc<MemoryQueue>) -> ReceivedMessage {
        queue.put("task", None).await.unwrap();
        queue.receive(1, VISIBILITY).await.unwrap().remove(0)
    }

    #[tokio::test(start_paused = true)]
    async fn keeps_the_message_invisible_for_as_long_as_the_work_takes() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let message = claimed(&queue).await;
        let lease = Lease::start(queue.clone(), &message, VISIBILITY);
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(!lease.lost().is_cancelled());
        assert_eq!(queue.snapshot(), vec![("task".into(), 1, false)]);
        assert!(queue.calls(Op::Update) >= 9, "extended every 10 s");
        lease.complete().await.unwrap();
        assert!(queue.texts().is_empty(), "completed: deleted");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_receipt_means_the_lease_is_lost() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let message = claimed(&queue).await;
        let lease = Lease::start(queue.clone(), &message, VISIBILITY);
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
        let lease = Lease::start(queue.clone(), &message, VISIBILITY);
        // The message would reappear at 30 s; the attempt must have stopped before.
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert!(
            lease.lost().is_cancelled(),
            "stopped before the message could reappear"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn release_makes_the_message_visible_again_with_new_text() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let message = claimed(&queue).await;
        let lease = Lease::start(queue.clone(), &message, VISIBILITY);
        lease
            .release(Duration::from_secs(5), Some("task+error"))
            .await
            .unwrap();
        assert_eq!(queue.snapshot(), vec![("task+error".into(), 1, false)]);
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(queue.snapshot(), vec![("task+error".into(), 1, true)]);
    }
}
