//! The backup control plane: plan a job (tables, ranges, options) into `job.json`,
//! enqueue one task per range in shuffled order, watch commit records appear (running N
//! workers in-process if asked), and finalize once every table is tiled. Every step reads
//! and writes only blobs and the queue, so `status --wait` can take over from a
//! coordinator that died.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use rand::seq::SliceRandom;
use tablevault_common::blob::{BlobClient, PutOptions};
use tablevault_common::format::{
    Compression, DEFAULT_BATCH_BYTES, DEFAULT_BLOCK_BYTES, FORMAT_VERSION,
};
use tablevault_common::job::{
    BackupJob, BackupOptions, BackupPaths, PROTOCOL_VERSION, PlannedTask, TablePlan, TaskKind,
    TaskMessage, new_backup_id, now_rfc3339,
};
use tablevault_common::queue::{MessageTtl, QueueClient};
use tablevault_common::table::TableClient;
use tablevault_common::{ClientOptions, StorageAccount};
use tablevault_worker::AccountSet;
use tablevault_worker::accounts::account_ref;
use tokio_util::sync::CancellationToken;

use crate::exit::{CmdResult, Failure};
use crate::finalize::finalize;
use crate::planner::{Planning, discover_ranges, normalize_split_keys, ranges_from_split_keys};
use crate::progress::{Progress, Snapshot};
use crate::report::{BackupReport, PoisonReport, TableReport, peak_rss_bytes};
use crate::state::JobState;
use crate::workers::InProcessWorkers;

/// Ranges per table to discover when the user does not say: two per in-process worker
/// (at least 8) so no worker waits on a straggler for long; 32 when the workers are
/// elsewhere and their number is unknown. Each split costs probes, so more is not free.
pub fn default_ranges(workers: usize) -> usize {
    if workers == 0 {
        32
    } else {
        (2 * workers).clamp(8, 256)
    }
}

/// Where the job lives: the backup account, its container and the task queue.
#[derive(Debug, Clone)]
pub struct Target {
    /// Account holding the container and the queue.
    pub account: StorageAccount,
    /// Container of backups.
    pub container: String,
    /// Task queue.
    pub queue: String,
    /// HTTP and retry settings.
    pub client_options: ClientOptions,
}

impl Target {
    /// The container client.
    pub fn blobs(&self) -> CmdResult<BlobClient> {
        Ok(BlobClient::with_options(
            &self.account,
            &self.container,
            &self.client_options,
        )?)
    }

    /// The queue client.
    pub fn queue(&self) -> CmdResult<QueueClient> {
        Ok(QueueClient::with_options(
            &self.account,
            &self.queue,
            &self.client_options,
        )?)
    }
}

/// What to back up and how.
#[derive(Debug, Clone)]
pub struct BackupRequest {
    /// Account to read tables from.
    pub source: StorageAccount,
    /// Tables to back up; all tables of the source when `None`.
    pub tables: Option<Vec<String>>,
    /// PartitionKeys to split every table at; discovery when empty.
    pub split_keys: Vec<String>,
    /// Ranges per table to aim for when discovering.
    pub ranges_per_table: usize,
    /// Block compression.
    pub compression: Compression,
    /// Blocks per data blob.
    pub blocks_per_blob: usize,
    /// Uncompressed block size at which blocks are sealed.
    pub block_bytes: usize,
    /// Deliveries after which a task is poisoned.
    pub max_attempts: u64,
}

impl BackupRequest {
    /// Defaults for a source account.
    pub fn new(source: StorageAccount) -> Self {
        BackupRequest {
            source,
            tables: None,
            split_keys: Vec::new(),
            ranges_per_table: 32,
            compression: Compression::None,
            blocks_per_blob: 20,
            block_bytes: DEFAULT_BLOCK_BYTES,
            max_attempts: 5,
        }
    }
}

/// How to watch a job.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Workers to run in this process (0: only watch).
    pub workers: usize,
    /// Accounts the in-process workers hold credentials for (sources of a backup,
    /// targets of a restore).
    pub accounts: AccountSet,
    /// Lease length of in-process workers.
    pub visibility: Duration,
    /// How often to look at the job's blobs.
    pub poll: Duration,
    /// No progress bar (for `--json`).
    pub quiet: bool,
    /// Stop watching (and stop in-process workers) when cancelled.
    pub shutdown: CancellationToken,
}

impl WatchOptions {
    /// Defaults: no workers, poll twice a second.
    pub fn new(shutdown: CancellationToken) -> Self {
        WatchOptions {
            workers: 0,
            accounts: AccountSet::default(),
            visibility: Duration::from_secs(60),
            poll: Duration::from_millis(500),
            quiet: false,
            shutdown,
        }
    }
}

/// Lists and checks the tables to back up.
async fn resolve_tables(
    client: &TableClient,
    wanted: &Option<Vec<String>>,
    account: &str,
) -> CmdResult<Vec<String>> {
    let existing = client.list_tables().await?;
    match wanted {
        None => {
            if existing.is_empty() {
                return Err(Failure::usage(format!(
                    "the source account {account} has no tables"
                )));
            }
            Ok(existing)
        }
        Some(names) => {
            let mut out: Vec<String> = Vec::new();
            let mut missing = Vec::new();
            for n in names {
                match existing.iter().find(|e| e.eq_ignore_ascii_case(n)) {
                    Some(e) if !out.contains(e) => out.push(e.clone()),
                    Some(_) => {}
                    None => missing.push(n.clone()),
                }
            }
            if !missing.is_empty() {
                return Err(Failure::usage(format!(
                    "table(s) not found in the source account {account}: {}",
                    missing.join(", ")
                )));
            }
            Ok(out)
        }
    }
}

/// Plans a backup and writes its `job.json`.
pub async fn plan(req: &BackupRequest, target: &Target) -> CmdResult<BackupJob> {
    if !(1..50_000).contains(&req.blocks_per_blob) {
        return Err(Failure::usage(
            "--blocks-per-blob must be between 1 and 49999",
        ));
    }
    if req.block_bytes < 64 * 1024 {
        return Err(Failure::usage("--block-size must be at least 64 KiB"));
    }
    let source = TableClient::with_options(&req.source, &target.client_options)?;
    let tables = resolve_tables(&source, &req.tables, req.source.name()).await?;
    let split = normalize_split_keys(&req.split_keys)?;
    let plans: Vec<CmdResult<TablePlan>> = futures::stream::iter(tables)
        .map(|name| {
            let source = &source;
            let split = &split;
            async move {
                let (ranges, planning) = if split.is_empty() {
                    let (ranges, probes) = discover_ranges(source, &name, req.ranges_per_table.max(1)).await?;
                    tracing::info!(table = %name, ranges = ranges.len(), probes, "discovered ranges");
                    (ranges, Planning::Discovered)
                } else {
                    (ranges_from_split_keys(split), Planning::SplitKeys)
                };
                let width = ranges.len().to_string().len().max(4);
                Ok(TablePlan {
                    planning: planning.as_str().to_string(),
                    tasks: ranges
                        .into_iter()
                        .enumerate()
                        .map(|(i, range)| PlannedTask {
                            task: format!("r{i:0width$}"),
                            range,
                        })
                        .collect(),
                    name,
                })
            }
        })
        .buffered(4)
        .collect()
        .await;
    let tables = plans.into_iter().collect::<CmdResult<Vec<_>>>()?;
    let job = BackupJob {
        protocol: PROTOCOL_VERSION,
        format: FORMAT_VERSION,
        backup_id: new_backup_id(),
        created_at: now_rfc3339(),
        source: account_ref(&req.source)?,
        options: BackupOptions {
            compression: req.compression,
            blocks_per_blob: req.blocks_per_blob,
            block_bytes: req.block_bytes,
            batch_bytes: DEFAULT_BATCH_BYTES,
            max_attempts: req.max_attempts.max(1),
            queue: target.queue.clone(),
        },
        tables,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let blobs = target.blobs()?;
    blobs.create_container().await?;
    let body = serde_json::to_vec_pretty(&job).expect("jobs serialize");
    blobs
        .put_blob(
            &BackupPaths::new(&job.backup_id).job(),
            Bytes::from(body),
            &PutOptions {
                content_type: Some("application/json".into()),
                if_none_match: true,
                ..Default::default()
            },
        )
        .await?;
    Ok(job)
}

/// The queue message of a planned task.
pub fn task_message(
    job: &BackupJob,
    container: &str,
    table: &str,
    task: &PlannedTask,
) -> TaskMessage {
    TaskMessage {
        v: PROTOCOL_VERSION,
        container: container.to_string(),
        job: job.backup_id.clone(),
        table: table.to_string(),
        task: task.task.clone(),
        kind: TaskKind::Backup {
            range: task.range.clone(),
        },
    }
}

/// Puts one message per task on the queue, in shuffled order so concurrent workers spread
/// over the key space, then records that the job is fully enqueued. With `state`, only
/// tasks not yet committed are enqueued (a resumed job).
pub async fn enqueue(
    target: &Target,
    job: &BackupJob,
    state: Option<&JobState>,
) -> CmdResult<usize> {
    let queue = target.queue()?;
    queue.create().await?;
    QueueClient::with_options(
        &target.account,
        &tablevault_common::job::poison_queue_name(&target.queue),
        &target.client_options,
    )?
    .create()
    .await?;
    let mut messages: Vec<String> = Vec::new();
    for t in &job.tables {
        for task in &t.tasks {
            let key = (t.name.clone(), task.task.clone());
            if state.is_some_and(|s| s.commits.contains_key(&key) || s.poisoned.contains_key(&key))
            {
                continue;
            }
            messages.push(task_message(job, &target.container, &t.name, task).encode());
        }
    }
    messages.shuffle(&mut rand::rng());
    let count = messages.len();
    let results: Vec<_> = futures::stream::iter(messages)
        .map(|m| {
            let queue = &queue;
            async move { queue.put_message(&m, None, MessageTtl::Never).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for r in results {
        r?;
    }
    let blobs = target.blobs()?;
    blobs
        .put_blob(
            &BackupPaths::new(&job.backup_id).enqueued_marker(),
            Bytes::from(count.to_string()),
            &PutOptions::default(),
        )
        .await?;
    Ok(count)
}

/// Watches a job until it is complete (then finalizes it), cannot complete (poisoned
/// tasks), or the watch is cancelled.
pub async fn watch(
    target: &Target,
    job: BackupJob,
    opts: &WatchOptions,
) -> CmdResult<BackupReport> {
    let started = Instant::now();
    let blobs = target.blobs()?;
    let mut workers = InProcessWorkers::start(target, &job.backup_id, opts)?;
    let stats = workers.stats.clone();
    let mut state = JobState::new(blobs.clone(), job);
    let mut progress = Progress::new("backup", opts.quiet);
    let mut stalled_checks = 0;
    let outcome = loop {
        if let Err(e) = state.refresh().await {
            tracing::warn!(error = %e, "cannot read the job's state; retrying");
        }
        let total = state.job.task_count() as u64;
        let live = opts.workers > 0;
        progress.update(Snapshot {
            tasks_done: state.commits.len() as u64,
            tasks_total: total,
            entities: if live {
                stats
                    .entities
                    .load(Ordering::Relaxed)
                    .max(state.committed_entities())
            } else {
                state.committed_entities()
            },
            bytes: if live {
                stats
                    .stored_bytes
                    .load(Ordering::Relaxed)
                    .max(state.committed_bytes())
            } else {
                state.committed_bytes()
            },
            poisoned: state.poisoned.len() as u64,
        });
        if state.is_complete() {
            break "complete";
        }
        if state.outstanding().is_empty() {
            if !state.poisoned.is_empty() {
                break "incomplete";
            }
            // Everything committed but no tiling: a planning bug. Say so rather than wait.
            stalled_checks += 1;
            if stalled_checks > 3 {
                progress.finish();
                workers.stop().await;
                return Err(Failure::failed(
                    "internal error: every task is committed but the ranges do not tile the key space",
                ));
            }
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
    let mut report = report_from_state(&state, target, outcome);
    if outcome == "complete" {
        let manifest = finalize(&blobs, &state).await?;
        report.entities = manifest.entities;
        report.raw_bytes = manifest.raw_bytes;
        report.stored_bytes = manifest.stored_bytes;
        report.tables = manifest
            .tables
            .iter()
            .map(|t| TableReport {
                name: t.name.clone(),
                entities: t.entities,
                ranges: t.ranges.len(),
                raw_bytes: t.raw_bytes,
                stored_bytes: t.stored_bytes,
            })
            .collect();
    }
    let secs = started.elapsed().as_secs_f64();
    report.duration_seconds = secs;
    report.entities_per_second = report.entities as f64 / secs.max(1e-6);
    report.mb_per_second = report.stored_bytes as f64 / 1e6 / secs.max(1e-6);
    report.peak_rss_bytes = peak_rss_bytes();
    Ok(report)
}

/// A report of the state as it is (committed tasks only).
pub fn report_from_state(state: &JobState, target: &Target, status: &str) -> BackupReport {
    let tables = state
        .job
        .tables
        .iter()
        .map(|t| {
            let done: Vec<_> = state
                .commits
                .values()
                .filter(|c| c.table == t.name)
                .collect();
            TableReport {
                name: t.name.clone(),
                entities: done.iter().map(|c| c.entities).sum(),
                ranges: t.tasks.len(),
                raw_bytes: done.iter().map(|c| c.raw_bytes).sum(),
                stored_bytes: done.iter().map(|c| c.stored_bytes).sum(),
            }
        })
        .collect::<Vec<_>>();
    let mut poisoned: Vec<PoisonReport> = state
        .poisoned
        .values()
        .map(|p| PoisonReport {
            table: p.table.clone(),
            task: p.task.clone(),
            reason: p.reason.clone(),
        })
        .collect();
    poisoned.sort_by(|a, b| (&a.table, &a.task).cmp(&(&b.table, &b.task)));
    BackupReport {
        backup_id: state.job.backup_id.clone(),
        status: status.to_string(),
        container: target.container.clone(),
        entities: tables.iter().map(|t| t.entities).sum(),
        raw_bytes: tables.iter().map(|t| t.raw_bytes).sum(),
        stored_bytes: tables.iter().map(|t| t.stored_bytes).sum(),
        tables,
        tasks_committed: state.commits.len(),
        tasks_total: state.job.task_count(),
        poisoned,
        duration_seconds: 0.0,
        entities_per_second: 0.0,
        mb_per_second: 0.0,
        peak_rss_bytes: None,
    }
}

/// `tablevault backup`: plan, enqueue, watch, finalize.
pub async fn run_backup(
    req: &BackupRequest,
    target: &Target,
    mut opts: WatchOptions,
) -> CmdResult<BackupReport> {
    let started = Instant::now();
    let job = plan(req, target).await?;
    tracing::info!(backup_id = %job.backup_id, tasks = job.task_count(), "planned");
    enqueue(target, &job, None).await?;
    if opts.accounts.is_empty() {
        opts.accounts = AccountSet::new(vec![req.source.clone()]);
    }
    let mut report = watch(target, job, &opts).await?;
    // Report the whole command's rate, planning included.
    let secs = started.elapsed().as_secs_f64();
    report.duration_seconds = secs;
    report.entities_per_second = report.entities as f64 / secs.max(1e-6);
    report.mb_per_second = report.stored_bytes as f64 / 1e6 / secs.max(1e-6);
    Ok(report)
}

/// `tablevault status <id> [--wait] [--retry-poisoned]`: report, and optionally take the
/// job over (re-enqueue what a dead coordinator never enqueued, requeue poisoned tasks,
/// watch to the end, finalize).
pub async fn status(
    target: &Target,
    id: &str,
    wait: bool,
    retry_poisoned: bool,
    opts: &WatchOptions,
) -> CmdResult<BackupReport> {
    let blobs = target.blobs()?;
    let job = crate::state::load_job(&blobs, id).await?;
    let mut state = JobState::new(blobs.clone(), job.clone());
    state.refresh().await?;
    if let Some(manifest) = crate::state::load_manifest(&blobs, id).await? {
        if wait {
            // Finalize again: idempotent, and collects any garbage a straggler left.
            finalize(&blobs, &state).await?;
        }
        let mut report = report_from_state(&state, target, "complete");
        report.entities = manifest.entities;
        report.raw_bytes = manifest.raw_bytes;
        report.stored_bytes = manifest.stored_bytes;
        return Ok(report);
    }
    if retry_poisoned && !state.poisoned.is_empty() {
        let queue = target.queue()?;
        for (table, task) in state.poisoned.keys() {
            let planned = job
                .table(table)
                .and_then(|t| t.tasks.iter().find(|p| &p.task == task))
                .ok_or_else(|| {
                    Failure::failed(format!("poisoned task {table}/{task} is not in the plan"))
                })?;
            blobs
                .delete(&BackupPaths::new(id).poison(table, task))
                .await?;
            queue
                .put_message(
                    &task_message(&job, &target.container, table, planned).encode(),
                    None,
                    MessageTtl::Never,
                )
                .await?;
            tracing::info!(table, task, "poisoned task re-queued");
        }
        state.poisoned.clear();
    }
    if !wait {
        let status = if state.outstanding().is_empty() && !state.poisoned.is_empty() {
            "incomplete"
        } else if state.is_complete() {
            "complete"
        } else {
            "in-progress"
        };
        return Ok(report_from_state(&state, target, status));
    }
    if blobs
        .properties(&BackupPaths::new(id).enqueued_marker())
        .await?
        .is_none()
    {
        let n = enqueue(target, &job, Some(&state)).await?;
        tracing::info!(
            tasks = n,
            "the previous coordinator died before enqueueing everything; re-enqueued outstanding tasks"
        );
    }
    watch(target, job, opts).await
}
