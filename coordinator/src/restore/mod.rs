//! The restore control plane. A restore is a job of its own: an id, a plan
//! (`restores/<id>/job.json`) and a state (`restores/<id>/state.json`) that workers check
//! before running any of its tasks, so only a live restore writes. Planning reads a
//! complete backup's manifest, creates the target tables and enqueues one task per block
//! (or per blob when the blob is small); the watch sees the tasks' records appear; then
//! `replace` deletes what the backup does not hold and the target is read back and
//! compared with the backup. `resume` re-enqueues what was not done, `cancel` ends it.

//!
//! Files: this one plans and enqueues; `watch` follows the tasks and finishes the job;
//! `check` reads the target back after writing; `control` finds, reports, resumes and
//! cancels restores; `preview` is `--dry-run`.

mod check;
mod control;
mod preview;
mod watch;

pub use check::check_target;
pub use control::{cancel, find_restore, resume, status};
pub use preview::{PlannedTable, RestorePlan, non_empty_targets, preview};
pub use watch::watch;

use std::collections::BTreeMap;
use std::time::Instant;

use futures::StreamExt;
use tablevault_azure::StorageAccount;
use tablevault_azure::table::TableClient;
use tablevault_core::format::READABLE_FORMATS;
use tablevault_core::job::finalize::{missing_or_short, settle_backup};
use tablevault_core::protocol::{
    AccountRef, CommitRecord, JobStatus, Manifest, ManifestTable, PROTOCOL_VERSION, RestoreJob,
    RestoreMode, RestoreStateRecord, RestoreTable, TaskKind, TaskMessage, new_backup_id,
    now_rfc3339,
};
use tablevault_core::store::{BackupPaths, CreateOutcome, Store};

use crate::error::carry_on_hint;
use crate::location::Location;
use crate::report::RestoreReport;
use crate::state::load_job;
use crate::watch::WatchOptions;
use crate::{Error, Result};

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

/// How a restore refused for a deletion of its backup ends its message.
pub(super) const STOPPED_BEFORE_WRITING: &str = "the restore stopped before writing";

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
    if !READABLE_FORMATS.contains(&manifest.format) {
        return Err(Error::invalid(format!(
            "backup {id} has format version {}; this tablevault reads versions {} to {}",
            manifest.format,
            READABLE_FORMATS.start(),
            READABLE_FORMATS.end()
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
        let mut commits = commits.into_iter().collect::<Result<Vec<_>>>()?;
        check_counts(backup_id, mt, &commits)?;
        // Tasks name blocks, and each reads its own data (inline ones from the record
        // again): what is kept per table is its block lists, not its data.
        commits.iter_mut().for_each(CommitRecord::drop_inline_bytes);
        let data = format!("{}{source}/", BackupPaths::new(backup_id).data_root());
        check_blobs(backup_id, mt, &commits, &store.blob_sizes(&data).await?)?;
        for c in &commits {
            tasks.extend(
                tasks_for(
                    job_id,
                    &location.container,
                    backup_id,
                    (source, target_table),
                    c,
                    per_blob_max_bytes,
                )
                .into_iter()
                .map(|t| (i, t)),
            );
        }
    }
    Ok(tasks)
}

/// Refuses a backup table whose records disagree on how many entities it holds: each
/// blob's blocks against the blob, each range's blobs against the range, the ranges
/// against the manifest. Tasks are made from the blocks listed, so a record that lost
/// its blobs (or a manifest that claims more) would restore fewer entities than were
/// backed up and report it complete: a commit record emptied of its 1,500 entities'
/// blobs restored none with exit 0, and `--mode replace` then deleted the whole target.
fn check_counts(backup_id: &str, table: &ManifestTable, commits: &[CommitRecord]) -> Result<()> {
    let corrupt = |what: String| {
        Err(Error::Corrupt(format!(
            "backup {backup_id}, table {}: {what}; nothing was written (tablevault verify {backup_id} checks every block)",
            table.name
        )))
    };
    let mut in_ranges = 0u64;
    for c in commits {
        let mut in_blobs = 0u64;
        for blob in &c.blobs {
            if let Some(problem) = blob.shape_problem(c.format) {
                return corrupt(format!("{} {problem}", blob.label(c)));
            }
            let in_blocks = blob
                .blocks
                .iter()
                .fold(0u64, |n, b| n.saturating_add(b.entities));
            if in_blocks != blob.entities {
                return corrupt(format!(
                    "{} lists {in_blocks} entities in its blocks, records {}",
                    blob.label(c),
                    blob.entities
                ));
            }
            in_blobs = in_blobs.saturating_add(blob.entities);
        }
        if in_blobs != c.entities {
            return corrupt(format!(
                "range {} lists {in_blobs} entities in its blobs, records {}",
                c.task, c.entities
            ));
        }
        in_ranges = in_ranges.saturating_add(c.entities);
    }
    if in_ranges != table.entities {
        return corrupt(format!(
            "its ranges record {in_ranges} entities, the manifest {}",
            table.entities
        ));
    }
    Ok(())
}

/// Refuses a backup whose data blobs are gone or shorter than the blocks their records
/// name, before anything is written: otherwise the other ranges are written and the
/// damaged one's task is poisoned, a half-restored table.
fn check_blobs(
    backup_id: &str,
    table: &ManifestTable,
    commits: &[CommitRecord],
    sizes: &BTreeMap<String, u64>,
) -> Result<()> {
    match missing_or_short(commits.iter().flat_map(|c| &c.blobs), sizes) {
        None => Ok(()),
        Some((blob, problem)) => Err(Error::Corrupt(format!(
            "backup {backup_id}, table {}: data blob {blob} {problem}; nothing was written",
            table.name
        ))),
    }
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

/// What a restore of `req` reads of its backup, checked: the manifest, the `(source,
/// target)` tables it selects, and the tasks of restore `job_id` (each with its
/// table's index). Failing because a deletion (prune or forget) removed the backup,
/// it says so, ending with `then` ([`crate::retention::unless_removed`]).
async fn read_backup(
    req: &RestoreRequest,
    location: &Location,
    store: &Store,
    job_id: &str,
    then: &str,
) -> Result<(Manifest, Vec<(String, String)>, Vec<(usize, TaskMessage)>)> {
    let read = async {
        let manifest = load_complete_manifest(store, &req.backup_id).await?;
        let pairs = crate::selection::select(&manifest, req.tables.as_deref(), &req.renames)?;
        let tasks = all_tasks(
            store,
            location,
            &manifest,
            job_id,
            &req.backup_id,
            &pairs,
            req.per_blob_max_bytes,
        )
        .await?;
        Ok((manifest, pairs, tasks))
    };
    crate::retention::unless_removed(store, &req.backup_id, then, read.await).await
}

/// Plans a restore: checks the backup, creates the target tables, writes the restore's
/// plan and state, and enqueues its tasks. Returns the job.
pub async fn plan_and_enqueue(req: &RestoreRequest, location: &Location) -> Result<RestoreJob> {
    crate::error::check_max_rate(req.max_rate)?;
    let store = location.store()?;
    let target = AccountRef::of(&req.target)?;
    let tables_client = TableClient::with_options(&req.target, &location.client_options)?;
    let restore_id = new_backup_id();
    let paths = BackupPaths::new(&req.backup_id);
    // Read (and checked) before any table is created.
    let (manifest, pairs, tasks) =
        read_backup(req, location, &store, &restore_id, STOPPED_BEFORE_WRITING).await?;
    for (_, t) in &pairs {
        create_target_table(&tables_client, &target, t).await?;
    }
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
    Err(crate::retention::being_deleted(
        &job.backup_id,
        STOPPED_BEFORE_WRITING,
    ))
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

/// Records a restore's state unless it was cancelled meanwhile (a cancel is final);
/// `false` when it was.
async fn set_state_unless_cancelled(
    store: &Store,
    job: &RestoreJob,
    status: JobStatus,
    note: Option<String>,
) -> Result<bool> {
    let state = RestoreStateRecord::now(status, note);
    Ok(store
        .set_restore_state_unless_cancelled(&job.backup_id, &job.restore_id, &state)
        .await?)
}

/// `(backup table, target table)` of each table a restore writes.
fn table_pairs(job: &RestoreJob) -> Vec<(String, String)> {
    job.tables
        .iter()
        .map(|t| (t.source.clone(), t.target.clone()))
        .collect()
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
    let id = &job.restore_id;
    let mut report = watch(location, &job, &req.target, opts)
        .await
        .map_err(|e| carry_on_hint(e, &format!("restore {id}"), &format!("resume {id}")))?;
    report.timed(started.elapsed().as_secs_f64());
    Ok(report)
}
