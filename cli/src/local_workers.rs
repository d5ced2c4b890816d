//! Workers in the command's own process (`--workers N`), so one machine needs one
//! command. They speak the same queue protocol as `tablevault-worker` daemons, serve only
//! the watched job, and stop when the watch ends.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tablevault_azure::ClientOptions;
use tablevault_coordinator::{LocalWorkers, Location, Result, RunningWorkers};
use tablevault_core::stats::WorkerStats;
use tablevault_worker::{AccountSet, Worker, WorkerConfig};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// How to start in-process workers.
#[derive(Debug, Clone)]
pub struct InProcessWorkers {
    count: usize,
    accounts: AccountSet,
    shutdown: CancellationToken,
    /// Lease length of their claimed messages.
    pub visibility: Duration,
    /// Longest wait between polls of an empty queue. Short: an idle in-process worker
    /// should take a task another one split off within a page or two, and polling an
    /// empty queue a few times a second costs nothing next to a backup.
    pub max_poll_interval: Duration,
}

impl InProcessWorkers {
    /// `count` one-task workers with the credentials of `accounts` (read as sources of
    /// backup tasks, written as targets of restore tasks), stopped early when `shutdown`
    /// is cancelled.
    pub fn new(count: usize, accounts: AccountSet, shutdown: CancellationToken) -> Self {
        InProcessWorkers {
            count,
            accounts,
            shutdown,
            visibility: Duration::from_secs(60),
            max_poll_interval: Duration::from_millis(100),
        }
    }
}

impl LocalWorkers for InProcessWorkers {
    fn start(&self, location: &Location, job: &str) -> Result<Box<dyn RunningWorkers>> {
        let stats = Arc::new(WorkerStats::default());
        let stop = self.shutdown.child_token();
        let mut running = JoinSet::new();
        // One process: a split wakes all of its idle workers.
        let work_queued = Arc::new(Notify::new());
        for instance in 0..self.count {
            let mut config = WorkerConfig::new(location.account.clone(), &location.queue);
            config.instance = Some(instance);
            config.sources = self.accounts.clone();
            config.targets = self.accounts.clone();
            config.concurrency = 1;
            config.visibility = self.visibility;
            config.max_poll_interval = self.max_poll_interval;
            config.only_job = Some(job.to_string());
            config.work_queued = work_queued.clone();
            // The coordinator created the queues before starting us.
            config.create_queues = false;
            // Workers stop between steps on their own token and then settle their
            // messages; cancelling their requests would leave those messages hidden.
            config.client_options = ClientOptions {
                cancel: None,
                ..location.client_options.clone()
            };
            running.spawn(Worker::new(config, stats.clone())?.run(stop.clone()));
        }
        Ok(Box::new(Running {
            running,
            stop,
            stats,
        }))
    }
}

/// How long stopping workers may take to hand their tasks back, so that Ctrl-C stops a
/// command within about two seconds.
const STOP_GRACE: Duration = Duration::from_millis(1500);

struct Running {
    running: JoinSet<tablevault_azure::Result<()>>,
    stop: CancellationToken,
    stats: Arc<WorkerStats>,
}

#[async_trait]
impl RunningWorkers for Running {
    fn stats(&self) -> Arc<WorkerStats> {
        self.stats.clone()
    }

    fn stopped(&mut self) -> Option<String> {
        match self.running.try_join_next()? {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(join) => Some(join.to_string()),
        }
    }

    async fn stop(mut self: Box<Self>) {
        self.stop.cancel();
        let drained = tokio::time::timeout(STOP_GRACE, async {
            while self.running.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                "in-process workers did not stop in time; their tasks reappear on the queue when their leases lapse"
            );
            self.running.abort_all();
        }
    }
}
