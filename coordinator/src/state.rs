//! A job's state, read from its store: the plan, the records of finished tasks and of
//! poisoned ones. Backups and restores share the model ([`Records`]); they differ in what
//! a finished task leaves (a commit record, a restore record) and in when the job is done
//! (every table tiled; every task accounted for). The coordinator holds nothing else, so
//! any coordinator can pick a job up where another left it.

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use tablevault_core::keys::{KeyRange, find_tiling};
use tablevault_core::protocol::{
    BackupJob, CommitRecord, Manifest, PoisonRecord, RestoreJob, RestoreRecord, is_valid_backup_id,
};
use tablevault_core::store::{BackupPaths, RecordKey, Store};

use crate::{Error, Result};

/// Loads a backup's plan; an id that is malformed or unknown is an invalid request.
pub async fn load_job(store: &Store, id: &str) -> Result<BackupJob> {
    if !is_valid_backup_id(id) {
        return Err(Error::invalid(format!("{id:?} is not a backup id")));
    }
    store.backup_job(id).await?.ok_or_else(|| {
        Error::invalid(format!(
            "backup {id} not found in container {:?} (see `tablevault list`)",
            store.container()
        ))
    })
}

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
pub struct JobState {
    /// The plan.
    pub job: BackupJob,
    /// Commit and poison records.
    pub records: Records<CommitRecord>,
}

impl JobState {
    /// State with nothing loaded yet.
    pub fn new(job: BackupJob) -> Self {
        let paths = BackupPaths::new(&job.backup_id);
        JobState {
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

/// What is known about a running or finished restore.
pub struct RestoreState {
    /// The restore's plan.
    pub job: RestoreJob,
    /// Done and poison records.
    pub records: Records<RestoreRecord>,
}

impl RestoreState {
    /// State with nothing loaded yet.
    pub fn new(job: RestoreJob) -> Self {
        let paths = BackupPaths::new(&job.backup_id);
        RestoreState {
            records: Records::new(
                paths.restore_done_root(&job.restore_id),
                paths.restore_poison_root(&job.restore_id),
            ),
            job,
        }
    }

    /// Tasks planned.
    pub fn task_count(&self) -> u64 {
        self.job.tables.iter().map(|t| t.tasks).sum()
    }

    /// Entities written by finished tasks.
    pub fn written(&self) -> u64 {
        self.records.done.values().map(|r| r.written).sum()
    }

    /// Whether every task finished or was poisoned.
    pub fn is_settled(&self) -> bool {
        (self.records.done.len() + self.records.poisoned.len()) as u64 >= self.task_count()
    }

    /// Whether everything was written: no poisoned task, no failed batch.
    pub fn is_clean(&self) -> bool {
        self.records.poisoned.is_empty()
            && self.records.done.values().all(|r| r.failures.is_empty())
    }
}

/// A backup's manifest, if it has one (that is, if it is complete).
pub async fn load_manifest(store: &Store, id: &str) -> Result<Option<Manifest>> {
    Ok(store.manifest(id).await?)
}
