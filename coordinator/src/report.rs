//! What a command reports at the end: one JSON object with `--json`, a short summary
//! otherwise.

use serde::Serialize;

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
#[derive(Debug, Clone, Serialize)]
pub struct PoisonReport {
    /// Table.
    pub table: String,
    /// Task.
    pub task: String,
    /// Why it was given up.
    pub reason: String,
}

/// The outcome of `backup` or `status`.
#[derive(Debug, Clone, Serialize)]
pub struct BackupReport {
    /// Backup id.
    pub backup_id: String,
    /// `complete`, `incomplete` (poisoned tasks), `in-progress` or `interrupted`.
    pub status: String,
    /// Container holding it.
    pub container: String,
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
    /// Tasks planned.
    pub tasks_total: usize,
    /// Poisoned tasks.
    pub poisoned: Vec<PoisonReport>,
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
    /// Prints the human summary to stdout.
    pub fn print_human(&self) {
        let verb = match self.status.as_str() {
            "complete" => "complete",
            "incomplete" => "INCOMPLETE",
            "interrupted" => "interrupted",
            _ => "in progress",
        };
        println!(
            "backup {} {verb}: {} table(s), {} entities, {} stored ({} raw), {}/{} tasks",
            self.backup_id,
            self.tables.len(),
            self.entities,
            indicatif::HumanBytes(self.stored_bytes),
            indicatif::HumanBytes(self.raw_bytes),
            self.tasks_committed,
            self.tasks_total,
        );
        if self.duration_seconds > 0.0 {
            println!(
                "  {:.1} s, {:.0} entities/s, {:.2} MB/s",
                self.duration_seconds, self.entities_per_second, self.mb_per_second
            );
        }
        let width = self.tables.iter().map(|t| t.name.len()).max().unwrap_or(0);
        for t in &self.tables {
            println!(
                "  {:width$}  {:>12} entities  {:>4} ranges  {:>10}",
                t.name,
                t.entities,
                t.ranges,
                indicatif::HumanBytes(t.stored_bytes).to_string(),
            );
        }
        for p in &self.poisoned {
            println!("  POISONED {}/{}: {}", p.table, p.task, p.reason);
        }
        match self.status.as_str() {
            "incomplete" => println!(
                "  the backup is not usable; fix the cause, then `tablevault status {} --retry-poisoned --wait`",
                self.backup_id
            ),
            "interrupted" | "in-progress" => println!(
                "  resume with `tablevault status {} --wait` (add --workers N to run workers here)",
                self.backup_id
            ),
            _ => {}
        }
    }
}

/// Peak resident set size of this process, from `/proc/self/status` (Linux only).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
