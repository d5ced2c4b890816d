//! Where a job stands, as one typed value shared by every view of it (reports, `status`,
//! `list`) instead of strings spelled in many places.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The state of a backup or restore job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobStatus {
    /// Tasks are still outstanding.
    InProgress,
    /// Every task finished and the job's result is whole (a backup has its manifest).
    Complete,
    /// Every task that could finish did, but some were poisoned: the backup is not
    /// usable until they are retried.
    Incomplete,
    /// A restore finished with failed batches or poisoned tasks.
    Failed,
    /// The command watching the job was stopped; the job can be resumed.
    Interrupted,
    /// A restore was cancelled: its remaining tasks are dropped, it cannot be resumed.
    Cancelled,
    /// A restore wrote everything, but reading the target back did not give the backup.
    Mismatch,
    /// A backup whose deletion (`prune`, `forget`) started and has not finished: it is
    /// not usable, and the next `prune` or `forget` finishes removing it.
    Deleting,
    /// A job whose plan, manifest or state cannot be read (damaged or written by another
    /// format): a backup in this state cannot be restored, and `forget` removes it.
    Damaged,
}

impl JobStatus {
    /// The name used in reports and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::InProgress => "in-progress",
            JobStatus::Complete => "complete",
            JobStatus::Incomplete => "incomplete",
            JobStatus::Failed => "failed",
            JobStatus::Interrupted => "interrupted",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Mismatch => "mismatch",
            JobStatus::Deleting => "deleting",
            JobStatus::Damaged => "damaged",
        }
    }

    /// Whether the job has ended for good (nothing more will happen to it).
    pub fn is_final(self) -> bool {
        !matches!(self, JobStatus::InProgress | JobStatus::Interrupted)
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Lets tests and callers compare with the JSON spelling.
impl PartialEq<&str> for JobStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_reported() {
        for s in [
            JobStatus::InProgress,
            JobStatus::Complete,
            JobStatus::Incomplete,
            JobStatus::Failed,
            JobStatus::Interrupted,
            JobStatus::Cancelled,
            JobStatus::Mismatch,
            JobStatus::Deleting,
            JobStatus::Damaged,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
