//! The state of a job as its records say, and the one rule every view applies to it:
//! a backup whose committed ranges tile every table is complete, and whoever sees that
//! first (a worker after its commit, `status`, `list`, `restore`, a watching
//! coordinator) writes its manifest ([`finalize::settle_backup`]), so no view can
//! contradict another.

pub mod finalize;
pub mod learned;

use std::collections::HashMap;

use serde::de::DeserializeOwned;

use crate::keys::{KeyRange, find_tiling};
use crate::protocol::{BackupJob, CommitRecord, PlannedTask, PoisonRecord};
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
        self.refresh_keeping(store, |_| {}).await
    }

    /// Reads the records that appeared since the last refresh, passing each new record
    /// of a finished task through `keep` (which may trim it) before it is kept.
    pub async fn refresh_keeping(&mut self, store: &Store, keep: impl Fn(&mut D)) -> Result<()> {
        // Side by side: the watch loop refreshes after every task's end, and the last
        // refresh stands between the last commit and the manifest.
        let (done, poisoned) = tokio::try_join!(
            store.load_new_records(&self.done_root, |k| self.done.contains_key(k)),
            store.load_new_records(&self.poison_root, |k| self.poisoned.contains_key(k)),
        )?;
        self.done.extend(done.into_iter().map(|(k, mut d)| {
            keep(&mut d);
            (k, d)
        }));
        self.poisoned.extend(poisoned);
        // A task poisoned and later finished (after a retry) is not poisoned.
        self.poisoned.retain(|k, _| !self.done.contains_key(k));
        Ok(())
    }
}

/// A table's name and the commit records that tile it, in key order.
pub type Tiling<'a> = (&'a str, Vec<&'a CommitRecord>);

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

    /// Reads the records that appeared since the last refresh. Inline blobs' bytes are
    /// dropped: a job's state is about ranges and counts, and a watch holds it for the
    /// whole backup, so its memory follows blocks, not data.
    pub async fn refresh(&mut self, store: &Store) -> Result<()> {
        self.records
            .refresh_keeping(store, CommitRecord::drop_inline_bytes)
            .await
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

    /// Each table of the plan, in plan order, with the commit records that tile it in key
    /// order; `None` if some table is not tiled yet. What the manifest and `learned.json`
    /// are both built from.
    pub fn tilings(&self) -> Option<Vec<Tiling<'_>>> {
        self.job
            .tables
            .iter()
            .map(|t| Some((t.name.as_str(), self.tiling(&t.name)?)))
            .collect()
    }

    /// Whether every table is tiled by committed ranges.
    pub fn is_complete(&self) -> bool {
        self.job
            .tables
            .iter()
            .all(|t| self.tiling(&t.name).is_some())
    }

    /// Every task known so far: the planned ones, and those the committed ones split off
    /// (dynamic splitting), as (table, task).
    pub fn known_tasks(&self) -> Vec<(String, PlannedTask)> {
        let mut out: Vec<(String, PlannedTask)> = self
            .job
            .tables
            .iter()
            .flat_map(|t| t.tasks.iter().map(|task| (t.name.clone(), task.clone())))
            .collect();
        for c in self.commits().values() {
            out.extend(c.split_off.iter().map(|t| (c.table.clone(), t.clone())));
        }
        out
    }

    /// A known task by table and id.
    pub fn task(&self, table: &str, task: &str) -> Option<PlannedTask> {
        self.known_tasks()
            .into_iter()
            .find(|(t, p)| t == table && p.task == task)
            .map(|(_, p)| p)
    }

    /// Known tasks (planned or split off) that are neither committed nor poisoned.
    pub fn outstanding(&self) -> Vec<RecordKey> {
        let mut out: Vec<RecordKey> = self
            .known_tasks()
            .into_iter()
            .map(|(table, task)| (table, task.task))
            .filter(|key| !self.commits().contains_key(key) && !self.poisoned().contains_key(key))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Tasks known so far: planned, and split off by committed tasks.
    pub fn task_count(&self) -> usize {
        let mut keys: Vec<RecordKey> = self
            .known_tasks()
            .into_iter()
            .map(|(table, task)| (table, task.task))
            .collect();
        keys.sort();
        keys.dedup();
        keys.len()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::EntityKey;
    use crate::protocol::TablePlan;

    fn commit(task: &str, range: KeyRange, split_off: Vec<PlannedTask>) -> CommitRecord {
        CommitRecord {
            range,
            entities: 1,
            split_off,
            ..crate::testing::empty_commit("j", "T", task)
        }
    }

    /// A task that split off part of its range is not the end of the story: the job is
    /// outstanding until the split-off tasks (and theirs) commit, and then complete.
    #[test]
    fn split_off_tasks_are_outstanding_until_committed() {
        let k = |s: &str| Some(EntityKey::partition_start(s));
        let job = crate::testing::test_job(
            "j",
            vec![TablePlan {
                name: "T".into(),
                planning: "whole".into(),
                tasks: vec![PlannedTask {
                    task: "r0000".into(),
                    range: KeyRange::all(),
                }],
            }],
        );
        let mut state = BackupState::new(job);
        assert_eq!(state.outstanding(), vec![("T".into(), "r0000".into())]);
        let upper = PlannedTask {
            task: "s1".into(),
            range: KeyRange::new(k("m"), None),
        };
        let middle = PlannedTask {
            task: "s2".into(),
            range: KeyRange::new(k("f"), k("m")),
        };
        state.records.done.insert(
            ("T".into(), "r0000".into()),
            commit(
                "r0000",
                KeyRange::new(None, k("f")),
                vec![middle.clone(), upper.clone()],
            ),
        );
        assert_eq!(state.task_count(), 3);
        assert_eq!(
            state.outstanding(),
            vec![("T".into(), "s1".into()), ("T".into(), "s2".into())]
        );
        assert!(!state.is_complete());
        assert_eq!(state.task("T", "s2"), Some(middle.clone()));
        // s1 splits again; its piece is outstanding in turn.
        let top = PlannedTask {
            task: "s3".into(),
            range: KeyRange::new(k("t"), None),
        };
        state.records.done.insert(
            ("T".into(), "s1".into()),
            commit("s1", KeyRange::new(k("m"), k("t")), vec![top.clone()]),
        );
        state.records.done.insert(
            ("T".into(), "s2".into()),
            commit("s2", middle.range, vec![]),
        );
        assert_eq!(state.outstanding(), vec![("T".into(), "s3".into())]);
        assert!(!state.is_complete());
        state
            .records
            .done
            .insert(("T".into(), "s3".into()), commit("s3", top.range, vec![]));
        assert!(state.outstanding().is_empty());
        assert!(state.is_complete());
        assert_eq!(state.tiling("T").unwrap().len(), 4);
    }
}
