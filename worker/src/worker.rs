//! The worker's poll loop: claim as many messages as there are free task slots, run each
//! in its own task, and back off while the queue is empty. What happens to one message is
//! `dispatch`'s business.

use std::sync::Arc;
use std::time::Duration;

use tablevault_azure::queue::QueueClient;
use tablevault_azure::{ClientOptions, Error, StorageAccount};
use tablevault_core::protocol::{poison_queue_name, worker_identity};
use tablevault_core::queue::TaskQueue;
use tablevault_core::stats::WorkerStats;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::accounts::AccountSet;
use crate::jobs::{JobFiles, azure_stores};
use crate::settle::Settler;

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Account holding the queue and the backup containers.
    pub backup: StorageAccount,
    /// Task queue name.
    pub queue: String,
    /// Accounts this worker may read tables from (backup).
    pub sources: AccountSet,
    /// Accounts this worker may write tables to (restore).
    pub targets: AccountSet,
    /// Tasks run at once.
    pub concurrency: usize,
    /// Visibility timeout of claimed messages (the lease length).
    pub visibility: Duration,
    /// Longest wait between polls of an empty queue.
    pub max_poll_interval: Duration,
    /// Serve only this job (in-process workers of a coordinator); others are handed back.
    pub only_job: Option<String>,
    /// HTTP and retry settings.
    pub client_options: ClientOptions,
}

impl WorkerConfig {
    /// Defaults for a backup account and queue.
    pub fn new(backup: StorageAccount, queue: &str) -> Self {
        WorkerConfig {
            backup,
            queue: queue.to_string(),
            sources: AccountSet::default(),
            targets: AccountSet::default(),
            concurrency: 4,
            visibility: Duration::from_secs(60),
            max_poll_interval: Duration::from_secs(5),
            only_job: None,
            client_options: ClientOptions::default(),
        }
    }
}

/// A worker: poll, claim, run, repeat, until shut down.
pub struct Worker {
    pub(crate) config: WorkerConfig,
    pub(crate) queue: Arc<dyn TaskQueue>,
    pub(crate) settler: Settler,
    pub(crate) stats: Arc<WorkerStats>,
    pub(crate) identity: String,
    pub(crate) jobs: JobFiles,
}

impl Worker {
    /// A worker on the Azure queue and containers of `config.backup`; fails on unusable
    /// configuration.
    pub fn new(config: WorkerConfig, stats: Arc<WorkerStats>) -> Result<Arc<Self>, Error> {
        let options = &config.client_options;
        let queue: Arc<dyn TaskQueue> = Arc::new(QueueClient::with_options(
            &config.backup,
            &config.queue,
            options,
        )?);
        let poison: Arc<dyn TaskQueue> = Arc::new(QueueClient::with_options(
            &config.backup,
            &poison_queue_name(&config.queue),
            options,
        )?);
        let identity = worker_identity();
        let jobs = JobFiles::new(
            azure_stores(config.backup.clone(), options.clone()),
            options.clone(),
        );
        Ok(Arc::new(Worker {
            settler: Settler::new(queue.clone(), poison, stats.clone(), &identity),
            queue,
            stats,
            identity,
            jobs,
            config,
        }))
    }

    /// Live counters.
    pub fn stats(&self) -> &Arc<WorkerStats> {
        &self.stats
    }

    /// Runs until `shutdown` is cancelled. Tasks in flight then stop and give their
    /// messages back so another worker picks them up at once.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), Error> {
        self.queue.create().await?;
        self.settler.poison_queue().create().await?;
        let slots = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        let mut running = JoinSet::new();
        let mut idle = Duration::from_millis(100);
        tracing::info!(queue = %self.config.queue, concurrency = self.config.concurrency, worker = %self.identity, "worker started");
        loop {
            let first = tokio::select! {
                _ = shutdown.cancelled() => break,
                p = slots.clone().acquire_owned() => p.expect("semaphore is never closed"),
            };
            while running.try_join_next().is_some() {}
            let free = 1 + slots.available_permits();
            let claimed = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = self.queue.receive(free.min(32) as u8, self.config.visibility) => r,
            };
            let messages = match claimed {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the task queue; retrying");
                    drop(first);
                    sleep_or_shutdown(&shutdown, self.config.max_poll_interval).await;
                    continue;
                }
            };
            if messages.is_empty() {
                drop(first);
                sleep_or_shutdown(&shutdown, idle).await;
                idle = (idle * 2).min(self.config.max_poll_interval);
                continue;
            }
            idle = Duration::from_millis(100);
            let mut permit = Some(first);
            for message in messages {
                let p = match permit.take() {
                    Some(p) => p,
                    None => slots
                        .clone()
                        .acquire_owned()
                        .await
                        .expect("semaphore is never closed"),
                };
                let me = self.clone();
                let stop = shutdown.clone();
                running.spawn(async move {
                    me.handle(message, stop).await;
                    drop(p);
                });
            }
        }
        tracing::info!(in_flight = running.len(), "worker stopping");
        while running.join_next().await.is_some() {}
        Ok(())
    }
}

async fn sleep_or_shutdown(shutdown: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}
