//! The worker's poll loop: claim as many messages as there are free task slots, run each
//! in its own task, and back off while the queue is empty. What happens to one message is
//! `dispatch`'s business.

use std::sync::Arc;
use std::time::Duration;

use tablevault_azure::queue::QueueClient;
use tablevault_azure::{ClientOptions, Error, RetryPolicy, StorageAccount};
use tablevault_core::protocol::{DEFAULT_WORKER_CONCURRENCY, poison_queue_name, worker_identity};
use tablevault_core::queue::TaskQueue;
use tablevault_core::stats::WorkerStats;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::accounts::AccountSet;
use crate::beats::Beats;
use crate::dispatch::Slot;
use crate::fleet::FleetWatch;
use crate::jobs::{JobFiles, StoreFactory, azure_stores};
use crate::metrics::WorkerMetrics;
use crate::serve::Health;
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
    /// Create the task and poison queues at start if they do not exist. A coordinator
    /// that creates them before starting its in-process workers turns it off.
    pub create_queues: bool,
    /// HTTP and retry settings.
    pub client_options: ClientOptions,
    /// After shutdown is asked for, how long tasks in flight may go on to finish before
    /// they are stopped and their messages given back.
    pub shutdown_grace: Duration,
    /// The process's metrics (shared by all its workers).
    pub metrics: Arc<WorkerMetrics>,
    /// What the health endpoints report (shared by all the process's workers).
    pub health: Arc<Health>,
    /// Wakes the process's idle workers when one of its tasks puts split-off work on the
    /// queue, so they claim it at once rather than at their next poll (shared by all
    /// the process's workers). A split hands work to workers idle now; on the emulator
    /// a first task read the rest of a table of 6,000 entities in 30-80 ms, before any
    /// idle worker polled again, and read 81-93% of it alone (split soak).
    pub work_queued: Arc<Notify>,
    /// Which of several workers in one process this is (the CLI's `--workers N`), for
    /// an identity, and so a heartbeat, of its own: sharing the process's, N workers
    /// counted as one live worker, and each took the whole of `--max-rate` (four
    /// in-process workers read at 3.5 times the cap).
    pub instance: Option<usize>,
}

/// The longest wait between polls of an empty queue, by default. Short: as a job
/// starts, work reaches idle workers only as running tasks split, and a task splits
/// again only once its last split-off part was claimed, so workers that poll slowly slow
/// the whole fleet's ramp-up (README, "Simulation at Azure's limits"). An idle poll per
/// second costs little.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How long a message is claimed for before its lease extends it: short, so the tasks of
/// a Get Messages answer that was lost reappear within seconds.
const CLAIM_VISIBILITY: Duration = Duration::from_secs(15);

impl WorkerConfig {
    /// The visibility a message is claimed with; the lease extends it to `visibility`.
    pub fn claim_visibility(&self) -> Duration {
        self.visibility.min(CLAIM_VISIBILITY)
    }

    /// Defaults for a backup account and queue.
    pub fn new(backup: StorageAccount, queue: &str) -> Self {
        WorkerConfig {
            backup,
            queue: queue.to_string(),
            sources: AccountSet::default(),
            targets: AccountSet::default(),
            concurrency: DEFAULT_WORKER_CONCURRENCY,
            visibility: Duration::from_secs(60),
            max_poll_interval: MAX_POLL_INTERVAL,
            only_job: None,
            create_queues: true,
            client_options: ClientOptions::default(),
            shutdown_grace: Duration::ZERO,
            metrics: Arc::new(WorkerMetrics::new()),
            health: Arc::new(Health::default()),
            work_queued: Arc::new(Notify::new()),
            instance: None,
        }
    }
}

/// The queues and stores a worker works on.
pub struct WorkerBackends {
    /// The task queue.
    pub queue: Arc<dyn TaskQueue>,
    /// The same queue for lease extensions, without retries.
    pub lease_queue: Arc<dyn TaskQueue>,
    /// The poison queue.
    pub poison: Arc<dyn TaskQueue>,
    /// The store of a job's container.
    pub store_for: StoreFactory,
}

/// A worker: poll, claim, run, repeat, until shut down.
pub struct Worker {
    pub(crate) config: WorkerConfig,
    pub(crate) queue: Arc<dyn TaskQueue>,
    /// The queue as the lease keeper uses it: one try per request (the keeper retries
    /// against its own deadline).
    pub(crate) lease_queue: Arc<dyn TaskQueue>,
    pub(crate) settler: Settler,
    pub(crate) stats: Arc<WorkerStats>,
    pub(crate) identity: String,
    pub(crate) jobs: JobFiles,
    /// Live workers per job, for each one's share of the account's rate.
    pub(crate) fleet: Arc<FleetWatch>,
    /// When this worker's heartbeat of each job is due.
    pub(crate) beats: Beats,
}

impl Worker {
    /// A worker on the Azure queue and containers of `config.backup`; fails on unusable
    /// configuration.
    pub fn new(mut config: WorkerConfig, stats: Arc<WorkerStats>) -> Result<Arc<Self>, Error> {
        if config.client_options.observer.is_none() {
            config.client_options.observer = Some(config.metrics.clone());
        }
        let options = &config.client_options;
        let queue_client = |name: &str, options: &ClientOptions| {
            QueueClient::with_options(&config.backup, name, options)
                .map(|q| Arc::new(q) as Arc<dyn TaskQueue>)
        };
        let mut one_try = options.clone();
        one_try.retry = RetryPolicy::none();
        let backends = WorkerBackends {
            queue: queue_client(&config.queue, options)?,
            lease_queue: queue_client(&config.queue, &one_try)?,
            poison: queue_client(&poison_queue_name(&config.queue), options)?,
            store_for: azure_stores(config.backup.clone(), options.clone()),
        };
        Ok(Self::with_backends(config, stats, backends))
    }

    /// A worker on the given queues and stores (in-memory fakes in tests).
    pub fn with_backends(
        mut config: WorkerConfig,
        stats: Arc<WorkerStats>,
        backends: WorkerBackends,
    ) -> Arc<Self> {
        if config.client_options.observer.is_none() {
            config.client_options.observer = Some(config.metrics.clone());
        }
        let identity = match config.instance {
            Some(i) => format!("{}-w{i}", worker_identity()),
            None => worker_identity(),
        };
        let jobs = JobFiles::new(
            backends.store_for,
            config.client_options.clone(),
            config.metrics.clone(),
        );
        Arc::new(Worker {
            settler: Settler::new(
                backends.queue.clone(),
                backends.poison,
                stats.clone(),
                config.metrics.clone(),
                &identity,
            ),
            queue: backends.queue,
            lease_queue: backends.lease_queue,
            stats,
            identity,
            jobs,
            fleet: Arc::default(),
            beats: Beats::default(),
            config,
        })
    }

    /// Live counters.
    pub fn stats(&self) -> &Arc<WorkerStats> {
        &self.stats
    }

    /// Runs until `shutdown` is cancelled. It then claims nothing more; tasks in flight
    /// have the configured grace period to finish, after which they stop and give their
    /// messages back so another worker picks them up at once.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), Error> {
        let health = self.config.health.clone();
        let reached = async {
            if !self.config.create_queues {
                return Ok(());
            }
            self.queue.create().await?;
            self.settler.poison_queue().create().await
        };
        // A shutdown while storage cannot be reached ends the start at once: retried to
        // its deadline, SIGTERM waited some 85 s and exited 1.
        let reached = tokio::select! {
            r = reached => r,
            _ = shutdown.cancelled() => {
                tracing::info!("shutdown requested before the queues could be reached");
                health.started();
                health.stopped(true);
                return Ok(());
            }
        };
        if let Err(e) = reached {
            health.started();
            health.stopped(false);
            return Err(e);
        }
        health.started();
        // Tasks stop on their own token, cancelled after the grace period.
        let stop_tasks = CancellationToken::new();
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
            // Having offered a task it cannot run, the worker lets the others claim it.
            if let Some(until) = self.settler.stepping_aside() {
                drop(first);
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep_until(until) => {}
                }
                continue;
            }
            let free = 1 + slots.available_permits();
            let claimed = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = self.queue.receive(free.min(32) as u8, self.config.claim_visibility()) => r,
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
                tokio::select! {
                    _ = sleep_or_shutdown(&shutdown, idle) => {
                        idle = (idle * 2).min(self.config.max_poll_interval);
                    }
                    _ = self.config.work_queued.notified() => {}
                }
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
                let stop = stop_tasks.clone();
                running.spawn(async move {
                    me.handle_in(message, stop, Slot::new(p)).await;
                });
            }
        }
        health.drain();
        let grace = self.config.shutdown_grace;
        tracing::info!(
            in_flight = running.len(),
            grace_s = grace.as_secs_f64(),
            "worker stopping: no more claims; tasks in flight finish or are given back"
        );
        let finished = tokio::time::timeout(grace, async {
            while running.join_next().await.is_some() {}
        })
        .await;
        if finished.is_err() {
            tracing::info!(
                in_flight = running.len(),
                "grace period over; giving the remaining tasks back"
            );
        }
        stop_tasks.cancel();
        while running.join_next().await.is_some() {}
        health.stopped(true);
        Ok(())
    }
}

async fn sleep_or_shutdown(shutdown: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use tablevault_core::keys::KeyRange;
    use tablevault_core::protocol::{JobStatus, PROTOCOL_VERSION, TaskKind, TaskMessage};
    use tablevault_core::store::Store;
    use tablevault_core::testing::{MemoryBlobs, MemoryQueue, Op, Strike, reset};

    use super::*;

    /// A worker on fakes; returns it with its task queue.
    pub(crate) fn worker_on_fakes() -> (Arc<Worker>, Arc<MemoryQueue>) {
        worker_on_fakes_with(Arc::new(MemoryBlobs::new("c")))
    }

    /// A worker on fakes whose store is `blobs`; returns it with its task queue.
    pub(crate) fn worker_on_fakes_with(blobs: Arc<MemoryBlobs>) -> (Arc<Worker>, Arc<MemoryQueue>) {
        let mut config = WorkerConfig::new(StorageAccount::emulator(), "q");
        config.max_poll_interval = Duration::from_millis(200);
        worker_on_fakes_configured(blobs, config)
    }

    /// A worker with `config` on fakes whose store is `blobs`; returns it with its task
    /// queue.
    fn worker_on_fakes_configured(
        blobs: Arc<MemoryBlobs>,
        config: WorkerConfig,
    ) -> (Arc<Worker>, Arc<MemoryQueue>) {
        let queue = Arc::new(MemoryQueue::new("q"));
        let backends = WorkerBackends {
            queue: queue.clone(),
            lease_queue: queue.clone(),
            poison: Arc::new(MemoryQueue::new("q-poison")),
            store_for: Arc::new(move |_| Ok(Store::new(blobs.clone()))),
        };
        let worker = Worker::with_backends(config, Arc::new(WorkerStats::default()), backends);
        (worker, queue)
    }

    /// Regression: in-process workers shared the process's identity, and so one
    /// heartbeat per job: the fleet counted them as one live worker, and each took the
    /// whole of the job's rate.
    #[test]
    fn workers_of_one_process_have_identities_of_their_own() {
        let identity = |instance| {
            let mut config = WorkerConfig::new(StorageAccount::emulator(), "q");
            config.instance = instance;
            let (worker, _) = worker_on_fakes_configured(Arc::new(MemoryBlobs::new("c")), config);
            worker.identity.clone()
        };
        let (a, b, daemon) = (identity(Some(0)), identity(Some(1)), identity(None));
        assert_ne!(a, b);
        assert_eq!(daemon, worker_identity());
        assert!(a.starts_with(&daemon) && b.starts_with(&daemon), "{a} {b}");
    }

    /// A task of a job that does not exist: once claimed, it is dropped.
    fn stale_task() -> TaskMessage {
        TaskMessage {
            v: PROTOCOL_VERSION,
            container: "c".into(),
            job: "20200101T000000Z-deadbeef".into(),
            table: "Gone".into(),
            task: "r0000".into(),
            kind: TaskKind::Backup {
                range: KeyRange::all(),
                ceiling: None,
                estimate: None,
            },
        }
    }

    #[tokio::test(start_paused = true)]
    async fn tasks_of_a_lost_claim_answer_reappear_within_seconds() {
        let (worker, queue) = worker_on_fakes();
        queue.put(&stale_task().encode(), None).await.unwrap();
        // The first Get Messages claims it, but its answer is lost.
        queue.fail(Op::Receive, "", Strike::After, reset("Get Messages"));
        let stop = CancellationToken::new();
        let run = tokio::spawn(worker.clone().run(stop.clone()));
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(
            queue.texts().is_empty(),
            "claimed again and handled after the short claim, not a full visibility later"
        );
        stop.cancel();
        run.await.unwrap().unwrap();
    }

    /// Regression: an idle worker claims what a split in its process put on the queue
    /// at once, not at its next poll. Polls of an empty queue back off to the longest
    /// interval; on the emulator a first task read the rest of a table of 6,000
    /// entities in 30-80 ms while the part it split off waited for idle workers' next
    /// polls (100 ms apart there), and read 81-93% of it alone (split soak, seeds 13, 50
    /// and 59).
    #[tokio::test(start_paused = true)]
    async fn work_a_split_queues_wakes_the_process_idle_workers() {
        let mut config = WorkerConfig::new(StorageAccount::emulator(), "q");
        config.max_poll_interval = Duration::from_secs(60);
        let work_queued = config.work_queued.clone();
        let (worker, queue) = worker_on_fakes_configured(Arc::new(MemoryBlobs::new("c")), config);
        let stop = CancellationToken::new();
        let run = tokio::spawn(worker.run(stop.clone()));
        // Idle for five minutes: its polls are a minute apart, the next one about 40 s
        // away (at 342 s).
        tokio::time::sleep(Duration::from_secs(300)).await;
        queue.put(&stale_task().encode(), None).await.unwrap();
        work_queued.notify_waiters();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(queue.texts().is_empty(), "claimed and handled at once");
        stop.cancel();
        run.await.unwrap().unwrap();
    }

    /// A restore's plan and the commit record it reads, in `blobs`; returns its task.
    async fn planted_restore(store: &Store, status: JobStatus) -> TaskMessage {
        use tablevault_core::format::{Compression, FORMAT_VERSION};
        use tablevault_core::protocol::{AccountRef, RestoreJob, RestoreMode, RestoreStateRecord};
        use tablevault_core::store::BackupPaths;
        let (backup, restore) = ("20200101T000000Z-backup01", "20200101T000000Z-restor01");
        let paths = BackupPaths::new(backup);
        let job = RestoreJob {
            protocol: PROTOCOL_VERSION,
            format: FORMAT_VERSION,
            restore_id: restore.into(),
            backup_id: backup.into(),
            created_at: String::new(),
            target: AccountRef::of(&StorageAccount::emulator()).unwrap(),
            mode: RestoreMode::Upsert,
            compression: Compression::Zstd,
            per_blob_max_bytes: 0,
            max_attempts: 5,
            tables: vec![tablevault_core::protocol::RestoreTable {
                source: "Src".into(),
                target: "Dst".into(),
                entities: 0,
                tasks: 1,
            }],
            verify: true,
            max_rate: None,
            tool_version: String::new(),
        };
        store
            .overwrite(&paths.restore_job(restore), &job)
            .await
            .unwrap();
        let commit = tablevault_core::testing::empty_commit(backup, "Src", "r0000");
        store
            .overwrite(&paths.commit("Src", "r0000"), &commit)
            .await
            .unwrap();
        store
            .set_restore_state(backup, restore, &RestoreStateRecord::now(status, None))
            .await
            .unwrap();
        TaskMessage {
            v: PROTOCOL_VERSION,
            container: "c".into(),
            job: backup.into(),
            table: "Dst".into(),
            task: "r0000-b00000".into(),
            kind: TaskKind::Restore {
                restore: restore.into(),
                source_table: "Src".into(),
                range_task: "r0000".into(),
                blob: 0,
                block: None,
            },
        }
    }

    /// Workers run a restore's tasks only while it is live: tasks of an interrupted,
    /// cancelled or finished restore are dropped, by its own workers and by others'.
    /// (A live task here is offered to other workers, as this one holds no credentials
    /// for the target: the message stays.)
    #[tokio::test(start_paused = true)]
    async fn tasks_of_restores_that_are_not_running_are_dropped() {
        for only_job in [None, Some("another-job")] {
            for (status, kept) in [
                (JobStatus::InProgress, true),
                (JobStatus::Interrupted, false),
                (JobStatus::Cancelled, false),
                (JobStatus::Complete, false),
            ] {
                let queue = Arc::new(MemoryQueue::new("q"));
                let store = Store::new(Arc::new(MemoryBlobs::new("c")));
                let task = planted_restore(&store, status).await;
                let backends = WorkerBackends {
                    queue: queue.clone(),
                    lease_queue: queue.clone(),
                    poison: Arc::new(MemoryQueue::new("q-poison")),
                    store_for: Arc::new(move |_| Ok(store.clone())),
                };
                let mut config = WorkerConfig::new(StorageAccount::emulator(), "q");
                config.max_poll_interval = Duration::from_millis(200);
                config.only_job = only_job.map(str::to_string);
                let worker =
                    Worker::with_backends(config, Arc::new(WorkerStats::default()), backends);
                queue.put(&task.encode(), None).await.unwrap();
                let stop = CancellationToken::new();
                let run = tokio::spawn(worker.run(stop.clone()));
                tokio::time::sleep(Duration::from_secs(1)).await;
                assert_eq!(
                    !queue.texts().is_empty(),
                    kept,
                    "{status:?}, worker serving {only_job:?}"
                );
                stop.cancel();
                run.await.unwrap().unwrap();
            }
        }
    }
    /// Runs a worker on fakes over a live restore's task that it hands on before
    /// running it (it holds no credentials for the target), then stops it. Returns the
    /// blobs, the store and where the restore's heartbeats are.
    async fn a_task_handed_on() -> (Arc<MemoryBlobs>, Store, String) {
        use tablevault_core::store::BackupPaths;
        let queue = Arc::new(MemoryQueue::new("q"));
        let blobs = Arc::new(MemoryBlobs::new("c"));
        let store = Store::new(blobs.clone());
        let (task, stop, run) = a_worker_offering_a_restore_task(&queue, &store).await;
        let TaskKind::Restore { restore, .. } = &task.kind else {
            unreachable!()
        };
        let root = BackupPaths::new(&task.job).restore_heartbeats_root(restore);
        stop.cancel();
        run.await.unwrap().unwrap();
        (blobs, store, root)
    }

    /// A worker on fakes, without credentials for any target, that has claimed and
    /// offered to others a live restore's task planted in `store` (500 ms after it
    /// started, polling every 200 ms). Returns the task, the worker's stop and its run.
    async fn a_worker_offering_a_restore_task(
        queue: &Arc<MemoryQueue>,
        store: &Store,
    ) -> (
        TaskMessage,
        CancellationToken,
        tokio::task::JoinHandle<Result<(), Error>>,
    ) {
        let task = planted_restore(store, JobStatus::InProgress).await;
        let stores = store.clone();
        let backends = WorkerBackends {
            queue: queue.clone(),
            lease_queue: queue.clone(),
            poison: Arc::new(MemoryQueue::new("q-poison")),
            store_for: Arc::new(move |_| Ok(stores.clone())),
        };
        let mut config = WorkerConfig::new(StorageAccount::emulator(), "q");
        config.max_poll_interval = Duration::from_millis(200);
        let worker = Worker::with_backends(config, Arc::new(WorkerStats::default()), backends);
        queue.put(&task.encode(), None).await.unwrap();
        let stop = CancellationToken::new();
        let run = tokio::spawn(worker.run(stop.clone()));
        tokio::time::sleep(Duration::from_millis(500)).await;
        (task, stop, run)
    }

    /// Regression (audit 12): a worker without the target's credentials, idle
    /// otherwise, took each task back as it reappeared after its offer (30 s, doubling),
    /// while the workers that could run it polled an empty queue: a restore of 12 s ran
    /// for over 12 minutes. It now offers it again after 2 s and claims nothing until
    /// a little after that, so an idle worker polling once a second claims it first.
    #[tokio::test(start_paused = true)]
    async fn a_task_offered_to_others_reaches_an_idle_worker_that_can_run_it() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let store = Store::new(Arc::new(MemoryBlobs::new("c")));
        // The worker polls faster than the other one below.
        let (task, stop, run) = a_worker_offering_a_restore_task(&queue, &store).await;
        assert!(
            queue
                .receive(1, Duration::from_secs(60))
                .await
                .unwrap()
                .is_empty(),
            "offered, so hidden for now"
        );
        // The other worker: idle, polling once a second.
        let start = tokio::time::Instant::now();
        let claimed_after = loop {
            let claimed = queue.receive(1, Duration::from_secs(60)).await.unwrap();
            if let Some(m) = claimed.first() {
                assert_eq!(TaskMessage::decode(&m.text).unwrap().task, task.task);
                break start.elapsed();
            }
            assert!(start.elapsed() < Duration::from_secs(600), "never claimed");
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        assert!(
            claimed_after < Duration::from_secs(5),
            "the other worker claimed it only after {claimed_after:?}"
        );
        stop.cancel();
        run.await.unwrap().unwrap();
    }

    /// A task handed on before it ran stops its heartbeat and, the worker having
    /// nothing else of the job, marks it idle.
    #[tokio::test(start_paused = true)]
    async fn a_task_handed_on_early_leaves_its_heartbeat_idle_and_quiet() {
        let (blobs, store, root) = a_task_handed_on().await;
        tokio::time::sleep(crate::beats::IDLE_GRACE + Duration::from_secs(1)).await;
        let beats = store.blobs().list(&root, None).await.unwrap().blobs;
        assert_eq!(beats.len(), 1, "{beats:?}");
        assert_eq!(
            beats[0]
                .metadata
                .get(crate::fleet::IDLE_METADATA)
                .map(String::as_str),
            Some("1"),
            "marked idle"
        );
        let writes = blobs.calls(Op::PutBlob);
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(blobs.calls(Op::PutBlob), writes, "nothing beats any more");
    }

    /// A job removed (prune, forget) before the idle mark is due gets no heartbeat back.
    #[tokio::test(start_paused = true)]
    async fn an_idle_mark_never_brings_back_a_removed_heartbeat() {
        let (_, store, root) = a_task_handed_on().await;
        let beats = store.list_names(&root).await.unwrap();
        assert_eq!(beats.len(), 1, "beating while it ran");
        store.delete(&beats[0]).await.unwrap();
        tokio::time::sleep(crate::beats::IDLE_GRACE + Duration::from_secs(1)).await;
        assert!(store.list_names(&root).await.unwrap().is_empty());
    }
}
