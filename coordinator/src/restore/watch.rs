//! Following a planned restore to its end: the watch loop's view of it, its report, and
//! the state it ends in (interrupted, cancelled, complete, incomplete, mismatch).

use std::time::Instant;

use async_trait::async_trait;
use tablevault_azure::StorageAccount;
use tablevault_core::protocol::{JobStatus, RestoreJob, RestoreRecord};
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::{BackupPaths, Store};

use super::check::finish_writing;
use super::set_state_unless_cancelled;
use crate::Result;
use crate::location::Location;
use crate::report::{
    FailureReport, PoisonReport, RestoreReport, RestoreTableReport, peak_rss_bytes,
};
use crate::state::RestoreState;
use crate::watch::{Snapshot, WatchOptions, Watched, watch as watch_job};

/// A restore as the watch loop sees it.
struct RestoreWatch {
    state: RestoreState,
    /// Set when another command cancelled the restore.
    cancelled: bool,
}

#[async_trait]
impl Watched for RestoreWatch {
    async fn refresh(&mut self, store: &Store) -> Result<()> {
        let job = &self.state.job;
        if let Some(s) = store.restore_state(&job.backup_id, &job.restore_id).await? {
            self.cancelled = s.status == JobStatus::Cancelled;
        }
        Ok(self.state.records.refresh(store).await?)
    }

    fn snapshot(&self, live: Option<&WorkerStats>) -> Snapshot {
        let s = &self.state;
        Snapshot {
            tasks_done: s.records.done.len() as u64,
            tasks_total: s.task_count(),
            entities: s
                .written()
                .max(live.map_or(0, |l| WorkerStats::get(&l.entities))),
            bytes: 0,
            poisoned: s.records.poisoned.len() as u64,
            entities_expected: Some(s.job.tables.iter().map(|t| t.entities).sum()),
        }
    }

    fn records_seen(&self) -> usize {
        self.state.records.done.len() + self.state.records.poisoned.len()
    }

    fn planned_tasks(&self) -> u64 {
        self.state.task_count()
    }

    fn heartbeats_root(&self) -> String {
        let job = &self.state.job;
        BackupPaths::new(&job.backup_id).restore_heartbeats_root(&job.restore_id)
    }

    fn resume_hint(&self) -> String {
        format!("run `tablevault resume {}`", self.state.job.restore_id)
    }

    fn settled(&mut self) -> Result<Option<JobStatus>> {
        if self.cancelled {
            return Ok(Some(JobStatus::Cancelled));
        }
        Ok(self.state.is_settled().then(|| {
            if self.state.is_clean() {
                JobStatus::Complete
            } else {
                JobStatus::Incomplete
            }
        }))
    }
}

/// The report of a restore's state as it is.
pub(super) fn report(state: &RestoreState, status: JobStatus) -> RestoreReport {
    let job = &state.job;
    let tables = job
        .tables
        .iter()
        .map(|t| {
            let done: Vec<&RestoreRecord> = state
                .records
                .done
                .values()
                .filter(|r| r.target_table == t.target)
                .collect();
            RestoreTableReport {
                source: t.source.clone(),
                target: t.target.clone(),
                entities: t.entities,
                written: done.iter().map(|r| r.written).sum(),
                identical: done.iter().map(|r| r.identical).sum(),
                skipped: done.iter().map(|r| r.skipped).sum(),
                failed: done.iter().map(|r| r.failed).sum(),
                tasks_done: done.len() as u64,
                tasks: t.tasks,
            }
        })
        .collect::<Vec<_>>();
    let mut failures: Vec<FailureReport> = state
        .records
        .done
        .values()
        .flat_map(|r| {
            r.failures.iter().map(|f| FailureReport {
                table: r.target_table.clone(),
                task: r.task.clone(),
                keys: f.keys.clone(),
                status: f.status,
                code: f.code.clone(),
                message: f.message.clone(),
            })
        })
        .collect();
    failures.sort_by(|a, b| (&a.table, &a.task).cmp(&(&b.table, &b.task)));
    RestoreReport {
        restore_id: job.restore_id.clone(),
        backup_id: job.backup_id.clone(),
        status,
        mode: job.mode,
        target_account: job.target.account.clone(),
        target_endpoint: job.target.table_endpoint.clone(),
        created_at: job.created_at.clone(),
        entities: tables.iter().map(|t| t.entities).sum(),
        deleted: 0,
        verification: None,
        written: tables.iter().map(|t| t.written).sum(),
        tables,
        failures,
        poisoned: PoisonReport::sorted(state.records.poisoned.values()),
        duration_seconds: 0.0,
        entities_per_second: 0.0,
        peak_rss_bytes: peak_rss_bytes(),
    }
}

/// Watches a planned restore until its tasks settle, then finishes it: `replace` deletes
/// what the backup does not hold, the target is read back and compared with the backup
/// (when the job asks for it), and the state and report are written. Interrupted (Ctrl-C),
/// the restore is recorded as such and stops being worked on; `resume` carries it on.
pub async fn watch(
    location: &Location,
    job: &RestoreJob,
    target: &StorageAccount,
    opts: &WatchOptions,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let store = location.store()?;
    let mut w = RestoreWatch {
        state: RestoreState::new(job.clone()),
        cancelled: false,
    };
    let watched = watch_job(location, &job.restore_id, &mut w, opts).await;
    let status = match watched {
        Ok(s) => s,
        Err(e) => {
            if opts.shutdown.is_cancelled() {
                record_interrupted(location, job).await;
            }
            return Err(e);
        }
    };
    let mut report = report(&w.state, status);
    match status {
        JobStatus::Interrupted => {
            record_interrupted(location, job).await;
            report.timed(started.elapsed().as_secs_f64());
            return Ok(report);
        }
        JobStatus::Cancelled => {
            report.timed(started.elapsed().as_secs_f64());
            return Ok(report);
        }
        JobStatus::Complete => {
            if let Err(e) =
                finish_writing(location, job, target, &mut report, opts.progress.as_deref()).await
            {
                if opts.shutdown.is_cancelled() {
                    record_interrupted(location, job).await;
                }
                return Err(e);
            }
        }
        _ => {}
    }
    report.timed(started.elapsed().as_secs_f64());
    // A cancel that came in meanwhile stands.
    if !set_state_unless_cancelled(&store, job, report.status, None).await? {
        report.status = JobStatus::Cancelled;
    }
    let path = BackupPaths::new(&job.backup_id).restore_report(&job.restore_id);
    if let Err(e) = store.overwrite(&path, &report).await {
        tracing::warn!(error = %e, "could not write the restore report");
    }
    Ok(report)
}

/// Records that a restore was interrupted, unless it was cancelled meanwhile; works after
/// Ctrl-C (its requests are not cancelled).
async fn record_interrupted(location: &Location, job: &RestoreJob) {
    let Ok(store) = location.uncancellable().store() else {
        return;
    };
    if let Ok(Some(s)) = store.restore_state(&job.backup_id, &job.restore_id).await
        && s.status.is_final()
    {
        return;
    }
    let note = Some(format!(
        "resume with `tablevault resume {}`",
        job.restore_id
    ));
    if let Err(e) = set_state_unless_cancelled(&store, job, JobStatus::Interrupted, note).await {
        tracing::warn!(error = %e, "could not record that the restore was interrupted");
    }
}
