//! Where jobs live: the backup account, its container and the task queue, with the
//! clients to reach them.

use std::sync::Arc;

use tablevault_azure::blob::BlobClient;
use tablevault_azure::queue::QueueClient;
use tablevault_azure::{ClientOptions, StorageAccount};
use tablevault_core::protocol::poison_queue_name;
use tablevault_core::queue::TaskQueue;
use tablevault_core::store::Store;

use crate::Result;

/// Where a location's storage really is, when not the Azure account itself: the seam
/// through which unit tests run the control plane on in-memory fakes.
#[derive(Clone)]
pub struct Backends {
    /// The container's store.
    pub store: Store,
    /// The task queue.
    pub queue: Arc<dyn TaskQueue>,
    /// Its poison queue.
    pub poison: Arc<dyn TaskQueue>,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backends")
            .field("container", &self.store.container())
            .field("queue", &self.queue.name())
            .finish()
    }
}

/// The backup account, container and task queue of a job.
#[derive(Debug, Clone)]
pub struct Location {
    /// Account holding the container and the queue.
    pub account: StorageAccount,
    /// Container of backups.
    pub container: String,
    /// Task queue.
    pub queue: String,
    /// HTTP and retry settings.
    pub client_options: ClientOptions,
    /// Storage to use instead of the account's (tests); `None` in real use.
    pub backends: Option<Backends>,
}

impl Location {
    /// The container's store.
    pub fn store(&self) -> Result<Store> {
        if let Some(b) = &self.backends {
            return Ok(b.store.clone());
        }
        Ok(Store::azure(BlobClient::with_options(
            &self.account,
            &self.container,
            &self.client_options,
        )?))
    }

    /// The task queue.
    /// The same location with requests that Ctrl-C does not cancel and a short deadline:
    /// for recording, after an interruption, that the job was interrupted.
    pub fn uncancellable(&self) -> Location {
        let mut l = self.clone();
        l.client_options.cancel = None;
        l.client_options.deadline = std::time::Duration::from_secs(10);
        l
    }

    pub fn task_queue(&self) -> Result<Arc<dyn TaskQueue>> {
        if let Some(b) = &self.backends {
            return Ok(b.queue.clone());
        }
        Ok(Arc::new(QueueClient::with_options(
            &self.account,
            &self.queue,
            &self.client_options,
        )?))
    }

    /// Creates the task queue and its poison queue if they do not exist. In-process
    /// workers count on it and do not create them again: their Create Queue calls would
    /// wait behind the job's messages being put.
    pub async fn create_queues(&self) -> Result<()> {
        self.task_queue()?.create().await?;
        self.poison_queue()?.create().await?;
        Ok(())
    }

    /// The poison queue that goes with the task queue.
    pub fn poison_queue(&self) -> Result<Arc<dyn TaskQueue>> {
        if let Some(b) = &self.backends {
            return Ok(b.poison.clone());
        }
        Ok(Arc::new(QueueClient::with_options(
            &self.account,
            &poison_queue_name(&self.queue),
            &self.client_options,
        )?))
    }
}
