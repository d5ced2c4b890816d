//! `tablevault prune` and `tablevault forget`: which backups a container keeps, and
//! removing the others safely.
//!
//! * [`policy`]: restic's keep rules over backup times (pure).
//! * `survey`: what the container holds: each backup's state, start, activity, and the
//!   restores still reading it.
//! * `plan`: what goes and what stays, and why (pure over the survey).
//! * `delete`: removing one backup in an order that never leaves something that looks
//!   complete but is missing data, and that a later run finishes after a crash.
//!
//! The rules (docs/ARCHITECTURE.md, "Retention"): the policy counts complete backups
//! only, per source account; the newest complete backup of each account and every
//! backup a live restore reads always stay; an incomplete backup stays while it shows
//! activity within `abandoned_after`, and goes after that; a half-deleted backup always
//! goes.

mod delete;
mod plan;
pub mod policy;
mod survey;

use serde::{Deserialize, Serialize};
use tablevault_core::store::Store;

pub use policy::{Count, KeepPolicy, Span};

use crate::{Error, Result};

/// `<id>/deleting.json`: says a deletion started, and what the backup was, so `list` can
/// show it while its other files are going.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeletionRecord {
    /// The backup.
    pub backup_id: String,
    /// When the backup was planned, if known.
    pub created_at: Option<String>,
    /// Its source account, if known.
    pub source_account: Option<String>,
    /// Its tables, if known.
    #[serde(default)]
    pub tables: Vec<String>,
    /// Why it is deleted.
    pub reason: String,
    /// When the deletion started.
    pub at: String,
    /// Which process deleted it (host and pid).
    pub by: String,
}

/// The deletion record of a backup whose deletion started and has not finished.
pub async fn deleting(store: &Store, id: &str) -> Result<Option<DeletionRecord>> {
    let path = tablevault_core::store::BackupPaths::new(id).deleting();
    match store.read(&path).await {
        Ok(d) => Ok(d),
        // Unreadable, but there: still a deletion.
        Err(tablevault_core::store::StoreError::Corrupt(_)) => Ok(Some(DeletionRecord {
            backup_id: id.to_string(),
            created_at: None,
            source_account: None,
            tables: Vec::new(),
            reason: "unknown".into(),
            at: String::new(),
            by: String::new(),
        })),
        Err(e) => Err(e.into()),
    }
}

/// `read`'s outcome, unless it failed while a deletion (prune or forget) removed backup
/// `id`: then the refusal that says so ([`removal_refusal`]). A deletion removes the
/// manifest and job, then the commit records, then the data, so a command reading the
/// backup as it goes meets a missing record or blob; said as that, it was exit 1 with a
/// raw `BlobNotFound` (retrying cannot help) or exit 4 for a damaged backup. A usage
/// error (an unknown backup or table) stands where no deletion is under way: the backup
/// may never have been there.
pub async fn unless_removed<T>(store: &Store, id: &str, then: &str, read: Result<T>) -> Result<T> {
    let Err(e) = read else { return read };
    let usage = matches!(e, Error::Invalid(_));
    Err(removal_refusal(store, id, then, !usage).await.unwrap_or(e))
}

/// The refusal, ending with `then` (what the command did not do), of a command that
/// read backup `id` while a deletion started on it, or, with `gone_counts`, that
/// finished (its job is gone); `None` when neither, or when the look fails.
pub async fn removal_refusal(
    store: &Store,
    id: &str,
    then: &str,
    gone_counts: bool,
) -> Option<Error> {
    if let Ok(Some(_)) = deleting(store, id).await {
        return Some(being_deleted(id, then));
    }
    if gone_counts && let Ok(None) = store.backup_job(id).await {
        return Some(Error::invalid(format!(
            "backup {id} was deleted (prune or forget) while it was read; {then}"
        )));
    }
    None
}

/// The refusal of a command that found a deletion started on backup `id`, ending with
/// `then` (what the command did not do).
pub(crate) fn being_deleted(id: &str, then: &str) -> Error {
    Error::invalid(format!(
        "backup {id} is being deleted (prune or forget); {then}"
    ))
}

/// `tablevault prune`.
#[derive(Debug, Clone)]
pub struct PruneRequest {
    /// What to keep.
    pub policy: KeepPolicy,
    /// How long an incomplete backup may go without activity before it is abandoned.
    pub abandoned_after: Span,
    /// Only backups of this source account.
    pub source_account: Option<String>,
    /// Only say what would happen.
    pub dry_run: bool,
    /// Now, in Unix seconds (UTC).
    pub now: i64,
}

/// `tablevault forget`.
#[derive(Debug, Clone)]
pub struct ForgetRequest {
    /// Backups to remove.
    pub ids: Vec<String>,
    /// How long an incomplete backup may go without activity before it may be removed.
    pub abandoned_after: Span,
    /// Only say what would happen.
    pub dry_run: bool,
    /// Now, in Unix seconds (UTC).
    pub now: i64,
}

/// A backup and what happens to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Backup id.
    pub id: String,
    /// When it was planned (RFC 3339, UTC).
    pub started: String,
    /// `complete`, `in-progress`, `incomplete`, `deleting` (a deletion did not finish)
    /// or `leftover` (files without a plan).
    pub state: String,
    /// Its source account, if known.
    pub source_account: Option<String>,
    /// Why it stays or goes.
    pub reasons: Vec<String>,
}

/// A backup that could not be removed.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// Backup id.
    pub id: String,
    /// Why; running the command again carries on.
    pub error: String,
}

/// What `prune` or `forget` kept and removed (or, with `dry_run`, would).
#[derive(Debug, Clone, Serialize)]
pub struct RetentionReport {
    /// The container.
    pub container: String,
    /// Nothing was changed.
    pub dry_run: bool,
    /// Backups that stay, newest first.
    pub kept: Vec<Decision>,
    /// Backups removed (or that would be), newest first.
    pub removed: Vec<Decision>,
    /// Backups whose removal failed; run again to finish.
    pub failed: Vec<Failure>,
}

/// Applies a keep policy to the container.
pub async fn prune(store: &Store, req: &PruneRequest) -> Result<RetentionReport> {
    if req.policy.is_empty() {
        return Err(Error::invalid(
            "no keep rule given: pass at least one of --keep-last, --keep-hourly, --keep-daily, \
             --keep-weekly, --keep-monthly, --keep-yearly (a count of at least 1) or \
             --keep-within; nothing was removed",
        ));
    }
    let backups = survey::survey(store, req.now, &req.abandoned_after).await?;
    if let Some(account) = &req.source_account
        && !backups
            .iter()
            .any(|b| b.source_account.as_deref() == Some(account.as_str()))
    {
        // A misspelt account would otherwise read as an empty container, exit 0.
        let mut known: Vec<&str> = backups
            .iter()
            .filter_map(|b| b.source_account.as_deref())
            .collect();
        known.sort_unstable();
        known.dedup();
        return Err(Error::invalid(format!(
            "no backup of source account {account:?} in container {:?} (its backups are of: {}); nothing was removed",
            store.container(),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    let (kept, removed) = plan::prune(&backups, req);
    carry_out(
        store,
        &backups,
        kept,
        removed,
        req.dry_run,
        req.now,
        &req.abandoned_after,
    )
    .await
}

/// Removes the named backups; refuses (and removes nothing) if one of them must stay.
pub async fn forget(store: &Store, req: &ForgetRequest) -> Result<RetentionReport> {
    if req.ids.is_empty() {
        return Err(Error::invalid("name at least one backup id to forget"));
    }
    let backups = survey::survey(store, req.now, &req.abandoned_after).await?;
    forget_surveyed(store, &backups, req).await
}

/// [`forget`] of the `backups` a survey found.
async fn forget_surveyed(
    store: &Store,
    backups: &[survey::Surveyed],
    req: &ForgetRequest,
) -> Result<RetentionReport> {
    let removed = plan::forget(backups, req).map_err(Error::invalid)?;
    let report = carry_out(
        store,
        backups,
        Vec::new(),
        removed,
        req.dry_run,
        req.now,
        &req.abandoned_after,
    )
    .await?;
    refused_late(report)
}

/// A `forget` whose backup a restore began to read between the check and the removal
/// kept it, as it must, but reported that as a success (exit 0, "removed 0"): a script's
/// `forget ID && …` was told the backup was gone. Such a backup is a refusal, as one
/// the check had caught, naming what was removed all the same.
fn refused_late(report: RetentionReport) -> Result<RetentionReport> {
    if report.kept.is_empty() {
        return Ok(report);
    }
    let refused: Vec<String> = report
        .kept
        .iter()
        .map(|d| {
            format!(
                "{}: {} began reading it while it was being removed (wait for it to \
                 finish, or cancel it)",
                d.id,
                d.reasons.join(", ")
            )
        })
        .collect();
    let removed: Vec<&str> = report.removed.iter().map(|d| d.id.as_str()).collect();
    let also = if removed.is_empty() {
        "nothing was removed".to_string()
    } else {
        format!("removed {}", removed.join(", "))
    };
    Err(Error::invalid(format!(
        "not removed: {}; {also}",
        refused.join("; ")
    )))
}

async fn carry_out(
    store: &Store,
    backups: &[survey::Surveyed],
    mut kept: Vec<Decision>,
    planned: Vec<Decision>,
    dry_run: bool,
    now: i64,
    abandoned_after: &Span,
) -> Result<RetentionReport> {
    let mut removed = Vec::new();
    let mut failed = Vec::new();
    if let Some(first) = planned.first().filter(|_| !dry_run) {
        // Asked of a blob that is not there, before any marker is written: credentials
        // that may not delete (a SAS without `d`) left each backup marked `deleting`,
        // refused by restore, and "run again to finish" never could.
        let probe = format!("{}/delete-permission-check", first.id);
        store.delete(&probe).await.map_err(|e| {
            Error::from(e).in_step(
                "checking that the backup container's credentials may delete blobs (a SAS \
                 needs the `d` permission; a role, Storage Blob Data Contributor); nothing \
                 was removed",
            )
        })?;
    }
    for d in planned {
        if dry_run {
            removed.push(d);
            continue;
        }
        let b = backups
            .iter()
            .find(|b| b.id == d.id)
            .ok_or_else(|| Error::Internal(format!("{} was planned but not surveyed", d.id)))?;
        match delete::delete_backup(store, b, &d.reasons.join("; "), now, abandoned_after).await {
            Ok(delete::Deleted::Done) => {
                tracing::info!(backup = %d.id, reasons = ?d.reasons, "backup removed");
                removed.push(d);
            }
            Ok(delete::Deleted::Refused(readers)) => {
                let mut d = d;
                d.reasons = readers;
                kept.push(d);
            }
            Err(e) => {
                tracing::warn!(backup = %d.id, error = %e, "could not remove a backup; run again to finish");
                failed.push(Failure {
                    id: d.id.clone(),
                    error: e.to_string(),
                });
            }
        }
    }
    kept.sort_by(|a, b| b.started.cmp(&a.started).then(b.id.cmp(&a.id)));
    Ok(RetentionReport {
        container: store.container().to_string(),
        dry_run,
        kept,
        removed,
        failed,
    })
}

/// Now, in Unix seconds, by this machine's clock.
pub fn now() -> i64 {
    survey::unix_seconds(std::time::SystemTime::now()).unwrap_or(0)
}

/// Now by the storage service's clock (the `Date` of a listing of the container), which
/// the times retention weighs are written by, so that a machine whose clock runs ahead
/// does not judge a running backup abandoned (a prune two hours ahead deleted one under
/// its coordinator). This machine's clock where the service gives none.
pub async fn service_now(store: &Store) -> Result<i64> {
    let local = now();
    let listing = match store.blobs().list(CLOCK_PROBE, None).await {
        Ok(listing) => listing,
        Err(e) if e.status() == Some(404) => return Ok(local),
        Err(e) => return Err(e.into()),
    };
    let Some(service) = listing.service_time.and_then(survey::unix_seconds) else {
        return Ok(local);
    };
    if (service - local).abs() > CLOCK_SKEW_NOTED {
        tracing::warn!(
            skew_seconds = local - service,
            "this machine's clock is off the storage service's; retention goes by the service's"
        );
    }
    Ok(service)
}

/// A prefix no blob has: listing it costs one request and returns the service's time.
const CLOCK_PROBE: &str = "~clock/";

/// Seconds of difference from the service's clock worth a warning.
const CLOCK_SKEW_NOTED: i64 = 120;

#[cfg(test)]
mod tests;
