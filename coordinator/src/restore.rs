//! The restore control plane: read a complete backup's manifest, create the target
//! tables, enqueue one task per block (or per blob when the blob is small), watch the
//! tasks' records appear, and report per-table counts and every batch that could not be
//! written.

use std::time::Instant;

use async_trait::async_trait;
use futures::StreamExt;
use tablevault_azure::StorageAccount;
use tablevault_azure::table::TableClient;
use tablevault_core::format::FORMAT_VERSION;
use tablevault_core::protocol::{
    AccountRef, CommitRecord, JobStatus, Manifest, PROTOCOL_VERSION, RestoreJob, RestoreMode,
    RestoreRecord, RestoreTable, TaskKind, TaskMessage, new_backup_id, now_rfc3339,
};
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::{BackupPaths, CreateOutcome, Store};

use crate::location::Location;
use crate::report::{
    FailureReport, PoisonReport, RestoreReport, RestoreTableReport, peak_rss_bytes,
};
use crate::state::{RestoreState, load_job};
use crate::watch::{Snapshot, WatchOptions, Watched, watch as watch_job};
use crate::{Error, Result};
use tablevault_core::job::finalize::settle_backup;

/// Blobs whose blocks hold at most this much XML in all are restored by one task.
pub const DEFAULT_PER_BLOB_MAX_BYTES: u64 = 4 << 20;

/// What to restore and how.
#[derive(Debug, Clone)]
pub struct RestoreRequest {
    /// The backup.
    pub backup_id: String,
    /// Account to write to.
    pub target: StorageAccount,
    /// Tables of the backup to restore; all when `None`.
    pub tables: Option<Vec<String>>,
    /// `(source, target)` table renames.
    pub renames: Vec<(String, String)>,
    /// How existing entities are treated.
    pub mode: RestoreMode,
    /// Blobs up to this many uncompressed bytes are one task; larger ones one per block.
    pub per_blob_max_bytes: u64,
    /// Deliveries after which a task is poisoned.
    pub max_attempts: u64,
}

impl RestoreRequest {
    /// Defaults for a backup and a target account.
    pub fn new(backup_id: &str, target: StorageAccount) -> Self {
        RestoreRequest {
            backup_id: backup_id.to_string(),
            target,
            tables: None,
            renames: Vec::new(),
            mode: RestoreMode::Upsert,
            per_blob_max_bytes: DEFAULT_PER_BLOB_MAX_BYTES,
            max_attempts: 5,
        }
    }
}

/// Loads a backup's manifest, refusing incomplete backups and unknown versions.
pub async fn load_complete_manifest(store: &Store, id: &str) -> Result<Manifest> {
    // Distinguishes "no such backup" from "not complete".
    let job = load_job(store, id).await?;
    let Some(manifest) = settle_backup(store, &job).await? else {
        return Err(Error::invalid(format!(
            "backup {id} is incomplete (it has no manifest) and cannot be restored or verified; \
             finish it with `tablevault status {id} --wait`"
        )));
    };
    if manifest.format != FORMAT_VERSION {
        return Err(Error::invalid(format!(
            "backup {id} has format version {}; this tablevault reads version {FORMAT_VERSION}",
            manifest.format
        )));
    }
    Ok(manifest)
}

/// The tasks of one backed-up range: one per blob whose blocks hold at most
/// `per_blob_max_bytes` of XML, one per block otherwise.
fn tasks_for(
    restore: &str,
    container: &str,
    backup_id: &str,
    (source, target): (&str, &str),
    commit: &CommitRecord,
    per_blob_max_bytes: u64,
) -> Vec<TaskMessage> {
    let mut out = Vec::new();
    for (b, blob) in commit.blobs.iter().enumerate() {
        let raw: u64 = blob.blocks.iter().map(|k| k.raw_length).sum();
        let blocks: Vec<Option<usize>> = if raw <= per_blob_max_bytes {
            vec![None]
        } else {
            (0..blob.blocks.len()).map(Some).collect()
        };
        for block in blocks {
            let task = match block {
                None => format!("{}-b{b:05}", commit.task),
                Some(k) => format!("{}-b{b:05}-k{k:05}", commit.task),
            };
            out.push(TaskMessage {
                v: PROTOCOL_VERSION,
                container: container.to_string(),
                job: backup_id.to_string(),
                table: target.to_string(),
                task,
                kind: TaskKind::Restore {
                    restore: restore.to_string(),
                    source_table: source.to_string(),
                    range_task: commit.task.clone(),
                    blob: b,
                    block,
                },
            });
        }
    }
    out
}

/// Plans a restore: checks the backup, creates the target tables, writes the restore's
/// job file and enqueues its tasks. Returns the job.
pub async fn plan_and_enqueue(req: &RestoreRequest, location: &Location) -> Result<RestoreJob> {
    let store = location.store()?;
    let manifest = load_complete_manifest(&store, &req.backup_id).await?;
    let pairs = crate::selection::select(&manifest, req.tables.as_deref(), &req.renames)?;
    let tables_client = TableClient::with_options(&req.target, &location.client_options)?;
    for (_, t) in &pairs {
        tables_client.create_table(t).await?;
    }
    let restore_id = new_backup_id();
    let paths = BackupPaths::new(&req.backup_id);
    let mut tasks = Vec::new();
    let mut tables = Vec::new();
    for (source, target_table) in &pairs {
        let mt = manifest
            .tables
            .iter()
            .find(|t| &t.name == source)
            .expect("selected from the manifest");
        let commits: Vec<Result<CommitRecord>> = futures::stream::iter(&mt.ranges)
            .map(|r| {
                let store = &store;
                async move { Ok(store.commit_record(&r.commit).await?) }
            })
            .buffered(16)
            .collect()
            .await;
        let mut count = 0u64;
        for c in commits {
            let t = tasks_for(
                &restore_id,
                &location.container,
                &req.backup_id,
                (source, target_table),
                &c?,
                req.per_blob_max_bytes,
            );
            count += t.len() as u64;
            tasks.extend(t);
        }
        tables.push(RestoreTable {
            source: source.clone(),
            target: target_table.clone(),
            entities: mt.entities,
            tasks: count,
        });
    }
    let job = RestoreJob {
        protocol: PROTOCOL_VERSION,
        format: manifest.format,
        restore_id: restore_id.clone(),
        backup_id: req.backup_id.clone(),
        created_at: now_rfc3339(),
        target: AccountRef::of(&req.target)?,
        mode: req.mode,
        compression: manifest.compression,
        per_blob_max_bytes: req.per_blob_max_bytes,
        max_attempts: req.max_attempts.max(1),
        tables,
        verify: true,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    if store
        .create(&paths.restore_job(&restore_id), &job, Vec::new())
        .await?
        == CreateOutcome::AlreadyExists
    {
        return Err(Error::Internal(format!(
            "restore id {restore_id} is already taken"
        )));
    }
    let queue = location.task_queue()?;
    queue.create().await?;
    // Shuffled, so workers write to different partitions at once.
    let next = format!(
        "restore {restore_id} of backup {} cannot be completed; run the restore again",
        req.backup_id
    );
    crate::enqueue::enqueue_shuffled(&queue, tasks, &next).await?;
    Ok(job)
}

/// A restore as the watch loop sees it.
struct RestoreWatch(RestoreState);

#[async_trait]
impl Watched for RestoreWatch {
    async fn refresh(&mut self, store: &Store) -> Result<()> {
        Ok(self.0.records.refresh(store).await?)
    }

    fn snapshot(&self, live: Option<&WorkerStats>) -> Snapshot {
        let s = &self.0;
        Snapshot {
            tasks_done: s.records.done.len() as u64,
            tasks_total: s.task_count(),
            entities: s
                .written()
                .max(live.map_or(0, |l| WorkerStats::get(&l.entities))),
            bytes: 0,
            poisoned: s.records.poisoned.len() as u64,
        }
    }

    fn records_seen(&self) -> usize {
        self.0.records.done.len() + self.0.records.poisoned.len()
    }

    fn heartbeats_root(&self) -> String {
        BackupPaths::new(&self.0.job.backup_id).restore_heartbeats_root(&self.0.job.restore_id)
    }

    fn resume_hint(&self) -> String {
        "run the restore again (upsert is idempotent)".into()
    }

    fn settled(&mut self) -> Result<Option<JobStatus>> {
        Ok(self.0.is_settled().then(|| {
            if self.0.is_clean() {
                JobStatus::Complete
            } else {
                JobStatus::Failed
            }
        }))
    }
}

/// The report of a restore's state as it is.
fn report(state: &RestoreState, status: JobStatus) -> RestoreReport {
    let job = &state.job;
    let tables = job
        .tables
        .iter()
        .map(|t| {
            let done: Vec<&RestoreRecord> = state
                .records
                .done
                .values()
                .filter(|r| r.target_table == t.target)
                .collect();
            RestoreTableReport {
                source: t.source.clone(),
                target: t.target.clone(),
                entities: t.entities,
                written: done.iter().map(|r| r.written).sum(),
                identical: done.iter().map(|r| r.identical).sum(),
                skipped: done.iter().map(|r| r.skipped).sum(),
                failed: done.iter().map(|r| r.failed).sum(),
                tasks_done: done.len() as u64,
                tasks: t.tasks,
            }
        })
        .collect::<Vec<_>>();
    let mut failures: Vec<FailureReport> = state
        .records
        .done
        .values()
        .flat_map(|r| {
            r.failures.iter().map(|f| FailureReport {
                table: r.target_table.clone(),
                task: r.task.clone(),
                keys: f.keys.clone(),
                status: f.status,
                code: f.code.clone(),
                message: f.message.clone(),
            })
        })
        .collect();
    failures.sort_by(|a, b| (&a.table, &a.task).cmp(&(&b.table, &b.task)));
    RestoreReport {
        restore_id: job.restore_id.clone(),
        backup_id: job.backup_id.clone(),
        status,
        mode: job.mode,
        written: tables.iter().map(|t| t.written).sum(),
        tables,
        failures,
        poisoned: PoisonReport::sorted(state.records.poisoned.values()),
        duration_seconds: 0.0,
        entities_per_second: 0.0,
        peak_rss_bytes: peak_rss_bytes(),
    }
}

/// Watches a planned restore to the end and reports it (also writing the report next
/// to the restore's job file).
pub async fn watch(
    location: &Location,
    job: &RestoreJob,
    opts: &WatchOptions,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let store = location.store()?;
    let mut w = RestoreWatch(RestoreState::new(job.clone()));
    let status = watch_job(location, &job.backup_id, &mut w, opts).await?;
    let mut report = report(&w.0, status);
    report.timed(started.elapsed().as_secs_f64());
    if status != JobStatus::Interrupted {
        let path = BackupPaths::new(&job.backup_id).restore_report(&job.restore_id);
        if let Err(e) = store.overwrite(&path, &report).await {
            tracing::warn!(error = %e, "could not write the restore report");
        }
    }
    Ok(report)
}

/// `tablevault restore`: plan, enqueue, watch.
pub async fn run_restore(
    req: &RestoreRequest,
    location: &Location,
    opts: &WatchOptions,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let job = plan_and_enqueue(req, location).await?;
    tracing::info!(restore_id = %job.restore_id, tasks = job.tables.iter().map(|t| t.tasks).sum::<u64>(), "restore planned");
    let mut report = watch(location, &job, opts).await?;
    report.timed(started.elapsed().as_secs_f64());
    Ok(report)
}
