//! The state of a job as its records say, and the one rule every view applies to it:
//! a backup whose committed ranges tile every table is complete, and whoever sees that
//! first (a worker after its commit, `status`, `list`, `restore`, a watching
//! coordinator) writes its manifest ([`finalize::settle_backup`]), so no view can
//! contradict another.

pub mod finalize;

use std::collections::HashMap;

use serde::de::DeserializeOwned;

use crate::keys::{KeyRange, find_tiling};
use crate::protocol::{BackupJob, CommitRecord, PoisonRecord};
use crate::store::{BackupPaths, RecordKey, Result, Store};

/// The records tasks of one job left: what finished, what was given up.
#[derive(Debug)]
pub struct Records<D> {
    /// Where finished tasks' records live.
    done_root: String,
    /// Where poison records live.
    poison_root: String,
    /// Records of finished tasks, by (table, task).
    pub done: HashMap<RecordKey, D>,
    /// Poison records, by (table, task); a task that later finished is not poisoned.
    pub poisoned: HashMap<RecordKey, PoisonRecord>,
}

impl<D: DeserializeOwned> Records<D> {
    /// Records under two prefixes, none read yet.
    pub fn new(done_root: String, poison_root: String) -> Self {
        Records {
            done_root,
            poison_root,
            done: HashMap::new(),
            poisoned: HashMap::new(),
        }
    }

    /// Reads the records that appeared since the last refresh.
    pub async fn refresh(&mut self, store: &Store) -> Result<()> {
        let done = store
            .load_new_records(&self.done_root, |k| self.done.contains_key(k))
            .await?;
        self.done.extend(done);
        let poisoned = store
            .load_new_records(&self.poison_root, |k| self.poisoned.contains_key(k))
            .await?;
        self.poisoned.extend(poisoned);
        // A task poisoned and later finished (after a retry) is not poisoned.
        self.poisoned.retain(|k, _| !self.done.contains_key(k));
        Ok(())
    }
}

/// What is known about a running or finished backup.
pub struct BackupState {
    /// The plan.
    pub job: BackupJob,
    /// Commit and poison records.
    pub records: Records<CommitRecord>,
}

impl BackupState {
    /// State with nothing loaded yet.
    pub fn new(job: BackupJob) -> Self {
        let paths = BackupPaths::new(&job.backup_id);
        BackupState {
            records: Records::new(paths.commits_root(), paths.poison_root()),
            job,
        }
    }

    /// Commit records by (table, task).
    pub fn commits(&self) -> &HashMap<RecordKey, CommitRecord> {
        &self.records.done
    }

    /// Poison records by (table, task).
    pub fn poisoned(&self) -> &HashMap<RecordKey, PoisonRecord> {
        &self.records.poisoned
    }

    /// Reads the records that appeared since the last refresh.
    pub async fn refresh(&mut self, store: &Store) -> Result<()> {
        self.records.refresh(store).await
    }

    /// The commit records whose ranges tile a table, in key order, if they do.
    pub fn tiling(&self, table: &str) -> Option<Vec<&CommitRecord>> {
        let candidates: Vec<&CommitRecord> = self
            .commits()
            .values()
            .filter(|c| c.table == table)
            .collect();
        let ranges: Vec<&KeyRange> = candidates.iter().map(|c| &c.range).collect();
        let chain = find_tiling(&ranges)?;
        Some(chain.into_iter().map(|i| candidates[i]).collect())
    }

    /// Whether every table is tiled by committed ranges.
    pub fn is_complete(&self) -> bool {
        self.job
            .tables
            .iter()
            .all(|t| self.tiling(&t.name).is_some())
    }

    /// Planned tasks that are neither committed nor poisoned.
    pub fn outstanding(&self) -> Vec<RecordKey> {
        let mut out = Vec::new();
        for t in &self.job.tables {
            for task in &t.tasks {
                let key = (t.name.clone(), task.task.clone());
                if !self.commits().contains_key(&key) && !self.poisoned().contains_key(&key) {
                    out.push(key);
                }
            }
        }
        out
    }

    /// Entities in committed tasks.
    pub fn committed_entities(&self) -> u64 {
        self.commits().values().map(|c| c.entities).sum()
    }

    /// Stored bytes of committed tasks.
    pub fn committed_bytes(&self) -> u64 {
        self.commits().values().map(|c| c.stored_bytes).sum()
    }
}
