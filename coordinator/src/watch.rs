//! One watch loop for every kind of job: read the job's records as they appear, show
//! progress, and stop when the job is settled or the watch is cancelled. In-process
//! workers, when the caller provides them ([`LocalWorkers`]), are started for the job and
//! stopped at the end; their counters feed the progress and wake the loop on every
//! finished task.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tablevault_core::protocol::JobStatus;
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::Store;
use tokio_util::sync::CancellationToken;

use crate::{Location, Result};

/// What a progress display is shown.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Tasks finished.
    pub tasks_done: u64,
    /// Tasks known.
    pub tasks_total: u64,
    /// Entities processed so far.
    pub entities: u64,
    /// Bytes written so far.
    pub bytes: u64,
    /// Tasks poisoned.
    pub poisoned: u64,
}

/// Shows a job's progress (a bar on a terminal, log lines elsewhere).
pub trait Progress: Send + Sync {
    /// The latest snapshot.
    fn update(&self, snapshot: Snapshot);
    /// The watch is over.
    fn finish(&self);
}

/// Starts workers in the watching process, serving only the watched job.
pub trait LocalWorkers: Send + Sync {
    /// Starts them on the location's queue, for job `job`.
    fn start(&self, location: &Location, job: &str) -> Result<Box<dyn RunningWorkers>>;
}

/// In-process workers of one watch.
#[async_trait]
pub trait RunningWorkers: Send {
    /// Their shared live counters (and the signal that a task finished).
    fn stats(&self) -> Arc<WorkerStats>;
    /// Why a worker stopped on its own, if one did since the last call.
    fn stopped(&mut self) -> Option<String>;
    /// Stops them; tasks in flight give their messages back.
    async fn stop(self: Box<Self>);
}

/// How to watch a job.
#[derive(Clone)]
pub struct WatchOptions {
    /// Workers to run in this process while watching; `None` only watches.
    pub workers: Option<Arc<dyn LocalWorkers>>,
    /// How often to look at the job's records.
    pub poll: Duration,
    /// Stops the watch (and in-process workers) when cancelled.
    pub shutdown: CancellationToken,
    /// Where progress goes; `None` shows nothing.
    pub progress: Option<Arc<dyn Progress>>,
}

impl WatchOptions {
    /// Only watch, polling twice a second, showing nothing.
    pub fn new(shutdown: CancellationToken) -> Self {
        WatchOptions {
            workers: None,
            poll: Duration::from_millis(500),
            shutdown,
            progress: None,
        }
    }
}

/// A job as the watch loop sees it.
#[async_trait]
pub(crate) trait Watched: Send {
    /// Reads records that appeared since the last call.
    async fn refresh(&mut self, store: &Store) -> Result<()>;
    /// Progress, with the in-process workers' live counters when there are some.
    fn snapshot(&self, live: Option<&WorkerStats>) -> Snapshot;
    /// `Some` once the job needs no more watching, with its status.
    fn settled(&mut self) -> Result<Option<JobStatus>>;
}

/// Watches `job` until it settles or the watch is cancelled (then `Interrupted`).
pub(crate) async fn watch(
    location: &Location,
    job_id: &str,
    state: &mut dyn Watched,
    opts: &WatchOptions,
) -> Result<JobStatus> {
    let store = location.store()?;
    let store = &store;
    let mut workers = match &opts.workers {
        Some(w) => Some(w.start(location, job_id)?),
        None => None,
    };
    let stats = workers.as_ref().map(|w| w.stats());
    let outcome = async {
        loop {
            if let Err(e) = state.refresh(store).await {
                tracing::warn!(error = %e, "cannot read the job's state; retrying");
            }
            if let Some(p) = &opts.progress {
                p.update(state.snapshot(stats.as_deref()));
            }
            if let Some(status) = state.settled()? {
                return Ok(status);
            }
            if let Some(why) = workers.as_mut().and_then(|w| w.stopped()) {
                tracing::error!(error = %why, "an in-process worker stopped");
            }
            let changed = async {
                match &stats {
                    Some(s) => s.changed.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = opts.shutdown.cancelled() => return Ok(JobStatus::Interrupted),
                _ = changed => {}
                _ = tokio::time::sleep(opts.poll) => {}
            }
        }
    }
    .await;
    if let Some(w) = workers {
        w.stop().await;
    }
    if let Some(p) = &opts.progress {
        p.finish();
    }
    outcome
}
