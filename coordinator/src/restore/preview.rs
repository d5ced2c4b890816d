//! `--dry-run`: what a restore would do, counted against the target as it is now, and
//! which target tables hold entities (writing into them needs confirmation).

use serde::Serialize;
use tablevault_azure::table::TableClient;
use tablevault_core::protocol::{AccountRef, RestoreMode};

use super::{RestoreRequest, load_complete_manifest, read_backup};
use crate::Result;
use crate::compare::{CompareOptions, Equality, compare_tables};
use crate::location::Location;

/// What a restore would do to one table.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedTable {
    /// Table in the backup.
    pub source: String,
    /// Table it would write.
    pub target: String,
    /// Whether the target table exists now.
    pub exists: bool,
    /// Entities the backup holds for it.
    pub entities: u64,
    /// Blocks they are stored in.
    pub blocks: u64,
    /// Tasks the restore would enqueue.
    pub tasks: u64,
    /// Backed-up entities absent from the target: would be written.
    pub new: u64,
    /// Present and equal to the backup.
    pub unchanged: u64,
    /// Present and different: overwritten (upsert, replace), merged (merge), left alone
    /// (insert-skip) or failures (insert-fail), as `mode` says.
    pub different: u64,
    /// In the target, not in the backup: deleted by `replace`, kept otherwise.
    pub extra: u64,
    /// Of `extra`, what would be deleted.
    pub would_delete: u64,
}

/// What a restore would do (`--dry-run`): nothing is written, nothing enqueued.
#[derive(Debug, Clone, Serialize)]
pub struct RestorePlan {
    /// The backup.
    pub backup_id: String,
    /// When the backup was taken.
    pub backup_created_at: String,
    /// Account the backup was taken from.
    pub source_account: String,
    /// Account it would write to.
    pub target_account: String,
    /// That account's Table endpoint.
    pub target_endpoint: String,
    /// Mode.
    pub mode: RestoreMode,
    /// Whether the target would be read back and compared at the end.
    pub verify: bool,
    /// Entities, blocks and tasks in all.
    pub entities: u64,
    /// Blocks in all.
    pub blocks: u64,
    /// Tasks in all.
    pub tasks: u64,
    /// Per table.
    pub tables: Vec<PlannedTable>,
}

/// Plans a restore without doing it: reads the backup's records and compares the backup
/// with the target tables as they are, so the counts of what would be overwritten and
/// deleted are exact at this moment.
pub async fn preview(req: &RestoreRequest, location: &Location) -> Result<RestorePlan> {
    let store = location.store()?;
    let target = AccountRef::of(&req.target)?;
    let client = TableClient::with_options(&req.target, &location.client_options)?;
    const THEN: &str = "nothing was planned";
    let (manifest, pairs, tasks) = read_backup(req, location, &store, "preview", THEN).await?;
    let compared = compare_tables(
        &store,
        &manifest,
        &pairs,
        &client,
        CompareOptions {
            equality: Equality::for_mode(req.mode),
            delete_extras: false,
            deleted: None,
        },
        None,
    )
    .await;
    let compared = crate::retention::unless_removed(&store, &req.backup_id, THEN, compared).await?;
    let tables: Vec<PlannedTable> = compared
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let mt = manifest.tables.iter().find(|t| t.name == c.source);
            PlannedTable {
                entities: c.counts.backup,
                blocks: mt.map_or(0, |t| t.blocks),
                tasks: tasks.iter().filter(|(t, _)| *t == i).count() as u64,
                exists: c.exists,
                new: c.counts.missing,
                unchanged: c.counts.matching,
                different: c.counts.different,
                extra: c.counts.extra,
                would_delete: if req.mode == RestoreMode::Replace {
                    c.counts.extra
                } else {
                    0
                },
                source: c.source,
                target: c.target,
            }
        })
        .collect();
    Ok(RestorePlan {
        backup_id: req.backup_id.clone(),
        backup_created_at: manifest.created_at.clone(),
        source_account: manifest.source.account.clone(),
        target_account: target.account,
        target_endpoint: target.table_endpoint,
        mode: req.mode,
        verify: req.verify,
        entities: tables.iter().map(|t| t.entities).sum(),
        blocks: tables.iter().map(|t| t.blocks).sum(),
        tasks: tasks.len() as u64,
        tables,
    })
}

/// The target tables of a restore that exist and hold entities: writing into them needs
/// the user's confirmation.
pub async fn non_empty_targets(req: &RestoreRequest, location: &Location) -> Result<Vec<String>> {
    let store = location.store()?;
    let manifest = crate::retention::unless_removed(
        &store,
        &req.backup_id,
        super::STOPPED_BEFORE_WRITING,
        load_complete_manifest(&store, &req.backup_id).await,
    )
    .await?;
    let pairs = crate::selection::select(&manifest, req.tables.as_deref(), &req.renames)?;
    let client = TableClient::with_options(&req.target, &location.client_options)?;
    let mut out = Vec::new();
    for (_, t) in pairs {
        if client.table_exists(&t).await?
            && client
                .pages(
                    &t,
                    tablevault_azure::table::Query {
                        filter: None,
                        top: Some(1),
                        keys_only: true,
                        page_bytes: None,
                    },
                )
                .first_entity()
                .await?
                .is_some()
        {
            out.push(t);
        }
    }
    Ok(out)
}
