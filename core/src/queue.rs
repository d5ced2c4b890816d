//! The task queue as the job protocol uses it: put, claim with a visibility timeout,
//! extend or give back, delete. [`TaskQueue`] is the seam: the Azure Queue client
//! implements it, and `testing::MemoryQueue` does for unit tests of leases and settling.
//!
//! Messages never expire: a task waits on the queue for as long as its job needs it.

use std::time::Duration;

use async_trait::async_trait;
use tablevault_azure::Result;
use tablevault_azure::queue::{MessageTtl, QueueClient};

pub use tablevault_azure::queue::ReceivedMessage;

/// A queue of task messages.
#[async_trait]
pub trait TaskQueue: Send + Sync {
    /// The queue's name.
    fn name(&self) -> &str;

    /// Creates the queue if it does not exist.
    async fn create(&self) -> Result<()>;

    /// Adds a message that never expires, first visible after `visible_after`. At least
    /// once: an ambiguous failure is retried, so the message may be stored twice.
    async fn put(&self, text: &str, visible_after: Option<Duration>) -> Result<()>;

    /// Claims up to `max` messages (1-32) for `visibility`.
    async fn receive(&self, max: u8, visibility: Duration) -> Result<Vec<ReceivedMessage>>;

    /// Changes a claimed message's visibility (and optionally its text); returns the new
    /// pop receipt. A stale receipt is `Error::LostOwnership`.
    async fn update(
        &self,
        message_id: &str,
        pop_receipt: &str,
        visibility: Duration,
        new_text: Option<&str>,
    ) -> Result<String>;

    /// Deletes a claimed message. A stale receipt is `Error::LostOwnership`.
    async fn delete(&self, message_id: &str, pop_receipt: &str) -> Result<()>;

    /// The service's approximate message count, invisible messages included.
    async fn approximate_count(&self) -> Result<u64>;

    /// Whether some message is waiting to be claimed (visible now): when none is, idle
    /// workers may be polling, and a worker with a large range splits it for them.
    async fn has_waiting(&self) -> Result<bool> {
        Ok(self.first_waiting().await?.is_some())
    }

    /// The text of the first message waiting to be claimed, if any, without claiming it.
    async fn first_waiting(&self) -> Result<Option<String>>;
}

#[async_trait]
impl TaskQueue for QueueClient {
    fn name(&self) -> &str {
        QueueClient::name(self)
    }

    async fn create(&self) -> Result<()> {
        QueueClient::create(self).await
    }

    async fn put(&self, text: &str, visible_after: Option<Duration>) -> Result<()> {
        // Duplicate tasks are dropped by the protocol: retry through ambiguous failures.
        self.put_message_at_least_once(text, visible_after, MessageTtl::Never)
            .await
            .map(|_| ())
    }

    async fn receive(&self, max: u8, visibility: Duration) -> Result<Vec<ReceivedMessage>> {
        self.get_messages(max, visibility).await
    }

    async fn update(
        &self,
        message_id: &str,
        pop_receipt: &str,
        visibility: Duration,
        new_text: Option<&str>,
    ) -> Result<String> {
        self.update_message(message_id, pop_receipt, visibility, new_text)
            .await
    }

    async fn delete(&self, message_id: &str, pop_receipt: &str) -> Result<()> {
        self.delete_message(message_id, pop_receipt).await
    }

    async fn approximate_count(&self) -> Result<u64> {
        QueueClient::approximate_count(self).await
    }

    async fn first_waiting(&self) -> Result<Option<String>> {
        Ok(self
            .peek_messages(1)
            .await?
            .into_iter()
            .next()
            .map(|m| m.text))
    }
}
