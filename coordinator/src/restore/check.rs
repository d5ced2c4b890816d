//! The check after writing: `replace` deletes what the backup does not hold, then the
//! target is read back and compared with the backup as the restore's mode promises.

use std::time::Instant;

use tablevault_azure::StorageAccount;
use tablevault_azure::table::TableClient;
use tablevault_core::protocol::{JobStatus, Manifest, RestoreJob, RestoreMode};
use tablevault_core::store::Store;

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
        opts: CompareOptions,
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
        let pruned = restored
            .compare(
                CompareOptions {
                    equality: Equality::Exact,
                    delete_extras: true,
                },
                progress,
            )
            .await?;
        report.deleted = pruned.iter().map(|t| t.counts.deleted).sum();
        tracing::info!(
            deleted = report.deleted,
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
