//! Planning from what the last backup learned: its commit records list every block with
//! its first key and entity count, so a table can be cut into ranges of nearly equal
//! entity counts without a single probe. Tables change between backups; the cut only
//! decides balance (workers still split what turns out large), never correctness.

use futures::StreamExt;
use tablevault_core::keys::{EntityKey, KeyRange};
use tablevault_core::protocol::{AccountRef, Manifest, ManifestTable, is_valid_backup_id};
use tablevault_core::store::Store;

use crate::Result;

/// Backups looked at, newest first, to find the last complete one of the same account.
const LOOKBACK: usize = 20;

/// Commit records read at once.
const READS_IN_FLIGHT: usize = 16;

/// Fewest entities per planned task: smaller tasks cost more in per-task requests than
/// they gain in balance (workers split large ones anyway).
pub const MIN_TASK_ENTITIES: u64 = 10_000;

/// The manifest of the newest complete backup of `source` in the store, if any.
pub async fn last_complete_backup(store: &Store, source: &AccountRef) -> Result<Option<Manifest>> {
    let mut ids = match store.list_dirs("").await {
        Ok(ids) => ids,
        Err(e) if e.status() == Some(404) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    ids.retain(|id| is_valid_backup_id(id));
    // Ids start with their creation time, so the newest sort last.
    ids.sort();
    for id in ids.iter().rev().take(LOOKBACK) {
        if let Ok(Some(m)) = store.manifest(id).await
            && m.source.account == source.account
            && m.source.table_endpoint == source.table_endpoint
        {
            return Ok(Some(m));
        }
    }
    Ok(None)
}

/// Cuts a table into at most `max_tasks` ranges of nearly equal entity counts (and at
/// least [`MIN_TASK_ENTITIES`] each) at block boundaries of its previous backup.
pub async fn ranges_from_previous(
    store: &Store,
    table: &ManifestTable,
    max_tasks: usize,
) -> Result<Vec<KeyRange>> {
    let tasks = (table.entities / MIN_TASK_ENTITIES).clamp(1, max_tasks.max(1) as u64);
    if tasks <= 1 {
        return Ok(vec![KeyRange::all()]);
    }
    // (first key, entities) of every block, in key order.
    let reads: Vec<_> = table
        .ranges
        .iter()
        .map(|r| {
            let path = r.commit.clone();
            async move { store.commit_record(&path).await }
        })
        .collect();
    let records: Vec<_> = futures::stream::iter(reads)
        .buffered(READS_IN_FLIGHT)
        .collect()
        .await;
    let mut blocks: Vec<(EntityKey, u64)> = Vec::new();
    for record in records {
        let record = record?;
        for blob in &record.blobs {
            blocks.extend(
                blob.blocks
                    .iter()
                    .map(|b| (b.first_key.clone(), b.entities)),
            );
        }
    }
    Ok(cut_equal(&blocks, tasks))
}

/// Ranges of about `total / tasks` entities each, cut at block starts.
pub fn cut_equal(blocks: &[(EntityKey, u64)], tasks: u64) -> Vec<KeyRange> {
    let total: u64 = blocks.iter().map(|(_, n)| n).sum();
    let tasks = tasks.max(1);
    // Cut where the running count first reaches each k/tasks of the total.
    let mut points: Vec<EntityKey> = Vec::new();
    let mut seen = 0u64;
    let mut k = 1u64;
    for (first, n) in blocks {
        if k < tasks && seen >= k * total / tasks {
            if points.last().is_none_or(|p| first > p) {
                points.push(first.clone());
            }
            while k < tasks && seen >= k * total / tasks {
                k += 1;
            }
        }
        seen += n;
    }
    KeyRange::partition(&points)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablevault_core::keys::find_tiling;

    #[test]
    fn equal_cuts_tile_and_balance() {
        let blocks: Vec<(EntityKey, u64)> = (0..100)
            .map(|i| {
                (
                    EntityKey::new(format!("p{:03}", i / 7), format!("r{i:04}")),
                    1000,
                )
            })
            .collect();
        let ranges = cut_equal(&blocks, 8);
        assert_eq!(ranges.len(), 8);
        let refs: Vec<&KeyRange> = ranges.iter().collect();
        assert!(find_tiling(&refs).is_some());
        for r in &ranges {
            let n: u64 = blocks
                .iter()
                .filter(|(k, _)| r.contains(k))
                .map(|(_, n)| n)
                .sum();
            assert!((12_000..=13_000).contains(&n), "{r}: {n}");
        }
        assert_eq!(cut_equal(&[], 4), vec![KeyRange::all()]);
    }
}
