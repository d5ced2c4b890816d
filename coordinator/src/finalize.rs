//! Finalizing a backup once its committed ranges tile every table: write the manifest
//! (create-only, so two coordinators finalizing at once agree), then delete the blobs of
//! attempts that did not win. Safe to run again at any point.

use std::collections::HashSet;

use tablevault_core::protocol::{Manifest, ManifestRange, ManifestTable, now_rfc3339};
use tablevault_core::store::{BackupPaths, CreateOutcome, Store};

use crate::state::{JobState, load_manifest};
use crate::{Error, Result};

/// Builds the manifest from the tiling of every table. `None` if some table is not tiled.
pub fn build_manifest(state: &JobState) -> Option<Manifest> {
    let job = &state.job;
    let paths = BackupPaths::new(&job.backup_id);
    let mut tables = Vec::new();
    for t in &job.tables {
        let chain = state.tiling(&t.name)?;
        let ranges: Vec<ManifestRange> = chain
            .iter()
            .map(|c| ManifestRange {
                task: c.task.clone(),
                range: c.range.clone(),
                entities: c.entities,
                commit: paths.commit(&c.table, &c.task),
            })
            .collect();
        tables.push(ManifestTable {
            name: t.name.clone(),
            entities: chain.iter().map(|c| c.entities).sum(),
            raw_bytes: chain.iter().map(|c| c.raw_bytes).sum(),
            stored_bytes: chain.iter().map(|c| c.stored_bytes).sum(),
            blobs: chain.iter().map(|c| c.blobs.len() as u64).sum(),
            blocks: chain
                .iter()
                .flat_map(|c| &c.blobs)
                .map(|b| b.blocks.len() as u64)
                .sum(),
            ranges,
        });
    }
    Some(Manifest {
        format: job.format,
        backup_id: job.backup_id.clone(),
        created_at: job.created_at.clone(),
        completed_at: now_rfc3339(),
        source: job.source.clone(),
        compression: job.options.compression,
        entities: tables.iter().map(|t| t.entities).sum(),
        raw_bytes: tables.iter().map(|t| t.raw_bytes).sum(),
        stored_bytes: tables.iter().map(|t| t.stored_bytes).sum(),
        tables,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    })
}

/// Writes the manifest (or reads the one another coordinator wrote first) and collects
/// the blobs of losing and dead attempts. Returns the manifest in force.
pub async fn finalize(store: &Store, state: &JobState) -> Result<Manifest> {
    let id = &state.job.backup_id;
    let paths = BackupPaths::new(id);
    let manifest = build_manifest(state)
        .ok_or_else(|| Error::Internal("finalize called on an incomplete backup".into()))?;
    let metadata = vec![
        ("tvformat".into(), manifest.format.to_string()),
        ("tventities".into(), manifest.entities.to_string()),
    ];
    let manifest = match store.create(&paths.manifest(), &manifest, metadata).await? {
        CreateOutcome::Created => manifest,
        CreateOutcome::AlreadyExists => load_manifest(store, id)
            .await?
            .ok_or_else(|| Error::Internal("manifest vanished while finalizing".into()))?,
    };
    collect_garbage(store, &paths, &manifest, state).await?;
    Ok(manifest)
}

/// Deletes data blobs that no range of the manifest references: attempts that lost the
/// commit race, died mid-way, or committed a range the tiling did not use.
async fn collect_garbage(
    store: &Store,
    paths: &BackupPaths,
    manifest: &Manifest,
    state: &JobState,
) -> Result<()> {
    let mut keep = HashSet::new();
    for t in &manifest.tables {
        for r in &t.ranges {
            if let Some(c) = state.commits().get(&(t.name.clone(), r.task.clone())) {
                keep.insert(paths.attempt_prefix(&c.table, &c.task, &c.attempt));
            }
        }
    }
    let garbage: Vec<String> = store
        .list_names(&paths.data_root())
        .await?
        .into_iter()
        .filter(|n| !keep.iter().any(|k| n.starts_with(k.as_str())))
        .collect();
    if !garbage.is_empty() {
        tracing::info!(
            blobs = garbage.len(),
            "deleting blobs of attempts that did not win"
        );
    }
    store.delete_unreferenced(&garbage).await;
    Ok(())
}
