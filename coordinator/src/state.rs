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
        let commits = load_new_records(&self.blobs, &self.paths.commits_root(), |k| {
            self.commits.contains_key(k)
        })
        .await?;
        self.commits.extend(commits);
        let poisoned = load_new_records(&self.blobs, &self.paths.poison_root(), |k| {
            self.poisoned.contains_key(k)
        })
        .await?;
        self.poisoned.extend(poisoned);
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

/// `(table, task)`: where a record belongs.
pub type RecordKey = (String, String);

/// Reads the JSON records `<prefix><table>/<task>.json` that `known` does not have yet,
/// keyed by `(table, task)`: commit and poison records of a backup, done and poison
/// records of a restore. Records are only ever added, so each is read once.
pub async fn load_new_records<T: serde::de::DeserializeOwned>(
    blobs: &BlobClient,
    prefix: &str,
    known: impl Fn(&RecordKey) -> bool,
) -> CmdResult<Vec<(RecordKey, T)>> {
    let listing = blobs
        .list_all(&ListOptions {
            prefix: Some(prefix),
            ..Default::default()
        })
        .await?;
    let new: Vec<(RecordKey, String)> = listing
        .blobs
        .into_iter()
        .filter_map(|b| parse_record_name(&b.name, prefix).map(|k| (k, b.name)))
        .filter(|(k, _)| !known(k))
        .collect();
    let loaded: Vec<CmdResult<Option<(RecordKey, T)>>> = futures::stream::iter(new)
        .map(|(key, name)| async move {
            let Some(bytes) = blobs.get_if_exists(&name).await? else {
                return Ok(None); // deleted since the listing (a retried poison record)
            };
            serde_json::from_slice::<T>(&bytes)
                .map(|r| Some((key, r)))
                .map_err(|e| Failure::failed(format!("record {name} is unreadable: {e}")))
        })
        .buffer_unordered(16)
        .collect()
        .await;
    loaded.into_iter().filter_map(Result::transpose).collect()
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
