//! tablevault's stateless worker: claims tasks from the queue, keeps each claimed message
//! invisible while it works, runs the task, and deletes the message only once the task is
//! committed (or poisoned). Any number of workers on any number of machines can share a
//! queue; adding workers adds throughput.
//!
//! The same [`Worker`] runs inside `tablevault backup --workers N` and as the
//! `tablevault-worker` daemon.

pub mod accounts;
pub mod backup;
pub mod blob_writer;
pub mod lease;
pub mod limiter;
pub mod reader;
pub mod restore;
pub mod runtime;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tablevault_common::blob::{BlobClient, PutOptions};
use tablevault_common::job::{
    BackupJob, BackupPaths, CommitRecord, PROTOCOL_VERSION, PoisonRecord, RestoreJob, TaskKind,
    TaskMessage, now_rfc3339, poison_queue_name, worker_identity,
};
use tablevault_common::queue::{MessageTtl, QueueClient, ReceivedMessage};
use tablevault_common::table::TableClient;
use tablevault_common::{ClientOptions, Error, StorageAccount};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use accounts::AccountSet;
use backup::{BackupAttempt, BackupOutcome};
use lease::Lease;
use limiter::AdaptiveLimit;
use restore::{RestoreAttempt, RestoreOutcome};

/// How a task attempt ended when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskError {
    /// The queue message was lost to another worker: stop, touch nothing.
    Lost,
    /// The worker is shutting down: give the message back at once.
    Shutdown,
    /// May succeed later (throttling, timeouts, a broken connection).
    Transient(String),
    /// Can never succeed as things are (missing table, no access, corrupt data).
    Permanent(String),
}

impl From<Error> for TaskError {
    fn from(e: Error) -> Self {
        match e {
            Error::LostOwnership { .. } => TaskError::Lost,
            e if e.is_retryable() => TaskError::Transient(e.to_string()),
            e => TaskError::Permanent(e.to_string()),
        }
    }
}

/// Why an attempt must stop now, if it must: its message went to another worker, or this
/// worker is shutting down.
pub(crate) fn stop_requested(
    lost: &CancellationToken,
    shutdown: &CancellationToken,
) -> Result<(), TaskError> {
    if lost.is_cancelled() {
        Err(TaskError::Lost)
    } else if shutdown.is_cancelled() {
        Err(TaskError::Shutdown)
    } else {
        Ok(())
    }
}

/// Live counters, shared with an in-process coordinator for its progress bar.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Entities read by attempts (including attempts later abandoned).
    pub entities: AtomicU64,
    /// Response bytes read from the source.
    pub read_bytes: AtomicU64,
    /// Bytes of blocks produced.
    pub stored_bytes: AtomicU64,
    /// Tasks committed by this worker.
    pub tasks_committed: AtomicU64,
    /// Tasks given back for a retry.
    pub tasks_retried: AtomicU64,
    /// Tasks poisoned.
    pub tasks_poisoned: AtomicU64,
    /// Signalled when a task is committed or poisoned, so a watcher can look at once.
    pub changed: tokio::sync::Notify,
}

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
    config: WorkerConfig,
    queue: QueueClient,
    poison: QueueClient,
    stats: Arc<WorkerStats>,
    identity: String,
    jobs: Mutex<HashMap<String, Arc<BackupJob>>>,
    restores: Mutex<HashMap<String, Arc<RestoreJob>>>,
    commits: Mutex<HashMap<String, Arc<CommitRecord>>>,
    tables: Mutex<HashMap<String, TableClient>>,
    limiters: Mutex<HashMap<String, Arc<AdaptiveLimit>>>,
}

/// A task resolved against its job.
enum Work {
    Backup {
        job: Arc<BackupJob>,
        range: tablevault_common::keys::KeyRange,
        done: String,
        poison: String,
    },
    Restore {
        job: Arc<RestoreJob>,
        commit: Arc<CommitRecord>,
        blob: usize,
        block: Option<usize>,
        done: String,
        poison: String,
    },
}

impl Work {
    /// The blob whose existence means the task is done.
    fn done_path(&self) -> &str {
        match self {
            Work::Backup { done, .. } | Work::Restore { done, .. } => done,
        }
    }

    fn poison_path(&self) -> &str {
        match self {
            Work::Backup { poison, .. } | Work::Restore { poison, .. } => poison,
        }
    }

    fn max_attempts(&self) -> u64 {
        match self {
            Work::Backup { job, .. } => job.options.max_attempts,
            Work::Restore { job, .. } => job.max_attempts,
        }
    }
}

impl Worker {
    /// A worker; fails on unusable configuration.
    pub fn new(config: WorkerConfig, stats: Arc<WorkerStats>) -> Result<Arc<Self>, Error> {
        let queue =
            QueueClient::with_options(&config.backup, &config.queue, &config.client_options)?;
        let poison = QueueClient::with_options(
            &config.backup,
            &poison_queue_name(&config.queue),
            &config.client_options,
        )?;
        Ok(Arc::new(Worker {
            config,
            queue,
            poison,
            stats,
            identity: worker_identity(),
            jobs: Mutex::new(HashMap::new()),
            restores: Mutex::new(HashMap::new()),
            commits: Mutex::new(HashMap::new()),
            tables: Mutex::new(HashMap::new()),
            limiters: Mutex::new(HashMap::new()),
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
        self.poison.create().await?;
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
                r = self.queue.get_messages(free.min(32) as u8, self.config.visibility) => r,
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

    async fn handle(&self, message: ReceivedMessage, shutdown: CancellationToken) {
        let task = match TaskMessage::decode(&message.text) {
            Ok(t) => t,
            Err(why) => {
                tracing::error!(message_id = %message.message_id, reason = %why, "malformed task message; moving it to the poison queue");
                self.move_to_poison(&message, &why, None).await;
                return;
            }
        };
        if let Some(only) = &self.config.only_job
            && &task.job != only
        {
            self.hand_back(&message, Duration::ZERO).await;
            return;
        }
        let span = tracing::info_span!("task", job = %task.job, table = %task.table, task = %task.task, delivery = message.dequeue_count);
        self.handle_task(message, task, shutdown)
            .instrument(span)
            .await;
    }

    async fn handle_task(
        &self,
        message: ReceivedMessage,
        task: TaskMessage,
        shutdown: CancellationToken,
    ) {
        let blobs = match BlobClient::with_options(
            &self.config.backup,
            &task.container,
            &self.config.client_options,
        ) {
            Ok(b) => b,
            Err(e) => {
                self.move_to_poison(&message, &format!("bad container: {e}"), None)
                    .await;
                return;
            }
        };
        let paths = BackupPaths::new(&task.job);
        // Resolve the job: what marks the task done, where its poison record goes, how
        // many deliveries it gets, and the work itself.
        let prepared = match &task.kind {
            TaskKind::Backup { range } => match self.backup_job(&blobs, &task.job).await {
                Ok(Some(job)) => Ok(Some(Work::Backup {
                    done: paths.commit(&task.table, &task.task),
                    poison: paths.poison(&task.table, &task.task),
                    range: range.clone(),
                    job,
                })),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            },
            TaskKind::Restore {
                restore,
                source_table,
                range_task,
                blob,
                block,
            } => match self.restore_job(&blobs, &task.job, restore).await {
                Ok(Some(job)) => match self
                    .commit_record(&blobs, &paths.commit(source_table, range_task))
                    .await
                {
                    Ok(commit) => Ok(Some(Work::Restore {
                        done: paths.restore_done(restore, &task.table, &task.task),
                        poison: paths.restore_poison(restore, &task.table, &task.task),
                        job,
                        commit,
                        blob: *blob,
                        block: *block,
                    })),
                    Err(e) => Err(e),
                },
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            },
        };
        let work = match prepared {
            Ok(Some(w)) => w,
            Ok(None) => {
                tracing::warn!(
                    "stale message: its backup or restore does not exist (deleted?); dropping it"
                );
                self.drop_message(&message).await;
                return;
            }
            Err(e) if e.status() == Some(404) => {
                tracing::warn!(error = %e, "stale message: the backup data it refers to is gone; dropping it");
                self.drop_message(&message).await;
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the job's files; giving the task back");
                self.release_unleased(&message, Duration::from_secs(5))
                    .await;
                return;
            }
        };
        match blobs.properties(work.done_path()).await {
            Ok(Some(_)) => {
                tracing::debug!("task already done; dropping the duplicate message");
                self.drop_message(&message).await;
                return;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot check whether the task is done; giving it back");
                self.release_unleased(&message, Duration::from_secs(5))
                    .await;
                return;
            }
        }
        if message.dequeue_count > work.max_attempts() {
            let reason = format!(
                "delivered {} times (limit {}) without finishing; last error: {}",
                message.dequeue_count,
                work.max_attempts(),
                task_last_error(&message.text).unwrap_or_else(|| {
                    "none recorded (the attempts timed out or their workers died)".into()
                })
            );
            self.poison_task(&blobs, work.poison_path(), &task, &message, &reason)
                .await;
            return;
        }
        let result = match &work {
            Work::Backup { job, range, .. } => {
                let Some(source) = self.client_for(&self.config.sources, &job.source, None) else {
                    tracing::warn!(account = %job.source.account, "this worker has no credentials for the source account; handing the task to another worker (configure --source)");
                    self.hand_back(&message, Duration::from_secs(30)).await;
                    return;
                };
                let lease = Lease::start(self.queue.clone(), &message, self.config.visibility);
                let attempt = BackupAttempt {
                    blobs: &blobs,
                    job,
                    source: &source,
                    table: &task.table,
                    task: &task.task,
                    range,
                    lost: lease.lost(),
                    shutdown: shutdown.clone(),
                    stats: &self.stats,
                    worker: &self.identity,
                };
                let outcome = attempt.run().await;
                if matches!(outcome, Ok(BackupOutcome::Committed { .. })) {
                    self.stats.tasks_committed.fetch_add(1, Ordering::Relaxed);
                }
                (lease, outcome.map(|_| ()))
            }
            Work::Restore {
                job,
                commit,
                blob,
                block,
                ..
            } => {
                let limiter = self.limiter_for(&job.target.table_endpoint);
                let Some(target) =
                    self.client_for(&self.config.targets, &job.target, Some(&limiter))
                else {
                    tracing::warn!(account = %job.target.account, "this worker has no credentials for the target account; handing the task to another worker (configure --target)");
                    self.hand_back(&message, Duration::from_secs(30)).await;
                    return;
                };
                let lease = Lease::start(self.queue.clone(), &message, self.config.visibility);
                let attempt = RestoreAttempt {
                    blobs: &blobs,
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
                    shutdown: shutdown.clone(),
                    stats: &self.stats,
                    worker: &self.identity,
                };
                let outcome = attempt.run().await;
                if matches!(outcome, Ok(RestoreOutcome::Done(_))) {
                    self.stats.tasks_committed.fetch_add(1, Ordering::Relaxed);
                }
                (lease, outcome.map(|_| ()))
            }
        };
        self.settle(result, &blobs, work.poison_path(), &task, &message)
            .await;
    }

    /// Acts on an attempt's end: delete the message when done, give it back on a
    /// transient failure (recording the error in it), poison it on a permanent one.
    async fn settle(
        &self,
        (lease, outcome): (Lease, Result<(), TaskError>),
        blobs: &BlobClient,
        poison_path: &str,
        task: &TaskMessage,
        message: &ReceivedMessage,
    ) {
        match outcome {
            Ok(()) => {
                self.stats.changed.notify_one();
                if let Err(e) = lease.complete().await {
                    tracing::warn!(error = %e, "task done but its message could not be deleted; a duplicate delivery will be dropped");
                }
            }
            Err(TaskError::Lost) => {
                tracing::warn!("lost the message mid-task; another worker has it");
            }
            Err(TaskError::Shutdown) => {
                let _ = lease.release(Duration::ZERO, None).await;
            }
            Err(TaskError::Transient(why)) => {
                self.stats.tasks_retried.fetch_add(1, Ordering::Relaxed);
                let delay = Duration::from_secs((5 * message.dequeue_count).min(120));
                tracing::warn!(reason = %why, retry_in_s = delay.as_secs(), "task failed; it will be retried");
                let text = with_last_error(task, &why);
                if let Err(e) = lease.release(delay, Some(&text)).await {
                    tracing::warn!(error = %e, "could not give the message back; it reappears when its lease lapses");
                }
            }
            Err(TaskError::Permanent(why)) => {
                drop(lease);
                self.poison_task(blobs, poison_path, task, message, &why)
                    .await;
            }
        }
    }

    async fn drop_message(&self, message: &ReceivedMessage) {
        let _ = self
            .queue
            .delete_message(&message.message_id, &message.pop_receipt)
            .await;
    }

    async fn load_json<T: serde::de::DeserializeOwned>(
        blobs: &BlobClient,
        path: &str,
    ) -> Result<Option<T>, Error> {
        let Some(bytes) = blobs.get_if_exists(path).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::InvalidResponse {
                op: "Read Job",
                detail: format!("{path} is not a valid job file: {e}"),
            })
    }

    /// Reads a JSON file once and keeps it: many tasks share each job file and commit
    /// record. `None` if the file does not exist.
    async fn cached<T: serde::de::DeserializeOwned>(
        cache: &Mutex<HashMap<String, Arc<T>>>,
        blobs: &BlobClient,
        path: &str,
    ) -> Result<Option<Arc<T>>, Error> {
        let key = format!("{}/{path}", blobs.container());
        if let Some(v) = cache.lock().expect("cache lock").get(&key) {
            return Ok(Some(v.clone()));
        }
        let Some(value) = Self::load_json::<T>(blobs, path).await? else {
            return Ok(None);
        };
        let value = Arc::new(value);
        let mut cache = cache.lock().expect("cache lock");
        if cache.len() >= 256 {
            cache.clear();
        }
        cache.insert(key, value.clone());
        Ok(Some(value))
    }

    /// A backup's job file; `None` if the backup does not exist.
    async fn backup_job(
        &self,
        blobs: &BlobClient,
        id: &str,
    ) -> Result<Option<Arc<BackupJob>>, Error> {
        let job = Self::cached(&self.jobs, blobs, &BackupPaths::new(id).job()).await?;
        if let Some(j) = &job {
            check_protocol(&format!("backup {id}"), j.protocol)?;
        }
        Ok(job)
    }

    /// A restore's job file; `None` if the restore does not exist.
    async fn restore_job(
        &self,
        blobs: &BlobClient,
        backup: &str,
        restore: &str,
    ) -> Result<Option<Arc<RestoreJob>>, Error> {
        let path = BackupPaths::new(backup).restore_job(restore);
        let job = Self::cached(&self.restores, blobs, &path).await?;
        if let Some(j) = &job {
            check_protocol(&format!("restore {restore}"), j.protocol)?;
        }
        Ok(job)
    }

    /// A commit record; a missing one is a 404 (the backup data is gone).
    async fn commit_record(
        &self,
        blobs: &BlobClient,
        path: &str,
    ) -> Result<Arc<CommitRecord>, Error> {
        Self::cached(&self.commits, blobs, path)
            .await?
            .ok_or_else(|| Error::Service {
                op: "Read Commit Record",
                status: 404,
                code: Some("BlobNotFound".into()),
                message: format!("{path} does not exist"),
                retry_after: None,
            })
    }

    /// The write limiter for a target account (one per account per worker).
    fn limiter_for(&self, endpoint: &str) -> Arc<AdaptiveLimit> {
        self.limiters
            .lock()
            .expect("limiters lock")
            .entry(endpoint.to_string())
            .or_insert_with(|| AdaptiveLimit::new(8, 1, 64))
            .clone()
    }

    /// A Table client for an account a job names, from the accounts this worker holds
    /// credentials for; with a limiter, its retries report throttling to it.
    fn client_for(
        &self,
        accounts: &AccountSet,
        wanted: &tablevault_common::job::AccountRef,
        limiter: Option<&Arc<AdaptiveLimit>>,
    ) -> Option<TableClient> {
        let account = accounts.find(wanted)?;
        let key = format!("{}|{}", wanted.table_endpoint, limiter.is_some());
        let mut cache = self.tables.lock().expect("tables lock");
        if let Some(c) = cache.get(&key) {
            return Some(c.clone());
        }
        let mut options = self.config.client_options.clone();
        if let Some(l) = limiter {
            options.retry.observer = Some(l.clone());
        }
        let client = TableClient::with_options(account, &options).ok()?;
        cache.insert(key, client.clone());
        Some(client)
    }

    /// Gives a message we will not work on back without spending one of its attempts: a
    /// fresh copy goes on the queue (dequeue count 0) and the claimed one is deleted.
    async fn hand_back(&self, message: &ReceivedMessage, delay: Duration) {
        match self
            .queue
            .put_message(&message.text, Some(delay), MessageTtl::Never)
            .await
        {
            Ok(_) => {
                let _ = self
                    .queue
                    .delete_message(&message.message_id, &message.pop_receipt)
                    .await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not re-queue a foreign task; releasing it");
                self.release_unleased(message, delay).await;
            }
        }
    }

    async fn release_unleased(&self, message: &ReceivedMessage, delay: Duration) {
        let _ = self
            .queue
            .update_message(&message.message_id, &message.pop_receipt, delay, None)
            .await;
    }

    async fn poison_task(
        &self,
        blobs: &BlobClient,
        poison_path: &str,
        task: &TaskMessage,
        message: &ReceivedMessage,
        reason: &str,
    ) {
        self.stats.tasks_poisoned.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            reason,
            "task poisoned: it will not be retried and its job cannot complete"
        );
        let record = PoisonRecord {
            job: task.job.clone(),
            table: task.table.clone(),
            task: task.task.clone(),
            reason: reason.to_string(),
            dequeue_count: message.dequeue_count,
            at: now_rfc3339(),
            worker: self.identity.clone(),
        };
        let body =
            Bytes::from(serde_json::to_vec_pretty(&record).expect("poison records serialize"));
        let opts = PutOptions {
            content_type: Some("application/json".into()),
            ..PutOptions::default()
        };
        if let Err(e) = blobs.put_blob(poison_path, body, &opts).await {
            tracing::warn!(error = %e, "could not write the poison record");
        }
        self.move_to_poison(message, reason, Some(task)).await;
        self.stats.changed.notify_one();
    }

    async fn move_to_poison(
        &self,
        message: &ReceivedMessage,
        reason: &str,
        task: Option<&TaskMessage>,
    ) {
        let entry = serde_json::json!({
            "reason": reason,
            "dequeue_count": message.dequeue_count,
            "job": task.map(|t| t.job.clone()),
            "table": task.map(|t| t.table.clone()),
            "task": task.map(|t| t.task.clone()),
            "original": message.text,
            "at": now_rfc3339(),
            "worker": self.identity,
        });
        let text = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(entry.to_string())
        };
        match self
            .poison
            .put_message(&text, None, MessageTtl::Never)
            .await
        {
            Ok(_) => {
                let _ = self
                    .queue
                    .delete_message(&message.message_id, &message.pop_receipt)
                    .await;
            }
            Err(e) => {
                tracing::error!(error = %e, "could not move the message to the poison queue; it will be redelivered")
            }
        }
    }
}

/// Refuses job files written by a newer (or unknown) protocol version.
fn check_protocol(what: &str, protocol: u32) -> Result<(), Error> {
    if protocol == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(Error::InvalidResponse {
            op: "Read Job",
            detail: format!(
                "{what} uses protocol {protocol}; this worker speaks {PROTOCOL_VERSION}"
            ),
        })
    }
}

/// The message text with the last error recorded, for the next attempt (and the poison
/// record, if it comes to that). Kept short so messages stay far below 64 KiB.
fn with_last_error(task: &TaskMessage, why: &str) -> String {
    let mut value = serde_json::to_value(task).expect("task messages serialize");
    let why: String = why.chars().take(1000).collect();
    value["last_error"] = serde_json::Value::String(why);
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(value.to_string())
}

fn task_last_error(text: &str) -> Option<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("last_error")?.as_str().map(str::to_string)
}

async fn sleep_or_shutdown(shutdown: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablevault_common::keys::KeyRange;

    #[test]
    fn last_error_travels_in_the_message() {
        let t = TaskMessage {
            v: PROTOCOL_VERSION,
            container: "tablevault".into(),
            job: "j1".into(),
            table: "Tbl".into(),
            task: "r0001".into(),
            kind: TaskKind::Backup {
                range: KeyRange::all(),
            },
        };
        let text = with_last_error(&t, "HTTP 503 ServerBusy");
        assert_eq!(TaskMessage::decode(&text).unwrap(), t, "still a valid task");
        assert_eq!(
            task_last_error(&text).as_deref(),
            Some("HTTP 503 ServerBusy")
        );
        assert_eq!(task_last_error(&t.encode()), None);
    }

    #[test]
    fn errors_are_classified() {
        let busy = Error::Service {
            op: "x",
            status: 503,
            code: Some("ServerBusy".into()),
            message: String::new(),
            retry_after: None,
        };
        assert!(matches!(TaskError::from(busy), TaskError::Transient(_)));
        let missing = Error::Service {
            op: "x",
            status: 404,
            code: Some("TableNotFound".into()),
            message: String::new(),
            retry_after: None,
        };
        assert!(matches!(TaskError::from(missing), TaskError::Permanent(_)));
        let lost = Error::LostOwnership {
            op: "x",
            message_id: "m".into(),
            code: "MessageNotFound".into(),
        };
        assert_eq!(TaskError::from(lost), TaskError::Lost);
    }
}
