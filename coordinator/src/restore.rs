//! The restore control plane: read a complete backup's manifest, create the target
//! tables, enqueue one task per block (or per blob when the blob is small) in shuffled
//! order, watch the tasks' done records (running N workers in-process if asked), and
//! report per-table counts and every batch that could not be written.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use rand::seq::SliceRandom;
use serde::Serialize;
use tablevault_common::StorageAccount;
use tablevault_common::blob::{BlobClient, PutOptions};
use tablevault_common::format::FORMAT_VERSION;
use tablevault_common::job::{
    BackupPaths, CommitRecord, Manifest, PROTOCOL_VERSION, PoisonRecord, RestoreJob, RestoreMode,
    RestoreRecord, RestoreTable, TaskKind, TaskMessage, new_backup_id, now_rfc3339,
};
use tablevault_common::keys::EntityKey;
use tablevault_common::queue::MessageTtl;
use tablevault_common::table::TableClient;
use tablevault_worker::AccountSet;
use tablevault_worker::accounts::account_ref;

use crate::backup::{Target, WatchOptions};
use crate::exit::{CmdResult, Failure};
use crate::progress::{Progress, Snapshot};
use crate::report::peak_rss_bytes;
use crate::state::load_new_records;
use crate::workers::InProcessWorkers;

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

/// Per-table outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreTableReport {
    /// Table in the backup.
    pub source: String,
    /// Table written.
    pub target: String,
    /// Entities the backup holds.
    pub entities: u64,
    /// Entities written.
    pub written: u64,
    /// Entities already present and identical (insert modes).
    pub identical: u64,
    /// Entities present and left alone (`insert-skip`).
    pub skipped: u64,
    /// Entities in batches that failed.
    pub failed: u64,
    /// Tasks done.
    pub tasks_done: u64,
    /// Tasks planned.
    pub tasks: u64,
}

/// A failed batch, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct FailureReport {
    /// Target table.
    pub table: String,
    /// Task.
    pub task: String,
    /// Entities not written (all keys of the batch).
    pub keys: Vec<EntityKey>,
    /// HTTP status.
    pub status: u16,
    /// Service error code.
    pub code: Option<String>,
    /// The service's reason.
    pub message: String,
}

/// The outcome of `restore`.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreReport {
    /// Restore id.
    pub restore_id: String,
    /// Backup id.
    pub backup_id: String,
    /// `complete`, `failed` (failed batches or poisoned tasks) or `interrupted`.
    pub status: String,
    /// Mode.
    pub mode: RestoreMode,
    /// Per table.
    pub tables: Vec<RestoreTableReport>,
    /// Entities written in all tables.
    pub written: u64,
    /// Failed batches.
    pub failures: Vec<FailureReport>,
    /// Poisoned tasks (for example a corrupt block: nothing from it was written).
    pub poisoned: Vec<crate::report::PoisonReport>,
    /// Wall time.
    pub duration_seconds: f64,
    /// Entities written per second.
    pub entities_per_second: f64,
    /// Peak resident memory of this process (Linux).
    pub peak_rss_bytes: Option<u64>,
}

impl RestoreReport {
    /// Prints the human summary.
    pub fn print_human(&self) {
        println!(
            "restore {} of backup {} ({}): {}, {} entities written in {:.1} s ({:.0} entities/s)",
            self.restore_id,
            self.backup_id,
            self.mode.as_str(),
            if self.status == "complete" {
                "complete"
            } else {
                &self.status
            },
            self.written,
            self.duration_seconds,
            self.entities_per_second
        );
        for t in &self.tables {
            println!(
                "  {} -> {}: {} of {} entities written{}{}{}",
                t.source,
                t.target,
                t.written,
                t.entities,
                if t.identical > 0 {
                    format!(", {} already identical", t.identical)
                } else {
                    String::new()
                },
                if t.skipped > 0 {
                    format!(", {} existing left alone", t.skipped)
                } else {
                    String::new()
                },
                if t.failed > 0 {
                    format!(", {} FAILED", t.failed)
                } else {
                    String::new()
                },
            );
        }
        for f in self.failures.iter().take(20) {
            let keys: Vec<String> = f.keys.iter().take(5).map(ToString::to_string).collect();
            println!(
                "  FAILED batch in {} ({} entities, e.g. {}): {} {}",
                f.table,
                f.keys.len(),
                keys.join(", "),
                f.code.as_deref().unwrap_or(""),
                f.message
            );
        }
        if self.failures.len() > 20 {
            println!(
                "  … {} more failed batches (see --json)",
                self.failures.len() - 20
            );
        }
        for p in &self.poisoned {
            println!("  POISONED {}/{}: {}", p.table, p.task, p.reason);
        }
    }
}

/// Loads a backup's manifest, refusing incomplete backups and unknown versions.
pub async fn load_complete_manifest(blobs: &BlobClient, id: &str) -> CmdResult<Manifest> {
    let Some(manifest) = crate::state::load_manifest(blobs, id).await? else {
        // Distinguish "no such backup" from "not complete".
        crate::state::load_job(blobs, id).await?;
        return Err(Failure::usage(format!(
            "backup {id} is incomplete (it has no manifest) and cannot be restored or verified; \
             finish it with `tablevault status {id} --wait`"
        )));
    };
    if manifest.format != FORMAT_VERSION {
        return Err(Failure::usage(format!(
            "backup {id} has format version {}; this tablevault reads version {FORMAT_VERSION}",
            manifest.format
        )));
    }
    Ok(manifest)
}

/// One planned restore task.
struct Unit {
    message: TaskMessage,
}

/// Plans the tasks of one table: one per blob whose blocks hold at most
/// `per_blob_max_bytes` of XML, one per block otherwise.
fn units_for(
    restore: &str,
    container: &str,
    backup_id: &str,
    source: &str,
    target: &str,
    commit: &CommitRecord,
    per_blob_max_bytes: u64,
) -> Vec<Unit> {
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
            out.push(Unit {
                message: TaskMessage {
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
                },
            });
        }
    }
    out
}

/// Plans a restore: checks the backup, creates the target tables, writes the restore's
/// job file and enqueues its tasks. Returns the job.
pub async fn plan_and_enqueue(req: &RestoreRequest, target: &Target) -> CmdResult<RestoreJob> {
    let blobs = target.blobs()?;
    let manifest = load_complete_manifest(&blobs, &req.backup_id).await?;
    let pairs = crate::selection::select(&manifest, req.tables.as_deref(), &req.renames)?;
    let tables_client = TableClient::with_options(&req.target, &target.client_options)?;
    for (_, t) in &pairs {
        tables_client.create_table(t).await?;
    }
    let restore_id = new_backup_id();
    let paths = BackupPaths::new(&req.backup_id);
    let mut units = Vec::new();
    let mut tables = Vec::new();
    for (source, target_table) in &pairs {
        let mt = manifest
            .tables
            .iter()
            .find(|t| &t.name == source)
            .expect("selected from the manifest");
        let commits: Vec<CmdResult<CommitRecord>> = futures::stream::iter(&mt.ranges)
            .map(|r| {
                let blobs = &blobs;
                async move {
                    tablevault_worker::reader::load_commit(blobs, &r.commit)
                        .await
                        .map_err(|e| Failure::failed(e.to_string()))
                }
            })
            .buffered(16)
            .collect()
            .await;
        let mut count = 0u64;
        for c in commits {
            let c = c?;
            let u = units_for(
                &restore_id,
                &target.container,
                &req.backup_id,
                source,
                target_table,
                &c,
                req.per_blob_max_bytes,
            );
            count += u.len() as u64;
            units.extend(u);
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
        target: account_ref(&req.target)?,
        mode: req.mode,
        compression: manifest.compression,
        per_blob_max_bytes: req.per_blob_max_bytes,
        max_attempts: req.max_attempts.max(1),
        tables,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    blobs
        .put_blob(
            &paths.restore_job(&restore_id),
            Bytes::from(serde_json::to_vec_pretty(&job).expect("jobs serialize")),
            &PutOptions {
                content_type: Some("application/json".into()),
                if_none_match: true,
                ..Default::default()
            },
        )
        .await?;
    // Shuffled, so workers write to different partitions at once.
    units.shuffle(&mut rand::rng());
    let queue = target.queue()?;
    queue.create().await?;
    let results: Vec<_> = futures::stream::iter(units)
        .map(|u| {
            let queue = &queue;
            async move {
                queue
                    .put_message(&u.message.encode(), None, MessageTtl::Never)
                    .await
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(job)
}

/// Done and poison records of a restore, read incrementally.
struct RestoreState {
    done: HashMap<(String, String), RestoreRecord>,
    poisoned: HashMap<(String, String), PoisonRecord>,
}

impl RestoreState {
    async fn refresh(
        &mut self,
        blobs: &BlobClient,
        paths: &BackupPaths,
        restore: &str,
    ) -> CmdResult<()> {
        let done = load_new_records(blobs, &paths.restore_done_root(restore), |k| {
            self.done.contains_key(k)
        })
        .await?;
        self.done.extend(done);
        let poisoned = load_new_records(blobs, &paths.restore_poison_root(restore), |k| {
            self.poisoned.contains_key(k)
        })
        .await?;
        self.poisoned.extend(poisoned);
        self.poisoned.retain(|k, _| !self.done.contains_key(k));
        Ok(())
    }
}

/// Watches a planned restore to the end and reports it (also writing the report next
/// to the restore's job file).
pub async fn watch(
    target: &Target,
    job: &RestoreJob,
    opts: &WatchOptions,
) -> CmdResult<RestoreReport> {
    let started = Instant::now();
    let blobs = target.blobs()?;
    let paths = BackupPaths::new(&job.backup_id);
    let mut workers = InProcessWorkers::start(target, &job.backup_id, opts)?;
    let stats = workers.stats.clone();
    let total: u64 = job.tables.iter().map(|t| t.tasks).sum();
    let mut state = RestoreState {
        done: HashMap::new(),
        poisoned: HashMap::new(),
    };
    let mut progress = Progress::new("restore", opts.quiet);
    let outcome = loop {
        if let Err(e) = state.refresh(&blobs, &paths, &job.restore_id).await {
            tracing::warn!(error = %e, "cannot read the restore's state; retrying");
        }
        let written: u64 = state.done.values().map(|r| r.written).sum();
        progress.update(Snapshot {
            tasks_done: state.done.len() as u64,
            tasks_total: total,
            entities: written.max(stats.entities.load(Ordering::Relaxed)),
            bytes: 0,
            poisoned: state.poisoned.len() as u64,
        });
        if (state.done.len() + state.poisoned.len()) as u64 >= total {
            break if state.poisoned.is_empty() && state.done.values().all(|r| r.failures.is_empty())
            {
                "complete"
            } else {
                "failed"
            };
        }
        workers.check();
        tokio::select! {
            _ = opts.shutdown.cancelled() => break "interrupted",
            _ = stats.changed.notified() => {}
            _ = tokio::time::sleep(opts.poll) => {}
        }
    };
    workers.stop().await;
    progress.finish();

    let tables = job
        .tables
        .iter()
        .map(|t| {
            let done: Vec<&RestoreRecord> = state
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
    let mut poisoned: Vec<_> = state
        .poisoned
        .values()
        .map(|p| crate::report::PoisonReport {
            table: p.table.clone(),
            task: p.task.clone(),
            reason: p.reason.clone(),
        })
        .collect();
    poisoned.sort_by(|a, b| (&a.table, &a.task).cmp(&(&b.table, &b.task)));
    let secs = started.elapsed().as_secs_f64();
    let written: u64 = tables.iter().map(|t| t.written).sum();
    let report = RestoreReport {
        restore_id: job.restore_id.clone(),
        backup_id: job.backup_id.clone(),
        status: outcome.to_string(),
        mode: job.mode,
        tables,
        written,
        failures,
        poisoned,
        duration_seconds: secs,
        entities_per_second: written as f64 / secs.max(1e-6),
        peak_rss_bytes: peak_rss_bytes(),
    };
    if outcome != "interrupted" {
        let _ = blobs
            .put_blob(
                &paths.restore_report(&job.restore_id),
                Bytes::from(serde_json::to_vec_pretty(&report).expect("reports serialize")),
                &PutOptions {
                    content_type: Some("application/json".into()),
                    ..Default::default()
                },
            )
            .await;
    }
    Ok(report)
}

/// `tablevault restore`: plan, enqueue, watch.
pub async fn run_restore(
    req: &RestoreRequest,
    target: &Target,
    mut opts: WatchOptions,
) -> CmdResult<RestoreReport> {
    let started = Instant::now();
    let job = plan_and_enqueue(req, target).await?;
    tracing::info!(restore_id = %job.restore_id, tasks = job.tables.iter().map(|t| t.tasks).sum::<u64>(), "restore planned");
    if opts.accounts.is_empty() {
        opts.accounts = AccountSet::new(vec![req.target.clone()]);
    }
    let mut report = watch(target, &job, &opts).await?;
    let secs = started.elapsed().as_secs_f64();
    report.duration_seconds = secs;
    report.entities_per_second = report.written as f64 / secs.max(1e-6);
    Ok(report)
}
