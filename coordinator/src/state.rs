//! A job's state, read from its store: the plan, the records of finished tasks and of
//! poisoned ones. Backups and restores share the model ([`Records`], in
//! `tablevault_core::job`, where workers use it too); they differ in what a finished task
//! leaves (a commit record, a restore record) and in when the job is done (every table
//! tiled; every task accounted for). The coordinator holds nothing else, so any
//! coordinator can pick a job up where another left it.

use tablevault_core::job::finalize::settle_backup;
use tablevault_core::protocol::{
    BackupJob, Manifest, RestoreJob, RestoreRecord, is_valid_backup_id,
};
use tablevault_core::store::{BackupPaths, Store, StoreError};

pub use tablevault_core::job::{BackupState as JobState, Records};

use crate::{Error, Result};

/// Where a backup stands by its files, as `list` and retention see it.
pub(crate) enum Standing {
    /// It has its manifest (finalized now if its ranges tile every table).
    Complete(Box<Manifest>),
    /// No manifest, nothing poisoned.
    InProgress,
    /// No manifest, some task poisoned.
    Incomplete,
    /// Its manifest or a record cannot be read: why.
    Damaged(String),
}

/// The one rule ([`settle_backup`]), then its poison records; an unreadable file makes
/// it damaged rather than failing the caller, so one such backup does not hide others.
pub(crate) async fn standing(store: &Store, job: &BackupJob) -> Result<Standing> {
    Ok(match settle_backup(store, job).await {
        Ok(Some(m)) => Standing::Complete(Box::new(m)),
        Ok(None) => {
            let poison = BackupPaths::new(&job.backup_id).poison_root();
            if store.list_names(&poison).await?.is_empty() {
                Standing::InProgress
            } else {
                Standing::Incomplete
            }
        }
        Err(StoreError::Corrupt(why)) => {
            // An unreadable manifest over whole records can be rebuilt: say how.
            if unreadable_manifest(store, &job.backup_id)
                .await
                .is_ok_and(|m| m.is_some())
            {
                Standing::Damaged(rebuild_hint(&why, &job.backup_id))
            } else {
                Standing::Damaged(why)
            }
        }
        Err(e) => return Err(e.into()),
    })
}

/// Why a backup's `manifest.json` cannot be read, when it cannot; `None` when it reads
/// (or is not there).
pub(crate) async fn unreadable_manifest(store: &Store, id: &str) -> Result<Option<String>> {
    match store.manifest(id).await {
        Err(StoreError::Corrupt(why)) => Ok(Some(why)),
        Ok(_) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// An unreadable manifest's damage, with the command that rebuilds it from the commit
/// records.
pub(crate) fn rebuild_hint(why: &str, id: &str) -> String {
    format!("{why} (`tablevault status {id} --wait` rebuilds the manifest from the commit records)")
}

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
