//! Finalizing a backup once its committed ranges tile every table: write the manifest
//! (create-only, so two coordinators finalizing at once agree), then delete the blobs of
//! attempts that did not win. Safe to run again at any point.

use bytes::Bytes;
use futures::StreamExt;
use tablevault_common::blob::{BlobClient, ListOptions, PutOptions};
use tablevault_common::job::{BackupPaths, Manifest, ManifestRange, ManifestTable, now_rfc3339};

use crate::exit::{CmdResult, Failure};
use crate::state::JobState;

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
pub async fn finalize(blobs: &BlobClient, state: &JobState) -> CmdResult<Manifest> {
    let paths = BackupPaths::new(&state.job.backup_id);
    let manifest = build_manifest(state).ok_or_else(|| {
        Failure::failed("internal error: finalize called on an incomplete backup")
    })?;
    let body = serde_json::to_vec_pretty(&manifest).expect("manifests serialize");
    let opts = PutOptions {
        content_type: Some("application/json".into()),
        metadata: vec![
            ("tvformat".into(), manifest.format.to_string()),
            ("tventities".into(), manifest.entities.to_string()),
        ],
        if_none_match: true,
    };
    let manifest = match blobs
        .put_blob(&paths.manifest(), Bytes::from(body), &opts)
        .await
    {
        Ok(_) => manifest,
        Err(e) if e.has_code("BlobAlreadyExists") || e.status() == Some(412) => {
            crate::state::load_manifest(blobs, &state.job.backup_id)
                .await?
                .ok_or_else(|| Failure::failed("manifest vanished while finalizing"))?
        }
        Err(e) => return Err(e.into()),
    };
    collect_garbage(blobs, &paths, &manifest, state).await?;
    Ok(manifest)
}

/// Deletes data blobs that no range of the manifest references: attempts that lost the
/// commit race, died mid-way, or committed a range the tiling did not use.
async fn collect_garbage(
    blobs: &BlobClient,
    paths: &BackupPaths,
    manifest: &Manifest,
    state: &JobState,
) -> CmdResult<()> {
    let mut keep = std::collections::HashSet::new();
    for t in &manifest.tables {
        for r in &t.ranges {
            if let Some(c) = state.commits.get(&(t.name.clone(), r.task.clone())) {
                keep.insert(paths.attempt_prefix(&c.table, &c.task, &c.attempt));
            }
        }
    }
    let listing = blobs
        .list_all(&ListOptions {
            prefix: Some(&paths.data_root()),
            ..Default::default()
        })
        .await?;
    let garbage: Vec<String> = listing
        .blobs
        .into_iter()
        .map(|b| b.name)
        .filter(|n| !keep.iter().any(|k| n.starts_with(k.as_str())))
        .collect();
    if !garbage.is_empty() {
        tracing::info!(
            blobs = garbage.len(),
            "deleting blobs of attempts that did not win"
        );
    }
    let results: Vec<_> = futures::stream::iter(garbage)
        .map(|name| async move { (blobs.delete(&name).await, name) })
        .buffer_unordered(16)
        .collect()
        .await;
    for (r, name) in results {
        if let Err(e) = r {
            tracing::warn!(blob = %name, error = %e, "could not delete an unused blob");
        }
    }
    Ok(())
}
