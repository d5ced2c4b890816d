//! A backup's state, read from its blobs: the plan, the commit records of finished tasks,
//! the poison records of abandoned ones, and whether the committed ranges tile every
//! table's key space. The coordinator holds nothing else, so any coordinator can pick a
//! job up where another left it.

use std::collections::HashMap;

use futures::StreamExt;
use tablevault_common::blob::{BlobClient, ListOptions};
use tablevault_common::job::{BackupJob, BackupPaths, CommitRecord, Manifest, PoisonRecord};
use tablevault_common::keys::{KeyRange, find_tiling};

use crate::exit::{CmdResult, Failure};

/// Loads a backup's `job.json`.
pub async fn load_job(blobs: &BlobClient, id: &str) -> CmdResult<BackupJob> {
    if !tablevault_common::job::is_valid_backup_id(id) {
        return Err(Failure::usage(format!("{id:?} is not a backup id")));
    }
    let paths = BackupPaths::new(id);
    let bytes = blobs.get_if_exists(&paths.job()).await?.ok_or_else(|| {
        Failure::usage(format!(
            "backup {id} not found in container {:?} (see `tablevault list`)",
            blobs.container()
        ))
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Failure::failed(format!("job.json of backup {id} is unreadable: {e}")))
}

/// Loads a backup's manifest, if it has one (that is, if it is complete).
pub async fn load_manifest(blobs: &BlobClient, id: &str) -> CmdResult<Option<Manifest>> {
    let Some(bytes) = blobs
        .get_if_exists(&BackupPaths::new(id).manifest())
        .await?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Failure::failed(format!("manifest of backup {id} is unreadable: {e}")))
}

/// What is known about a running or finished backup.
pub struct JobState {
    /// The plan.
    pub job: BackupJob,
    blobs: BlobClient,
    paths: BackupPaths,
    /// Commit records by (table, task).
    pub commits: HashMap<(String, String), CommitRecord>,
    /// Poison records by (table, task).
    pub poisoned: HashMap<(String, String), PoisonRecord>,
}

impl JobState {
    /// State with nothing loaded yet.
    pub fn new(blobs: BlobClient, job: BackupJob) -> Self {
        JobState {
            paths: BackupPaths::new(&job.backup_id),
            job,
            blobs,
            commits: HashMap::new(),
            poisoned: HashMap::new(),
        }
    }

    /// Reads commit and poison records that appeared since the last refresh.
    pub async fn refresh(&mut self) -> CmdResult<()> {
        let listing = self
            .blobs
            .list_all(&ListOptions {
                prefix: Some(&self.paths.commits_root()),
                ..Default::default()
            })
            .await?;
        let new: Vec<String> = listing
            .blobs
            .into_iter()
            .map(|b| b.name)
            .filter(|n| {
                parse_record_name(n, &self.paths.commits_root())
                    .is_some_and(|k| !self.commits.contains_key(&k))
            })
            .collect();
        let blobs = &self.blobs;
        let loaded: Vec<CmdResult<CommitRecord>> = futures::stream::iter(new)
            .map(|name| async move {
                let bytes = blobs.get(&name).await?;
                serde_json::from_slice::<CommitRecord>(&bytes).map_err(|e| {
                    Failure::failed(format!("commit record {name} is unreadable: {e}"))
                })
            })
            .buffer_unordered(16)
            .collect()
            .await;
        for record in loaded {
            let record = record?;
            self.commits
                .insert((record.table.clone(), record.task.clone()), record);
        }
        let poison = self
            .blobs
            .list_all(&ListOptions {
                prefix: Some(&self.paths.poison_root()),
                ..Default::default()
            })
            .await?;
        for b in poison.blobs {
            let Some(key) = parse_record_name(&b.name, &self.paths.poison_root()) else {
                continue;
            };
            if self.poisoned.contains_key(&key) {
                continue;
            }
            if let Some(bytes) = self.blobs.get_if_exists(&b.name).await?
                && let Ok(record) = serde_json::from_slice::<PoisonRecord>(&bytes)
            {
                self.poisoned.insert(key, record);
            }
        }
        // A task poisoned and later committed (after a retry) is not poisoned.
        self.poisoned.retain(|k, _| !self.commits.contains_key(k));
        Ok(())
    }

    /// The commit records whose ranges tile a table, in key order, if they do.
    pub fn tiling(&self, table: &str) -> Option<Vec<&CommitRecord>> {
        let candidates: Vec<&CommitRecord> =
            self.commits.values().filter(|c| c.table == table).collect();
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
    pub fn outstanding(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for t in &self.job.tables {
            for task in &t.tasks {
                let key = (t.name.clone(), task.task.clone());
                if !self.commits.contains_key(&key) && !self.poisoned.contains_key(&key) {
                    out.push(key);
                }
            }
        }
        out
    }

    /// Entities in committed tasks.
    pub fn committed_entities(&self) -> u64 {
        self.commits.values().map(|c| c.entities).sum()
    }

    /// Stored bytes of committed tasks.
    pub fn committed_bytes(&self) -> u64 {
        self.commits.values().map(|c| c.stored_bytes).sum()
    }
}

/// `(table, task)` from `<prefix><table>/<task>.json`.
fn parse_record_name(name: &str, prefix: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix(prefix)?;
    let (table, file) = rest.split_once('/')?;
    let task = file.strip_suffix(".json")?;
    Some((table.to_string(), task.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names() {
        assert_eq!(
            parse_record_name("b1/tasks/Orders/r0001.json", "b1/tasks/"),
            Some(("Orders".into(), "r0001".into()))
        );
        assert_eq!(parse_record_name("b1/tasks/Orders/x", "b1/tasks/"), None);
        assert_eq!(
            parse_record_name("b2/tasks/Orders/r.json", "b1/tasks/"),
            None
        );
    }
}
