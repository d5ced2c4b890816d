//! Removing one backup. The order keeps two promises: nothing ever looks like a
//! complete backup while its data is going, and a deletion that stops anywhere (crash,
//! Ctrl-C, an error) is visible as such and finished by the next `prune` or `forget`.
//!
//! 1. Write `deleting.json`. From here `list` shows the backup as `deleting`, the
//!    finalize rule never writes its manifest, and a restore that starts planning now
//!    sees it and stops.
//! 2. Look for live restores again (one may have started since the survey; restore
//!    planning writes its plan before it looks for the marker, so one of the two sees
//!    the other). If there is one, take the marker back and keep the backup.
//! 3. Delete `manifest.json`, then `job.json`: the backup is no longer complete, and
//!    workers drop its queued tasks (a task whose plan is missing is deleted).
//! 4. Delete commit and poison records: nothing can tile, so nothing can finalize it.
//! 5. Delete everything else under `<id>/` (data, heartbeats, markers, restores),
//!    listing again until only the marker is left.
//! 6. Delete the marker.
//!
//! Every step deletes what exists and ignores what is already gone, so running it again
//! from the start after a stop finishes the job.

use tablevault_core::protocol::{now_rfc3339, worker_identity};
use tablevault_core::store::{BackupPaths, Store};

use super::survey::{Kind, Surveyed, live_restores};
use super::{DeletionRecord, Span};
use crate::Result;

/// How a deletion ended.
pub(crate) enum Deleted {
    /// Everything is gone.
    Done,
    /// A restore started reading the backup; it stays. The restores, described.
    Refused(Vec<String>),
}

/// How many times the rest of the backup is listed and deleted before giving up (an
/// attempt that raced the deletion may write after a listing).
const SWEEPS: usize = 3;

pub(crate) async fn delete_backup(
    store: &Store,
    b: &Surveyed,
    reason: &str,
    now: i64,
    abandoned_after: &Span,
) -> Result<Deleted> {
    let paths = BackupPaths::new(&b.id);
    let marked_before = b.kind == Kind::Deleting;
    if !marked_before {
        let record = DeletionRecord {
            backup_id: b.id.clone(),
            created_at: Some(super::policy::format_time(b.started)),
            source_account: b.source_account.clone(),
            tables: b.tables.clone(),
            reason: reason.to_string(),
            at: now_rfc3339(),
            by: worker_identity(),
        };
        store.overwrite(&paths.deleting(), &record).await?;
    }
    let readers = live_restores(store, &b.id, now, abandoned_after).await?;
    if !readers.is_empty() {
        if !marked_before {
            store.delete(&paths.deleting()).await?;
        }
        tracing::info!(backup = %b.id, ?readers, "a restore reads the backup; it stays");
        return Ok(Deleted::Refused(readers));
    }
    store.delete_all(&[paths.manifest(), paths.job()]).await?;
    for root in [paths.commits_root(), paths.poison_root()] {
        let names = store.list_names(&root).await?;
        store.delete_all(&names).await?;
    }
    let marker = paths.deleting();
    for sweep in 0.. {
        let rest: Vec<String> = store
            .list_names(&paths.root())
            .await?
            .into_iter()
            .filter(|n| *n != marker)
            .collect();
        if rest.is_empty() {
            break;
        }
        if sweep == SWEEPS {
            return Err(crate::Error::Internal(format!(
                "{} blobs of backup {} keep appearing while it is deleted (a worker still \
                 running its tasks?); run again later to finish",
                rest.len(),
                b.id
            )));
        }
        store.delete_all(&rest).await?;
    }
    store.delete(&marker).await?;
    Ok(Deleted::Done)
}
