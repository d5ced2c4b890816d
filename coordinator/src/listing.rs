//! `tablevault list`: the backups in a container and their restores, oldest first, with
//! their state.

use serde::Serialize;
use tablevault_core::protocol::{JobStatus, RestoreMode, is_valid_backup_id};
use tablevault_core::store::{BackupPaths, Store, StoreError};

use crate::Result;
use crate::retention::policy::{format_time, time_of_id};
use crate::state::{Standing, standing};
use tablevault_core::protocol::BackupJob;

/// One backup in the list.
#[derive(Debug, Clone, Serialize)]
pub struct ListEntry {
    /// Backup id.
    pub backup_id: String,
    /// When it was planned.
    pub created_at: String,
    /// `complete`, `incomplete` (poisoned tasks) or `in-progress`.
    pub status: JobStatus,
    /// Source account.
    pub source_account: String,
    /// Tables.
    pub tables: Vec<String>,
    /// Entities (complete backups only).
    pub entities: Option<u64>,
    /// Stored bytes (complete backups only).
    pub stored_bytes: Option<u64>,
    /// When it completed (complete backups only).
    pub completed_at: Option<String>,
    /// Seconds from planning to completion (complete backups only).
    pub duration_seconds: Option<f64>,
    /// What is wrong with a `damaged` backup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl ListEntry {
    /// A backup whose plan or manifest cannot be read. One damaged backup must not hide
    /// the others: it is listed as such, so it can be seen and removed with `forget`.
    fn damaged(id: &str, job: Option<&BackupJob>, problem: String) -> ListEntry {
        ListEntry {
            backup_id: id.to_string(),
            created_at: job.map_or_else(
                || time_of_id(id).map(format_time).unwrap_or_default(),
                |j| j.created_at.clone(),
            ),
            status: JobStatus::Damaged,
            source_account: job.map(|j| j.source.account.clone()).unwrap_or_default(),
            tables: job.map_or_else(Vec::new, |j| {
                j.tables.iter().map(|t| t.name.clone()).collect()
            }),
            entities: None,
            stored_bytes: None,
            completed_at: None,
            duration_seconds: None,
            problem: Some(problem),
        }
    }
}

/// Seconds between two RFC 3339 times, if both parse and are in order.
pub(crate) fn seconds_between(from: &str, to: &str) -> Option<f64> {
    let from = humantime::parse_rfc3339_weak(from).ok()?;
    let to = humantime::parse_rfc3339_weak(to).ok()?;
    Some(to.duration_since(from).ok()?.as_secs_f64())
}

/// Lists the backups of a container.
pub async fn list(store: &Store) -> Result<Vec<ListEntry>> {
    let ids = match store.list_dirs("").await {
        Ok(ids) => ids,
        Err(StoreError::Storage(e)) if e.has_code("ContainerNotFound") => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for id in ids {
        if !is_valid_backup_id(&id) {
            continue;
        }
        // A deletion that has not finished (prune, forget): shown as such, whatever is left.
        if let Some(d) = crate::retention::deleting(store, &id).await? {
            out.push(ListEntry {
                backup_id: id.clone(),
                created_at: d.created_at.unwrap_or_default(),
                status: JobStatus::Deleting,
                source_account: d.source_account.unwrap_or_default(),
                tables: d.tables,
                entities: None,
                stored_bytes: None,
                duration_seconds: None,
                completed_at: None,
                problem: None,
            });
            continue;
        }
        let job = match store.backup_job(&id).await {
            Ok(Some(job)) => job,
            Ok(None) => continue, // not a tablevault backup
            Err(StoreError::Corrupt(why)) => {
                out.push(ListEntry::damaged(
                    &id,
                    None,
                    format!("plan unreadable: {why}"),
                ));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let (status, manifest) = match standing(store, &job).await? {
            Standing::Complete(m) => (JobStatus::Complete, Some(*m)),
            Standing::InProgress => (JobStatus::InProgress, None),
            Standing::Incomplete => (JobStatus::Incomplete, None),
            Standing::Damaged(why) => {
                out.push(ListEntry::damaged(&id, Some(&job), why));
                continue;
            }
        };
        out.push(ListEntry {
            backup_id: id.clone(),
            created_at: job.created_at.clone(),
            status,
            source_account: job.source.account.clone(),
            tables: job.tables.iter().map(|t| t.name.clone()).collect(),
            entities: manifest.as_ref().map(|m| m.entities),
            stored_bytes: manifest.as_ref().map(|m| m.stored_bytes),
            duration_seconds: manifest
                .as_ref()
                .and_then(|m| seconds_between(&job.created_at, &m.completed_at)),
            completed_at: manifest.map(|m| m.completed_at),
            problem: None,
        });
    }
    Ok(out)
}

/// One restore in the list.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreListEntry {
    /// Restore id.
    pub restore_id: String,
    /// The backup it restores.
    pub backup_id: String,
    /// When it was planned.
    pub created_at: String,
    /// Where it stands.
    pub status: JobStatus,
    /// Mode.
    pub mode: RestoreMode,
    /// Account written to.
    pub target_account: String,
    /// `source -> target` per table.
    pub tables: Vec<String>,
    /// Entities the backup holds for those tables.
    pub entities: u64,
}

/// Lists the restores of the container's backups, oldest first.
pub async fn list_restores(store: &Store) -> Result<Vec<RestoreListEntry>> {
    let ids = match store.list_dirs("").await {
        Ok(ids) => ids,
        Err(StoreError::Storage(e)) if e.has_code("ContainerNotFound") => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for backup in ids.iter().filter(|id| is_valid_backup_id(id)) {
        let root = BackupPaths::new(backup).restores_root();
        for rid in store.list_dirs(&root).await? {
            let rid = rid.trim_start_matches(&root).to_string();
            let Ok(Some(job)) = store.restore_job(backup, &rid).await else {
                continue;
            };
            let status = match store.restore_state(backup, &rid).await {
                Ok(state) => state.map_or(JobStatus::Interrupted, |s| s.status),
                Err(StoreError::Corrupt(_)) => JobStatus::Damaged,
                Err(e) => return Err(e.into()),
            };
            out.push(RestoreListEntry {
                restore_id: rid,
                backup_id: backup.clone(),
                created_at: job.created_at.clone(),
                status,
                mode: job.mode,
                target_account: job.target.account.clone(),
                tables: job
                    .tables
                    .iter()
                    .map(|t| format!("{} -> {}", t.source, t.target))
                    .collect(),
                entities: job.tables.iter().map(|t| t.entities).sum(),
            });
        }
    }
    out.sort_by(|a, b| a.created_at.cmp(&b.created_at));
    Ok(out)
}
