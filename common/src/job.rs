//! The job protocol shared by coordinator and workers: where a backup's blobs live, the
//! plan (`job.json`), task messages, commit records, poison records and the manifest.
//!
//! All job state lives in blobs, so coordinators and workers are stateless. Nothing here
//! carries a secret: accounts are identified by name and endpoint only.

use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use crate::format::Compression;
use crate::keys::{EntityKey, KeyRange};

/// Default container for backups.
pub const DEFAULT_CONTAINER: &str = "tablevault";
/// Default task queue.
pub const DEFAULT_QUEUE: &str = "tablevault-tasks";
/// Version of the job files and messages.
pub const PROTOCOL_VERSION: u32 = 1;

/// The poison queue that goes with a task queue.
pub fn poison_queue_name(queue: &str) -> String {
    format!("{queue}-poison")
}

/// Now, as RFC 3339 UTC with seconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// A new backup id: sortable by time, unique by a random suffix
/// (`20261122T114600Z-1a2b3c4d`).
pub fn new_backup_id() -> String {
    let t: String = now_rfc3339()
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    let r = uuid::Uuid::new_v4().simple().to_string();
    format!("{t}-{}", &r[..8])
}

/// Whether a string is a plausible backup id (safe as a blob path segment).
pub fn is_valid_backup_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !id.starts_with('.')
}

/// Blob names of one backup, per the layout in docs/ARCHITECTURE.md.
#[derive(Debug, Clone)]
pub struct BackupPaths {
    id: String,
}

impl BackupPaths {
    /// Paths for a backup id.
    pub fn new(id: &str) -> Self {
        BackupPaths { id: id.to_string() }
    }

    /// The backup id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `<id>/job.json`: the plan.
    pub fn job(&self) -> String {
        format!("{}/job.json", self.id)
    }

    /// `<id>/enqueued`: written once every planned task is on the queue.
    pub fn enqueued_marker(&self) -> String {
        format!("{}/enqueued", self.id)
    }

    /// `<id>/manifest.json`: written last; its presence means the backup is complete.
    pub fn manifest(&self) -> String {
        format!("{}/manifest.json", self.id)
    }

    /// `<id>/data/`.
    pub fn data_root(&self) -> String {
        format!("{}/data/", self.id)
    }

    /// `<id>/data/<table>/<task>/<attempt>/`.
    pub fn attempt_prefix(&self, table: &str, task: &str, attempt: &str) -> String {
        format!("{}/data/{table}/{task}/{attempt}/", self.id)
    }

    /// One data blob of an attempt.
    pub fn data_blob(&self, table: &str, task: &str, attempt: &str, index: usize) -> String {
        format!("{}{index:05}", self.attempt_prefix(table, task, attempt))
    }

    /// `<id>/tasks/`.
    pub fn commits_root(&self) -> String {
        format!("{}/tasks/", self.id)
    }

    /// `<id>/tasks/<table>/<task>.json`: the commit record of the attempt that won.
    pub fn commit(&self, table: &str, task: &str) -> String {
        format!("{}/tasks/{table}/{task}.json", self.id)
    }

    /// `<id>/poison/`.
    pub fn poison_root(&self) -> String {
        format!("{}/poison/", self.id)
    }

    /// `<id>/poison/<table>/<task>.json`: why a task was given up.
    pub fn poison(&self, table: &str, task: &str) -> String {
        format!("{}/poison/{table}/{task}.json", self.id)
    }

    /// `<id>/restores/`.
    pub fn restores_root(&self) -> String {
        format!("{}/restores/", self.id)
    }

    /// `<id>/restores/<restore>/job.json`: a restore's plan.
    pub fn restore_job(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/job.json", self.id)
    }

    /// `<id>/restores/<restore>/done/`.
    pub fn restore_done_root(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/done/", self.id)
    }

    /// `<id>/restores/<restore>/done/<table>/<task>.json`: what a restore task wrote.
    pub fn restore_done(&self, restore: &str, table: &str, task: &str) -> String {
        format!("{}/restores/{restore}/done/{table}/{task}.json", self.id)
    }

    /// `<id>/restores/<restore>/poison/`.
    pub fn restore_poison_root(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/poison/", self.id)
    }

    /// `<id>/restores/<restore>/poison/<table>/<task>.json`.
    pub fn restore_poison(&self, restore: &str, table: &str, task: &str) -> String {
        format!("{}/restores/{restore}/poison/{table}/{task}.json", self.id)
    }

    /// `<id>/restores/<restore>/report.json`: the final report.
    pub fn restore_report(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/report.json", self.id)
    }
}

/// Where a table lives (no secrets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountRef {
    /// Account name.
    pub account: String,
    /// Table service endpoint, as the coordinator used it.
    pub table_endpoint: String,
}

/// Backup settings every worker must apply the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupOptions {
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

/// What a queue message asks a worker to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TaskKind {
    /// Scan a key range of a table into blobs.
    Backup {
        /// The range.
        range: KeyRange,
    },
    /// Replay one data blob, or one block of it, into a table. The message names the
    /// target table (`table`); the rest comes from the backup's records.
    Restore {
        /// Restore id (under the backup's `restores/`).
        restore: String,
        /// Table the data was backed up from.
        source_table: String,
        /// Task id of the backed-up range (its commit record holds the blob list).
        range_task: String,
        /// Index of the blob in the commit record.
        blob: usize,
        /// Index of the block in the blob, or `None` for every block of the blob.
        block: Option<usize>,
    },
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
}

impl RestoreMode {
    /// The name on the command line and in files.
    pub fn as_str(self) -> &'static str {
        match self {
            RestoreMode::Upsert => "upsert",
            RestoreMode::Merge => "merge",
            RestoreMode::InsertSkip => "insert-skip",
            RestoreMode::InsertFail => "insert-fail",
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
            other => Err(format!(
                "unknown mode {other:?} (upsert, merge, insert-skip or insert-fail)"
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
    /// Version of the tablevault that planned it.
    pub tool_version: String,
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

/// A queue message. Sent as base64 of its JSON, so any key survives the queue's XML.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskMessage {
    /// Protocol version.
    pub v: u32,
    /// Container holding the job.
    pub container: String,
    /// Backup id.
    pub job: String,
    /// Table.
    pub table: String,
    /// Task id.
    pub task: String,
    /// What to do.
    #[serde(flatten)]
    pub kind: TaskKind,
}

impl TaskMessage {
    /// The queue text.
    pub fn encode(&self) -> String {
        BASE64.encode(serde_json::to_vec(self).expect("task messages serialize"))
    }

    /// Parses queue text, saying what is wrong with a bad message.
    pub fn decode(text: &str) -> Result<Self, String> {
        let bytes = BASE64
            .decode(text.trim())
            .map_err(|_| "message is not base64".to_string())?;
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("message is not JSON: {e}"))?;
        let v = value.get("v").and_then(|v| v.as_u64());
        if v != Some(PROTOCOL_VERSION as u64) {
            return Err(format!("unsupported message version {v:?}"));
        }
        let msg: TaskMessage =
            serde_json::from_value(value).map_err(|e| format!("message is malformed: {e}"))?;
        if !is_valid_backup_id(&msg.job) {
            return Err(format!("message has an invalid job id {:?}", msg.job));
        }
        if !crate::table::is_valid_table_name(&msg.table) {
            return Err(format!("message has an invalid table name {:?}", msg.table));
        }
        if !is_valid_backup_id(&msg.task) {
            return Err(format!("message has an invalid task id {:?}", msg.task));
        }
        if let TaskKind::Restore {
            restore,
            source_table,
            range_task,
            ..
        } = &msg.kind
        {
            if !is_valid_backup_id(restore) || !is_valid_backup_id(range_task) {
                return Err("message has an invalid restore or range id".into());
            }
            if !crate::table::is_valid_table_name(source_table) {
                return Err(format!(
                    "message has an invalid source table {source_table:?}"
                ));
            }
        }
        Ok(msg)
    }
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
}

/// One data blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRecord {
    /// Blob name.
    pub name: String,
    /// Entities in all its blocks.
    pub entities: u64,
    /// Stored size.
    pub length: u64,
    /// Its blocks, in order.
    pub blocks: Vec<BlockRecord>,
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

/// `host/pid`, to say which worker did something.
pub fn worker_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into());
    format!("{host}/{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_bad_ones_say_why() {
        let m = TaskMessage {
            v: PROTOCOL_VERSION,
            container: "tablevault".into(),
            job: new_backup_id(),
            table: "Orders".into(),
            task: "r0003".into(),
            kind: TaskKind::Backup {
                range: KeyRange::new(Some(EntityKey::new("a<&>'\"\u{0}", "")), None),
            },
        };
        assert_eq!(TaskMessage::decode(&m.encode()).unwrap(), m);
        assert!(TaskMessage::decode("%%%").unwrap_err().contains("base64"));
        assert!(
            TaskMessage::decode(&BASE64.encode("{"))
                .unwrap_err()
                .contains("JSON")
        );
        assert!(
            TaskMessage::decode(&BASE64.encode(r#"{"v":9}"#))
                .unwrap_err()
                .contains("version")
        );
        let mut bad = serde_json::to_value(&m).unwrap();
        bad["table"] = "../../x".into();
        assert!(
            TaskMessage::decode(&BASE64.encode(bad.to_string()))
                .unwrap_err()
                .contains("table")
        );
        let mut bad = serde_json::to_value(&m).unwrap();
        bad["job"] = "../x".into();
        assert!(
            TaskMessage::decode(&BASE64.encode(bad.to_string()))
                .unwrap_err()
                .contains("job")
        );
    }

    #[test]
    fn ids_and_paths() {
        let id = new_backup_id();
        assert!(is_valid_backup_id(&id), "{id}");
        assert_eq!(id.len(), "20261122T114600Z-1a2b3c4d".len());
        let p = BackupPaths::new("b1");
        assert_eq!(
            p.data_blob("T", "r0001", "att", 3),
            "b1/data/T/r0001/att/00003"
        );
        assert_eq!(p.commit("T", "r0001"), "b1/tasks/T/r0001.json");
        assert!(!is_valid_backup_id("../x"));
    }
}
