//! The files of a job: the backup plan (`job.json`), commit and poison records, the
//! manifest, and a restore's plan and per-task records. All are JSON; none holds a secret
//! (accounts are named, never authenticated).

use serde::{Deserialize, Serialize};

use tablevault_azure::{ConfigError, Service, StorageAccount};

use super::JobStatus;
use crate::format::Compression;
use crate::keys::{EntityKey, KeyRange};

/// Where a table lives (no secrets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountRef {
    /// Account name.
    pub account: String,
    /// Table service endpoint, as the coordinator used it.
    pub table_endpoint: String,
}

impl AccountRef {
    /// How a job names an account: its name and Table endpoint, never its credentials.
    pub fn of(account: &StorageAccount) -> Result<Self, ConfigError> {
        Ok(AccountRef {
            account: account.name().to_string(),
            table_endpoint: account
                .endpoint(Service::Table)?
                .as_str()
                .trim_end_matches('/')
                .to_string(),
        })
    }
}

/// Backup settings every worker must apply the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupOptions {
    /// Whether workers split the unread part of a large range off to idle workers.
    /// Absent (false) in jobs of older planners.
    #[serde(default)]
    pub dynamic_split: bool,
    /// Block compression.
    pub compression: Compression,
    /// Blocks per data blob (under 50,000).
    pub blocks_per_blob: usize,
    /// Uncompressed block size at which a block is sealed.
    pub block_bytes: usize,
    /// Restore-request budget of one batch.
    pub batch_bytes: usize,
    /// Deliveries after which a task is poisoned.
    pub max_attempts: u64,
    /// The task queue.
    pub queue: String,
    /// Most entities per second the whole fleet reads from the source account
    /// (`--max-rate`), shared among the live workers like the account's own target;
    /// absent: the account's target alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate: Option<u32>,
}

/// One planned task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedTask {
    /// Task id, unique within the table.
    pub task: String,
    /// The key range it covers.
    pub range: KeyRange,
}

/// The plan for one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TablePlan {
    /// Table name.
    pub name: String,
    /// How the ranges were chosen (`split-keys`, `discovered`, `whole`).
    pub planning: String,
    /// The tasks; their ranges tile the key space.
    pub tasks: Vec<PlannedTask>,
}

/// `job.json`: everything a worker needs to run a task of this backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupJob {
    /// Version of this file's layout.
    pub protocol: u32,
    /// Format version of the data blobs.
    pub format: u32,
    /// Backup id.
    pub backup_id: String,
    /// When the plan was made.
    pub created_at: String,
    /// Source account.
    pub source: AccountRef,
    /// Settings.
    pub options: BackupOptions,
    /// Tables and their tasks.
    pub tables: Vec<TablePlan>,
    /// Version of the tablevault that planned it.
    pub tool_version: String,
}

impl BackupJob {
    /// The plan of one table.
    pub fn table(&self, name: &str) -> Option<&TablePlan> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// Total planned tasks.
    pub fn task_count(&self) -> usize {
        self.tables.iter().map(|t| t.tasks.len()).sum()
    }
}

/// How restored entities meet entities already in the target table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RestoreMode {
    /// Insert or replace: the backup wins; safe under redelivery.
    #[default]
    Upsert,
    /// Insert or merge: backed-up properties win, other existing properties stay.
    Merge,
    /// Insert only; entities that exist are left alone.
    InsertSkip,
    /// Insert only; an existing entity that differs from the backup is a failure.
    InsertFail,
    /// Make each table exactly the backup: upsert every entity, then delete the entities
    /// the backup does not hold. Never the default.
    Replace,
}

impl RestoreMode {
    /// The name on the command line and in files.
    pub fn as_str(self) -> &'static str {
        match self {
            RestoreMode::Upsert => "upsert",
            RestoreMode::Merge => "merge",
            RestoreMode::InsertSkip => "insert-skip",
            RestoreMode::InsertFail => "insert-fail",
            RestoreMode::Replace => "replace",
        }
    }
}

impl std::str::FromStr for RestoreMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "upsert" => Ok(RestoreMode::Upsert),
            "merge" => Ok(RestoreMode::Merge),
            "insert-skip" => Ok(RestoreMode::InsertSkip),
            "insert-fail" => Ok(RestoreMode::InsertFail),
            "replace" => Ok(RestoreMode::Replace),
            other => Err(format!(
                "unknown mode {other:?} (upsert, merge, insert-skip, insert-fail or replace)"
            )),
        }
    }
}

/// One table of a restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreTable {
    /// Table in the backup.
    pub source: String,
    /// Table written to.
    pub target: String,
    /// Entities the backup holds for it.
    pub entities: u64,
    /// Tasks it was cut into.
    pub tasks: u64,
}

/// `restores/<restore>/job.json`: a restore's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreJob {
    /// Version of this file's layout.
    pub protocol: u32,
    /// Format version of the backup.
    pub format: u32,
    /// Restore id.
    pub restore_id: String,
    /// Backup id.
    pub backup_id: String,
    /// When it was planned.
    pub created_at: String,
    /// Account written to.
    pub target: AccountRef,
    /// How existing entities are treated.
    pub mode: RestoreMode,
    /// Block compression of the backup.
    pub compression: Compression,
    /// Blobs whose blocks hold at most this many uncompressed bytes in all are restored
    /// by one task; larger blobs get one task per block.
    pub per_blob_max_bytes: u64,
    /// Deliveries after which a task is poisoned.
    pub max_attempts: u64,
    /// Tables.
    pub tables: Vec<RestoreTable>,
    /// Whether the target is read back and compared with the backup at the end.
    #[serde(default = "default_true")]
    pub verify: bool,
    /// Most entities per second the whole fleet writes to the target account
    /// (`--max-rate`); absent: the account's target alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate: Option<u32>,
    /// Version of the tablevault that planned it.
    pub tool_version: String,
}

fn default_true() -> bool {
    true
}

/// `restores/<restore>/deleted/<run>.json`: what one run of a `replace` restore deleted
/// of the entities the backup does not hold. A resumed restore's report sums every
/// run's; a run killed outright left none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionsRecord {
    /// Entities this run deleted (each counted when its request succeeded).
    pub deleted: u64,
    /// When it was recorded.
    pub at: String,
    /// Which process recorded it (host and pid).
    pub by: String,
}

/// `restores/<restore>/state.json`: where a restore stands, as the last command that
/// acted on it recorded. Workers run a restore's tasks only while it is `in-progress`, so
/// an interrupted, cancelled or finished restore writes nothing more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreStateRecord {
    /// The state.
    pub status: JobStatus,
    /// When it was recorded.
    pub at: String,
    /// Which process recorded it (host and pid).
    pub by: String,
    /// Why, for people reading it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl RestoreStateRecord {
    /// A state recorded now by this process.
    pub fn now(status: JobStatus, note: Option<String>) -> Self {
        RestoreStateRecord {
            status,
            at: super::now_rfc3339(),
            by: super::worker_identity(),
            note,
        }
    }

    /// Whether workers may run the restore's tasks.
    pub fn is_live(&self) -> bool {
        self.status == JobStatus::InProgress
    }
}

/// A batch that could not be written, with everything needed to act on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchFailure {
    /// Keys of the entities not written.
    pub keys: Vec<EntityKey>,
    /// HTTP status of the failure (409 for insert-fail conflicts).
    pub status: u16,
    /// The service's error code, or `Conflict` for an insert-fail conflict.
    pub code: Option<String>,
    /// The service's reason.
    pub message: String,
}

/// Blob metadata of a restore's done record: entities its task wrote.
pub const WRITTEN_METADATA: &str = "tvwritten";

/// Blob metadata of a restore's done record: entities in its batches that failed, so
/// `resume` finds the tasks to run again from one listing, without reading a record.
pub const FAILED_METADATA: &str = "tvfailed";

/// `restores/<restore>/done/<table>/<task>.json`: what one restore task did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRecord {
    /// Restore id.
    pub restore: String,
    /// Table read from the backup.
    pub source_table: String,
    /// Table written.
    pub target_table: String,
    /// Task id.
    pub task: String,
    /// Attempt id.
    pub attempt: String,
    /// Entities in the task's blocks.
    pub entities: u64,
    /// Entities written by this attempt.
    pub written: u64,
    /// Entities already present and identical to the backup (insert modes).
    pub identical: u64,
    /// Entities present, different and left alone (`insert-skip`).
    pub skipped: u64,
    /// Entities in batches that failed.
    pub failed: u64,
    /// Entity group transactions sent successfully.
    pub batches: u64,
    /// The failed batches.
    pub failures: Vec<BatchFailure>,
    /// When the attempt started.
    pub started_at: String,
    /// When it finished.
    pub finished_at: String,
    /// Which worker ran it.
    pub worker: String,
}

/// One block inside a data blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockRecord {
    /// Block id within the blob.
    pub id: String,
    /// Byte offset in the blob.
    pub offset: u64,
    /// Stored length.
    pub length: u64,
    /// Uncompressed XML length.
    pub raw_length: u64,
    /// Entities.
    pub entities: u64,
    /// Batches.
    pub batches: u64,
    /// Hex SHA-256 of the stored bytes.
    pub sha256: String,
    /// First entity's key.
    pub first_key: EntityKey,
    /// Last entity's key.
    pub last_key: EntityKey,
    /// Keys inside the block, about every [`crate::format::MARK_ENTITIES`] entities, with
    /// how many come before each in the block: what the next backup plans equal ranges
    /// from (a block holds thousands of entities). Absent in records of earlier versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<KeyMark>,
}

/// A key inside a block and how many of the block's entities come before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyMark {
    /// The key (of the first entity of a batch).
    pub key: EntityKey,
    /// Entities of the block before it.
    pub before: u64,
    /// Whether the key is the first of its partition (the entity before it in the block
    /// is of another). Absent (false) in records written before it was added.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub starts_partition: bool,
}

/// One data blob, or (format 2) an inline blob: the stored bytes of a small range's
/// blocks kept in the commit record itself, which then names no data blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRecord {
    /// Blob name; absent (empty) for an inline blob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Entities in all its blocks.
    pub entities: u64,
    /// Stored size.
    pub length: u64,
    /// Its blocks, in order.
    pub blocks: Vec<BlockRecord>,
    /// An inline blob's stored bytes, base64 (standard alphabet, padded): what a data
    /// blob would hold. Absent for a data blob, and where a reader dropped it from a
    /// record it keeps only for its counts ([`CommitRecord::drop_inline_bytes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
}

impl BlobRecord {
    /// Whether its bytes are in the commit record rather than in a data blob of its own.
    pub fn is_inline(&self) -> bool {
        self.name.is_empty()
    }

    /// An inline blob's stored bytes, decoded; `None` for a data blob. An entry is one or
    /// the other, never both or neither, and an inline blob's bytes are base64 of exactly
    /// `length` bytes; otherwise, what is wrong with it.
    pub fn inline_bytes(&self) -> Result<Option<Vec<u8>>, String> {
        use base64::Engine;
        match (&self.inline, self.is_inline()) {
            (None, false) => Ok(None),
            (None, true) => {
                Err("holds no bytes: it has neither a data blob's name nor inline bytes".into())
            }
            (Some(_), false) => Err(format!(
                "cannot also name a data blob ({}) when it holds inline bytes too",
                self.name
            )),
            (Some(text), true) => match base64::engine::general_purpose::STANDARD.decode(text) {
                Err(e) => Err(format!("holds inline bytes that are not base64: {e}")),
                Ok(bytes) if bytes.len() as u64 != self.length => Err(format!(
                    "holds {} inline bytes, recorded {}",
                    bytes.len(),
                    self.length
                )),
                Ok(bytes) => Ok(Some(bytes)),
            },
        }
    }

    /// What is wrong with its shape in a commit record of backup format `format`, if
    /// anything: [`Self::inline_bytes`]'s rules, and no inline blob before format 2. Its
    /// blocks' own checks come when they are read; this one needs no request, so a
    /// restore can refuse a damaged record before it writes anything.
    pub fn shape_problem(&self, format: u32) -> Option<String> {
        if self.is_inline() && self.inline.is_some() && format < crate::format::INLINE_SINCE_FORMAT
        {
            return Some(format!(
                "is inline in a record of format {format}, which has none"
            ));
        }
        self.inline_bytes().err()
    }

    /// How messages name it: the data blob, or the range whose record holds it.
    pub fn label<'a>(&'a self, commit: &'a CommitRecord) -> std::borrow::Cow<'a, str> {
        if self.is_inline() {
            format!("the inline blob of {}/{}", commit.table, commit.task).into()
        } else {
            self.name.as_str().into()
        }
    }
}

/// `tasks/<table>/<task>.json`: what the winning attempt of a task wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRecord {
    /// Format version of the data.
    pub format: u32,
    /// Backup id.
    pub job: String,
    /// Table.
    pub table: String,
    /// Task id.
    pub task: String,
    /// The attempt whose blobs these are.
    pub attempt: String,
    /// The key range scanned.
    pub range: KeyRange,
    /// Entities written.
    pub entities: u64,
    /// Uncompressed bytes.
    pub raw_bytes: u64,
    /// Stored bytes.
    pub stored_bytes: u64,
    /// Data blobs, in key order.
    pub blobs: Vec<BlobRecord>,
    /// When the attempt started scanning.
    pub started_at: String,
    /// When it committed.
    pub finished_at: String,
    /// Which worker ran it (host and process).
    pub worker: String,
    /// Tasks this attempt put on the queue for the upper parts of the task's range it did
    /// not read itself (dynamic splitting): `range` ends where the first of them starts.
    /// Their commits, and those of the tasks they split off in turn, complete the task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub split_off: Vec<PlannedTask>,
}

impl CommitRecord {
    /// Drops the bytes of its inline blobs, for a record kept only for its ranges, counts
    /// and block lists (a job's state, a plan): what stays in memory is then bounded by
    /// blocks, not by data.
    pub fn drop_inline_bytes(&mut self) {
        for blob in &mut self.blobs {
            blob.inline = None;
        }
    }

    /// Names of the data blobs it references (inline blobs have none).
    pub fn data_blob_names(&self) -> impl Iterator<Item = &str> {
        self.blobs
            .iter()
            .filter(|b| !b.is_inline())
            .map(|b| b.name.as_str())
    }
}

/// `poison/<table>/<task>.json`: why a task was given up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoisonRecord {
    /// Backup id.
    pub job: String,
    /// Table.
    pub table: String,
    /// Task id.
    pub task: String,
    /// Why.
    pub reason: String,
    /// Deliveries so far.
    pub dequeue_count: u64,
    /// When.
    pub at: String,
    /// Which worker gave up.
    pub worker: String,
    /// The keys whose entities the task would have backed up or restored: what is
    /// missing because it was given up. Absent in records of older writers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<KeyRange>,
}

/// One range of a table in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestRange {
    /// Task id.
    pub task: String,
    /// Key range.
    pub range: KeyRange,
    /// Entities.
    pub entities: u64,
    /// Blob name of the commit record listing its blobs and blocks.
    pub commit: String,
}

/// One table in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestTable {
    /// Table name.
    pub name: String,
    /// Entities.
    pub entities: u64,
    /// Uncompressed bytes.
    pub raw_bytes: u64,
    /// Stored bytes.
    pub stored_bytes: u64,
    /// Data blobs.
    pub blobs: u64,
    /// Blocks.
    pub blocks: u64,
    /// Ranges in key order; they tile the key space.
    pub ranges: Vec<ManifestRange>,
}

/// `manifest.json`: written last. Its presence means the backup is complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version of the data.
    pub format: u32,
    /// Backup id.
    pub backup_id: String,
    /// When the plan was made.
    pub created_at: String,
    /// When the manifest was written.
    pub completed_at: String,
    /// Source account.
    pub source: AccountRef,
    /// Block compression.
    pub compression: Compression,
    /// Tables.
    pub tables: Vec<ManifestTable>,
    /// Entities in all tables.
    pub entities: u64,
    /// Uncompressed bytes in all tables.
    pub raw_bytes: u64,
    /// Stored bytes in all tables.
    pub stored_bytes: u64,
    /// Version of the tablevault that finalized it.
    pub tool_version: String,
}

/// `learned.json`: what a complete backup learned about its tables for the next backup
/// of the same account to plan from. Each large table's blocks and marks, merged down to
/// at most a few thousand parts, so a repeat plan reads this one file beside the
/// manifest instead of every commit record (tens of thousands of reads, and megabytes of
/// marks, for an account of large tables cut into hundreds of ranges each). Written by
/// whoever finalizes, beside the manifest; absent for backups of small tables only, of
/// earlier versions, or whose finalizer stopped in between. Planning falls back to the
/// commit records then. It decides balance only, never what is backed up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Learned {
    /// Format version of the backup it was learned from.
    pub format: u32,
    /// The backup it was learned from.
    pub backup_id: String,
    /// That backup's source account.
    pub source: AccountRef,
    /// Tables large enough to be planned into more than one range, in the job's order.
    pub tables: Vec<LearnedTable>,
}

/// What a backup learned about one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LearnedTable {
    /// Table name.
    pub name: String,
    /// Entities backed up (the parts' sum).
    pub entities: u64,
    /// Distinct workers that committed its ranges: a fleet of daemons is planned one
    /// task per slot of as many workers.
    pub writers: usize,
    /// The table in key order, in parts of about equal size.
    pub parts: Vec<Part>,
}

/// A part of a table between two keys a backup recorded (a block start or a mark): its
/// first key, its entities, and whether that key is the first of its partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// Its first key.
    pub first: EntityKey,
    /// Entities from it to the next part.
    pub entities: u64,
    /// Whether `first` is the first key of its partition.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub starts_partition: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job of an earlier version: no `dynamic_split`, no `max_rate`.
    const OLD_JOB: &str = r#"{
        "protocol": 1, "format": 1, "backup_id": "20261122T114600Z-1a2b3c4d",
        "created_at": "2026-11-22T11:46:00Z",
        "source": { "account": "a", "table_endpoint": "https://a.table.core.windows.net" },
        "options": { "compression": "zstd", "blocks_per_blob": 20, "block_bytes": 3984588,
                     "batch_bytes": 3500000, "max_attempts": 5, "queue": "q" },
        "tables": [], "tool_version": "0.1.0" }"#;

    /// A blob entry is a data blob or (format 2) an inline blob of exactly its length,
    /// and a data blob's entry reads and writes as format 1 wrote it: no `inline`.
    #[test]
    fn a_blob_entry_is_a_data_blob_or_an_inline_blob_of_its_length() {
        let v1 = r#"{"name": "j/data/T/r0000/a/00000", "entities": 3, "length": 4, "blocks": []}"#;
        let data: BlobRecord = serde_json::from_str(v1).unwrap();
        assert!(!data.is_inline());
        assert_eq!(data.shape_problem(1), None);
        assert!(!serde_json::to_string(&data).unwrap().contains("inline"));
        let inline = BlobRecord {
            name: String::new(),
            inline: Some("AAECAw==".into()),
            ..data.clone()
        };
        assert!(inline.is_inline());
        assert!(!serde_json::to_string(&inline).unwrap().contains("\"name\""));
        assert_eq!(inline.shape_problem(2), None);
        let problem = |b: &BlobRecord, format| b.shape_problem(format).unwrap_or_default();
        assert!(problem(&inline, 1).contains("format 1"));
        let both = BlobRecord {
            name: "x".into(),
            ..inline.clone()
        };
        assert!(problem(&both, 2).contains("too"));
        let neither = BlobRecord {
            inline: None,
            ..inline.clone()
        };
        assert!(problem(&neither, 2).contains("neither"));
        for (text, expected) in [("AAEC", "3 inline bytes"), ("**", "not base64")] {
            let b = BlobRecord {
                inline: Some(text.into()),
                ..inline.clone()
            };
            assert!(
                problem(&b, 2).contains(expected),
                "{text}: {}",
                problem(&b, 2)
            );
        }
    }

    #[test]
    fn a_rate_cap_is_optional_and_written_only_when_set() {
        let mut job: BackupJob = serde_json::from_str(OLD_JOB).unwrap();
        assert_eq!(job.options.max_rate, None);
        assert!(!job.options.dynamic_split);
        let text = serde_json::to_string(&job).unwrap();
        assert!(!text.contains("max_rate"), "{text}");
        job.options.max_rate = Some(8_000);
        let text = serde_json::to_string(&job).unwrap();
        let back: BackupJob = serde_json::from_str(&text).unwrap();
        assert_eq!(back.options.max_rate, Some(8_000));
        assert_eq!(back, job);
    }
}
