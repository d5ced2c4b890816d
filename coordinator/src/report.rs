//! What backup and restore commands report at the end, as data: the command line prints
//! it (one JSON object with `--json`, a summary otherwise).

use serde::Serialize;
use tablevault_core::keys::{EntityKey, KeyRange};
use tablevault_core::protocol::{JobStatus, PoisonRecord, RestoreMode};

/// Per-table result of a backup.
#[derive(Debug, Clone, Serialize)]
pub struct TableReport {
    /// Table name.
    pub name: String,
    /// Entities backed up.
    pub entities: u64,
    /// Ranges (tasks) it was cut into.
    pub ranges: usize,
    /// Uncompressed bytes.
    pub raw_bytes: u64,
    /// Stored bytes.
    pub stored_bytes: u64,
}

/// A poisoned task, as reported.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PoisonReport {
    /// Table.
    pub table: String,
    /// Task.
    pub task: String,
    /// Why it was given up.
    pub reason: String,
    /// The keys whose entities are missing because of it.
    pub range: Option<KeyRange>,
}

impl PoisonReport {
    /// Reports of poison records, sorted by table and task.
    pub fn sorted<'a>(records: impl IntoIterator<Item = &'a PoisonRecord>) -> Vec<Self> {
        let mut out: Vec<PoisonReport> = records
            .into_iter()
            .map(|p| PoisonReport {
                table: p.table.clone(),
                task: p.task.clone(),
                reason: p.reason.clone(),
                range: p.range.clone(),
            })
            .collect();
        out.sort_by(|a, b| (&a.table, &a.task).cmp(&(&b.table, &b.task)));
        out
    }
}

/// The outcome of `backup` or `status`.
#[derive(Debug, Clone, Serialize)]
pub struct BackupReport {
    /// Backup id.
    pub backup_id: String,
    /// Where the backup stands.
    pub status: JobStatus,
    /// Container holding it.
    pub container: String,
    /// Backup format version it is written in (docs/FORMAT.md): 1, or 2 where asked
    /// for (`--format 2`), which only a tablevault that reads format 2 can restore.
    pub format: u32,
    /// Per table.
    pub tables: Vec<TableReport>,
    /// Entities in all tables (committed tasks only while in progress).
    pub entities: u64,
    /// Uncompressed bytes.
    pub raw_bytes: u64,
    /// Stored bytes.
    pub stored_bytes: u64,
    /// Tasks committed.
    pub tasks_committed: usize,
    /// Tasks known: planned, and split off by workers while they scanned.
    pub tasks_total: usize,
    /// Entities of the largest range in the manifest (complete backups): how evenly the
    /// work was spread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_task_entities: Option<u64>,
    /// Poisoned tasks.
    pub poisoned: Vec<PoisonReport>,
    /// Seconds spent planning and enqueueing (`backup` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planning_seconds: Option<f64>,
    /// Wall time of this command.
    pub duration_seconds: f64,
    /// Entities per second over this command's wall time.
    pub entities_per_second: f64,
    /// Stored MB (10^6 bytes) per second.
    pub mb_per_second: f64,
    /// Peak resident memory of this process (Linux), in bytes.
    pub peak_rss_bytes: Option<u64>,
}

impl BackupReport {
    /// Sets what a complete backup's manifest knows: its entities, bytes and tables,
    /// the ranges split off while it ran included (`status` once counted the planned
    /// tasks alone: "1 ranges" of 13), and its time from plan to manifest, to the second
    /// (`status --json` of a finished backup said `"duration_seconds": 0.0`; the command
    /// that ran it times itself closer, after this).
    pub fn fill_from_manifest(&mut self, manifest: &tablevault_core::protocol::Manifest) {
        self.entities = manifest.entities;
        self.raw_bytes = manifest.raw_bytes;
        self.stored_bytes = manifest.stored_bytes;
        self.tables = manifest
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
        // Both times are to the second: a backup within one second has no rate to tell.
        if let Some(seconds) =
            crate::listing::seconds_between(&manifest.created_at, &manifest.completed_at)
                .filter(|s| *s >= 1.0)
        {
            self.timed(seconds);
        }
    }

    /// Sets the timing fields from the command's wall time.
    pub fn timed(&mut self, seconds: f64) {
        let secs = seconds.max(1e-6);
        self.duration_seconds = seconds;
        self.entities_per_second = self.entities as f64 / secs;
        self.mb_per_second = self.stored_bytes as f64 / 1e6 / secs;
    }
}

/// Per-table outcome of a restore.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RestoreReport {
    /// Restore id.
    pub restore_id: String,
    /// Backup id.
    pub backup_id: String,
    /// `complete`, `incomplete` (failed batches or poisoned tasks), `mismatch` (the
    /// target read back differs from the backup), `interrupted`, `cancelled` or
    /// `in-progress`.
    pub status: JobStatus,
    /// Mode.
    pub mode: RestoreMode,
    /// Account written to.
    pub target_account: String,
    /// Its Table endpoint.
    pub target_endpoint: String,
    /// When the restore was planned.
    pub created_at: String,
    /// Entities the backup's selected tables hold.
    pub entities: u64,
    /// Entities deleted because the backup does not hold them (`replace`).
    pub deleted: u64,
    /// The check of the target after writing: `None` when it did not run (`--no-verify`,
    /// or the restore did not write everything).
    pub verification: Option<RestoreVerification>,
    /// Per table.
    pub tables: Vec<RestoreTableReport>,
    /// Entities written in all tables.
    pub written: u64,
    /// Failed batches.
    pub failures: Vec<FailureReport>,
    /// Poisoned tasks (for example a corrupt block: nothing from it was written).
    pub poisoned: Vec<PoisonReport>,
    /// Wall time: of the command that ran or watched the restore, or, for a look at a
    /// restore without its final report (`status`, `cancel`), from its start to now, or
    /// to when it stopped.
    pub duration_seconds: f64,
    /// Entities written per second over that time.
    pub entities_per_second: f64,
    /// Peak resident memory of this process (Linux).
    pub peak_rss_bytes: Option<u64>,
}

/// What reading the restored tables back found.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RestoreVerification {
    /// Whether the target holds what the backup holds, as the mode promises.
    pub ok: bool,
    /// Per table: counts and the first differences, with their keys.
    pub tables: Vec<crate::compare::TableComparison>,
    /// Wall time of the check.
    pub duration_seconds: f64,
}

impl RestoreReport {
    /// Sets the timing fields from the command's wall time.
    pub fn timed(&mut self, seconds: f64) {
        self.duration_seconds = seconds;
        self.entities_per_second = self.written as f64 / seconds.max(1e-6);
    }
}

/// Peak resident set size of this process, from `/proc/self/status` (Linux only).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablevault_core::protocol::Manifest;

    fn report() -> BackupReport {
        BackupReport {
            backup_id: "b".into(),
            status: JobStatus::Complete,
            container: "c".into(),
            format: 1,
            tables: Vec::new(),
            entities: 0,
            raw_bytes: 0,
            stored_bytes: 0,
            tasks_committed: 1,
            tasks_total: 1,
            largest_task_entities: None,
            poisoned: Vec::new(),
            planning_seconds: None,
            duration_seconds: 0.0,
            entities_per_second: 0.0,
            mb_per_second: 0.0,
            peak_rss_bytes: None,
        }
    }

    /// Regression: `status --json` of a finished backup said it took no time, at no
    /// rate. It is timed from the plan to the manifest.
    #[test]
    fn a_finished_backup_is_timed_from_its_manifest() {
        let manifest: Manifest = serde_json::from_value(serde_json::json!({
            "format": 1, "backup_id": "b", "created_at": "2026-11-28T00:00:00Z",
            "completed_at": "2026-11-28T00:00:05Z",
            "source": { "account": "a", "table_endpoint": "http://x" },
            "compression": "zstd", "tables": [], "entities": 100, "raw_bytes": 0,
            "stored_bytes": 10_000_000, "tool_version": "t"
        }))
        .unwrap();
        let mut r = report();
        r.fill_from_manifest(&manifest);
        assert_eq!(
            (r.duration_seconds, r.entities_per_second, r.mb_per_second),
            (5.0, 20.0, 2.0)
        );
        // Within one second: no rate to tell.
        let mut r = report();
        r.fill_from_manifest(&Manifest {
            completed_at: manifest.created_at.clone(),
            ..manifest
        });
        assert_eq!((r.duration_seconds, r.entities_per_second), (0.0, 0.0));
    }
}
