//! Workers a coordinator runs in its own process (`--workers N`), so one machine needs one
//! command. They speak the same queue protocol as `tablevault-worker` daemons, serve only
//! the coordinator's job, and stop when the watch ends.

use std::sync::Arc;
use std::time::Duration;

use tablevault_worker::{Worker, WorkerConfig, WorkerStats};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::backup::{Target, WatchOptions};
use crate::exit::CmdResult;

/// The running in-process workers of one watch.
pub struct InProcessWorkers {
    running: JoinSet<tablevault_common::Result<()>>,
    stop: CancellationToken,
    /// Their shared live counters (and the signal that wakes the watcher).
    pub stats: Arc<WorkerStats>,
}

impl InProcessWorkers {
    /// Starts `opts.workers` one-task workers for job `job_id`, with the credentials of
    /// `opts.accounts` (read as sources for backup tasks, written as targets for restore
    /// tasks).
    pub fn start(target: &Target, job_id: &str, opts: &WatchOptions) -> CmdResult<Self> {
        let stats = Arc::new(WorkerStats::default());
        let stop = opts.shutdown.child_token();
        let mut running = JoinSet::new();
        for _ in 0..opts.workers {
            let mut config = WorkerConfig::new(target.account.clone(), &target.queue);
            config.sources = opts.accounts.clone();
            config.targets = opts.accounts.clone();
            config.concurrency = 1;
            config.visibility = opts.visibility;
            config.max_poll_interval = Duration::from_millis(500);
            config.only_job = Some(job_id.to_string());
            config.client_options = target.client_options.clone();
            running.spawn(Worker::new(config, stats.clone())?.run(stop.clone()));
        }
        Ok(InProcessWorkers {
            running,
            stop,
            stats,
        })
    }

    /// Logs a worker that stopped on its own (it cannot reach the queue, say).
    pub fn check(&mut self) {
        if let Some(Ok(Err(e))) = self.running.try_join_next() {
            tracing::error!(error = %e, "an in-process worker stopped");
        }
    }

    /// Stops them; tasks in flight give their messages back.
    pub async fn stop(mut self) {
        self.stop.cancel();
        while self.running.join_next().await.is_some() {}
    }
}
