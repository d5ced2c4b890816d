//! One attempt at one backup task: scan a key range, pack it into blocks, upload them
//! under the attempt's own prefix, then commit with a conditional create of the task's
//! commit record. The first commit wins; a losing attempt deletes what it wrote.
//!
//! The scan runs one page ahead of packing and uploading, so the source is read while
//! blocks go out; memory stays at a page or two plus a few blocks.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tablevault_common::blob::{BlobClient, PutOptions};
use tablevault_common::format::{FORMAT_VERSION, Packer, PackerConfig};
use tablevault_common::job::{BackupJob, BackupPaths, CommitRecord, now_rfc3339};
use tablevault_common::keys::{EntityKey, KeyRange};
use tablevault_common::table::{EntityPage, MAX_PAGE_SIZE, Query, TableClient};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::blob_writer::BlobWriter;
use crate::{TaskError, WorkerStats};

/// What the attempt achieved.
#[derive(Debug, PartialEq, Eq)]
pub enum BackupOutcome {
    /// This attempt's commit record was written.
    Committed {
        /// Entities in the range.
        entities: u64,
    },
    /// Another attempt had already committed the task; this one's blobs were deleted.
    LostRace,
}

/// Everything one attempt needs.
pub struct BackupAttempt<'a> {
    /// The job's container.
    pub blobs: &'a BlobClient,
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
}

impl BackupAttempt<'_> {
    fn check_stop(&self) -> Result<(), TaskError> {
        crate::stop_requested(&self.lost, &self.shutdown)
    }

    /// Runs the attempt to a commit (or a lost race), cleaning up after itself on failure.
    pub async fn run(&self) -> Result<BackupOutcome, TaskError> {
        let attempt = uuid::Uuid::new_v4().simple().to_string();
        let span = tracing::info_span!("attempt", id = %&attempt[..8]);
        self.run_attempt(attempt).instrument(span).await
    }

    async fn run_attempt(&self, attempt: String) -> Result<BackupOutcome, TaskError> {
        let paths = BackupPaths::new(&self.job.backup_id);
        let options = &self.job.options;
        let mut writer = BlobWriter::new(
            self.blobs.clone(),
            paths.clone(),
            self.table,
            self.task,
            &attempt,
            options.compression.as_str(),
            options.blocks_per_blob,
        );
        let started_at = now_rfc3339();
        match self.scan_into(&mut writer).await {
            Ok(()) => {}
            Err(e) => {
                writer.abandon().await;
                return Err(e);
            }
        }
        if let Err(e) = self.check_stop() {
            writer.abandon().await;
            return Err(e);
        }
        let names_if_failed = writer.committed_names();
        let blobs = match writer.finish().await {
            Ok(b) => b,
            Err(e) => {
                crate::blob_writer::delete_blobs(self.blobs, &names_if_failed).await;
                return Err(e.into());
            }
        };
        let all_names: Vec<String> = blobs.iter().map(|b| b.name.clone()).collect();
        let entities: u64 = blobs.iter().map(|b| b.entities).sum();
        let record = CommitRecord {
            format: FORMAT_VERSION,
            job: self.job.backup_id.clone(),
            table: self.table.to_string(),
            task: self.task.to_string(),
            attempt: attempt.clone(),
            range: self.range.clone(),
            entities,
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
        };
        if let Err(e) = self.check_stop() {
            crate::blob_writer::delete_blobs(self.blobs, &all_names).await;
            return Err(e);
        }
        let body = serde_json::to_vec_pretty(&record).expect("commit records serialize");
        let put = PutOptions {
            metadata: vec![
                ("tventities".into(), entities.to_string()),
                ("tvstoredbytes".into(), record.stored_bytes.to_string()),
                ("tvattempt".into(), attempt.clone()),
            ],
            content_type: Some("application/json".into()),
            if_none_match: true,
        };
        match self
            .blobs
            .put_blob(
                &paths.commit(self.table, self.task),
                Bytes::from(body),
                &put,
            )
            .await
        {
            Ok(_) => {
                tracing::info!(entities, blobs = all_names.len(), "task committed");
                Ok(BackupOutcome::Committed { entities })
            }
            Err(e) if e.has_code("BlobAlreadyExists") || e.status() == Some(412) => {
                tracing::info!(
                    "another attempt committed this task first; deleting this attempt's blobs"
                );
                crate::blob_writer::delete_blobs(self.blobs, &all_names).await;
                Ok(BackupOutcome::LostRace)
            }
            Err(e) => {
                // The commit may or may not have landed; only blobs we are sure nobody
                // references may go. If it landed, our blobs are referenced: keep them.
                let landed = self
                    .blobs
                    .get_if_exists(&paths.commit(self.table, self.task))
                    .await
                    .ok()
                    .flatten()
                    .and_then(|b| serde_json::from_slice::<CommitRecord>(&b).ok())
                    .is_some_and(|r| r.attempt == attempt);
                if landed {
                    return Ok(BackupOutcome::Committed { entities });
                }
                crate::blob_writer::delete_blobs(self.blobs, &all_names).await;
                Err(e.into())
            }
        }
    }

    /// Scans every segment of the range in key order into the writer.
    async fn scan_into(&self, writer: &mut BlobWriter) -> Result<(), TaskError> {
        let options = &self.job.options;
        let mut packer = Packer::new(PackerConfig {
            table: self.table.to_string(),
            block_bytes: options.block_bytes,
            batch_bytes: options.batch_bytes,
            compression: options.compression,
        });
        let (tx, mut rx) = mpsc::channel::<Result<EntityPage, tablevault_common::Error>>(1);
        let source = self.source.clone();
        let table = self.table.to_string();
        let filters = self.range.filters();
        let scanner = tokio::spawn(async move {
            for filter in filters {
                let query = Query {
                    filter,
                    top: Some(MAX_PAGE_SIZE),
                };
                let mut continuation = None;
                loop {
                    // Wait for room before fetching: one page is packed while the next is
                    // read, and no more than those two are held.
                    let Ok(slot) = tx.reserve().await else { return };
                    let page = source
                        .query_page(&table, &query, continuation.as_ref())
                        .await;
                    let next = page.as_ref().ok().and_then(|p| p.continuation.clone());
                    let failed = page.is_err();
                    slot.send(page);
                    if failed {
                        return;
                    }
                    match next {
                        Some(c) => continuation = Some(c),
                        None => break,
                    }
                }
            }
        });
        let result = async {
            let mut previous: Option<EntityKey> = None;
            loop {
                let page = tokio::select! {
                    page = rx.recv() => page,
                    _ = self.lost.cancelled() => return Err(TaskError::Lost),
                    _ = self.shutdown.cancelled() => return Err(TaskError::Shutdown),
                };
                let Some(page) = page else { break };
                let page = page?;
                self.stats
                    .read_bytes
                    .fetch_add(page.response_bytes as u64, Ordering::Relaxed);
                let count = page.entities.len() as u64;
                for entity in page.entities {
                    let key = EntityKey::new(&entity.partition_key, &entity.row_key);
                    if !self.range.contains(&key) || previous.as_ref().is_some_and(|p| &key <= p) {
                        return Err(TaskError::Permanent(format!(
                            "the service returned entity {key} outside the requested range {} or out of order",
                            self.range
                        )));
                    }
                    previous = Some(key);
                    if let Some(block) = packer.push(entity) {
                        self.stats
                            .stored_bytes
                            .fetch_add(block.data.len() as u64, Ordering::Relaxed);
                        writer.add(block).await?;
                    }
                }
                self.stats.entities.fetch_add(count, Ordering::Relaxed);
                self.check_stop()?;
            }
            for block in packer.finish() {
                self.stats
                    .stored_bytes
                    .fetch_add(block.data.len() as u64, Ordering::Relaxed);
                writer.add(block).await?;
            }
            Ok(())
        }
        .await;
        scanner.abort();
        result
    }
}
