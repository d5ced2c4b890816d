//! One attempt at one backup task: scan a key range, pack it into blocks, upload them
//! under the attempt's own prefix, then commit with a conditional create of the task's
//! commit record. The first commit wins; a losing attempt deletes what it wrote.
//!
//! The scan runs one page ahead of packing and uploading, so the source is read while
//! blocks go out; memory stays at a page or two plus a few blocks.
//!
//! While it scans, an attempt that finds no task waiting on the queue (so workers may be
//! idle) cuts the part of its range it has not read yet in two and puts the upper part on
//! the queue as a new task ([`tablevault_core::split`]); it then stops where that part
//! starts. Its commit record names the range it read and the tasks it split off, so the
//! committed ranges still tile the table exactly. The look waits for the next page, which
//! often shows where the next partition starts (a probe fewer), and after a cut the scan
//! goes on with a query that ends there, so the service does not read on into the part
//! another task now holds.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tablevault_azure::table::{EntityPage, Filter, Query, TableClient};
use tablevault_core::format::{
    FORMAT_VERSION, INLINE_MAX_BYTES, INLINE_SINCE_FORMAT, Packer, PackerConfig,
};
use tablevault_core::job::finalize::{RANGE_METADATA, range_metadata};

use tablevault_core::keys::{EntityKey, KeyRange, filters_after};
use tablevault_core::protocol::{
    BackupJob, CommitRecord, PROTOCOL_VERSION, PlannedTask, TaskKind, TaskMessage, now_rfc3339,
    split_task_id,
};
use tablevault_core::queue::TaskQueue;
use tablevault_core::split::{
    CountingProbe, PageTally, PageWindow, PartitionRead, ReadSoFar, TableProbe, find_split,
};
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::{BackupPaths, BlockWriter, CreateOutcome, Store, StoreError};
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::TaskError;
use crate::fleet::FleetWatch;
use crate::limiter::AdaptiveLimit;

/// Least time between two looks at the queue for idle workers where partitions are
/// paced (Azure). A look is one Peek Messages; at most one is made per page.
const SPLIT_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Entities a page read is paced for: the most a page holds.
const PAGE_ENTITIES: u64 = tablevault_azure::table::MAX_PAGE_SIZE as u64;

/// What the attempt achieved.
#[derive(Debug, PartialEq, Eq)]
pub enum BackupOutcome {
    /// This attempt's commit record was written.
    Committed {
        /// Entities in the range.
        entities: u64,
        /// Bytes of the blobs written.
        stored_bytes: u64,
        /// Tasks split off the range while it was read.
        split_off: usize,
    },
    /// Another attempt had already committed the task; this one's blobs were deleted.
    LostRace,
}

/// Everything one attempt needs.
pub struct BackupAttempt<'a> {
    /// The job's store.
    pub store: &'a Store,
    /// The job.
    pub job: &'a BackupJob,
    /// The source account's Table client.
    pub source: &'a TableClient,
    /// Table to scan.
    pub table: &'a str,
    /// Task id.
    pub task: &'a str,
    /// Key range.
    pub range: &'a KeyRange,
    /// Cancelled when the queue message is lost.
    pub lost: CancellationToken,
    /// Cancelled when the worker shuts down.
    pub shutdown: CancellationToken,
    /// Live counters.
    pub stats: &'a WorkerStats,
    /// Who we are, for the record.
    pub worker: &'a str,
    /// Where split-off tasks go; `None` never splits.
    pub splitting: Option<Splitting<'a>>,
    /// The source account's limiter: every page read is paced by it (`None`: unpaced).
    pub limiter: Option<&'a Arc<AdaptiveLimit>>,
    /// Notified when a page comes with more to read: the range holds more than a page.
    /// A worker backing up a group of small tables then hands the rest of the group to
    /// others instead of keeping it waiting behind a large one.
    pub more_pages: Option<&'a tokio::sync::Notify>,
}

/// What an attempt needs to split its range.
pub struct Splitting<'a> {
    /// The task queue.
    pub queue: &'a Arc<dyn TaskQueue>,
    /// The container holding the job (for the new tasks' messages).
    pub container: &'a str,
    /// A position no key reaches, from the task's message.
    pub ceiling: Option<&'a EntityKey>,
    /// The range was planned, not split off another task with an estimate: only such a
    /// range is cut into pieces for idle workers (`ReadSoFar::planned`).
    pub planned: bool,
    /// Wakes the process's idle workers once split-off tasks are on the queue
    /// (`WorkerConfig::work_queued`).
    pub work_queued: &'a Notify,
    /// The worker's view of the job's fleet, told when a look finds the queue empty.
    pub fleet: &'a FleetWatch,
}

/// What a look for idle workers came to (`try_split`).
#[derive(Default)]
struct SplitLook {
    /// Tasks split off, upper ones first; none when the range was not cut.
    split_off: Vec<PlannedTask>,
    /// Nothing waited on the queue and a search that sent probes found no cut.
    fruitless: bool,
    /// The tasks split off for idle workers (nothing waited on the queue).
    queued_for_idle: Option<QueuedForIdle>,
}

/// Tasks a look queued for workers that were idle: until their claims have had time,
/// the next look does not take one of them, still waiting, for a sign that no worker
/// is idle.
struct QueuedForIdle {
    /// Their messages, as queued.
    texts: Vec<String>,
    /// Until when their claims may be under way: three times what queueing took.
    until: Instant,
}

impl QueuedForIdle {
    /// Whether `text`, found waiting by a look begun at `looked`, is one of these
    /// whose claim may be under way.
    fn being_claimed(&self, text: &str, looked: Instant) -> bool {
        looked <= self.until && self.texts.iter().any(|t| t == text)
    }
}

/// What a scan covered.
struct Scanned {
    /// Where the scan stopped: the range's end, or where the first split-off task starts.
    end: Option<EntityKey>,
    /// Tasks split off, upper parts first.
    split_off: Vec<PlannedTask>,
}

impl BackupAttempt<'_> {
    /// Whether the service serves each partition at a rate of its own (Azure; not the
    /// emulator), as the limiter has learned.
    fn partitions_paced(&self) -> bool {
        self.limiter.is_some_and(|l| l.paces_partitions())
    }

    fn check_stop(&self) -> Result<(), TaskError> {
        crate::stop_requested(&self.lost, &self.shutdown)
    }

    /// Runs the attempt to a commit (or a lost race), cleaning up after itself on failure.
    pub async fn run(&self) -> Result<BackupOutcome, TaskError> {
        let attempt = super::new_attempt_id();
        let span = tracing::info_span!("attempt", id = %&attempt[..8]);
        self.run_attempt(attempt).instrument(span).await
    }

    async fn run_attempt(&self, attempt: String) -> Result<BackupOutcome, TaskError> {
        let paths = BackupPaths::new(&self.job.backup_id);
        let options = &self.job.options;
        let mut writer = self.store.block_writer(
            &paths,
            self.table,
            self.task,
            &attempt,
            options.compression,
            options.blocks_per_blob,
        );
        // Only a job of format 2 or later: its readers know inline blobs.
        if self.job.format >= INLINE_SINCE_FORMAT {
            writer = writer.inline_up_to(INLINE_MAX_BYTES);
        }
        let started_at = now_rfc3339();
        let scanned = match self.scan_into(&mut writer).await {
            Ok(s) => s,
            Err(e) => {
                writer.abandon().await;
                return Err(e);
            }
        };
        if let Err(e) = self.check_stop() {
            writer.abandon().await;
            return Err(e);
        }
        let names_if_failed = writer.committed_names();
        let blobs = match writer.finish().await {
            Ok(b) => b,
            Err(e) => {
                self.store.delete_unreferenced(&names_if_failed).await;
                return Err(e.into());
            }
        };
        let record = CommitRecord {
            format: self.job.format.min(FORMAT_VERSION),
            job: self.job.backup_id.clone(),
            table: self.table.to_string(),
            task: self.task.to_string(),
            attempt,
            range: KeyRange::new(self.range.start.clone(), scanned.end),
            entities: blobs.iter().map(|b| b.entities).sum(),
            raw_bytes: blobs
                .iter()
                .flat_map(|b| &b.blocks)
                .map(|b| b.raw_length)
                .sum(),
            stored_bytes: blobs.iter().map(|b| b.length).sum(),
            blobs,
            started_at,
            finished_at: now_rfc3339(),
            worker: self.worker.to_string(),
            split_off: scanned.split_off,
        };
        if let Err(e) = self.check_stop() {
            self.store.delete_unreferenced(&blob_names(&record)).await;
            return Err(e);
        }
        commit(self.store, &paths, &record).await
    }

    /// Cuts the unread part of the range (after `after`, before `end`) if no task waits
    /// on the queue (in two, or, where partitions are not paced and its size can be
    /// told, into pieces for idle workers), or, where partitions are not paced (the
    /// emulator), if the one waiting was split off with an estimate and this task would
    /// end at one and a half times that, and puts the upper parts there. Returns the new
    /// tasks, upper ones first.
    /// Splitting only speeds things up, so any failure just means no split.
    ///
    /// With no task waiting, a search that sent probes and found no cut is
    /// `fruitless`, and the caller looks less often: after the n-th such search it skips
    /// the next 2^n - 1 looks. Mostly the remainder was too small to split and only
    /// shrinks as the task reads on; asked again at every page, the tail task of a
    /// repeat backup sent 25 probes for no split (each a whole-table filter on the
    /// emulator). It does not stop looking: a first task that has read only a small
    /// tenant's keys may find no cut yet and one a few pages on.
    async fn try_split(
        &self,
        splitting: &Splitting<'_>,
        after: &EntityKey,
        seen_next: Option<&EntityKey>,
        end: Option<&EntityKey>,
        read: ReadSoFar<'_>,
        own_pieces: Option<&QueuedForIdle>,
    ) -> SplitLook {
        // Where partitions have a rate (Azure), the rest of one is read fastest by one
        // task, and a remainder is only cut in two (`find_split`).
        let unpaced = !self.partitions_paced();
        let looked = Instant::now();
        let outweigh = match splitting.queue.first_waiting().await {
            Ok(None) => {
                // The job's end is coming: workers that find no task turn idle, and
                // this one should take their share soon.
                let root = BackupPaths::new(&self.job.backup_id).heartbeats_root();
                splitting.fleet.queue_seen_empty(self.store, &root);
                None
            }
            // The piece this task split off at its last look, for workers that were idle
            // then, still waits, within three times what queueing it took: their claims
            // are under way (the page was prefetched, so this look came right after
            // that one). Taken for a sign that no worker was idle, it kept the task from
            // splitting where the split model, in which a piece is claimed at once,
            // splits: on Azurite a table of 5,999 dates, whose first piece held a third
            // of what its estimate said, had one task read 4,851 (the split soak's seed
            // 38). Past that time the piece waits because no worker is idle.
            Ok(Some(text))
                if unpaced && own_pieces.is_some_and(|o| o.being_claimed(&text, looked)) =>
            {
                tracing::debug!(
                    read = read.entities,
                    "the task split off at the last look still waits for an idle worker's claim"
                );
                None
            }
            // While a task waits no worker is idle, and a split only evens out task
            // sizes. Where partitions are paced that costs requests and refusals for
            // nothing (simulated first backups at 64 workers: 89.0% of the account
            // and 0.7% refused without it, 87.5% and 0.9% with it); on the emulator it
            // keeps the first task of a small table from reading on alone.
            Ok(Some(text)) if unpaced => match TaskMessage::decode(&text).map(|m| m.kind) {
                Ok(TaskKind::Backup {
                    estimate: Some(e), ..
                }) => Some(e),
                _ => {
                    tracing::debug!(
                        read = read.entities,
                        "a task of unknown size waits on the queue; not splitting"
                    );
                    return SplitLook::default();
                }
            },
            Ok(Some(_)) | Err(_) => return SplitLook::default(),
        };
        let probe = CountingProbe::new(TableProbe {
            client: self.source,
            table: self.table,
        });
        let split = match find_split(
            &probe,
            after,
            seen_next,
            end,
            splitting.ceiling,
            Some(read),
            outweigh,
            unpaced,
        )
        .await
        {
            Ok(Some(s)) => s,
            Ok(None) => {
                tracing::debug!(
                    read = read.entities,
                    probes = probe.sent(),
                    waiting = ?outweigh,
                    "looked for a cut for idle workers; found none worth making"
                );
                return SplitLook {
                    split_off: Vec::new(),
                    fruitless: outweigh.is_none() && probe.sent() > 0,
                    ..SplitLook::default()
                };
            }
            Err(e) => {
                tracing::debug!(error = %e, "could not probe for a split point; not splitting");
                return SplitLook::default();
            }
        };
        // The upper part, as one task or as pieces, top piece last.
        let starts: Vec<&EntityKey> = std::iter::once(&split.at).chain(&split.pieces).collect();
        let messages: Vec<(PlannedTask, TaskMessage)> = starts
            .iter()
            .enumerate()
            .map(|(i, start)| {
                let above = starts.get(i + 1).copied();
                let range = KeyRange::new(Some((*start).clone()), above.or(end).cloned());
                let task = split_task_id(self.table, &range);
                let top = above.is_none();
                let message = TaskMessage {
                    v: PROTOCOL_VERSION,
                    container: splitting.container.to_string(),
                    job: self.job.backup_id.clone(),
                    table: self.table.to_string(),
                    task: task.clone(),
                    kind: TaskKind::Backup {
                        range: range.clone(),
                        // Only the top piece reaches as far as the ceiling is known.
                        ceiling: if top { split.ceiling.clone() } else { None },
                        estimate: split.estimate,
                    },
                };
                (PlannedTask { task, range }, message)
            })
            .collect();
        let texts: Vec<String> = messages.iter().map(|(_, m)| m.encode()).collect();
        let put_started = Instant::now();
        let results =
            futures::future::join_all(texts.iter().map(|t| splitting.queue.put(t, None))).await;
        let claims_until = Instant::now() + 3 * put_started.elapsed();
        // The pieces queued from the top down without a gap are split off; a piece
        // below a failed put stays with this task. A put that failed may still have
        // landed: then that task only repeats part of this one, and whichever commits
        // are used, the tiling is exact.
        let queued = queued_from_top(&results);
        if let Some(Err(e)) = results.iter().rev().find(|r| r.is_err()) {
            tracing::debug!(error = %e, queued, "could not queue a split-off task; this task keeps the pieces below it");
        }
        let queued_for_idle = (outweigh.is_none() && queued > 0).then(|| QueuedForIdle {
            texts: texts.iter().skip(results.len() - queued).cloned().collect(),
            until: claims_until,
        });
        let split_off: Vec<PlannedTask> = messages
            .into_iter()
            .skip(results.len() - queued)
            .map(|(task, _)| task)
            .rev()
            .collect();
        let Some(lowest) = split_off.last() else {
            return SplitLook::default();
        };
        splitting.work_queued.notify_waiters();
        tracing::info!(at = %lowest.range, pieces = split_off.len(), probes = split.probes, estimate = ?split.estimate, waiting = ?outweigh, "split the unread part of the range off to other workers");
        WorkerStats::add(&self.stats.tasks_split, split_off.len() as u64);
        SplitLook {
            split_off,
            fruitless: false,
            queued_for_idle,
        }
    }

    /// Scans every segment of the range in key order into the writer, splitting off
    /// the unread part when workers may be idle.
    async fn scan_into(&self, writer: &mut BlockWriter) -> Result<Scanned, TaskError> {
        let options = &self.job.options;
        let mut packer = Packer::new(PackerConfig {
            table: self.table.to_string(),
            block_bytes: options.block_bytes,
            batch_bytes: options.batch_bytes,
            compression: options.compression,
        });
        // Each page with whether it ends the range: no continuation, and no segment
        // after its query's.
        let (tx, mut rx) = mpsc::channel::<(tablevault_azure::Result<EntityPage>, bool)>(1);
        // The range's end as splits move it down, for the scan to narrow its query.
        let (end_tx, mut end_rx) = watch::channel(self.range.end.clone());
        let source = self.source.clone();
        let table = self.table.to_string();
        let range = self.range.clone();
        let limiter = self.limiter.cloned();
        let scanner = tokio::spawn(async move {
            // Pages are paced as full ones (the account's rate, and the partition's, since a
            // page mostly reads one), and what a short page did not read is given back.
            let task_pacer = limiter.as_ref().and_then(|l| l.task_pacer());
            let mut segments: VecDeque<Option<Filter>> = range.filters().into();
            let mut last_sent: Option<EntityKey> = None;
            'segments: while let Some(filter) = segments.pop_front() {
                let mut pages = source.pages(&table, Query::scan(filter));
                loop {
                    // Wait for room before fetching: one page is packed while the next is
                    // read, and no more than those two are held.
                    let Ok(slot) = tx.reserve().await else { return };
                    // A split moved the end down: go on with a query that stops there, so
                    // the service does not read on into the part other tasks now hold (the
                    // emulator sorts every match of a query for each page it serves).
                    if end_rx.has_changed().unwrap_or(false) {
                        let end = end_rx.borrow_and_update().clone();
                        segments = match &last_sent {
                            Some(last) => filters_after(last, end.as_ref()),
                            None => KeyRange::new(range.start.clone(), end).filters(),
                        }
                        .into();
                        continue 'segments;
                    }
                    if let Some(p) = &task_pacer {
                        p.acquire(PAGE_ENTITIES).await;
                    }
                    if let Some(l) = &limiter {
                        l.pace(PAGE_ENTITIES).await;
                    }
                    let page = pages.next_page().await;
                    let read = match &page {
                        Some(Ok(p)) => {
                            if let Some(e) = p.entities.last() {
                                last_sent = Some(EntityKey::new(&e.partition_key, &e.row_key));
                            }
                            p.entities.len() as u64
                        }
                        _ => 0,
                    };
                    let unused = PAGE_ENTITIES.saturating_sub(read);
                    if let Some(p) = &task_pacer {
                        p.refund(unused);
                    }
                    if let Some(l) = &limiter {
                        l.refund(unused);
                    }
                    match page {
                        None => break,
                        Some(page) => {
                            let failed = page.is_err();
                            let ends_range = page
                                .as_ref()
                                .is_ok_and(|p| p.continuation.is_none() && segments.is_empty());
                            slot.send((page, ends_range));
                            if failed {
                                return;
                            }
                        }
                    }
                }
            }
        });
        let result = async {
            let mut previous: Option<EntityKey> = None;
            let mut first: Option<EntityKey> = None;
            let mut read = 0u64;
            // The first key read in the current partition, and how many of it.
            let mut partition_first: Option<EntityKey> = None;
            let mut partition_read = 0u64;
            let mut largest_partition = 0u64;
            // The last pages read whole: the last one, and the fewest that span
            // partitions where it does not.
            let mut window = PageWindow::default();
            let mut end = self.range.end.clone();
            let mut split_off = Vec::new();
            let paced = self.partitions_paced();
            let mut last_look: Option<Instant> = None;
            // Whether to offer half of the rest to idle workers once the next page is
            // in: it shows where the next partition starts, sparing a probe.
            let mut look_due = false;
            // Fruitless searches so far, and looks still to skip after the last one.
            let (mut fruitless_searches, mut looks_to_skip) = (0u32, 0u32);
            // The tasks the last look queued for idle workers.
            let mut own_pieces: Option<QueuedForIdle> = None;
            'pages: loop {
                let page = tokio::select! {
                    page = rx.recv() => page,
                    _ = self.lost.cancelled() => return Err(TaskError::Lost),
                    _ = self.shutdown.cancelled() => return Err(TaskError::Shutdown),
                };
                let Some((page, ends_range)) = page else {
                    break;
                };
                let page = page?;
                WorkerStats::add(&self.stats.read_bytes, page.response_bytes as u64);
                // A page that ends the range holds all of its rest: nothing is left to
                // cut (in the split model, 22 of the 64 probes of Zipf sizes falling
                // with the key were sent there, each search ending in no cut).
                if let (Some(splitting), Some(after), Some(first), true) =
                    (&self.splitting, &previous, &first, look_due)
                    && !page.entities.is_empty()
                    && !ends_range
                {
                    let seen_next = page
                        .entities
                        .iter()
                        .find(|e| e.partition_key != after.pk)
                        .map(|e| EntityKey::new(&e.partition_key, &e.row_key));
                    // The first entity read ahead, when it is in the partition being read.
                    let next_rk = page
                        .entities
                        .first()
                        .filter(|e| e.partition_key == after.pk)
                        .map(|e| e.row_key.as_str());
                    let so_far = ReadSoFar {
                        first,
                        entities: read,
                        partition: partition_first.as_ref().map(|f| PartitionRead {
                            first_rk: &f.rk,
                            entities: partition_read,
                            continues: page
                                .entities
                                .last()
                                .is_some_and(|e| e.partition_key == after.pk),
                            more: next_rk.is_some(),
                            next_rk,
                        }),
                        largest_partition,
                        last_page: window.last(),
                        recent_pages: window.recent(),
                        planned: splitting.planned,
                    };
                    let look = self
                        .try_split(
                            splitting,
                            after,
                            seen_next.as_ref(),
                            end.as_ref(),
                            so_far,
                            own_pieces.as_ref(),
                        )
                        .await;
                    own_pieces = look.queued_for_idle;
                    if look.fruitless {
                        fruitless_searches += 1;
                        looks_to_skip = (1u32 << fruitless_searches.min(16)) - 1;
                    }
                    let pieces = look.split_off;
                    if let Some(lowest) = pieces.last() {
                        end = lowest.range.start.clone();
                        end_tx.send_replace(end.clone());
                        split_off.extend(pieces);
                        // More workers may be idle: look again after this page.
                        last_look = None;
                    }
                }
                let full = !page.entities.is_empty() && page.continuation.is_some();
                if let (true, Some(more)) = (full, self.more_pages) {
                    more.notify_one();
                }
                let mut count = 0u64;
                let mut tally = PageTally::default();
                for entity in page.entities {
                    let key = EntityKey::new(&entity.partition_key, &entity.row_key);
                    if end.as_ref().is_some_and(|e| &key >= e) {
                        // The rest belongs to a task split off.
                        WorkerStats::add(&self.stats.entities, count);
                        break 'pages;
                    }
                    count += 1;
                    if !self.range.contains(&key) || previous.as_ref().is_some_and(|p| &key <= p) {
                        return Err(TaskError::Permanent(format!(
                            "the service returned entity {key} outside the requested range {} or out of order",
                            self.range
                        )));
                    }
                    if first.is_none() {
                        first = Some(key.clone());
                    }
                    if previous.as_ref().is_none_or(|p| p.pk != key.pk) {
                        partition_first = Some(key.clone());
                        partition_read = 0;
                    }
                    tally.note(&key);
                    partition_read += 1;
                    largest_partition = largest_partition.max(partition_read);
                    previous = Some(key);
                    if let Some(block) = packer.push(entity) {
                        WorkerStats::add(&self.stats.stored_bytes, block.data.len() as u64);
                        writer.add(block).await?;
                    }
                }
                WorkerStats::add(&self.stats.entities, count);
                read += count;
                window.push(tally);
                self.check_stop()?;
                // A full page with more to come: worth offering half of the rest to
                // idle workers (one Peek Messages). Where partitions are not paced (the
                // emulator), once a page, as the split model does: looks at least
                // 50 ms apart there left a first look that found no cut the only one
                // where pages came in faster (prefetched), and a task read a table of
                // 6,022 dates alone (split soak, seed 67) where the model split it at
                // the third page. Where they are paced, at most every
                // SPLIT_CHECK_INTERVAL: looking at every page cost simulated first
                // backups 1-2 points of the account at 16 and 64 workers.
                look_due = self.splitting.is_some()
                    && full
                    && (!paced || last_look.is_none_or(|t| t.elapsed() >= SPLIT_CHECK_INTERVAL));
                if look_due && looks_to_skip > 0 {
                    looks_to_skip -= 1;
                    look_due = false;
                }
                if look_due {
                    last_look = Some(Instant::now());
                }
            }
            for block in packer.finish() {
                WorkerStats::add(&self.stats.stored_bytes, block.data.len() as u64);
                writer.add(block).await?;
            }
            // Upper parts were split off first; list them in key order.
            split_off.reverse();
            Ok(Scanned { end, split_off })
        }
        .await;
        scanner.abort();
        result
    }
}

fn blob_names(record: &CommitRecord) -> Vec<String> {
    record.data_blob_names().map(str::to_string).collect()
}

/// Commits an attempt: creates the task's commit record only if none exists. If another
/// attempt's record is there, this attempt lost and deletes its blobs. An uncertain
/// outcome is settled by the store, which reads the record back. Blobs are deleted only
/// when certainly unreferenced: after losing, or when the commit certainly never reached
/// the service; otherwise they stay for finalize to collect if unreferenced.
pub async fn commit(
    store: &Store,
    paths: &BackupPaths,
    record: &CommitRecord,
) -> Result<BackupOutcome, TaskError> {
    let path = paths.commit(&record.table, &record.task);
    let metadata = vec![
        ("tventities".into(), record.entities.to_string()),
        ("tvstoredbytes".into(), record.stored_bytes.to_string()),
        ("tvattempt".into(), record.attempt.clone()),
        (RANGE_METADATA.into(), range_metadata(&record.range)),
    ];
    let names = blob_names(record);
    match store.create(&path, record, metadata).await {
        Ok(CreateOutcome::Created) => {
            tracing::info!(
                entities = record.entities,
                blobs = names.len(),
                "task committed"
            );
            Ok(BackupOutcome::Committed {
                entities: record.entities,
                stored_bytes: record.stored_bytes,
                split_off: record.split_off.len(),
            })
        }
        Ok(CreateOutcome::AlreadyExists) => {
            tracing::info!(
                "another attempt committed this task first; deleting this attempt's blobs"
            );
            store.delete_unreferenced(&names).await;
            Ok(BackupOutcome::LostRace)
        }
        Err(e) => {
            if matches!(&e, StoreError::Storage(s) if s.is_safe_to_resend()) {
                store.delete_unreferenced(&names).await;
            }
            Err(e.into())
        }
    }
}

/// How many of the pieces whose puts gave `results` (in key order) are split off: those
/// from the top down to the first failure. A gap would leave a range nobody reads.
fn queued_from_top<T, E>(results: &[Result<T, E>]) -> usize {
    results.iter().rev().take_while(|r| r.is_ok()).count()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use tablevault_core::testing::{MemoryBlobs, Op, Strike, busy, reset, service};

    use super::*;

    fn record(attempt: &str, blobs: &MemoryBlobs) -> CommitRecord {
        let name = BackupPaths::new("job1").data_blob("Tbl", "r0000", attempt, 0);
        blobs.tamper(&name, Bytes::from_static(b"data"));
        CommitRecord {
            format: FORMAT_VERSION,
            job: "job1".into(),
            table: "Tbl".into(),
            task: "r0000".into(),
            attempt: attempt.into(),
            range: KeyRange::all(),
            entities: 7,
            raw_bytes: 4,
            stored_bytes: 4,
            blobs: vec![tablevault_core::protocol::BlobRecord {
                name,
                entities: 7,
                length: 4,
                blocks: Vec::new(),
                inline: None,
            }],
            started_at: String::new(),
            finished_at: String::new(),
            worker: "w".into(),
            split_off: Vec::new(),
        }
    }

    fn setup() -> (Arc<MemoryBlobs>, Store, BackupPaths) {
        let blobs = Arc::new(MemoryBlobs::new("c"));
        (blobs.clone(), Store::new(blobs), BackupPaths::new("job1"))
    }

    #[test]
    fn only_pieces_queued_from_the_top_without_a_gap_are_split_off() {
        let (ok, err) = (Ok::<(), ()>(()), Err::<(), ()>(()));
        assert_eq!(queued_from_top(&[ok, ok, ok]), 3);
        // A failed put in the middle: the pieces below it stay with the splitter.
        assert_eq!(queued_from_top(&[ok, err, ok, ok]), 2);
        assert_eq!(queued_from_top(&[ok, ok, err]), 0);
        assert_eq!(queued_from_top::<(), ()>(&[]), 0);
    }

    #[tokio::test]
    async fn the_first_commit_wins_and_the_loser_cleans_up() {
        let (blobs, store, paths) = setup();
        let (a, b) = (record("aaaa", &blobs), record("bbbb", &blobs));
        assert_eq!(
            commit(&store, &paths, &a).await,
            Ok(BackupOutcome::Committed {
                entities: 7,
                stored_bytes: 4,
                split_off: 0
            })
        );
        assert_eq!(
            commit(&store, &paths, &b).await,
            Ok(BackupOutcome::LostRace)
        );
        let names = blobs.names();
        assert!(names.iter().any(|n| n.contains("/aaaa/")), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("/bbbb/")), "{names:?}");
        let winner: CommitRecord = store
            .read(&paths.commit("Tbl", "r0000"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(winner.attempt, "aaaa");
    }

    #[tokio::test]
    async fn a_commit_whose_answer_is_lost_is_read_back() {
        let (blobs, store, paths) = setup();
        let a = record("aaaa", &blobs);
        blobs.fail(Op::PutBlob, "/tasks/", Strike::After, reset("Put Blob"));
        assert_eq!(
            commit(&store, &paths, &a).await,
            Ok(BackupOutcome::Committed {
                entities: 7,
                stored_bytes: 4,
                split_off: 0
            }),
            "it landed: the attempt committed and keeps its blobs"
        );
        assert!(blobs.names().iter().any(|n| n.contains("/aaaa/")));
    }

    #[tokio::test]
    async fn a_retried_commit_that_finds_its_own_record_has_committed() {
        // The first try landed but its answer was lost; the retry got 409.
        let (blobs, store, paths) = setup();
        let a = record("aaaa", &blobs);
        blobs.fail(
            Op::PutBlob,
            "/tasks/",
            Strike::After,
            service("Put Blob", 409, "BlobAlreadyExists"),
        );
        assert_eq!(
            commit(&store, &paths, &a).await,
            Ok(BackupOutcome::Committed {
                entities: 7,
                stored_bytes: 4,
                split_off: 0
            })
        );
        assert!(
            blobs.names().iter().any(|n| n.contains("/aaaa/")),
            "the data of a committed attempt is never deleted: {:?}",
            blobs.names()
        );
    }

    /// A look for idle workers that finds the job's queue empty tells the worker's view
    /// of the fleet (the job's end is coming: list it often), whether or not a cut is
    /// then found (here the table cannot even be probed); one that finds a task waiting
    /// does not.
    #[tokio::test]
    async fn a_look_that_finds_the_queue_empty_tells_the_fleet_view() {
        use tablevault_azure::config::StorageAccount;
        use tablevault_azure::pipeline::ClientOptions;
        use tablevault_core::testing::{MemoryQueue, test_job};

        let (_blobs, store, paths) = setup();
        let job = test_job("job1", Vec::new());
        let unreachable = StorageAccount::from_connection_string(
            "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://127.0.0.1:9",
        )
        .unwrap();
        let options = ClientOptions {
            deadline: Duration::from_millis(300),
            ..ClientOptions::default()
        };
        let source = TableClient::with_options(&unreachable, &options).unwrap();
        let memory = Arc::new(MemoryQueue::new("q"));
        let queue: Arc<dyn TaskQueue> = memory.clone();
        let (work_queued, fleet, stats) =
            (Notify::new(), FleetWatch::default(), WorkerStats::default());
        let range = KeyRange::all();
        let attempt = BackupAttempt {
            store: &store,
            job: &job,
            source: &source,
            table: "Tbl",
            task: "r0000",
            range: &range,
            lost: CancellationToken::new(),
            shutdown: CancellationToken::new(),
            stats: &stats,
            worker: "w",
            splitting: None,
            limiter: None,
            more_pages: None,
        };
        let splitting = Splitting {
            queue: &queue,
            container: "c",
            ceiling: None,
            planned: true,
            work_queued: &work_queued,
            fleet: &fleet,
        };
        let first = EntityKey::new("p", "0000");
        let after = EntityKey::new("p", "0999");
        let read = ReadSoFar {
            first: &first,
            entities: 1_000,
            partition: None,
            largest_partition: 1_000,
            last_page: None,
            recent_pages: None,
            planned: true,
        };
        let root = paths.heartbeats_root();
        memory.put("a task waiting", None).await.unwrap();
        let look = attempt
            .try_split(&splitting, &after, None, None, read, None)
            .await;
        assert!(look.split_off.is_empty());
        assert_eq!(
            fleet.queue_seen_empty_at(&store, &root),
            None,
            "a task waits"
        );
        let taken = memory.receive(1, Duration::from_secs(60)).await.unwrap();
        memory
            .delete(&taken[0].message_id, &taken[0].pop_receipt)
            .await
            .unwrap();
        let look = attempt
            .try_split(&splitting, &after, None, None, read, None)
            .await;
        assert!(look.split_off.is_empty(), "the table cannot be probed");
        assert!(fleet.queue_seen_empty_at(&store, &root).is_some());
        assert_eq!(
            fleet.queue_seen_empty_at(&store, "job2/heartbeats/"),
            None,
            "another job's"
        );
    }

    /// A task queued for idle workers counts as being claimed only while their claims
    /// have had no time (then a look does not take it for a sign that none is idle),
    /// and only for the messages queued: another task's waits.
    #[test]
    fn a_piece_counts_as_being_claimed_only_for_a_while() {
        let queued = QueuedForIdle {
            texts: vec!["piece".to_string()],
            until: Instant::now() + Duration::from_secs(60),
        };
        assert!(queued.being_claimed("piece", Instant::now()));
        assert!(!queued.being_claimed("another task", Instant::now()));
        let past = QueuedForIdle {
            texts: vec!["piece".to_string()],
            until: Instant::now() - Duration::from_millis(1),
        };
        assert!(!past.being_claimed("piece", Instant::now()));
    }

    #[tokio::test]
    async fn a_commit_refused_before_it_was_applied_fails_and_frees_its_blobs() {
        let (blobs, store, paths) = setup();
        let a = record("aaaa", &blobs);
        blobs.fail(Op::PutBlob, "/tasks/", Strike::Before, busy("Put Blob"));
        assert!(matches!(
            commit(&store, &paths, &a).await,
            Err(TaskError::Transient(_))
        ));
        assert!(blobs.names().is_empty(), "{:?}", blobs.names());
    }

    #[tokio::test]
    async fn an_uncertain_commit_fails_but_keeps_its_blobs() {
        // A reset: the create may still be applied later, so nothing it could name may go.
        let (blobs, store, paths) = setup();
        let a = record("aaaa", &blobs);
        blobs.fail(Op::PutBlob, "/tasks/", Strike::Before, reset("Put Blob"));
        assert!(matches!(
            commit(&store, &paths, &a).await,
            Err(TaskError::Transient(_))
        ));
        assert_eq!(blobs.names().len(), 1, "{:?}", blobs.names());
    }
}
