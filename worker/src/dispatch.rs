//! What a worker does with one claimed message: decode it, resolve it against its job's
//! files, drop it if it is stale or its task already done, poison it if it was delivered
//! too often, otherwise run one attempt under a lease and settle the outcome. The checks
//! are the same for both kinds of task; only the attempt differs.

use std::sync::Arc;
use std::time::Duration;

use tablevault_core::job::finalize::settle_backup;
use tablevault_core::keys::{EntityKey, KeyRange};
use tablevault_core::protocol::{
    AccountRef, BackupJob, CommitRecord, RestoreJob, TaskKind, TaskMessage, last_error,
};
use tablevault_core::queue::ReceivedMessage;
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::{BackupPaths, Store, StoreError};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use tablevault_azure::table::TableClient;

use crate::TaskError;
use crate::attempt::backup::{BackupAttempt, BackupOutcome, Splitting};
use crate::attempt::restore::{RestoreAttempt, RestoreOutcome};
use crate::beats::{Beats, HEARTBEAT_PERIOD, IDLE_GRACE};
use crate::fleet::{FleetShare, IDLE_METADATA};
use crate::jobs::RESTORE_STATE_TTL;
use crate::lease::Lease;
use crate::limiter::AdaptiveLimit;
use crate::metrics::Kind;
use crate::settle::PoisonTarget;
use crate::worker::Worker;

/// A task resolved against its job.
enum Work {
    Backup {
        job: Arc<BackupJob>,
        range: KeyRange,
        ceiling: Option<EntityKey>,
        /// Planned, not split off another task with an estimate.
        planned: bool,
    },
    Restore {
        job: Arc<RestoreJob>,
        commit: Arc<CommitRecord>,
        blob: usize,
        block: Option<usize>,
    },
}

/// A resolved task with the paths that settle it.
struct Resolved {
    work: Work,
    /// The blob whose existence means the task is done.
    done: String,
    /// Where its poison record goes.
    poison: String,
}

impl Resolved {
    /// The keys the task would write.
    fn range(&self) -> Option<KeyRange> {
        match &self.work {
            Work::Backup { range, .. } => Some(range.clone()),
            Work::Restore {
                commit,
                blob,
                block,
                ..
            } => {
                let blocks = &commit.blobs.get(*blob)?.blocks;
                let (first, last) = match block {
                    Some(i) => (blocks.get(*i)?, blocks.get(*i)?),
                    None => (blocks.first()?, blocks.last()?),
                };
                Some(KeyRange::spanning(&first.first_key, &last.last_key))
            }
        }
    }

    fn max_attempts(&self) -> u64 {
        match &self.work {
            Work::Backup { job, .. } => job.options.max_attempts,
            Work::Restore { job, .. } => job.max_attempts,
        }
    }
}

/// A claimed message's hold on one of the worker's task slots. The task gives it up as
/// soon as its own work ends: settling the message (a delete, mostly) is one more round
/// trip, which the next claim need not wait for.
pub(crate) struct Slot(Option<OwnedSemaphorePermit>);

impl Slot {
    /// A hold on `permit`'s slot.
    pub(crate) fn new(permit: OwnedSemaphorePermit) -> Self {
        Slot(Some(permit))
    }

    /// No slot (a message handled outside the claim loop, in tests).
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        Slot(None)
    }

    /// Gives the slot back to the claim loop.
    pub(crate) fn free(&mut self) {
        self.0 = None;
    }
}

impl Worker {
    /// Handles one claimed message outside the claim loop.
    #[cfg(test)]
    pub(crate) async fn handle(&self, message: ReceivedMessage, shutdown: CancellationToken) {
        self.handle_in(message, shutdown, Slot::none()).await;
    }

    /// Handles one claimed message in a task slot of the claim loop.
    pub(crate) async fn handle_in(
        &self,
        message: ReceivedMessage,
        shutdown: CancellationToken,
        mut slot: Slot,
    ) {
        let task = match TaskMessage::decode(&message.text) {
            Ok(t) => t,
            Err(why) => {
                self.config.metrics.claimed(Kind::Unknown);
                self.config.metrics.poisoned(Kind::Unknown);
                tracing::error!(message_id = %message.message_id, reason = %why, "malformed task message; moving it to the poison queue");
                self.settler
                    .move_to_poison(&message, &message.pop_receipt, &why, None)
                    .await;
                return;
            }
        };
        if let Some(only) = &self.config.only_job
            && task.owner() != only
        {
            if self.restore_has_ended(&task).await {
                tracing::info!(
                    restore = task.owner(),
                    "dropping a task of a restore that is not running"
                );
                let _ = self
                    .settler
                    .queue()
                    .delete(&message.message_id, &message.pop_receipt)
                    .await;
            } else {
                // Another job's: its own workers take it (a little later, so this worker
                // does not keep claiming it).
                self.settler
                    .hand_back(&message, &message.pop_receipt, FOREIGN_TASK_DELAY)
                    .await;
            }
            return;
        }
        let metrics = &self.config.metrics;
        metrics.claimed(Kind::of(&task.kind));
        let _in_flight = metrics.in_flight(Kind::of(&task.kind));
        let span = tracing::info_span!("task", job = %task.job, table = %task.table, task = %task.task, delivery = message.dequeue_count);
        if let TaskKind::Tables { tables } = &task.kind {
            let tables = tables.clone();
            self.handle_group(message, task, tables, shutdown, &mut slot)
                .instrument(span)
                .await;
            return;
        }
        self.handle_task(message, task, shutdown, &mut slot)
            .instrument(span)
            .await;
    }

    /// Whether the task is a restore's whose state says it is not running (or that has no
    /// state). Unreadable state counts as running: the owner decides later.
    async fn restore_has_ended(&self, task: &TaskMessage) -> bool {
        let TaskKind::Restore { restore, .. } = &task.kind else {
            return false;
        };
        let Ok(store) = self.jobs.store(&task.container) else {
            return false;
        };
        match self.jobs.restore_state(&store, &task.job, restore).await {
            Ok(Some(state)) => !state.is_live(),
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Cancels `stop` once the task's restore is no longer running (checked every
    /// [`RESTORE_STATE_TTL`]), then waits for ever: raced against the attempt, which
    /// ends first.
    async fn stop_when_restore_ends(&self, task: &TaskMessage, stop: &CancellationToken) {
        loop {
            tokio::time::sleep(RESTORE_STATE_TTL).await;
            if self.restore_has_ended(task).await {
                tracing::info!(task = %task.task, "the restore was cancelled or interrupted; stopping its task");
                stop.cancel();
                std::future::pending::<()>().await;
            }
        }
    }

    /// The limiter of a Table endpoint, held to this worker's share of the account (or
    /// of the job's `max_rate`) by the live workers of the job whose heartbeats are under
    /// `heartbeats`, now and while the returned guard lives.
    async fn limiter_for(
        &self,
        endpoint: &str,
        store: &Store,
        heartbeats: &str,
        max_rate: Option<u32>,
    ) -> (Arc<AdaptiveLimit>, FleetShare) {
        let limiter = self.jobs.limiter_for(endpoint);
        if let Some(count) = self.fleet.live_workers(store, heartbeats).await {
            limiter.set_fleet_size(count, max_rate);
        }
        let following = FleetShare::follow(
            self.fleet.clone(),
            store.clone(),
            heartbeats.to_string(),
            limiter.clone(),
            max_rate,
        );
        (limiter, following)
    }

    /// Awaits `reading` (a task's job files) while the job's fleet under `heartbeats` is
    /// listed: the pacer needs that count before the first query, and it does not depend
    /// on the job, so a worker's first task of a job waits one round trip for both instead
    /// of two. Later tasks find the count fresh and the job cached.
    pub(crate) async fn beside_fleet_listing<T>(
        &self,
        store: &Store,
        heartbeats: &str,
        reading: impl Future<Output = T>,
    ) -> T {
        tokio::join!(reading, self.fleet.live_workers(store, heartbeats)).0
    }

    /// Reads what the task refers to; `None` if its job no longer exists.
    async fn resolve(
        &self,
        store: &Store,
        task: &TaskMessage,
    ) -> Result<Option<Resolved>, StoreError> {
        let paths = BackupPaths::new(&task.job);
        Ok(match &task.kind {
            TaskKind::Backup {
                range,
                ceiling,
                estimate,
            } => self
                .jobs
                .backup_job(store, &task.job)
                .await?
                .filter(|job| plans_tables(job, [task.table.as_str()]))
                .map(|job| Resolved {
                    done: paths.commit(&task.table, &task.task),
                    poison: paths.poison(&task.table, &task.task),
                    work: Work::Backup {
                        range: range.clone(),
                        ceiling: ceiling.clone(),
                        planned: estimate.is_none(),
                        job,
                    },
                }),
            // Never resolved here: `handle` gives groups to `group.rs`. Dropping one
            // would lose its tables, so it is read as a job that cannot be read.
            TaskKind::Tables { .. } => {
                return Err(StoreError::Corrupt(
                    "a group of tables reached the single-task path".into(),
                ));
            }
            TaskKind::Restore {
                restore,
                source_table,
                range_task,
                blob,
                block,
            } => match self.jobs.restore_job(store, &task.job, restore).await? {
                None => None,
                // A task for tables the restore does not map: forged, or another job's.
                Some(job)
                    if !job
                        .tables
                        .iter()
                        .any(|t| &t.source == source_table && t.target == task.table) =>
                {
                    tracing::warn!(restore = %job.restore_id, source = %source_table, target = %task.table, "a task for tables this restore does not map; dropping it");
                    None
                }
                Some(job) => {
                    let commit = self
                        .jobs
                        .commit_record(store, &paths.commit(source_table, range_task))
                        .await?;
                    Some(Resolved {
                        done: paths.restore_done(restore, &task.table, &task.task),
                        poison: paths.restore_poison(restore, &task.table, &task.task),
                        work: Work::Restore {
                            job,
                            commit,
                            blob: *blob,
                            block: *block,
                        },
                    })
                }
            },
        })
    }

    async fn handle_task(
        &self,
        message: ReceivedMessage,
        task: TaskMessage,
        shutdown: CancellationToken,
        slot: &mut Slot,
    ) {
        let settler = &self.settler;
        let Some((store, lease)) = self.take(&message, &task).await else {
            return;
        };
        // Where the workers of the task's job beat.
        let heartbeats = heartbeats_root(&task);
        let resolving = self.resolve(&store, &task);
        let resolved = self
            .beside_fleet_listing(&store, &heartbeats, resolving)
            .await;
        let Some((resolved, lease)) = found_or_settled(resolved, lease).await else {
            return;
        };
        if let (Work::Restore { job, .. }, TaskKind::Restore { restore, .. }) =
            (&resolved.work, &task.kind)
        {
            match self.jobs.restore_state(&store, &task.job, restore).await {
                Ok(Some(state)) if state.is_live() => {}
                Ok(state) => {
                    let status = state.map_or("not started", |s| s.status.as_str());
                    tracing::info!(restore = %job.restore_id, status, "the restore is not running; dropping its task (resume re-enqueues what is left)");
                    let _ = lease.complete().await;
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the restore's state; giving the task back");
                    let _ = lease.release(READ_FAILED_RETRY, None).await;
                    return;
                }
            }
        }
        // A first delivery is almost never of a finished task (only a duplicate put can
        // be), and a duplicate that runs anyway loses the commit race and cleans up: skip
        // the check there, which is one request of the few a small task costs.
        let already_done = if message.dequeue_count <= 1 {
            Ok(false)
        } else {
            store.exists(&resolved.done).await
        };
        match already_done {
            Ok(true) => {
                tracing::debug!("task already done; dropping the duplicate message");
                let _ = lease.complete().await;
                return;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot check whether the task is done; giving it back");
                let _ = lease.release(READ_FAILED_RETRY, None).await;
                return;
            }
        }
        let poison = PoisonTarget {
            store: &store,
            path: &resolved.poison,
            task: &task,
            range: resolved.range(),
        };
        if message.dequeue_count > resolved.max_attempts() {
            let reason = format!(
                "delivered {} times (limit {}) without finishing; last error: {}",
                message.dequeue_count,
                resolved.max_attempts(),
                last_error(&message.text).unwrap_or_else(|| {
                    "none recorded (the attempts timed out or their workers died)".into()
                })
            );
            let receipt = lease.stop().await;
            settler
                .poison_task(poison, &message, &receipt, &reason)
                .await;
            return;
        }
        // Beats until dropped: at the end, or on an early return below.
        let heartbeat = self.heartbeat(&store, &heartbeats, &task);
        // A backup whose task committed here, to check for completion at the end.
        let mut completes = None;
        let outcome = match &resolved.work {
            Work::Backup {
                job,
                range,
                ceiling,
                planned,
            } => {
                let Some((source, limiter, _following)) = self
                    .paced_client(
                        Role::Source,
                        &job.source,
                        &store,
                        &heartbeats,
                        job.options.max_rate,
                    )
                    .await
                else {
                    let receipt = lease.stop().await;
                    settler.offer_to_others(&message, &receipt).await;
                    return;
                };
                let attempt = self.backup_attempt(
                    &store,
                    job,
                    (&source, &limiter),
                    (&task.container, &task.table, &task.task),
                    range,
                    ceiling.as_ref(),
                    *planned,
                    (lease.lost(), shutdown.clone()),
                );
                let outcome = attempt.run().await;
                self.count_backup(&outcome);
                completes = outcome.is_ok().then(|| job.clone());
                outcome.map(|_| ())
            }
            Work::Restore {
                job,
                commit,
                blob,
                block,
            } => {
                let Some((target, limiter, _following)) = self
                    .paced_client(Role::Target, &job.target, &store, &heartbeats, job.max_rate)
                    .await
                else {
                    let receipt = lease.stop().await;
                    settler.offer_to_others(&message, &receipt).await;
                    return;
                };
                // A restore cancelled or interrupted while this task runs: the attempt
                // stops at its next batch and hands the message back, and whoever
                // claims it next drops it. (Checked only at claim, a cancelled
                // restore's tasks in flight wrote on to the end.)
                let stop = shutdown.child_token();
                let attempt = RestoreAttempt {
                    store: &store,
                    backup_id: &task.job,
                    job,
                    commit,
                    target: &target,
                    limiter: &limiter,
                    target_table: &task.table,
                    task: &task.task,
                    blob: *blob,
                    block: *block,
                    lost: lease.lost(),
                    shutdown: stop.clone(),
                    stats: &self.stats,
                    worker: &self.identity,
                };
                let outcome = tokio::select! {
                    outcome = attempt.run() => outcome,
                    () = self.stop_when_restore_ends(&task, &stop) => {
                        unreachable!("waits for ever once it has stopped the attempt")
                    }
                };
                if let Ok(RestoreOutcome::Done(record)) = &outcome {
                    WorkerStats::add(&self.stats.tasks_committed, 1);
                    self.config
                        .metrics
                        .committed(Kind::Restore, record.entities, 0);
                }
                outcome.map(|_| ())
            }
        };
        slot.free();
        // The message is deleted while the backup is checked for completion: neither
        // waits on the other (a worker that dies between them leaves a message whose
        // next delivery finds the task done, and a backup the next observer finalizes).
        let checked = async {
            if let Some(job) = &completes {
                self.settle_backup_job(&store, job).await;
            }
        };
        tokio::join!(settler.settle(lease, outcome, &message, poison), checked);
        drop(heartbeat);
    }
}

impl Worker {
    /// The store of the task's container and a lease on its message, which is ours from
    /// here on however long reading the job's files takes; `None` (the message moved to
    /// the poison queue) when the container is not one this worker can use.
    pub(crate) async fn take(
        &self,
        message: &ReceivedMessage,
        task: &TaskMessage,
    ) -> Option<(Store, Lease)> {
        let store = match self.jobs.store(&task.container) {
            Ok(s) => s,
            Err(e) => {
                let why = format!("bad container: {e}");
                self.settler
                    .move_to_poison(message, &message.pop_receipt, &why, None)
                    .await;
                return None;
            }
        };
        let lease = Lease::start_counted(
            self.lease_queue.clone(),
            message,
            self.config.claim_visibility(),
            self.config.visibility,
            Some(self.config.metrics.clone()),
        );
        Some((store, lease))
    }

    /// A Table client for the account a job reads (`Role::Source`) or writes
    /// (`Role::Target`), paced by that account's limiter (held to this worker's share of
    /// the account, or of `max_rate`, while the returned guard lives); `None`, with a
    /// warning, when this worker holds no credentials for the account.
    pub(crate) async fn paced_client(
        &self,
        role: Role,
        account: &AccountRef,
        store: &Store,
        heartbeats: &str,
        max_rate: Option<u32>,
    ) -> Option<(TableClient, Arc<AdaptiveLimit>, FleetShare)> {
        let (limiter, following) = self
            .limiter_for(&account.table_endpoint, store, heartbeats, max_rate)
            .await;
        let accounts = match role {
            Role::Source => &self.config.sources,
            Role::Target => &self.config.targets,
        };
        let Some(client) = self.jobs.table_client(accounts, account, Some(&limiter)) else {
            let (what, option) = match role {
                Role::Source => ("source", "--source"),
                Role::Target => ("target", "--target"),
            };
            tracing::warn!(account = %account.account, "this worker has no credentials for the {what} account; handing the task to another worker (configure {option})");
            return None;
        };
        Some((client, limiter, following))
    }

    /// The worker's heartbeat for a job whose heartbeats are under `root`, beating
    /// while it lives.
    pub(crate) fn heartbeat(&self, store: &Store, root: &str, task: &TaskMessage) -> Heartbeat {
        let path = format!("{root}{}", blob_safe(&self.identity));
        Heartbeat::start(&self.beats, store.clone(), path, task, &self.identity)
    }

    /// An attempt at one backup task: `names` are the container, table and task, `stop`
    /// the lease's loss and the worker's shutdown.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backup_attempt<'a>(
        &'a self,
        store: &'a Store,
        job: &'a BackupJob,
        (source, limiter): (&'a TableClient, &'a Arc<AdaptiveLimit>),
        (container, table, task): (&'a str, &'a str, &'a str),
        range: &'a KeyRange,
        ceiling: Option<&'a EntityKey>,
        planned: bool,
        (lost, shutdown): (CancellationToken, CancellationToken),
    ) -> BackupAttempt<'a> {
        BackupAttempt {
            store,
            job,
            source,
            table,
            task,
            range,
            lost,
            shutdown,
            stats: &self.stats,
            worker: &self.identity,
            splitting: job.options.dynamic_split.then(|| Splitting {
                queue: self.settler.queue(),
                container,
                ceiling,
                planned,
                work_queued: &self.config.work_queued,
                fleet: &self.fleet,
            }),
            limiter: Some(limiter),
            more_pages: None,
        }
    }

    /// Counts a backup attempt's outcome in the worker's stats and metrics.
    pub(crate) fn count_backup(&self, outcome: &Result<BackupOutcome, TaskError>) {
        if let Ok(BackupOutcome::Committed {
            entities,
            stored_bytes,
            split_off,
        }) = outcome
        {
            WorkerStats::add(&self.stats.tasks_committed, 1);
            let metrics = &self.config.metrics;
            metrics.committed(Kind::Backup, *entities, *stored_bytes);
            metrics.split(*split_off as u64);
        }
    }

    /// Finalizes the backup if this commit was its last. Whoever observes the last
    /// commit finalizes; in-process workers serve one job whose coordinator watches and
    /// finalizes it, so they leave it that listing of every commit record.
    pub(crate) async fn settle_backup_job(&self, store: &Store, job: &BackupJob) {
        if self.config.only_job.is_none()
            && let Err(e) = settle_backup(store, job).await
        {
            tracing::warn!(error = %e, "could not check whether the backup is complete; the next observer will");
        }
    }
}

/// Which account of a job a Table client is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Role {
    /// The account a backup reads.
    Source,
    /// The account a restore writes.
    Target,
}

/// What a task's job files were read as, when they were found: `None` when the message
/// was settled instead. A job that no longer exists, or whose data is gone, drops the
/// message: expected after `prune` or `forget` removed the job (queued messages cannot
/// be deleted without their receipt, so they end here). Files that cannot be read give
/// it back for a retry.
pub(crate) async fn found_or_settled<T>(
    found: Result<Option<T>, StoreError>,
    lease: Lease,
) -> Option<(T, Lease)> {
    match found {
        Ok(Some(t)) => Some((t, lease)),
        Ok(None) => {
            tracing::info!(
                "stale message: its backup or restore does not exist (removed?); dropping it"
            );
            let _ = lease.complete().await;
            None
        }
        Err(e) if e.status() == Some(404) => {
            tracing::info!(error = %e, "stale message: the backup data it refers to is gone (removed?); dropping it");
            let _ = lease.complete().await;
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the job's files; giving the task back");
            let _ = lease.release(READ_FAILED_RETRY, None).await;
            None
        }
    }
}

/// Whether the backup plans every one of `tables`: a task naming another table (a
/// message forged or meant for another job) would write data and a commit record into
/// the backup, so it is dropped instead.
pub(crate) fn plans_tables<'a>(job: &BackupJob, tables: impl IntoIterator<Item = &'a str>) -> bool {
    for table in tables {
        if !job.tables.iter().any(|t| t.name == table) {
            tracing::warn!(backup = %job.backup_id, table, "a task for a table this backup does not plan; dropping it");
            return false;
        }
    }
    true
}

/// Where the heartbeats of the workers on `task`'s job go: a backup's, or one restore's.
pub(crate) fn heartbeats_root(task: &TaskMessage) -> String {
    let paths = BackupPaths::new(&task.job);
    match &task.kind {
        TaskKind::Restore { restore, .. } => paths.restore_heartbeats_root(restore),
        TaskKind::Backup { .. } | TaskKind::Tables { .. } => paths.heartbeats_root(),
    }
}

/// A worker identity (`host/pid`) as one blob name segment.
fn blob_safe(identity: &str) -> String {
    identity
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Rewrites a blob next to the job while an attempt runs: a watcher that sees it change
/// knows someone is working on the job even when no task finishes for a while, and the
/// other workers count this one in their share of the account (`fleet`). Dropped, it
/// stops; if the worker then has no task of the job in flight and none starts within
/// [`IDLE_GRACE`], it marks the heartbeat idle, so the others take its share.
pub(crate) struct Heartbeat {
    beating: tokio::task::JoinHandle<()>,
    beats: Beats,
    /// The heartbeat's container and path, the key of `beats`.
    working: String,
    store: Store,
    path: String,
    worker: String,
}

impl Heartbeat {
    /// Writes at once if the worker's heartbeat of the job is due (see `beats`): a
    /// first beat tells the other workers at once that one more shares the account.
    /// Otherwise the task beats first after a period: one that ends sooner says so by
    /// its record.
    fn start(beats: &Beats, store: Store, path: String, task: &TaskMessage, worker: &str) -> Self {
        let working = format!("{}/{path}", store.container());
        let now = beats.task_started(&working);
        let beat = serde_json::json!({ "worker": worker, "table": task.table, "task": task.task });
        let (writer, at) = (store.clone(), path.clone());
        let beating = tokio::spawn(async move {
            let mut first = now;
            loop {
                if !std::mem::take(&mut first) {
                    tokio::time::sleep(HEARTBEAT_PERIOD).await;
                }
                let mut beat = beat.clone();
                beat["at"] = tablevault_core::protocol::now_rfc3339().into();
                if let Err(e) = writer.overwrite(&at, &beat).await {
                    tracing::debug!(error = %e, "could not write a heartbeat");
                }
            }
        });
        Heartbeat {
            beating,
            beats: beats.clone(),
            working,
            store,
            path,
            worker: worker.to_string(),
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.beating.abort();
        let Some(generation) = self.beats.task_ended(&self.working) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (beats, working) = (self.beats.clone(), self.working.clone());
        let (store, path, worker) = (self.store.clone(), self.path.clone(), self.worker.clone());
        runtime.spawn(async move {
            tokio::time::sleep(IDLE_GRACE).await;
            if !beats.still_idle(&working, generation) {
                return;
            }
            let beat = serde_json::json!({
                "worker": worker,
                "idle": true,
                "at": tablevault_core::protocol::now_rfc3339(),
            });
            // Only over the heartbeat as it is: the job may have been removed meanwhile.
            let metadata = vec![(IDLE_METADATA.to_string(), "1".to_string())];
            if let Err(e) = store.replace_existing(&path, &beat, metadata).await {
                tracing::debug!(error = %e, "could not write an idle heartbeat");
            }
        });
    }
}

/// How long a task of another job is hidden after this worker hands it back.
pub(crate) const FOREIGN_TASK_DELAY: Duration = Duration::from_secs(2);

/// How soon a task whose job files could not be read is tried again.
const READ_FAILED_RETRY: Duration = Duration::from_secs(5);
