//! Finalizing a backup once its committed ranges tile every table: write the manifest
//! (create-only, so everyone finalizing at once agrees on one), then delete the blobs of
//! attempts that did not win. Safe to run again at any point, by anyone.

use std::collections::{BTreeMap, HashSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::{BackupState, Tiling};
use crate::keys::{KeyRange, find_tiling};
use crate::protocol::{BackupJob, BlobRecord, Manifest, ManifestRange, ManifestTable, now_rfc3339};
use crate::store::{BackupPaths, CreateOutcome, Result, Store, StoreError};

/// Blob metadata of a commit record holding its range (base64 of JSON), so completion
/// can be checked from one listing instead of reading every record.
pub const RANGE_METADATA: &str = "tvrange";

/// The metadata value for a range.
pub fn range_metadata(range: &KeyRange) -> String {
    BASE64.encode(serde_json::to_vec(range).expect("ranges serialize"))
}

fn range_from_metadata(value: &str) -> Option<KeyRange> {
    serde_json::from_slice(&BASE64.decode(value).ok()?).ok()
}

/// Builds the manifest of `job` from the tiling of every table ([`BackupState::tilings`]).
pub fn build_manifest(job: &BackupJob, tilings: &[Tiling<'_>]) -> Manifest {
    let paths = BackupPaths::new(&job.backup_id);
    let mut tables = Vec::new();
    for (name, chain) in tilings {
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
            name: name.to_string(),
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
    Manifest {
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
    }
}

/// Writes the manifest (or reads the one someone wrote first) and collects the blobs of
/// losing and dead attempts. Returns the manifest in force; `None` if some table is not
/// tiled yet.
pub async fn finalize(store: &Store, state: &BackupState) -> Result<Option<Manifest>> {
    let id = &state.job.backup_id;
    let paths = BackupPaths::new(id);
    let Some(tilings) = state.tilings() else {
        return Ok(None);
    };
    let manifest = build_manifest(&state.job, &tilings);
    // A backup a prune or forget is removing (its marker, or its plan gone) never gets a
    // manifest: a coordinator that watched it to the end finalized from what it held and
    // reported complete a backup whose data was being deleted under it. Checked again
    // after the write, for a deletion that began meanwhile.
    if being_removed(store, &paths).await? {
        return Ok(None);
    }
    let (manifest, created) = match store
        .create(&paths.manifest(), &manifest, manifest_metadata(&manifest))
        .await?
    {
        CreateOutcome::Created => {
            tracing::info!(backup = %id, entities = manifest.entities, "backup complete: manifest written");
            (manifest, true)
        }
        CreateOutcome::AlreadyExists => {
            let manifest = store.manifest(id).await?.ok_or_else(|| {
                StoreError::Corrupt(format!("the manifest of {id} vanished while finalizing"))
            })?;
            (manifest, false)
        }
    };
    // The garbage is collected while the second check runs: removing blobs no range
    // references is right whether or not a deletion began (which removes them too). The
    // next backup's planning hints go out meanwhile too, from whoever wrote the manifest.
    let (removed, collected, ()) = tokio::join!(
        being_removed(store, &paths),
        collect_garbage(store, &paths, &manifest, state),
        write_learned(store, &paths, created.then_some((&state.job, &tilings[..])))
    );
    if removed? {
        store
            .delete_all(&[paths.manifest(), paths.learned()])
            .await?;
        return Ok(None);
    }
    collected?;
    Ok(Some(manifest))
}

/// Writes what the backup learned for the next one's plan (`learned.json`), if its job
/// and tilings are given and some table is large enough to learn from. Failing to is
/// logged, not an error: the next plan reads the commit records instead.
async fn write_learned(
    store: &Store,
    paths: &BackupPaths,
    tiled: Option<(&BackupJob, &[Tiling<'_>])>,
) {
    let Some(learned) = tiled.and_then(|(job, tilings)| super::learned::learned(job, tilings))
    else {
        return;
    };
    if let Err(e) = store.overwrite(&paths.learned(), &learned).await {
        tracing::debug!(error = %e, "cannot write what the backup learned; the next plan reads its commit records");
    }
}

/// Whether a backup is being removed: its deletion marker is there, or its plan is gone.
pub async fn being_removed(store: &Store, paths: &BackupPaths) -> Result<bool> {
    let (marker, plan) = (paths.deleting(), paths.job());
    let (marked, planned) = tokio::try_join!(store.exists(&marker), store.exists(&plan))?;
    Ok(marked || !planned)
}

/// The blob metadata a manifest is written with (seen in listings without a read).
fn manifest_metadata(manifest: &Manifest) -> Vec<(String, String)> {
    vec![
        ("tvformat".into(), manifest.format.to_string()),
        ("tventities".into(), manifest.entities.to_string()),
    ]
}

/// The first of `blobs` that is missing from `sizes` (a listing of the data blobs) or
/// shorter than its blocks need, with what is wrong with it. Inline blobs are in their
/// records, never missing.
pub fn missing_or_short<'a>(
    blobs: impl IntoIterator<Item = &'a BlobRecord>,
    sizes: &BTreeMap<String, u64>,
) -> Option<(&'a str, String)> {
    blobs
        .into_iter()
        .filter(|b| !b.is_inline())
        .find_map(|blob| {
            let needed = blob
                .blocks
                .iter()
                .map(|b| b.offset.saturating_add(b.length))
                .max()
                .unwrap_or(0);
            match sizes.get(&blob.name) {
                None => Some((blob.name.as_str(), "is missing".to_string())),
                Some(&size) if size < needed => Some((
                    blob.name.as_str(),
                    format!("holds {size} bytes, its blocks end at byte {needed}"),
                )),
                Some(_) => None,
            }
        })
}

/// Rewrites the manifest of a complete backup from its commit records, where the stored
/// one cannot be read: the records are what it was built from, and the data is intact,
/// but without a manifest no restore may read the backup. Only over a manifest that is
/// there (a backup never finalized is not made complete here); `None` when the records
/// do not tile every table, or the backup is being deleted. Refused as corrupt when a
/// data blob the records name is missing or short.
pub async fn rebuild_manifest(store: &Store, job: &BackupJob) -> Result<Option<Manifest>> {
    let paths = BackupPaths::new(&job.backup_id);
    if being_removed(store, &paths).await? {
        return Ok(None);
    }
    let mut state = BackupState::new(job.clone());
    state.refresh(store).await?;
    let Some(tilings) = state.tilings() else {
        return Ok(None);
    };
    let manifest = build_manifest(job, &tilings);
    let sizes = store.blob_sizes(&paths.data_root()).await?;
    let named = tilings
        .iter()
        .flat_map(|(_, chain)| chain)
        .flat_map(|c| &c.blobs);
    if let Some((blob, problem)) = missing_or_short(named, &sizes) {
        return Err(StoreError::Corrupt(format!(
            "the manifest of {} cannot be rebuilt: data blob {blob} {problem}",
            job.backup_id
        )));
    }
    let written = store
        .replace_existing(&paths.manifest(), &manifest, manifest_metadata(&manifest))
        .await?;
    Ok(written.then_some(manifest))
}

/// Deletes data blobs that no range of the manifest references: attempts that lost the
/// commit race, died mid-way, or committed a range the tiling did not use.
async fn collect_garbage(
    store: &Store,
    paths: &BackupPaths,
    manifest: &Manifest,
    state: &BackupState,
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

/// Whether the committed ranges tile every table, judged from one listing of the commit
/// records' metadata. `true` also when a record carries no range metadata (an older
/// writer): the caller then reads the records and checks properly.
async fn listing_says_tiled(store: &Store, job: &BackupJob) -> Result<bool> {
    let root = BackupPaths::new(&job.backup_id).commits_root();
    let listing = store.blobs().list(&root, None).await?;
    let mut ranges: Vec<(String, KeyRange)> = Vec::with_capacity(listing.blobs.len());
    for b in &listing.blobs {
        let Some(table) = b
            .name
            .strip_prefix(&root)
            .and_then(|rest| rest.split_once('/'))
            .map(|(t, _)| t)
        else {
            continue;
        };
        match b
            .metadata
            .get(RANGE_METADATA)
            .and_then(|v| range_from_metadata(v))
        {
            Some(r) => ranges.push((table.to_string(), r)),
            None => return Ok(true),
        }
    }
    Ok(job.tables.iter().all(|t| {
        let of_table: Vec<&KeyRange> = ranges
            .iter()
            .filter(|(name, _)| *name == t.name)
            .map(|(_, r)| r)
            .collect();
        find_tiling(&of_table).is_some()
    }))
}

/// The one rule for a backup's state: its manifest if it has one; otherwise, if its
/// committed ranges tile every table, it is finalized now and its new manifest returned;
/// otherwise `None` (still in progress, or incomplete). Cheap while the job is not
/// complete: one listing of its commit records.
pub async fn settle_backup(store: &Store, job: &BackupJob) -> Result<Option<Manifest>> {
    if let Some(m) = store.manifest(&job.backup_id).await? {
        return Ok(Some(m));
    }
    if !listing_says_tiled(store, job).await? {
        return Ok(None);
    }
    // A backup being deleted (or whose plan is gone) is never finalized ([`finalize`]
    // checks): records left by an attempt that raced the deletion must not make it look
    // complete.
    let mut state = BackupState::new(job.clone());
    state.refresh(store).await?;
    finalize(store, &state).await
}
