//! The restore control plane. A restore is a job of its own: an id, a plan
//! (`restores/<id>/job.json`) and a state (`restores/<id>/state.json`) that workers check
//! before running any of its tasks, so only a live restore writes. Planning reads a
//! complete backup's manifest, creates the target tables and enqueues one task per block
//! (or per blob when the blob is small); the watch sees the tasks' records appear; then
//! `replace` deletes what the backup does not hold and the target is read back and
//! compared with the backup. `resume` re-enqueues what was not done, `cancel` ends it.

use std::time::Instant;

use async_trait::async_trait;
use futures::StreamExt;
use serde::Serialize;
use tablevault_azure::StorageAccount;
use tablevault_azure::table::TableClient;
use tablevault_core::format::FORMAT_VERSION;
use tablevault_core::protocol::{
    AccountRef, CommitRecord, JobStatus, Manifest, PROTOCOL_VERSION, RestoreJob, RestoreMode,
    RestoreRecord, RestoreStateRecord, RestoreTable, TaskKind, TaskMessage, is_valid_backup_id,
    new_backup_id, now_rfc3339,
};
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::{BackupPaths, CreateOutcome, Store};

use crate::compare::{CompareOptions, Equality, TableComparison, compare_tables};
use crate::location::Location;
use crate::report::{
    FailureReport, PoisonReport, RestoreReport, RestoreTableReport, RestoreVerification,
    peak_rss_bytes,
};
use crate::state::{RestoreState, load_job};
use crate::watch::{Progress, Snapshot, WatchOptions, Watched, watch as watch_job};
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
    /// Read the target back and compare it with the backup at the end.
    pub verify: bool,
    /// Most entities per second the whole fleet writes (`None`: the account's target).
    pub max_rate: Option<u32>,
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
            verify: true,
            max_rate: None,
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

/// Every task of a restore, in key order per table (derived from the backup's commit
/// records, so a resumed restore re-creates exactly the tasks its plan had).
async fn all_tasks(
    store: &Store,
    location: &Location,
    manifest: &Manifest,
    job_id: &str,
    backup_id: &str,
    pairs: &[(String, String)],
    per_blob_max_bytes: u64,
) -> Result<Vec<(usize, TaskMessage)>> {
    let mut tasks = Vec::new();
    for (i, (source, target_table)) in pairs.iter().enumerate() {
        let mt = manifest
            .tables
            .iter()
            .find(|t| &t.name == source)
            .ok_or_else(|| {
                Error::invalid(format!("table {source} is not in backup {backup_id}"))
            })?;
        let commits: Vec<Result<CommitRecord>> = futures::stream::iter(&mt.ranges)
            .map(|r| async move { Ok(store.commit_record(&r.commit).await?) })
            .buffered(16)
            .collect()
            .await;
        for c in commits {
            tasks.extend(
                tasks_for(
                    job_id,
                    &location.container,
                    backup_id,
                    (source, target_table),
                    &c?,
                    per_blob_max_bytes,
                )
                .into_iter()
                .map(|t| (i, t)),
            );
        }
    }
    Ok(tasks)
}

/// Creates a target table, naming the account when the credentials may not.
async fn create_target_table(client: &TableClient, target: &AccountRef, table: &str) -> Result<()> {
    client.create_table(table).await.map(|_| ()).map_err(|e| {
        let context = if matches!(e.status(), Some(401 | 403)) {
            format!(
                "the credentials for the target account {} ({}) cannot create or write table {table}",
                target.account, target.table_endpoint
            )
        } else {
            format!(
                "creating table {table} in the target account {} ({})",
                target.account, target.table_endpoint
            )
        };
        Error::Step {
            context,
            source: Box::new(Error::Storage(e)),
        }
    })
}

/// Plans a restore: checks the backup, creates the target tables, writes the restore's
/// plan and state, and enqueues its tasks. Returns the job.
pub async fn plan_and_enqueue(req: &RestoreRequest, location: &Location) -> Result<RestoreJob> {
    crate::error::check_max_rate(req.max_rate)?;
    let store = location.store()?;
    let manifest = load_complete_manifest(&store, &req.backup_id).await?;
    let pairs = crate::selection::select(&manifest, req.tables.as_deref(), &req.renames)?;
    let target = AccountRef::of(&req.target)?;
    let tables_client = TableClient::with_options(&req.target, &location.client_options)?;
    for (_, t) in &pairs {
        create_target_table(&tables_client, &target, t).await?;
    }
    let restore_id = new_backup_id();
    let paths = BackupPaths::new(&req.backup_id);
    let tasks = all_tasks(
        &store,
        location,
        &manifest,
        &restore_id,
        &req.backup_id,
        &pairs,
        req.per_blob_max_bytes,
    )
    .await?;
    let tables = pairs
        .iter()
        .enumerate()
        .map(|(i, (source, target_table))| RestoreTable {
            source: source.clone(),
            target: target_table.clone(),
            entities: manifest
                .tables
                .iter()
                .find(|t| &t.name == source)
                .map_or(0, |t| t.entities),
            tasks: tasks.iter().filter(|(t, _)| *t == i).count() as u64,
        })
        .collect();
    let job = RestoreJob {
        protocol: PROTOCOL_VERSION,
        format: manifest.format,
        restore_id: restore_id.clone(),
        backup_id: req.backup_id.clone(),
        created_at: now_rfc3339(),
        target,
        mode: req.mode,
        compression: manifest.compression,
        per_blob_max_bytes: req.per_blob_max_bytes,
        max_attempts: req.max_attempts.max(1),
        tables,
        verify: req.verify,
        max_rate: req.max_rate,
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
    // Live before its first task is on the queue: workers drop tasks of restores that are not.
    set_state(&store, &job, JobStatus::InProgress, None).await?;
    refuse_if_deleting(&store, &job).await?;
    location.create_queues().await?;
    let queue = location.task_queue()?;
    // Shuffled, so workers write to different partitions at once.
    let next = format!(
        "restore {restore_id} of backup {} cannot be completed; run `tablevault resume {restore_id}`",
        req.backup_id
    );
    crate::enqueue::enqueue_shuffled(&queue, tasks.into_iter().map(|(_, t)| t).collect(), &next)
        .await?;
    Ok(job)
}

/// Stops a restore (recorded as cancelled) whose backup a deletion has started on. A
/// deletion looks for live restores after writing its marker, and a restore looks for
/// the marker after recording itself live, so one of the two always sees the other.
async fn refuse_if_deleting(store: &Store, job: &RestoreJob) -> Result<()> {
    if crate::retention::deleting(store, &job.backup_id)
        .await?
        .is_none()
    {
        return Ok(());
    }
    let note = Some("the backup is being deleted".to_string());
    set_state(store, job, JobStatus::Cancelled, note).await?;
    Err(Error::invalid(format!(
        "backup {} is being deleted (prune or forget); the restore stopped before writing",
        job.backup_id
    )))
}

async fn set_state(
    store: &Store,
    job: &RestoreJob,
    status: JobStatus,
    note: Option<String>,
) -> Result<()> {
    let state = RestoreStateRecord::now(status, note);
    Ok(store
        .set_restore_state(&job.backup_id, &job.restore_id, &state)
        .await?)
}

/// A restore as the watch loop sees it.
struct RestoreWatch {
    state: RestoreState,
    /// Set when another command cancelled the restore.
    cancelled: bool,
}

#[async_trait]
impl Watched for RestoreWatch {
    async fn refresh(&mut self, store: &Store) -> Result<()> {
        let job = &self.state.job;
        if let Some(s) = store.restore_state(&job.backup_id, &job.restore_id).await? {
            self.cancelled = s.status == JobStatus::Cancelled;
        }
        Ok(self.state.records.refresh(store).await?)
    }

    fn snapshot(&self, live: Option<&WorkerStats>) -> Snapshot {
        let s = &self.state;
        Snapshot {
            tasks_done: s.records.done.len() as u64,
            tasks_total: s.task_count(),
            entities: s
                .written()
                .max(live.map_or(0, |l| WorkerStats::get(&l.entities))),
            bytes: 0,
            poisoned: s.records.poisoned.len() as u64,
            entities_expected: Some(s.job.tables.iter().map(|t| t.entities).sum()),
        }
    }

    fn records_seen(&self) -> usize {
        self.state.records.done.len() + self.state.records.poisoned.len()
    }

    fn planned_tasks(&self) -> u64 {
        self.state.task_count()
    }

    fn heartbeats_root(&self) -> String {
        let job = &self.state.job;
        BackupPaths::new(&job.backup_id).restore_heartbeats_root(&job.restore_id)
    }

    fn resume_hint(&self) -> String {
        format!("run `tablevault resume {}`", self.state.job.restore_id)
    }

    fn settled(&mut self) -> Result<Option<JobStatus>> {
        if self.cancelled {
            return Ok(Some(JobStatus::Cancelled));
        }
        Ok(self.state.is_settled().then(|| {
            if self.state.is_clean() {
                JobStatus::Complete
            } else {
                JobStatus::Incomplete
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
        target_account: job.target.account.clone(),
        target_endpoint: job.target.table_endpoint.clone(),
        created_at: job.created_at.clone(),
        entities: tables.iter().map(|t| t.entities).sum(),
        deleted: 0,
        verification: None,
        written: tables.iter().map(|t| t.written).sum(),
        tables,
        failures,
        poisoned: PoisonReport::sorted(state.records.poisoned.values()),
        duration_seconds: 0.0,
        entities_per_second: 0.0,
        peak_rss_bytes: peak_rss_bytes(),
    }
}

/// Watches a planned restore until its tasks settle, then finishes it: `replace` deletes
/// what the backup does not hold, the target is read back and compared with the backup
/// (when the job asks for it), and the state and report are written. Interrupted (Ctrl-C),
/// the restore is recorded as such and stops being worked on; `resume` carries it on.
pub async fn watch(
    location: &Location,
    job: &RestoreJob,
    target: &StorageAccount,
    opts: &WatchOptions,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let store = location.store()?;
    let mut w = RestoreWatch {
        state: RestoreState::new(job.clone()),
        cancelled: false,
    };
    let watched = watch_job(location, &job.restore_id, &mut w, opts).await;
    let status = match watched {
        Ok(s) => s,
        Err(e) => {
            if opts.shutdown.is_cancelled() {
                record_interrupted(location, job).await;
            }
            return Err(e);
        }
    };
    let mut report = report(&w.state, status);
    match status {
        JobStatus::Interrupted => {
            record_interrupted(location, job).await;
            report.timed(started.elapsed().as_secs_f64());
            return Ok(report);
        }
        JobStatus::Cancelled => {
            report.timed(started.elapsed().as_secs_f64());
            return Ok(report);
        }
        JobStatus::Complete => {
            if let Err(e) =
                finish_writing(location, job, target, &mut report, opts.progress.as_deref()).await
            {
                if opts.shutdown.is_cancelled() {
                    record_interrupted(location, job).await;
                }
                return Err(e);
            }
        }
        _ => {}
    }
    report.timed(started.elapsed().as_secs_f64());
    // A cancel that came in meanwhile stands.
    let cancelled = matches!(
        store.restore_state(&job.backup_id, &job.restore_id).await?,
        Some(s) if s.status == JobStatus::Cancelled
    );
    if cancelled {
        report.status = JobStatus::Cancelled;
    } else {
        set_state(&store, job, report.status, None).await?;
    }
    let path = BackupPaths::new(&job.backup_id).restore_report(&job.restore_id);
    if let Err(e) = store.overwrite(&path, &report).await {
        tracing::warn!(error = %e, "could not write the restore report");
    }
    Ok(report)
}

/// Records that a restore was interrupted, unless it was cancelled meanwhile; works after
/// Ctrl-C (its requests are not cancelled).
async fn record_interrupted(location: &Location, job: &RestoreJob) {
    let Ok(store) = location.uncancellable().store() else {
        return;
    };
    if let Ok(Some(s)) = store.restore_state(&job.backup_id, &job.restore_id).await
        && s.status.is_final()
    {
        return;
    }
    let note = Some(format!(
        "resume with `tablevault resume {}`",
        job.restore_id
    ));
    if let Err(e) = set_state(&store, job, JobStatus::Interrupted, note).await {
        tracing::warn!(error = %e, "could not record that the restore was interrupted");
    }
}

/// `(backup table, target table)` of each table a restore writes.
fn table_pairs(job: &RestoreJob) -> Vec<(String, String)> {
    job.tables
        .iter()
        .map(|t| (t.source.clone(), t.target.clone()))
        .collect()
}

/// What comparing a restore's target with its backup needs, read once.
struct RestoredTables {
    store: Store,
    manifest: Manifest,
    client: TableClient,
    pairs: Vec<(String, String)>,
}

impl RestoredTables {
    async fn open(location: &Location, job: &RestoreJob, target: &StorageAccount) -> Result<Self> {
        let store = location.store()?;
        let manifest = load_complete_manifest(&store, &job.backup_id).await?;
        Ok(RestoredTables {
            store,
            manifest,
            client: TableClient::with_options(target, &location.client_options)?,
            pairs: table_pairs(job),
        })
    }

    async fn compare(
        &self,
        opts: CompareOptions,
        progress: Option<&dyn Progress>,
    ) -> Result<Vec<TableComparison>> {
        compare_tables(
            &self.store,
            &self.manifest,
            &self.pairs,
            &self.client,
            opts,
            progress,
        )
        .await
    }

    /// The check after writing (see [`check_target`]).
    async fn check(
        &self,
        job: &RestoreJob,
        report: &RestoreReport,
        progress: Option<&dyn Progress>,
    ) -> Result<RestoreVerification> {
        let started = Instant::now();
        let tables = self
            .compare(
                CompareOptions {
                    equality: Equality::for_mode(job.mode),
                    delete_extras: false,
                },
                progress,
            )
            .await?;
        let ok = tables.iter().all(|t| {
            let left_alone: u64 = report
                .tables
                .iter()
                .filter(|r| r.target == t.target)
                .map(|r| r.skipped + r.failed)
                .sum();
            let c = &t.counts;
            c.missing == 0
                && c.different <= left_alone
                && (job.mode != RestoreMode::Replace || c.extra == 0)
        });
        if !ok {
            tracing::error!(restore = %job.restore_id, "the target read back differs from the backup");
        }
        Ok(RestoreVerification {
            ok,
            tables,
            duration_seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// After every task wrote its entities: deletes extras (`replace`) and checks the target.
async fn finish_writing(
    location: &Location,
    job: &RestoreJob,
    target: &StorageAccount,
    report: &mut RestoreReport,
    progress: Option<&dyn Progress>,
) -> Result<()> {
    if job.mode != RestoreMode::Replace && !job.verify {
        return Ok(());
    }
    let restored = RestoredTables::open(location, job, target).await?;
    if job.mode == RestoreMode::Replace {
        if let Some(p) = progress {
            p.phase("replace: deleting extras");
        }
        let pruned = restored
            .compare(
                CompareOptions {
                    equality: Equality::Exact,
                    delete_extras: true,
                },
                progress,
            )
            .await?;
        report.deleted = pruned.iter().map(|t| t.counts.deleted).sum();
        tracing::info!(
            deleted = report.deleted,
            "deleted the entities the backup does not hold"
        );
    }
    if !job.verify {
        return Ok(());
    }
    if let Some(p) = progress {
        p.phase("verify");
    }
    let verification = restored.check(job, report, progress).await;
    if let Some(p) = progress {
        p.finish();
    }
    let verification = verification?;
    if !verification.ok {
        report.status = JobStatus::Mismatch;
    }
    report.verification = Some(verification);
    Ok(())
}

/// Reads a restore's target tables back and compares them with the backup, as the
/// restore's mode promises: every backed-up entity present and equal (only its own
/// properties for `merge`; entities `report` says were left alone or failed may differ),
/// and for `replace` nothing else. Extras are always counted.
pub async fn check_target(
    location: &Location,
    job: &RestoreJob,
    target: &StorageAccount,
    report: &RestoreReport,
) -> Result<RestoreVerification> {
    RestoredTables::open(location, job, target)
        .await?
        .check(job, report, None)
        .await
}

/// `tablevault restore`: plan, enqueue, watch, check.
pub async fn run_restore(
    req: &RestoreRequest,
    location: &Location,
    opts: &WatchOptions,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let job = plan_and_enqueue(req, location).await?;
    tracing::info!(restore_id = %job.restore_id, tasks = job.tables.iter().map(|t| t.tasks).sum::<u64>(), "restore planned");
    let mut report = watch(location, &job, &req.target, opts).await?;
    report.timed(started.elapsed().as_secs_f64());
    Ok(report)
}

/// Finds a restore by id among the container's backups.
pub async fn find_restore(store: &Store, restore_id: &str) -> Result<RestoreJob> {
    if !is_valid_backup_id(restore_id) {
        return Err(Error::invalid(format!(
            "{restore_id:?} is not a restore id"
        )));
    }
    let backups = store.list_dirs("").await?;
    let found: Vec<Option<RestoreJob>> = futures::stream::iter(backups)
        .filter(|b| std::future::ready(is_valid_backup_id(b)))
        .map(|b| async move { store.restore_job(&b, restore_id).await })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<std::result::Result<_, _>>()?;
    found.into_iter().flatten().next().ok_or_else(|| {
        Error::invalid(format!(
            "restore {restore_id} not found in container {:?} (see `tablevault list`)",
            store.container()
        ))
    })
}

/// Where a restore stands and what it did so far (`status`).
pub async fn status(location: &Location, job: &RestoreJob) -> Result<RestoreReport> {
    let store = location.store()?;
    let paths = BackupPaths::new(&job.backup_id);
    if let Some(r) = store
        .read::<RestoreReport>(&paths.restore_report(&job.restore_id))
        .await
        .ok()
        .flatten()
    {
        // A finished restore's report; the state may have changed since (cancel).
        let mut r = r;
        if let Some(s) = store.restore_state(&job.backup_id, &job.restore_id).await? {
            r.status = s.status;
        }
        return Ok(r);
    }
    let mut state = RestoreState::new(job.clone());
    state.records.refresh(&store).await?;
    let status = store
        .restore_state(&job.backup_id, &job.restore_id)
        .await?
        .map_or(JobStatus::Interrupted, |s| s.status);
    Ok(report(&state, status))
}

/// `tablevault resume`: carries an interrupted (or orphaned) restore on from what was
/// committed: marks it live again, re-enqueues every task without a done record (a
/// poisoned one gets another chance), and watches it to the end.
pub async fn resume(
    location: &Location,
    restore_id: &str,
    target: &StorageAccount,
    opts: &WatchOptions,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let store = location.store()?;
    let job = find_restore(&store, restore_id).await?;
    let named = AccountRef::of(target)?;
    if named != job.target {
        return Err(Error::invalid(format!(
            "restore {restore_id} writes to account {} ({}); the target given is {} ({})",
            job.target.account, job.target.table_endpoint, named.account, named.table_endpoint
        )));
    }
    match store.restore_state(&job.backup_id, restore_id).await? {
        Some(s) if s.status == JobStatus::Cancelled => {
            return Err(Error::invalid(format!(
                "restore {restore_id} was cancelled ({}); start a new restore of backup {}",
                s.at, job.backup_id
            )));
        }
        Some(s) if s.status == JobStatus::Complete => {
            return status(location, &job).await;
        }
        _ => {}
    }
    let manifest = load_complete_manifest(&store, &job.backup_id).await?;
    let pairs = table_pairs(&job);
    let tasks = all_tasks(
        &store,
        location,
        &manifest,
        restore_id,
        &job.backup_id,
        &pairs,
        job.per_blob_max_bytes,
    )
    .await?;
    let paths = BackupPaths::new(&job.backup_id);
    let done: std::collections::HashSet<String> = store
        .list_names(&paths.restore_done_root(restore_id))
        .await?
        .into_iter()
        .collect();
    let poisoned = store
        .list_names(&paths.restore_poison_root(restore_id))
        .await?;
    for p in poisoned {
        store.delete(&p).await?;
    }
    let left: Vec<TaskMessage> = tasks
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| !done.contains(&paths.restore_done(restore_id, &t.table, &t.task)))
        .collect();
    tracing::info!(tasks = left.len(), "resuming the restore");
    set_state(&store, &job, JobStatus::InProgress, None).await?;
    refuse_if_deleting(&store, &job).await?;
    location.create_queues().await?;
    let queue = location.task_queue()?;
    let next =
        format!("restore {restore_id} cannot be completed; run `tablevault resume {restore_id}`");
    crate::enqueue::enqueue_shuffled(&queue, left, &next).await?;
    let mut report = watch(location, &job, target, opts).await?;
    report.timed(started.elapsed().as_secs_f64());
    Ok(report)
}

/// `tablevault cancel`: ends a restore. Workers drop its queued tasks when they next see
/// them; a coordinator watching it stops. What was written stays written.
pub async fn cancel(location: &Location, restore_id: &str) -> Result<RestoreReport> {
    let store = location.store()?;
    let job = find_restore(&store, restore_id).await?;
    if let Some(s) = store.restore_state(&job.backup_id, restore_id).await?
        && s.status.is_final()
        && s.status != JobStatus::Cancelled
    {
        return Err(Error::invalid(format!(
            "restore {restore_id} has already ended ({}); there is nothing to cancel",
            s.status
        )));
    }
    set_state(
        &store,
        &job,
        JobStatus::Cancelled,
        Some("cancelled by the user".into()),
    )
    .await?;
    status(location, &job).await
}

/// What a restore would do to one table.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedTable {
    /// Table in the backup.
    pub source: String,
    /// Table it would write.
    pub target: String,
    /// Whether the target table exists now.
    pub exists: bool,
    /// Entities the backup holds for it.
    pub entities: u64,
    /// Blocks they are stored in.
    pub blocks: u64,
    /// Tasks the restore would enqueue.
    pub tasks: u64,
    /// Backed-up entities absent from the target: would be written.
    pub new: u64,
    /// Present and equal to the backup.
    pub unchanged: u64,
    /// Present and different: overwritten (upsert, replace), merged (merge), left alone
    /// (insert-skip) or failures (insert-fail), as `mode` says.
    pub different: u64,
    /// In the target, not in the backup: deleted by `replace`, kept otherwise.
    pub extra: u64,
    /// Of `extra`, what would be deleted.
    pub would_delete: u64,
}

/// What a restore would do (`--dry-run`): nothing is written, nothing enqueued.
#[derive(Debug, Clone, Serialize)]
pub struct RestorePlan {
    /// The backup.
    pub backup_id: String,
    /// When the backup was taken.
    pub backup_created_at: String,
    /// Account the backup was taken from.
    pub source_account: String,
    /// Account it would write to.
    pub target_account: String,
    /// That account's Table endpoint.
    pub target_endpoint: String,
    /// Mode.
    pub mode: RestoreMode,
    /// Whether the target would be read back and compared at the end.
    pub verify: bool,
    /// Entities, blocks and tasks in all.
    pub entities: u64,
    /// Blocks in all.
    pub blocks: u64,
    /// Tasks in all.
    pub tasks: u64,
    /// Per table.
    pub tables: Vec<PlannedTable>,
}

/// Plans a restore without doing it: reads the backup's records and compares the backup
/// with the target tables as they are, so the counts of what would be overwritten and
/// deleted are exact at this moment.
pub async fn preview(req: &RestoreRequest, location: &Location) -> Result<RestorePlan> {
    let store = location.store()?;
    let manifest = load_complete_manifest(&store, &req.backup_id).await?;
    let pairs = crate::selection::select(&manifest, req.tables.as_deref(), &req.renames)?;
    let target = AccountRef::of(&req.target)?;
    let client = TableClient::with_options(&req.target, &location.client_options)?;
    let tasks = all_tasks(
        &store,
        location,
        &manifest,
        "preview",
        &req.backup_id,
        &pairs,
        req.per_blob_max_bytes,
    )
    .await?;
    let compared = compare_tables(
        &store,
        &manifest,
        &pairs,
        &client,
        CompareOptions {
            equality: Equality::for_mode(req.mode),
            delete_extras: false,
        },
        None,
    )
    .await?;
    let tables: Vec<PlannedTable> = compared
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let mt = manifest.tables.iter().find(|t| t.name == c.source);
            PlannedTable {
                entities: c.counts.backup,
                blocks: mt.map_or(0, |t| t.blocks),
                tasks: tasks.iter().filter(|(t, _)| *t == i).count() as u64,
                exists: c.exists,
                new: c.counts.missing,
                unchanged: c.counts.matching,
                different: c.counts.different,
                extra: c.counts.extra,
                would_delete: if req.mode == RestoreMode::Replace {
                    c.counts.extra
                } else {
                    0
                },
                source: c.source,
                target: c.target,
            }
        })
        .collect();
    Ok(RestorePlan {
        backup_id: req.backup_id.clone(),
        backup_created_at: manifest.created_at.clone(),
        source_account: manifest.source.account.clone(),
        target_account: target.account,
        target_endpoint: target.table_endpoint,
        mode: req.mode,
        verify: req.verify,
        entities: tables.iter().map(|t| t.entities).sum(),
        blocks: tables.iter().map(|t| t.blocks).sum(),
        tasks: tasks.len() as u64,
        tables,
    })
}

/// The target tables of a restore that exist and hold entities: writing into them needs
/// the user's confirmation.
pub async fn non_empty_targets(req: &RestoreRequest, location: &Location) -> Result<Vec<String>> {
    let store = location.store()?;
    let manifest = load_complete_manifest(&store, &req.backup_id).await?;
    let pairs = crate::selection::select(&manifest, req.tables.as_deref(), &req.renames)?;
    let client = TableClient::with_options(&req.target, &location.client_options)?;
    let mut out = Vec::new();
    for (_, t) in pairs {
        if client.table_exists(&t).await?
            && client
                .pages(
                    &t,
                    tablevault_azure::table::Query {
                        filter: None,
                        top: Some(1),
                    },
                )
                .first_entity()
                .await?
                .is_some()
        {
            out.push(t);
        }
    }
    Ok(out)
}
