//! The check after writing: `replace` deletes what the backup does not hold, then the
//! target is read back and compared with the backup as the restore's mode promises.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tablevault_azure::StorageAccount;
use tablevault_azure::table::TableClient;
use tablevault_core::protocol::{
    DeletionsRecord, JobStatus, Manifest, RestoreJob, RestoreMode, now_rfc3339, worker_identity,
};
use tablevault_core::store::{BackupPaths, Store};

use super::{load_complete_manifest, table_pairs};
use crate::Result;
use crate::compare::{CompareOptions, Equality, TableComparison, compare_tables};
use crate::location::Location;
use crate::report::{RestoreReport, RestoreVerification};
use crate::watch::Progress;

/// What comparing a restore's target with its backup needs, read once.
struct RestoredTables {
    store: Store,
    manifest: Manifest,
    client: TableClient,
    pairs: Vec<(String, String)>,
}

impl RestoredTables {
    async fn open(location: &Location, job: &RestoreJob, target: &StorageAccount) -> Result<Self> {
        let store = location.store()?;
        let manifest = load_complete_manifest(&store, &job.backup_id).await?;
        Ok(RestoredTables {
            store,
            manifest,
            client: TableClient::with_options(target, &location.client_options)?,
            pairs: table_pairs(job),
        })
    }

    async fn compare(
        &self,
        opts: CompareOptions<'_>,
        progress: Option<&dyn Progress>,
    ) -> Result<Vec<TableComparison>> {
        compare_tables(
            &self.store,
            &self.manifest,
            &self.pairs,
            &self.client,
            opts,
            progress,
        )
        .await
    }

    /// The check after writing (see [`check_target`]).
    async fn check(
        &self,
        job: &RestoreJob,
        report: &RestoreReport,
        progress: Option<&dyn Progress>,
    ) -> Result<RestoreVerification> {
        let started = Instant::now();
        let tables = self
            .compare(
                CompareOptions {
                    equality: Equality::for_mode(job.mode),
                    delete_extras: false,
                    deleted: None,
                },
                progress,
            )
            .await?;
        let ok = tables.iter().all(|t| {
            let left_alone: u64 = report
                .tables
                .iter()
                .filter(|r| r.target == t.target)
                .map(|r| r.skipped + r.failed)
                .sum();
            let c = &t.counts;
            c.missing == 0
                && c.different <= left_alone
                && (job.mode != RestoreMode::Replace || c.extra == 0)
        });
        if !ok {
            tracing::error!(restore = %job.restore_id, "the target read back differs from the backup");
        }
        Ok(RestoreVerification {
            ok,
            tables,
            duration_seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// What earlier runs of a `replace` restore deleted (each run's record, below); runs
/// killed outright left none, so this counts at least what they deleted.
async fn earlier_deletions(store: &Store, backup: &str, restore: &str) -> u64 {
    let root = BackupPaths::new(backup).restore_deletions_root(restore);
    let Ok(names) = store.list_names(&root).await else {
        return 0;
    };
    let mut total = 0;
    for name in names {
        if let Ok(Some(r)) = store.read::<DeletionsRecord>(&name).await {
            total += r.deleted;
        }
    }
    total
}

/// Records what this run of a `replace` restore deleted, also when it was interrupted
/// (its requests are not cancelled): a resumed restore reported only the resumed run's
/// deletions (audit 12: 12 where 300 were deleted).
async fn record_deletions(store: &Store, backup: &str, restore: &str, deleted: u64) {
    if deleted == 0 {
        return;
    }
    // Unique per run: runs of one process (tests, a coordinator library) can follow
    // each other within a second.
    let at = now_rfc3339();
    let run = format!(
        "{}-{:08x}",
        at.replace([':', '-'], ""),
        rand::random::<u32>()
    );
    let path = BackupPaths::new(backup).restore_deletions(restore, &run);
    let record = DeletionsRecord {
        deleted,
        at,
        by: worker_identity(),
    };
    if let Err(e) = store.overwrite(&path, &record).await {
        tracing::warn!(error = %e, deleted, "could not record what this run deleted; the report of a resumed run will count fewer");
    }
}

/// After every task wrote its entities: deletes extras (`replace`) and checks the target.
pub(super) async fn finish_writing(
    location: &Location,
    job: &RestoreJob,
    target: &StorageAccount,
    report: &mut RestoreReport,
    progress: Option<&dyn Progress>,
) -> Result<()> {
    if job.mode != RestoreMode::Replace && !job.verify {
        return Ok(());
    }
    let restored = RestoredTables::open(location, job, target).await?;
    if job.mode == RestoreMode::Replace {
        if let Some(p) = progress {
            p.phase("replace: deleting extras");
        }
        let earlier = earlier_deletions(&restored.store, &job.backup_id, &job.restore_id).await;
        let deleted = AtomicU64::new(0);
        let pruned = restored
            .compare(
                CompareOptions {
                    equality: Equality::Exact,
                    delete_extras: true,
                    deleted: Some(&deleted),
                },
                progress,
            )
            .await;
        let this_run = deleted.load(Ordering::Relaxed);
        // Requests of the interrupted run's store are cancelled; this one's are not.
        if let Ok(store) = location.uncancellable().store() {
            record_deletions(&store, &job.backup_id, &job.restore_id, this_run).await;
        }
        pruned?;
        report.deleted = earlier + this_run;
        tracing::info!(
            deleted = report.deleted,
            this_run,
            "deleted the entities the backup does not hold"
        );
    }
    if job.verify {
        if let Some(p) = progress {
            p.phase("verify");
        }
        let verification = restored.check(job, report, progress).await;
        if let Some(p) = progress {
            p.finish();
        }
        let verification = verification?;
        if !verification.ok {
            report.status = JobStatus::Mismatch;
        }
        report.verification = Some(verification);
    }
    // The report's peak memory covers the deletions and the check too.
    report.peak_rss_bytes = crate::report::peak_rss_bytes();
    Ok(())
}

/// Reads a restore's target tables back and compares them with the backup, as the
/// restore's mode promises: every backed-up entity present and equal (only its own
/// properties for `merge`; entities `report` says were left alone or failed may differ),
/// and for `replace` nothing else. Extras are always counted.
pub async fn check_target(
    location: &Location,
    job: &RestoreJob,
    target: &StorageAccount,
    report: &RestoreReport,
) -> Result<RestoreVerification> {
    RestoredTables::open(location, job, target)
        .await?
        .check(job, report, None)
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tablevault_core::testing::MemoryBlobs;

    use super::*;

    /// Regression (audit 12): a `replace` restore interrupted while it deleted extras,
    /// then resumed, reported only the resumed run's deletions (12 where 300 were). Each
    /// run records what it deleted, and the report counts every run's.
    #[tokio::test]
    async fn every_run_of_a_replace_restore_counts_in_its_deletions() {
        let store = Store::new(Arc::new(MemoryBlobs::new("c")));
        let (backup, restore) = ("20261127T000000Z-0000000b", "20261127T000100Z-0000000r");
        assert_eq!(earlier_deletions(&store, backup, restore).await, 0);
        record_deletions(&store, backup, restore, 288).await;
        // A run that deleted nothing records nothing.
        record_deletions(&store, backup, restore, 0).await;
        record_deletions(&store, backup, restore, 12).await;
        assert_eq!(earlier_deletions(&store, backup, restore).await, 300);
        let root = BackupPaths::new(backup).restore_deletions_root(restore);
        assert_eq!(store.list_names(&root).await.unwrap().len(), 2);
        // Another restore of the backup counts its own.
        assert_eq!(
            earlier_deletions(&store, backup, "20261127T000200Z-0000000s").await,
            0
        );
    }
}
