//! Blob names of one backup, per the layout in docs/FORMAT.md. Nothing else in tablevault
//! spells a path.

/// Blob names of one backup, per the layout in docs/ARCHITECTURE.md.
#[derive(Debug, Clone)]
pub struct BackupPaths {
    id: String,
}

impl BackupPaths {
    /// Paths for a backup id.
    pub fn new(id: &str) -> Self {
        BackupPaths { id: id.to_string() }
    }

    /// The backup id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `<id>/`: everything of the backup, its restores included.
    pub fn root(&self) -> String {
        format!("{}/", self.id)
    }

    /// `<id>/deleting.json`: written first when a backup is deleted and removed last, so
    /// a deletion that stopped midway shows as such and is finished by the next one.
    /// While it exists the backup is never complete, whatever else is left.
    pub fn deleting(&self) -> String {
        format!("{}/deleting.json", self.id)
    }

    /// `<id>/job.json`: the plan.
    pub fn job(&self) -> String {
        format!("{}/job.json", self.id)
    }

    /// `<id>/enqueued`: written once every planned task is on the queue.
    pub fn enqueued_marker(&self) -> String {
        format!("{}/enqueued", self.id)
    }

    /// `<id>/manifest.json`: written last; its presence means the backup is complete.
    pub fn manifest(&self) -> String {
        format!("{}/manifest.json", self.id)
    }

    /// `<id>/learned.json`: what the next backup of the account plans from (its large
    /// tables' parts), written beside the manifest.
    pub fn learned(&self) -> String {
        format!("{}/learned.json", self.id)
    }

    /// `<id>/data/`.
    pub fn data_root(&self) -> String {
        format!("{}/data/", self.id)
    }

    /// `<id>/data/<table>/<task>/<attempt>/`.
    pub fn attempt_prefix(&self, table: &str, task: &str, attempt: &str) -> String {
        format!("{}/data/{table}/{task}/{attempt}/", self.id)
    }

    /// One data blob of an attempt.
    pub fn data_blob(&self, table: &str, task: &str, attempt: &str, index: usize) -> String {
        format!("{}{index:05}", self.attempt_prefix(table, task, attempt))
    }

    /// `<id>/tasks/`.
    pub fn commits_root(&self) -> String {
        format!("{}/tasks/", self.id)
    }

    /// `<id>/tasks/<table>/<task>.json`: the commit record of the attempt that won.
    pub fn commit(&self, table: &str, task: &str) -> String {
        format!("{}/tasks/{table}/{task}.json", self.id)
    }

    /// `<id>/poison/`.
    pub fn poison_root(&self) -> String {
        format!("{}/poison/", self.id)
    }

    /// `<id>/poison/<table>/<task>.json`: why a task was given up.
    pub fn poison(&self, table: &str, task: &str) -> String {
        format!("{}/poison/{table}/{task}.json", self.id)
    }

    /// `<id>/heartbeats/`: one blob per worker holding a task of the backup, rewritten
    /// while it works, so a watcher can tell the job is alive.
    pub fn heartbeats_root(&self) -> String {
        format!("{}/heartbeats/", self.id)
    }

    /// `<id>/restores/<restore>/heartbeats/`: the same for a restore.
    pub fn restore_heartbeats_root(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/heartbeats/", self.id)
    }

    /// `<id>/restores/`.
    pub fn restores_root(&self) -> String {
        format!("{}/restores/", self.id)
    }

    /// `<id>/restores/<restore>/job.json`: a restore's plan.
    pub fn restore_job(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/job.json", self.id)
    }

    /// `<id>/restores/<restore>/state.json`: whether the restore is live.
    pub fn restore_state(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/state.json", self.id)
    }

    /// `<id>/restores/<restore>/done/`.
    pub fn restore_done_root(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/done/", self.id)
    }

    /// `<id>/restores/<restore>/done/<table>/<task>.json`: what a restore task wrote.
    pub fn restore_done(&self, restore: &str, table: &str, task: &str) -> String {
        format!("{}/restores/{restore}/done/{table}/{task}.json", self.id)
    }

    /// `<id>/restores/<restore>/poison/`.
    pub fn restore_poison_root(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/poison/", self.id)
    }

    /// `<id>/restores/<restore>/poison/<table>/<task>.json`.
    pub fn restore_poison(&self, restore: &str, table: &str, task: &str) -> String {
        format!("{}/restores/{restore}/poison/{table}/{task}.json", self.id)
    }

    /// `<id>/restores/<restore>/deleted/`.
    pub fn restore_deletions_root(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/deleted/", self.id)
    }

    /// `<id>/restores/<restore>/deleted/<run>.json`: what one run of a `replace`
    /// restore deleted.
    pub fn restore_deletions(&self, restore: &str, run: &str) -> String {
        format!("{}/restores/{restore}/deleted/{run}.json", self.id)
    }

    /// `<id>/restores/<restore>/report.json`: the final report.
    pub fn restore_report(&self, restore: &str) -> String {
        format!("{}/restores/{restore}/report.json", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let p = BackupPaths::new("b1");
        assert_eq!(
            p.data_blob("T", "r0001", "att", 3),
            "b1/data/T/r0001/att/00003"
        );
        assert_eq!(p.commit("T", "r0001"), "b1/tasks/T/r0001.json");
        assert_eq!(p.poison("T", "r0001"), "b1/poison/T/r0001.json");
        assert_eq!(
            p.restore_done("x", "T", "r0001-b00000"),
            "b1/restores/x/done/T/r0001-b00000.json"
        );
    }
}
