//! One attempt at one restore task: fetch its block (or every block of its blob) with
//! ranged reads, verify and decode all of it before writing anything, then replay each
//! batch as one entity group transaction in the job's mode. Batches that cannot succeed
//! are recorded with their keys and the service's reason; nothing is dropped silently.
//! The attempt ends with a create-only "done" record.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt;
use tablevault_azure::Error;
use tablevault_azure::table::{
    BatchOperation, Cmp, Entity, Filter, Query, TableClient, batch_carries_keys,
};
use tablevault_core::keys::EntityKey;
use tablevault_core::protocol::{
    BatchFailure, CommitRecord, FAILED_METADATA, RestoreJob, RestoreMode, RestoreRecord,
    WRITTEN_METADATA, now_rfc3339,
};
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::{BackupPaths, CreateOutcome, Store, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::TaskError;
use crate::limiter::AdaptiveLimit;
use crate::pacer::RatePacer;

/// Most batches one task keeps in flight (the shared limiter may allow fewer, and the
/// limiter's rates space them).
const BATCHES_IN_FLIGHT: usize = 16;

/// What the attempt achieved.
#[derive(Debug)]
pub enum RestoreOutcome {
    /// This attempt's record was written.
    Done(Box<RestoreRecord>),
    /// Another attempt had already finished the task.
    AlreadyDone,
}

/// Everything one attempt needs.
pub struct RestoreAttempt<'a> {
    /// The backup's store.
    pub store: &'a Store,
    /// The backup id.
    pub backup_id: &'a str,
    /// The restore's plan.
    pub job: &'a RestoreJob,
    /// The commit record of the backed-up range.
    pub commit: &'a CommitRecord,
    /// The target account's Table client.
    pub target: &'a TableClient,
    /// This worker's limiter of the target account (write concurrency and rate).
    pub limiter: &'a Arc<AdaptiveLimit>,
    /// Table written to.
    pub target_table: &'a str,
    /// Task id.
    pub task: &'a str,
    /// Blob index in the commit record.
    pub blob: usize,
    /// Block index, or every block of the blob.
    pub block: Option<usize>,
    /// Cancelled when the queue message is lost.
    pub lost: CancellationToken,
    /// Cancelled when the worker shuts down.
    pub shutdown: CancellationToken,
    /// Live counters.
    pub stats: &'a WorkerStats,
    /// Who we are.
    pub worker: &'a str,
}

/// Counts of one batch.
#[derive(Debug, Default)]
struct BatchResult {
    written: u64,
    identical: u64,
    skipped: u64,
    failures: Vec<BatchFailure>,
}

impl BatchResult {
    /// Counts an entity an insert found already in the target with the backup's data:
    /// written, when the service last wrote it since the restore began (`began`), by an
    /// earlier attempt of this task that stopped before its record (a killed worker, a
    /// lost lease, an interrupted run), and identical otherwise. Counted identical, the
    /// entities a killed attempt had put back were reported as present before the
    /// restore: an `insert-skip` restore under worker kills reported 467 of 900 missing
    /// entities written, and 433 more as already there.
    fn settle_identical(&mut self, found: &Entity, began: Option<SystemTime>) {
        let written_since = began.is_some_and(|began| {
            found
                .timestamp
                .as_deref()
                .and_then(|t| humantime::parse_rfc3339(t).ok())
                .is_some_and(|at| at >= began)
        });
        if written_since {
            self.written += 1;
        } else {
            self.identical += 1;
        }
    }
}

fn key(e: &Entity) -> EntityKey {
    EntityKey::new(&e.partition_key, &e.row_key)
}

/// Errors about the batch's own data are recorded against the batch; anything else
/// (missing table, no access, throttling that outlasted the retries) ends the task.
fn is_batch_specific(e: &Error) -> bool {
    matches!(e.status(), Some(400 | 409 | 412 | 413)) && !e.has_code("TableNotFound")
}

impl RestoreAttempt<'_> {
    fn check_stop(&self) -> Result<(), TaskError> {
        crate::stop_requested(&self.lost, &self.shutdown)
    }

    /// From when what the service last wrote is this restore's own: the second after
    /// the one its plan was made in (`created_at` is to the second, and the target may
    /// have been written earlier in that second: a test that damaged a table and then
    /// restored it counted the damage's neighbours written). `None` when the plan does
    /// not say.
    fn began(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339(&self.job.created_at)
            .ok()
            .map(|planned| planned + std::time::Duration::from_secs(1))
    }

    /// Runs the attempt.
    pub async fn run(&self) -> Result<RestoreOutcome, TaskError> {
        let attempt = super::new_attempt_id();
        let span = tracing::info_span!("attempt", id = %&attempt[..8]);
        self.run_attempt(attempt).instrument(span).await
    }

    async fn run_attempt(&self, attempt: String) -> Result<RestoreOutcome, TaskError> {
        let started_at = now_rfc3339();
        let blob = self.commit.blobs.get(self.blob).ok_or_else(|| {
            TaskError::Permanent(format!(
                "commit record of {}/{} has no blob {}",
                self.commit.table, self.commit.task, self.blob
            ))
        })?;
        let blocks: Vec<_> = match self.block {
            Some(i) => vec![blob.blocks.get(i).ok_or_else(|| {
                TaskError::Permanent(format!("{} has no block {i}", blob.label(self.commit)))
            })?],
            None => blob.blocks.iter().collect(),
        };
        // Decode everything first: a corrupt block must not be half-written.
        let mut batches: Vec<Vec<Entity>> = Vec::new();
        for record in blocks {
            self.check_stop()?;
            let decoded = self
                .store
                .read_block(blob, record, self.job.compression)
                .await
                .map_err(|e| match e {
                    StoreError::Storage(e) => TaskError::from(e),
                    StoreError::Corrupt(why) => TaskError::Permanent(format!(
                        "corrupt backup data, nothing from it was written: {why}"
                    )),
                })?;
            if decoded.table != self.commit.table {
                return Err(TaskError::Permanent(format!(
                    "corrupt backup data, nothing from it was written: block of {} belongs to table {:?}",
                    blob.label(self.commit),
                    decoded.table
                )));
            }
            if let Some(e) = decoded
                .batches
                .iter()
                .flatten()
                .find(|e| !self.commit.range.contains(&key(e)))
            {
                return Err(TaskError::Permanent(format!(
                    "corrupt backup data, nothing from it was written: entity {} of {} lies outside range {}",
                    key(e),
                    blob.label(self.commit),
                    self.commit.range
                )));
            }
            batches.extend(decoded.batches);
        }
        let entities: u64 = batches.iter().map(|b| b.len() as u64).sum();
        self.check_stop()?;

        let mut record = RestoreRecord {
            restore: self.job.restore_id.clone(),
            source_table: self.commit.table.clone(),
            target_table: self.target_table.to_string(),
            task: self.task.to_string(),
            attempt,
            entities,
            written: 0,
            identical: 0,
            skipped: 0,
            failed: 0,
            batches: 0,
            failures: Vec::new(),
            started_at,
            finished_at: String::new(),
            worker: self.worker.to_string(),
        };
        // A block's batches mostly write one partition: they keep to its rate.
        let pacer = self.limiter.task_pacer();
        let mut results = futures::stream::iter(batches)
            .map(|batch| self.write_batch(batch, pacer.as_ref()))
            .buffer_unordered(BATCHES_IN_FLIGHT);
        let mut first_error: Option<TaskError> = None;
        while let Some(r) = results.next().await {
            match r {
                Ok(b) => {
                    record.written += b.written;
                    record.identical += b.identical;
                    record.skipped += b.skipped;
                    if b.failures.is_empty() {
                        record.batches += 1;
                    }
                    for f in b.failures {
                        record.failed += f.keys.len() as u64;
                        record.failures.push(f);
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        drop(results);
        if let Some(e) = first_error {
            return Err(e);
        }
        self.check_stop()?;
        record.finished_at = now_rfc3339();
        let path = BackupPaths::new(self.backup_id).restore_done(
            &self.job.restore_id,
            self.target_table,
            self.task,
        );
        let metadata = vec![
            (WRITTEN_METADATA.into(), record.written.to_string()),
            (FAILED_METADATA.into(), record.failed.to_string()),
        ];
        match self.store.create(&path, &record, metadata).await? {
            CreateOutcome::Created => {
                tracing::info!(
                    written = record.written,
                    failed = record.failed,
                    "restore task done"
                );
                Ok(RestoreOutcome::Done(Box::new(record)))
            }
            CreateOutcome::AlreadyExists => Ok(RestoreOutcome::AlreadyDone),
        }
    }

    fn operations(&self, batch: Vec<Entity>) -> Vec<BatchOperation> {
        batch
            .into_iter()
            .map(|e| match self.job.mode {
                RestoreMode::Upsert | RestoreMode::Replace => BatchOperation::InsertOrReplace(e),
                RestoreMode::Merge => BatchOperation::InsertOrMerge(e),
                RestoreMode::InsertSkip | RestoreMode::InsertFail => BatchOperation::Insert(e),
            })
            .collect()
    }

    /// Writes one batch of the backup: as one entity group transaction, except entities
    /// whose keys a change set cannot carry intact ([`batch_carries_keys`]), which go one
    /// request each.
    async fn write_batch(
        &self,
        batch: Vec<Entity>,
        pacer: Option<&RatePacer>,
    ) -> Result<BatchResult, TaskError> {
        let (grouped, single): (Vec<Entity>, Vec<Entity>) = batch
            .into_iter()
            .partition(|e| batch_carries_keys(&e.partition_key, &e.row_key));
        let mut result = self.write_group(grouped, pacer).await?;
        for entity in single {
            self.write_single(entity, &mut result, pacer).await?;
        }
        Ok(result)
    }

    /// Writes one entity with a single-entity request in the job's mode.
    async fn write_single(
        &self,
        entity: Entity,
        result: &mut BatchResult,
        pacer: Option<&RatePacer>,
    ) -> Result<(), TaskError> {
        self.check_stop()?;
        let table = self.target_table;
        if let Some(p) = pacer {
            p.acquire(1).await;
        }
        let guard = self.limiter.acquire_entities(1).await;
        self.check_stop()?;
        let written = match self.job.mode {
            RestoreMode::Upsert | RestoreMode::Replace => {
                self.target.upsert_entity(table, &entity, false).await
            }
            RestoreMode::Merge => self.target.upsert_entity(table, &entity, true).await,
            RestoreMode::InsertSkip | RestoreMode::InsertFail => {
                self.target.insert_entity(table, &entity).await
            }
        };
        let k = key(&entity);
        match written {
            Ok(()) => {
                guard.success();
                result.written += 1;
                WorkerStats::add(&self.stats.entities, 1);
            }
            Err(e) if e.has_code("EntityAlreadyExists") => {
                drop(guard);
                let current = self
                    .target
                    .get_entity(table, &entity.partition_key, &entity.row_key)
                    .await?;
                match current {
                    None => {
                        return Err(TaskError::Transient(format!(
                            "entity {k} conflicted on insert and then vanished; will retry"
                        )));
                    }
                    Some(c) if c.same_data(&entity) => {
                        result.settle_identical(&c, self.began());
                    }
                    Some(_) if self.job.mode == RestoreMode::InsertSkip => result.skipped += 1,
                    Some(_) => result.failures.push(BatchFailure {
                        message: format!(
                            "entity {k} already exists in {table} with different data (insert-fail mode)"
                        ),
                        keys: vec![k],
                        status: 409,
                        code: Some("Conflict".into()),
                    }),
                }
            }
            Err(e) if is_batch_specific(&e) => {
                drop(guard);
                tracing::warn!(entity = %k, error = %e, "an entity cannot be restored; recording it");
                result.failures.push(BatchFailure {
                    message: format!("entity {k}: {e}"),
                    keys: vec![k],
                    status: e.status().unwrap_or(0),
                    code: e.code().map(str::to_string),
                });
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Writes entities of one partition as one change set, resolving insert conflicts,
    /// retrying what can be retried.
    async fn write_group(
        &self,
        batch: Vec<Entity>,
        pacer: Option<&RatePacer>,
    ) -> Result<BatchResult, TaskError> {
        self.check_stop()?;
        let mut result = BatchResult::default();
        let mut ops = self.operations(batch);
        // Each round either writes everything left or resolves at least one conflict.
        for _round in 0..4 {
            if ops.is_empty() {
                return Ok(result);
            }
            if let Some(p) = pacer {
                p.acquire(ops.len() as u64).await;
            }
            let guard = self.limiter.acquire_entities(ops.len() as u64).await;
            // Checked again after the wait: batches in flight queue at the pacer, and a
            // stop asked meanwhile (a cancel, a lost lease) must hold them there.
            self.check_stop()?;
            match self.target.submit_batch(self.target_table, &ops).await {
                Ok(()) => {
                    guard.success();
                    result.written += ops.len() as u64;
                    WorkerStats::add(&self.stats.entities, ops.len() as u64);
                    return Ok(result);
                }
                Err(e)
                    if e.has_code("EntityAlreadyExists")
                        && matches!(
                            self.job.mode,
                            RestoreMode::InsertSkip | RestoreMode::InsertFail
                        ) =>
                {
                    drop(guard);
                    ops = self.resolve_conflicts(ops, &mut result).await?;
                }
                // One entity the service refuses fails its whole change set: the batch's
                // other entities (up to 99) are written one request each, so only what
                // the service refuses is left out, each with its own reason.
                Err(e) if is_batch_specific(&e) && ops.len() > 1 => {
                    drop(guard);
                    tracing::warn!(entities = ops.len(), error = %e, "a batch was refused; writing its entities one at a time");
                    for entity in ops.into_iter().filter_map(BatchOperation::into_entity) {
                        self.write_single(entity, &mut result, pacer).await?;
                    }
                    return Ok(result);
                }
                Err(e) if is_batch_specific(&e) => {
                    drop(guard);
                    let keys: Vec<EntityKey> = ops
                        .iter()
                        .map(|o| EntityKey::new(o.keys().0, o.keys().1))
                        .collect();
                    let (status, code, message) = match &e {
                        Error::BatchOperation {
                            status,
                            code,
                            message,
                            index,
                            ..
                        } => (
                            *status,
                            code.clone(),
                            match index.and_then(|i| keys.get(i)) {
                                Some(k) => format!("entity {k}: {message}"),
                                None => message.clone(),
                            },
                        ),
                        other => (
                            other.status().unwrap_or(0),
                            other.code().map(str::to_string),
                            other.to_string(),
                        ),
                    };
                    tracing::warn!(entities = keys.len(), %message, "a batch cannot be restored; recording it");
                    result.failures.push(BatchFailure {
                        keys,
                        status,
                        code,
                        message,
                    });
                    return Ok(result);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(TaskError::Transient(
            "entities kept appearing in the target while inserting; will retry".into(),
        ))
    }

    /// After an insert conflict: reads the batch's entities from the target (only its own
    /// keys, so memory is one batch whatever else the partition holds), keeps the absent
    /// ones for insertion, and settles the others: identical to the backup (an earlier
    /// attempt wrote it) or different (skipped, or a failure).
    async fn resolve_conflicts(
        &self,
        ops: Vec<BatchOperation>,
        result: &mut BatchResult,
    ) -> Result<Vec<BatchOperation>, TaskError> {
        let pk = ops[0].keys().0.to_string();
        let row_keys: Vec<&str> = ops.iter().map(|o| o.keys().1).collect();
        let mut existing: HashMap<String, Entity> = HashMap::with_capacity(ops.len());
        for filter in point_filters(&pk, &row_keys) {
            let found = self
                .target
                .pages(self.target_table, Query::scan(Some(filter)))
                .collect_entities()
                .await?;
            existing.extend(found.into_iter().map(|e| (e.row_key.clone(), e)));
        }
        let began = self.began();
        let mut absent = Vec::with_capacity(ops.len());
        let mut conflicts = Vec::new();
        for op in ops {
            let BatchOperation::Insert(entity) = &op else {
                absent.push(op);
                continue;
            };
            match existing.get(&entity.row_key) {
                None => absent.push(op),
                Some(current) if current.same_data(entity) => {
                    result.settle_identical(current, began);
                }
                Some(_) if self.job.mode == RestoreMode::InsertSkip => result.skipped += 1,
                Some(_) => conflicts.push(key(entity)),
            }
        }
        if !conflicts.is_empty() {
            result.failures.push(BatchFailure {
                message: format!(
                    "{} entities already exist in {} with different data (insert-fail mode)",
                    conflicts.len(),
                    self.target_table
                ),
                keys: conflicts,
                status: 409,
                code: Some("Conflict".into()),
            });
        }
        Ok(absent)
    }
}

/// Most comparisons the service allows in one `$filter`.
const MAX_FILTER_COMPARISONS: usize = 15;

/// Filters that read exactly the given entities of one partition:
/// `PartitionKey eq pk and (RowKey eq r1 or …)`, each within the service's limit on
/// comparisons.
fn point_filters(pk: &str, row_keys: &[&str]) -> Vec<Filter> {
    row_keys
        .chunks(MAX_FILTER_COMPARISONS - 1)
        .map(|chunk| {
            let any = chunk
                .iter()
                .map(|rk| Filter::row_key(Cmp::Eq, rk))
                .reduce(Filter::or)
                .expect("chunks are not empty");
            Filter::partition_key(Cmp::Eq, pk).and(any)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflict_checks_name_only_the_batchs_keys_within_the_service_limit() {
        let keys: Vec<String> = (0..100).map(|i| format!("r{i:03}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let filters = point_filters("p'q", &refs);
        assert_eq!(filters.len(), 8);
        for f in &filters {
            let text = f.as_str();
            let comparisons = text.matches(" eq ").count();
            assert!(comparisons <= MAX_FILTER_COMPARISONS, "{text}");
            assert!(!text.contains(" ge ") && !text.contains(" le "), "{text}");
            assert!(text.starts_with("(PartitionKey eq 'p''q')"), "{text}");
        }
        let named: usize = filters
            .iter()
            .map(|f| f.as_str().matches("RowKey eq").count())
            .sum();
        assert_eq!(named, 100);
    }
}
