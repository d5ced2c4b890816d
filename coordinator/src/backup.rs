//! The backup control plane: plan a job (tables, ranges, options) into `job.json`,
//! enqueue one task per range, watch commit records appear, and finalize once every table
//! is tiled. `status` reports on a job and, with `--wait`, takes it over from a
//! coordinator that died.

use std::time::Instant;

use async_trait::async_trait;
use futures::StreamExt;
use tablevault_azure::StorageAccount;
use tablevault_azure::table::TableClient;
use tablevault_core::format::{
    Compression, DEFAULT_BATCH_BYTES, DEFAULT_BLOCK_BYTES, DEFAULT_FORMAT, READABLE_FORMATS,
};
use tablevault_core::keys::KeyRange;
use tablevault_core::protocol::{
    AccountRef, BackupJob, BackupOptions, JobStatus, Manifest, PROTOCOL_VERSION, PlannedTask,
    TablePlan, TaskKind, TaskMessage, WholeTable, new_backup_id, now_rfc3339,
};
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::{BackupPaths, CreateOutcome, Store, StoreError};

use crate::error::carry_on_hint;
use crate::location::Location;
use crate::plan::previous::{Previous, last_complete_backup, ranges_from_previous};
use crate::plan::{Planning, discover_ranges, normalize_split_keys, ranges_from_split_keys};
use crate::report::{BackupReport, PoisonReport, TableReport, peak_rss_bytes};
use crate::state::{JobState, load_job, rebuild_hint, unreadable_manifest};
use crate::watch::{Snapshot, WatchOptions, Watched, watch as watch_job};
use crate::{Error, Result};
use tablevault_core::job::finalize::{being_removed, finalize, rebuild_manifest, settle_backup};

/// Most tasks a large table is planned into from its last backup: four per in-process
/// worker (at least 8) so no worker waits on a straggler for long and no planned task
/// ends far above the pieces split off as workers run dry (with two, 2.1 times the mean
/// task on a Zipf-like table of 50,000 entities on the emulator); 32 when the workers
/// are elsewhere and their number is unknown (more when more workers wrote the last
/// backup: [`crate::plan::previous::task_count`]). Workers split further as they go.
pub fn default_ranges(workers: usize) -> usize {
    if workers == 0 {
        32
    } else {
        (4 * workers).clamp(8, 256)
    }
}

/// What to back up and how.
#[derive(Debug, Clone)]
pub struct BackupRequest {
    /// Account to read tables from.
    pub source: StorageAccount,
    /// Tables to back up; all tables of the source when `None`.
    pub tables: Option<Vec<String>>,
    /// PartitionKeys to split every table at.
    pub split_keys: Vec<String>,
    /// Ranges per table to discover by probing; `None` plans from the last backup (or
    /// one task per table) and leaves balance to dynamic splitting.
    pub ranges_per_table: Option<usize>,
    /// Most tasks per table when planning from the last backup.
    pub max_tasks_per_table: usize,
    /// Whether the coordinator knows how many workers there will be (in-process
    /// workers): then `max_tasks_per_table` is the cap; otherwise a table may be planned
    /// into more tasks if more workers wrote its last backup.
    pub fleet_known: bool,
    /// Whether workers split the unread part of large ranges off to idle workers.
    pub dynamic_split: bool,
    /// Block compression.
    pub compression: Compression,
    /// Blocks per data blob.
    pub blocks_per_blob: usize,
    /// Uncompressed block size at which blocks are sealed.
    pub block_bytes: usize,
    /// Deliveries after which a task is poisoned.
    pub max_attempts: u64,
    /// Most entities per second the whole fleet reads (`None`: the account's target).
    pub max_rate: Option<u32>,
    /// Backup format version to write (`--format`): 1 by default, every range in data
    /// blobs, readable by every tablevault; 2 keeps a range that is one small block in
    /// its commit record (an inline blob, docs/FORMAT.md), one write per small table.
    pub format: u32,
}

impl BackupRequest {
    /// Defaults for a source account.
    pub fn new(source: StorageAccount) -> Self {
        BackupRequest {
            source,
            tables: None,
            split_keys: Vec::new(),
            ranges_per_table: None,
            max_tasks_per_table: 32,
            fleet_known: false,
            dynamic_split: true,
            compression: Compression::None,
            blocks_per_blob: 20,
            block_bytes: DEFAULT_BLOCK_BYTES,
            max_attempts: 5,
            max_rate: None,
            format: DEFAULT_FORMAT,
        }
    }
}

/// Lists and checks the tables to back up.
///
/// Credentials that may read tables but not list them (a service SAS for one table,
/// `tn=`, or a role scoped to a table) can still back up the tables `--tables` names:
/// each is then looked for with a one-entity query instead of in the listing.
async fn resolve_tables(
    client: &TableClient,
    wanted: &Option<Vec<String>>,
    account: &str,
) -> Result<Vec<String>> {
    if wanted
        .as_ref()
        .is_some_and(|names| names.iter().any(|n| n.trim().is_empty()))
    {
        return Err(Error::invalid(
            "--tables names an empty table (a stray comma?)",
        ));
    }
    let existing = match client.list_tables().await {
        Ok(existing) => existing,
        Err(e) if matches!(e.status(), Some(401 | 403)) => {
            return match wanted {
                Some(names) => readable_unlisted(client, names, account).await,
                None => Err(listing_refused(e, account)),
            };
        }
        Err(e) => return Err(e.into()),
    };
    match wanted {
        None => {
            if existing.is_empty() {
                return Err(Error::invalid(format!(
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
            not_found(&missing, account)?;
            Ok(out)
        }
    }
}

/// The error for a refused listing of the source's tables: the service's text names
/// neither the setting nor what it lacks.
fn listing_refused(e: tablevault_azure::Error, account: &str) -> Error {
    refused_reading(e, account, "list its tables")
}

/// The error for credentials the source refused `what`, naming the setting to check.
fn refused_reading(e: tablevault_azure::Error, account: &str, what: &str) -> Error {
    Error::from(e).in_step(format!(
        "the credentials for the source account {account} cannot {what} \
         (check --source / TABLEVAULT_SOURCE: a SAS needs ss=t, srt=sco, the r and \
         l permissions and an se= in the future; a role, Storage Table Data Reader; \
         a SAS for one table, tn=, can back it up when --tables names it)"
    ))
}

/// Refuses a backup of tables the source does not hold.
fn not_found(missing: &[String], account: &str) -> Result<()> {
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "table(s) not found in the source account {account}: {}",
        missing.join(", ")
    )))
}

/// The tables `names`, each checked with a one-entity query, where the credentials may
/// not list the account's tables. Names keep the case given: without the listing there
/// is no other.
async fn readable_unlisted(
    client: &TableClient,
    names: &[String],
    account: &str,
) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    let mut missing = Vec::new();
    for n in names {
        if out.iter().any(|o| o.eq_ignore_ascii_case(n)) {
            continue;
        }
        match client.holds_table(n).await {
            Ok(true) => out.push(n.clone()),
            Ok(false) => missing.push(n.clone()),
            Err(e) if matches!(e.status(), Some(401 | 403)) => {
                return Err(refused_reading(
                    e,
                    account,
                    &format!("list its tables, nor read table {n}"),
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
    not_found(&missing, account)?;
    tracing::info!(
        tables = out.len(),
        "the source's tables cannot be listed with these credentials; each named table was read instead"
    );
    Ok(out)
}

/// Cuts one table into ranges.
async fn plan_table(
    source: &TableClient,
    store: &Store,
    previous: Option<&Previous>,
    name: String,
    split: &[String],
    req: &BackupRequest,
) -> Result<TablePlan> {
    let from_previous = previous.and_then(|p| {
        let t = p.manifest.tables.iter().find(|t| t.name == name)?;
        Some((t, p.learned_table(t)))
    });
    let (ranges, planning) = if !split.is_empty() {
        (ranges_from_split_keys(split), Planning::SplitKeys)
    } else if let Some(target) = req.ranges_per_table {
        let (ranges, probes) = discover_ranges(source, &name, target.max(1)).await?;
        tracing::info!(table = %name, ranges = ranges.len(), probes, "discovered ranges");
        (ranges, Planning::Discovered)
    } else if let Some((t, learned)) = from_previous {
        let ranges =
            ranges_from_previous(store, t, learned, req.max_tasks_per_table, req.fleet_known)
                .await?;
        tracing::info!(
            table = %name,
            ranges = ranges.len(),
            from = if learned.is_some() { "what it learned" } else { "its commit records" },
            "planned from the last backup"
        );
        (ranges, Planning::Previous)
    } else {
        (vec![KeyRange::all()], Planning::Whole)
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

/// Plans a backup and writes its `job.json`.
pub async fn plan(req: &BackupRequest, location: &Location) -> Result<BackupJob> {
    Ok(plan_with_estimate(req, location).await?.0)
}

/// [`plan`], also returning the entities the last complete backup held for the job's
/// tables (the progress bar's estimate; `None` when some table is new or nothing is
/// known).
async fn plan_with_estimate(
    req: &BackupRequest,
    location: &Location,
) -> Result<(BackupJob, Option<u64>)> {
    if !(1..50_000).contains(&req.blocks_per_blob) {
        return Err(Error::invalid(
            "--blocks-per-blob must be between 1 and 49999",
        ));
    }
    if req.block_bytes < 64 * 1024 {
        return Err(Error::invalid("--block-size must be at least 64 KiB"));
    }
    if !READABLE_FORMATS.contains(&req.format) {
        return Err(Error::invalid(format!(
            "--format must be between {} and {}",
            READABLE_FORMATS.start(),
            READABLE_FORMATS.end()
        )));
    }
    crate::error::check_max_rate(req.max_rate)?;
    let source = TableClient::with_options(&req.source, &location.client_options)?;
    let split = normalize_split_keys(&req.split_keys)?;
    let store = location.store()?;
    let account = AccountRef::of(&req.source)?;
    // Planned from the last backup unless told where to cut.
    let plans_from_previous = split.is_empty() && req.ranges_per_table.is_none();
    // Independent requests, side by side: planning is a fixed cost of every backup, and
    // at a round trip of 10 ms each request in a row is 1% of a one-second backup. The
    // container is made here too (a listing of one that does not exist yet finds no
    // backups, as it should). The last backup is looked for even when the plan does not
    // use it: it is the progress bar's estimate.
    let (tables, previous, created) = tokio::join!(
        resolve_tables(&source, &req.tables, req.source.name()),
        last_complete_backup(&store, &account, plans_from_previous),
        store.create_container()
    );
    let tables = tables?;
    created?;
    let previous = match previous {
        Ok(previous) => previous,
        Err(e) if !plans_from_previous => {
            tracing::debug!(error = %e, "no estimate of the backup's size");
            None
        }
        Err(e) => return Err(e),
    };
    let planned_from = previous.as_ref().filter(|_| plans_from_previous);
    let planning: Vec<_> = tables
        .into_iter()
        .map(|name| plan_table(&source, &store, planned_from, name, &split, req))
        .collect();
    let plans: Vec<Result<TablePlan>> = futures::stream::iter(planning).buffered(8).collect().await;
    let tables = plans.into_iter().collect::<Result<Vec<_>>>()?;
    let job = BackupJob {
        protocol: PROTOCOL_VERSION,
        format: req.format,
        backup_id: new_backup_id(),
        created_at: now_rfc3339(),
        source: account,
        options: BackupOptions {
            dynamic_split: req.dynamic_split,
            compression: req.compression,
            blocks_per_blob: req.blocks_per_blob,
            block_bytes: req.block_bytes,
            batch_bytes: DEFAULT_BATCH_BYTES,
            max_attempts: req.max_attempts.max(1),
            queue: location.queue.clone(),
            max_rate: req.max_rate,
        },
        tables,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let expected = previous
        .as_ref()
        .and_then(|p| held_before(&p.manifest, &job));
    let id = &job.backup_id;
    match store
        .create(&BackupPaths::new(id).job(), &job, Vec::new())
        .await
        .map_err(|e| {
            // Stopped or failed mid-put, the plan may have landed: name the backup.
            Error::from(e).in_step(format!(
                "writing the plan of backup {id} (if `tablevault list` shows it, \
                 `tablevault status {id} --wait` carries it on)"
            ))
        })? {
        CreateOutcome::Created => Ok((job, expected)),
        CreateOutcome::AlreadyExists => Err(Error::Internal(format!(
            "backup id {} is already taken",
            job.backup_id
        ))),
    }
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
            ceiling: None,
            estimate: None,
        },
    }
}

/// Puts one message per task on the queue (many small whole tables a few to a message,
/// `group_size`), in shuffled order so concurrent workers spread over the key space,
/// then records that the job is fully enqueued. With `state`, only tasks not yet
/// committed or poisoned are enqueued (a resumed job). Returns the messages put.
pub async fn enqueue(
    location: &Location,
    job: &BackupJob,
    state: Option<&JobState>,
) -> Result<usize> {
    location.create_queues().await?;
    put_tasks(location, job, state).await
}

/// [`enqueue`] on queues that exist.
async fn put_tasks(
    location: &Location,
    job: &BackupJob,
    state: Option<&JobState>,
) -> Result<usize> {
    let queue = location.task_queue()?;
    let mut tasks = Vec::new();
    let mut whole_tables = Vec::new();
    for t in &job.tables {
        for task in &t.tasks {
            let key = (t.name.clone(), task.task.clone());
            if state
                .is_some_and(|s| s.commits().contains_key(&key) || s.poisoned().contains_key(&key))
            {
                continue;
            }
            if t.tasks.len() == 1 && task.range == KeyRange::all() {
                whole_tables.push(WholeTable {
                    table: t.name.clone(),
                    task: task.task.clone(),
                });
            } else {
                tasks.push(task_message(job, &location.container, &t.name, task));
            }
        }
    }
    let size = group_size(whole_tables.len());
    tasks.extend(
        whole_tables.chunks(size).filter_map(|group| {
            TaskMessage::for_tables(&location.container, &job.backup_id, group)
        }),
    );
    let id = &job.backup_id;
    let next = format!(
        "backup {id} is saved; queue the rest and finish it with `tablevault status {id} --wait`"
    );
    let count = crate::enqueue::enqueue_shuffled(&queue, tasks, &next).await?;
    location
        .store()?
        .mark(
            &BackupPaths::new(&job.backup_id).enqueued_marker(),
            &count.to_string(),
        )
        .await?;
    Ok(count)
}

/// Tables backed up whole per message, out of `whole` such tables: a group saves a put,
/// a claim and a delete per table (on the emulator they cost a backup of 200 small
/// tables as much as reading them). Groups come only with many such tables, and leave
/// at least [`MIN_MESSAGES`] messages so a fleet still spreads over them; a table in a
/// group that turns out large hands the rest on at once (`worker/src/group.rs`).
fn group_size(whole: usize) -> usize {
    (whole / MIN_MESSAGES).clamp(1, MAX_GROUP)
}

/// Fewest messages grouping leaves.
const MIN_MESSAGES: usize = 32;

/// Most tables one message backs up.
const MAX_GROUP: usize = 8;

/// The entities the last complete backup of the same account held for every table of
/// `job`, as a progress estimate; `None` when some table is new (or nothing is known).
async fn expected_entities(store: &Store, job: &BackupJob) -> Option<u64> {
    match last_complete_backup(store, &job.source, false).await {
        Ok(previous) => held_before(&previous?.manifest, job),
        Err(e) => {
            tracing::debug!(error = %e, "no estimate of the backup's size");
            None
        }
    }
}

/// The entities `previous` held for every table of `job`; `None` when some table is new.
fn held_before(previous: &Manifest, job: &BackupJob) -> Option<u64> {
    job.tables
        .iter()
        .map(|t| {
            previous
                .tables
                .iter()
                .find(|p| p.name == t.name)
                .map(|p| p.entities)
        })
        .sum()
}

/// A backup as the watch loop sees it.
struct BackupWatch {
    state: JobState,
    /// Entities the last complete backup of the same tables held.
    expected: Option<u64>,
    /// Checks that found every task committed but the table not tiled.
    stalled_checks: u32,
}

#[async_trait]
impl Watched for BackupWatch {
    async fn refresh(&mut self, store: &Store) -> Result<()> {
        Ok(self.state.refresh(store).await?)
    }

    fn snapshot(&self, live: Option<&WorkerStats>) -> Snapshot {
        let s = &self.state;
        let (mut entities, mut bytes) = (s.committed_entities(), s.committed_bytes());
        if let Some(live) = live {
            entities = entities.max(WorkerStats::get(&live.entities));
            bytes = bytes.max(WorkerStats::get(&live.stored_bytes));
        }
        Snapshot {
            tasks_done: s.commits().len() as u64,
            tasks_total: s.task_count() as u64,
            entities,
            bytes,
            poisoned: s.poisoned().len() as u64,
            entities_expected: self.expected,
        }
    }

    fn records_seen(&self) -> usize {
        self.state.commits().len() + self.state.poisoned().len()
    }

    fn planned_tasks(&self) -> u64 {
        self.state.job.task_count() as u64
    }

    fn heartbeats_root(&self) -> String {
        BackupPaths::new(&self.state.job.backup_id).heartbeats_root()
    }

    fn finish_marker(&self) -> Option<String> {
        Some(BackupPaths::new(&self.state.job.backup_id).manifest())
    }

    fn resume_hint(&self) -> String {
        format!(
            "resume with `tablevault status {} --wait`",
            self.state.job.backup_id
        )
    }

    fn settled(&mut self) -> Result<Option<JobStatus>> {
        if self.state.is_complete() {
            return Ok(Some(JobStatus::Complete));
        }
        if self.state.outstanding().is_empty() {
            if !self.state.poisoned().is_empty() {
                return Ok(Some(JobStatus::Incomplete));
            }
            // Everything committed but no tiling: a planning bug. Say so rather than wait.
            self.stalled_checks += 1;
            if self.stalled_checks > 3 {
                return Err(Error::Internal(
                    "every task is committed but the ranges do not tile the key space".into(),
                ));
            }
        }
        Ok(None)
    }
}

/// Watches a job until it is complete (then finalizes it), cannot complete (poisoned
/// tasks), or the watch is cancelled.
pub async fn watch(
    location: &Location,
    job: BackupJob,
    opts: &WatchOptions,
) -> Result<BackupReport> {
    let expected = expected_entities(&location.store()?, &job).await;
    watch_expecting(location, job, expected, opts).await
}

/// [`watch`] with the size estimate known: a new backup's plan looked it up already, and
/// looking again would hold back the in-process workers by two round trips.
async fn watch_expecting(
    location: &Location,
    job: BackupJob,
    expected: Option<u64>,
    opts: &WatchOptions,
) -> Result<BackupReport> {
    let started = Instant::now();
    let store = location.store()?;
    let id = job.backup_id.clone();
    let mut w = BackupWatch {
        expected,
        state: JobState::new(job),
        stalled_checks: 0,
    };
    let status = watch_job(location, &id, &mut w, opts).await?;
    let state = w.state;
    let mut report = report_from_state(&state, location, status);
    if status == JobStatus::Complete {
        let Some(manifest) = finalize(&store, &state).await? else {
            if being_removed(&store, &BackupPaths::new(&id)).await? {
                return Err(Error::Removed(format!(
                    "backup {id} was removed while it ran (a prune or forget judged it \
                     abandoned); it has no manifest and cannot be restored: take a new backup"
                )));
            }
            return Err(Error::Internal(
                "finalize called on an incomplete backup".into(),
            ));
        };
        report.fill_from_manifest(&manifest);
        report.tasks_total = report.tasks_total.max(state.task_count());
        report.largest_task_entities = manifest
            .tables
            .iter()
            .flat_map(|t| &t.ranges)
            .map(|r| r.entities)
            .max();
    }
    report.timed(started.elapsed().as_secs_f64());
    report.peak_rss_bytes = peak_rss_bytes();
    Ok(report)
}

/// A report of the state as it is (committed tasks only).
pub fn report_from_state(state: &JobState, location: &Location, status: JobStatus) -> BackupReport {
    let tables = state
        .job
        .tables
        .iter()
        .map(|t| {
            let done: Vec<_> = state
                .commits()
                .values()
                .filter(|c| c.table == t.name)
                .collect();
            TableReport {
                name: t.name.clone(),
                entities: done.iter().map(|c| c.entities).sum(),
                // Ranges split off while the backup ran are committed beside the
                // planned ones: `status` of a complete backup said "1 ranges" of 13.
                ranges: done.len().max(t.tasks.len()),
                raw_bytes: done.iter().map(|c| c.raw_bytes).sum(),
                stored_bytes: done.iter().map(|c| c.stored_bytes).sum(),
            }
        })
        .collect::<Vec<_>>();
    BackupReport {
        backup_id: state.job.backup_id.clone(),
        status,
        container: location.container.clone(),
        format: state.job.format,
        entities: tables.iter().map(|t| t.entities).sum(),
        raw_bytes: tables.iter().map(|t| t.raw_bytes).sum(),
        stored_bytes: tables.iter().map(|t| t.stored_bytes).sum(),
        tables,
        tasks_committed: state.commits().len(),
        tasks_total: state.task_count(),
        largest_task_entities: None,
        poisoned: PoisonReport::sorted(state.poisoned().values()),
        planning_seconds: None,
        duration_seconds: 0.0,
        entities_per_second: 0.0,
        mb_per_second: 0.0,
        peak_rss_bytes: None,
    }
}

/// `tablevault backup`: plan, enqueue, watch, finalize.
pub async fn run_backup(
    req: &BackupRequest,
    location: &Location,
    opts: &WatchOptions,
) -> Result<BackupReport> {
    let started = Instant::now();
    let ((job, expected), ()) =
        tokio::try_join!(plan_with_estimate(req, location), location.create_queues())?;
    tracing::info!(backup_id = %job.backup_id, tasks = job.task_count(), "planned");
    let planning_seconds = started.elapsed().as_secs_f64();
    let id = job.backup_id.clone();
    let mut report = enqueue_and_watch(location, job, expected, opts)
        .await
        .map_err(|e| carry_on_hint(e, &format!("backup {id}"), &format!("status {id} --wait")))?;
    report.planning_seconds = Some(planning_seconds);
    // Report the whole command's rate, planning included.
    report.timed(started.elapsed().as_secs_f64());
    Ok(report)
}

/// Puts a new job's tasks on its (existing) queue while watching it: workers start on
/// the first tasks while the rest are still being put, which with hundreds of small
/// tables is a good part of the whole backup. `expected` is the progress bar's estimate.
async fn enqueue_and_watch(
    location: &Location,
    job: BackupJob,
    expected: Option<u64>,
    opts: &WatchOptions,
) -> Result<BackupReport> {
    let enqueueing = put_tasks(location, &job, None);
    let watching = watch_expecting(location, job.clone(), expected, opts);
    tokio::pin!(enqueueing, watching);
    let mut enqueued = false;
    loop {
        tokio::select! {
            // A failed enqueue ends the command (and its in-process workers) at once; the
            // error says how to carry the job on.
            result = &mut enqueueing, if !enqueued => {
                result?;
                enqueued = true;
            }
            report = &mut watching => {
                let report = report?;
                // Complete means every planned task was taken from the queue, so the last
                // puts are landing; wait for them and the enqueued marker. Otherwise
                // (interrupted, poisoned) stop putting: `status --wait` re-enqueues what
                // never was, since the marker is missing.
                if !enqueued && report.status == JobStatus::Complete {
                    (&mut enqueueing).await?;
                }
                return Ok(report);
            }
        }
    }
}

/// What `status` should do besides reporting.
#[derive(Debug, Clone, Copy, Default)]
pub struct StatusOptions {
    /// Take the job over and watch it to the end, finalizing it.
    pub wait: bool,
    /// Put poisoned tasks back on the queue first.
    pub retry_poisoned: bool,
}

/// [`settle_backup`], where a file of the backup could not be read (`damage`): seeing a
/// backup to its end (`wait`) includes a manifest that can be read, so an unreadable one
/// is rebuilt from the commit records ([`rebuild_manifest`]) and the backup settled
/// again; where they cannot rebuild it, the error says why. Without `wait`, the error
/// says how. Damage elsewhere is the error as it was.
async fn settle_damaged(
    store: &Store,
    job: &BackupJob,
    wait: bool,
    damage: String,
) -> Result<Option<Manifest>> {
    let Some(why) = unreadable_manifest(store, &job.backup_id).await? else {
        return Err(Error::Corrupt(damage));
    };
    if !wait {
        return Err(Error::Corrupt(rebuild_hint(&why, &job.backup_id)));
    }
    match rebuild_manifest(store, job).await? {
        Some(manifest) => {
            tracing::warn!(
                backup = %job.backup_id,
                entities = manifest.entities,
                unreadable = %why,
                "the manifest could not be read; rebuilt from the commit records"
            );
            Ok(settle_backup(store, job).await?)
        }
        None => Err(Error::Corrupt(format!(
            "{why}; it cannot be rebuilt: its commit records do not tile every table, or it is being deleted"
        ))),
    }
}

/// `tablevault status <id> [--wait] [--retry-poisoned]`: report, and optionally take the
/// job over (re-enqueue what a dead coordinator never enqueued, requeue poisoned tasks,
/// watch to the end, finalize).
pub async fn status(
    location: &Location,
    id: &str,
    what: StatusOptions,
    opts: &WatchOptions,
) -> Result<BackupReport> {
    let store = location.store()?;
    let job = load_job(&store, id).await?;
    // The job's tasks are on the queue it was planned with, whatever this command was
    // given: watched (and worked by in-process workers) on the default queue, a job of
    // `--queue Q` stalled for the whole stall timeout, naming the wrong queue.
    let on_its_queue;
    let location = if job.options.queue == location.queue {
        location
    } else {
        tracing::info!(queue = %job.options.queue, "using the queue the job was planned with");
        on_its_queue = Location {
            queue: job.options.queue.clone(),
            ..location.clone()
        };
        &on_its_queue
    };
    let mut state = JobState::new(job.clone());
    state.refresh(&store).await?;
    // The one rule: a job whose ranges tile every table is complete, whoever sees it.
    let settled = match settle_backup(&store, &job).await {
        Err(StoreError::Corrupt(damage)) => settle_damaged(&store, &job, what.wait, damage).await?,
        settled => settled?,
    };
    if let Some(manifest) = settled {
        if what.wait {
            // Finalize again: idempotent, and collects any garbage a straggler left.
            finalize(&store, &state).await?;
        }
        let mut report = report_from_state(&state, location, JobStatus::Complete);
        report.fill_from_manifest(&manifest);
        return Ok(report);
    }
    if what.retry_poisoned && !state.poisoned().is_empty() {
        let queue = location.task_queue()?;
        for (table, task) in state.poisoned().keys() {
            let planned = state.task(table, task).ok_or_else(|| {
                Error::Internal(format!(
                    "poisoned task {table}/{task} is neither planned nor split off by a committed task"
                ))
            })?;
            // Queue first, then forget the record, and only the version read: if the new
            // delivery has already been poisoned again, its record stays.
            let path = BackupPaths::new(id).poison(table, task);
            let Some(etag) = store.blobs().properties(&path).await?.map(|p| p.etag) else {
                continue;
            };
            queue
                .put(
                    &task_message(&job, &location.container, table, &planned).encode(),
                    None,
                )
                .await?;
            store.blobs().delete_if_match(&path, &etag).await?;
            tracing::info!(table, task, "poisoned task re-queued");
        }
        state.records.poisoned.clear();
    }
    if !what.wait {
        let status = if state.outstanding().is_empty() && !state.poisoned().is_empty() {
            JobStatus::Incomplete
        } else if state.is_complete() {
            JobStatus::Complete
        } else {
            JobStatus::InProgress
        };
        return Ok(report_from_state(&state, location, status));
    }
    // In-process workers count on the queues existing.
    location.create_queues().await?;
    if !store
        .exists(&BackupPaths::new(id).enqueued_marker())
        .await?
    {
        let n = put_tasks(location, &job, Some(&state)).await?;
        tracing::info!(
            messages = n,
            "the previous coordinator died before enqueueing everything; re-enqueued outstanding tasks"
        );
    }
    watch(location, job, opts).await
}

#[cfg(test)]
mod tests;
