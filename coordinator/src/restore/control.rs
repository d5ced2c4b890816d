//! Restores already planned: finding one by id, where it stands (`status`), carrying it
//! on (`resume`) and ending it (`cancel`).

use std::time::Instant;

use futures::StreamExt;
use tablevault_azure::StorageAccount;
use tablevault_azure::blob::BlobItem;
use tablevault_core::protocol::{
    AccountRef, FAILED_METADATA, JobStatus, RestoreJob, TaskMessage, is_valid_backup_id,
};
use tablevault_core::store::{BackupPaths, Store};

use super::watch::{report, watch};
use super::{
    all_tasks, load_complete_manifest, refuse_if_deleting, set_state, set_state_unless_cancelled,
    table_pairs,
};
use crate::location::Location;
use crate::report::RestoreReport;
use crate::state::RestoreState;
use crate::watch::WatchOptions;
use crate::{Error, Result};

/// Finds a restore by id among the container's backups.
pub async fn find_restore(store: &Store, restore_id: &str) -> Result<RestoreJob> {
    if !is_valid_backup_id(restore_id) {
        return Err(Error::invalid(format!(
            "{restore_id:?} is not a restore id"
        )));
    }
    let backups = store.list_dirs("").await?;
    if backups.iter().any(|b| b == restore_id) {
        return Err(Error::invalid(format!(
            "{restore_id} is a backup, not a restore: this command takes a restore id \
             (`tablevault list` shows both)"
        )));
    }
    let found: Vec<Option<RestoreJob>> = futures::stream::iter(backups)
        .filter(|b| std::future::ready(is_valid_backup_id(b)))
        .map(|b| async move { store.restore_job(&b, restore_id).await })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<std::result::Result<_, _>>()?;
    found.into_iter().flatten().next().ok_or_else(|| {
        Error::invalid(format!(
            "restore {restore_id} not found in container {:?} (see `tablevault list`)",
            store.container()
        ))
    })
}

/// Where a restore stands and what it did so far (`status`).
pub async fn status(location: &Location, job: &RestoreJob) -> Result<RestoreReport> {
    let store = location.store()?;
    let paths = BackupPaths::new(&job.backup_id);
    if let Some(r) = store
        .read::<RestoreReport>(&paths.restore_report(&job.restore_id))
        .await
        .ok()
        .flatten()
    {
        // A finished restore's report; the state may have changed since (cancel).
        let mut r = r;
        if let Some(s) = store.restore_state(&job.backup_id, &job.restore_id).await? {
            r.status = s.status;
        }
        return Ok(r);
    }
    let mut state = RestoreState::new(job.clone());
    state.records.refresh(&store).await?;
    let recorded = store.restore_state(&job.backup_id, &job.restore_id).await?;
    let status = recorded
        .as_ref()
        .map_or(JobStatus::Interrupted, |s| s.status);
    let mut r = report(&state, status);
    // Timed from its start: up to now while it runs, up to its last recorded state once
    // it stopped (a cancel). A look at it took no time worth reporting, and "written in
    // 0.0 s (0 entities/s)" said nothing of the restore.
    let until = match &recorded {
        Some(s) if s.status.is_final() => s.at.clone(),
        _ => tablevault_core::protocol::now_rfc3339(),
    };
    if let Some(seconds) = crate::listing::seconds_between(&job.created_at, &until) {
        r.timed(seconds);
    }
    Ok(r)
}

/// `tablevault resume`: carries an interrupted (or orphaned) restore on from what was
/// committed: marks it live again, re-enqueues every task without a done record (a
/// poisoned one gets another chance) and every task whose batches failed, and watches
/// it to the end.
pub async fn resume(
    location: &Location,
    restore_id: &str,
    target: &StorageAccount,
    opts: &WatchOptions,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let store = location.store()?;
    let job = find_restore(&store, restore_id).await?;
    let named = AccountRef::of(target)?;
    if named != job.target {
        return Err(Error::invalid(format!(
            "restore {restore_id} writes to account {} ({}); the target given is {} ({})",
            job.target.account, job.target.table_endpoint, named.account, named.table_endpoint
        )));
    }
    match store.restore_state(&job.backup_id, restore_id).await? {
        Some(s) if s.status == JobStatus::Cancelled => {
            return Err(Error::invalid(format!(
                "restore {restore_id} was cancelled ({}); start a new restore of backup {}",
                s.at, job.backup_id
            )));
        }
        Some(s) if s.status == JobStatus::Complete => {
            return status(location, &job).await;
        }
        _ => {}
    }
    let pairs = table_pairs(&job);
    let read = async {
        let manifest = load_complete_manifest(&store, &job.backup_id).await?;
        all_tasks(
            &store,
            location,
            &manifest,
            restore_id,
            &job.backup_id,
            &pairs,
            job.per_blob_max_bytes,
        )
        .await
    };
    let tasks = crate::retention::unless_removed(
        &store,
        &job.backup_id,
        "the restore cannot be carried on",
        read.await,
    )
    .await?;
    let paths = BackupPaths::new(&job.backup_id);
    // A task whose record counts failed batches ran, but did not write everything: it
    // runs again (every mode replays safely; what it wrote is now identical). Its record
    // goes first, or workers would drop the task as done. The count is the record's
    // metadata, so one listing tells both kinds apart.
    let (retried, done): (Vec<BlobItem>, Vec<BlobItem>) = store
        .blobs()
        .list(&paths.restore_done_root(restore_id), None)
        .await?
        .blobs
        .into_iter()
        .partition(|b| {
            b.metadata
                .get(FAILED_METADATA)
                .is_some_and(|n| n.parse::<u64>().map_or(true, |n| n > 0))
        });
    let retried: Vec<String> = retried.into_iter().map(|b| b.name).collect();
    store.delete_all(&retried).await?;
    let done: std::collections::HashSet<String> = done.into_iter().map(|b| b.name).collect();
    let poisoned = store
        .list_names(&paths.restore_poison_root(restore_id))
        .await?;
    for p in poisoned {
        store.delete(&p).await?;
    }
    let left: Vec<TaskMessage> = tasks
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| !done.contains(&paths.restore_done(restore_id, &t.table, &t.task)))
        .collect();
    tracing::info!(tasks = left.len(), "resuming the restore");
    // Only over a state that is not `cancelled`: a cancel that landed since the check
    // above stays, and nothing is enqueued.
    if !set_state_unless_cancelled(&store, &job, JobStatus::InProgress, None).await? {
        return Err(Error::invalid(format!(
            "restore {restore_id} was cancelled while it was being resumed; start a new restore of backup {}",
            job.backup_id
        )));
    }
    refuse_if_deleting(&store, &job).await?;
    location.create_queues().await?;
    let queue = location.task_queue()?;
    let next =
        format!("restore {restore_id} cannot be completed; run `tablevault resume {restore_id}`");
    crate::enqueue::enqueue_shuffled(&queue, left, &next).await?;
    let mut report = watch(location, &job, target, opts).await?;
    report.timed(started.elapsed().as_secs_f64());
    Ok(report)
}

/// `tablevault cancel`: ends a restore. Workers drop its queued tasks when they next see
/// them; a coordinator watching it stops. What was written stays written.
pub async fn cancel(location: &Location, restore_id: &str) -> Result<RestoreReport> {
    let store = location.store()?;
    let job = find_restore(&store, restore_id).await?;
    if let Some(s) = store.restore_state(&job.backup_id, restore_id).await?
        && s.status.is_final()
        && s.status != JobStatus::Cancelled
    {
        return Err(Error::invalid(format!(
            "restore {restore_id} has already ended ({}); there is nothing to cancel",
            s.status
        )));
    }
    set_state(
        &store,
        &job,
        JobStatus::Cancelled,
        Some("cancelled by the user".into()),
    )
    .await?;
    status(location, &job).await
}
