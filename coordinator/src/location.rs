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
}

impl Location {
    /// The container's store.
    pub fn store(&self) -> Result<Store> {
        Ok(Store::azure(BlobClient::with_options(
            &self.account,
            &self.container,
            &self.client_options,
        )?))
    }

    /// The task queue.
    pub fn task_queue(&self) -> Result<Arc<dyn TaskQueue>> {
        Ok(Arc::new(QueueClient::with_options(
            &self.account,
            &self.queue,
            &self.client_options,
        )?))
    }

    /// The poison queue that goes with the task queue.
    pub fn poison_queue(&self) -> Result<Arc<dyn TaskQueue>> {
        Ok(Arc::new(QueueClient::with_options(
            &self.account,
            &poison_queue_name(&self.queue),
            &self.client_options,
        )?))
    }
}
