//! What a finished backup learns for the next one's plan (`learned.json`): each table
//! large enough to be planned into several ranges, as parts of about equal size cut at
//! its blocks' first keys and marks, and how many workers wrote it.
//!
//! The commit records hold the same, in full: a key every thousand entities, so a table
//! of a billion entities has a million marks spread over hundreds of records. Reading
//! them all made a repeat plan wait for a round trip per sixteen records (per table) and
//! megabytes of JSON; merged here to a bounded number of parts per table and per
//! backup, a repeat plan reads one file beside the manifest.

use std::collections::HashSet;

use crate::protocol::{BackupJob, BlockRecord, CommitRecord, Learned, LearnedTable, Part};
use crate::split::PIECE_ENTITIES;

/// Fewest entities a table holds for the next backup to plan it into more than one
/// range (planning makes one range per [`PIECE_ENTITIES`]); smaller tables learn
/// nothing.
pub const LEARNED_MIN_ENTITIES: u64 = 2 * PIECE_ENTITIES;

/// Most parts one table keeps: a plan cuts a table into at most 256 ranges, and with
/// 4,096 parts each range's ends are off by at most a thirty-second of a range.
pub const MAX_TABLE_PARTS: usize = 4_096;

/// Most parts a backup keeps over all its tables, shared in proportion to their
/// entities (each large table keeps at least [`MIN_TABLE_PARTS`]).
pub const MAX_PARTS: usize = 32_768;

/// Fewest parts a large table keeps, whatever its share.
pub const MIN_TABLE_PARTS: usize = 16;

/// Most bytes of keys the parts of a backup hold (keys can be 1 KiB each): past it,
/// every table keeps half as many parts, until it fits or each keeps its fewest.
pub const MAX_KEY_BYTES: usize = 8 << 20;

/// What `job`'s backup learned, from the commit records that tile each table
/// ([`super::BackupState::tilings`]); `None` when no table is large enough to learn
/// anything.
pub fn learned(job: &BackupJob, tilings: &[super::Tiling<'_>]) -> Option<Learned> {
    let large: Vec<(String, &[&CommitRecord])> = tilings
        .iter()
        .filter(|(_, chain)| chain.iter().map(|c| c.entities).sum::<u64>() >= LEARNED_MIN_ENTITIES)
        .map(|(name, chain)| (name.to_string(), &chain[..]))
        .collect();
    if large.is_empty() {
        return None;
    }
    // Each table with all its parts; merged below to what the budget allows.
    let tables: Vec<LearnedTable> = large
        .into_iter()
        .map(|(name, chain)| learn_table(name, chain))
        .collect();
    let total: u64 = tables.iter().map(|t| t.entities).sum::<u64>().max(1);
    let mut caps: Vec<usize> = tables
        .iter()
        .map(|t| {
            let share = (MAX_PARTS as u128 * t.entities as u128 / total as u128) as usize;
            share.clamp(MIN_TABLE_PARTS, MAX_TABLE_PARTS)
        })
        .collect();
    loop {
        let merged: Vec<Vec<Part>> = tables
            .iter()
            .zip(&caps)
            .map(|(t, &cap)| merge_parts(&t.parts, cap))
            .collect();
        let key_bytes: usize = merged.iter().flatten().map(key_bytes).sum();
        if key_bytes <= MAX_KEY_BYTES || caps.iter().all(|&c| c <= MIN_TABLE_PARTS) {
            return Some(Learned {
                format: job.format,
                backup_id: job.backup_id.clone(),
                source: job.source.clone(),
                tables: tables
                    .into_iter()
                    .zip(merged)
                    .map(|(table, parts)| LearnedTable { parts, ..table })
                    .collect(),
            });
        }
        for c in &mut caps {
            *c = (*c / 2).max(MIN_TABLE_PARTS);
        }
    }
}

/// What `records`, the commit records of table `name` that tile it, say of it: every
/// block start and mark as a part, in key order, and how many distinct workers wrote
/// them. What `learned.json` holds of the table before its parts are merged, and what a
/// plan reads from the records themselves where there is no `learned.json`.
pub fn learn_table(name: String, records: &[&CommitRecord]) -> LearnedTable {
    let writers = records
        .iter()
        .map(|c| c.worker.as_str())
        .collect::<HashSet<_>>()
        .len();
    let blocks = records
        .iter()
        .flat_map(|c| &c.blobs)
        .flat_map(|b| &b.blocks)
        .collect();
    let parts = table_parts(blocks);
    LearnedTable {
        name,
        entities: parts.iter().map(|p| p.entities).sum(),
        writers,
        parts,
    }
}

/// Whether `t` can be planned from as it is: at most [`MAX_TABLE_PARTS`] parts in
/// strictly increasing key order whose entities add up to its own count. A damaged or
/// hand-made `learned.json` that is not is ignored (the plan reads the commit records),
/// never trusted into a plan whose arithmetic overflows or whose ranges go backwards.
pub fn is_sound(t: &LearnedTable) -> bool {
    let ordered = t.parts.windows(2).all(|w| w[0].first < w[1].first);
    let sum = t
        .parts
        .iter()
        .try_fold(0u64, |sum, p| sum.checked_add(p.entities));
    !t.parts.is_empty() && t.parts.len() <= MAX_TABLE_PARTS && ordered && sum == Some(t.entities)
}

fn key_bytes(p: &Part) -> usize {
    p.first.pk.len() + p.first.rk.len()
}

/// A table's blocks as parts in key order: each block whole, or cut at the keys it
/// marks. A block's first key starts a partition when the block before it ended in
/// another.
pub fn table_parts(mut blocks: Vec<&BlockRecord>) -> Vec<Part> {
    blocks.sort_by(|a, b| a.first_key.cmp(&b.first_key));
    let mut parts = Vec::new();
    let mut last_pk: Option<&str> = None;
    for block in blocks {
        parts.extend(block_parts(block, last_pk));
        last_pk = Some(&block.last_key.pk);
    }
    parts
}

/// A block as parts: whole, or cut at the keys it marks. `before` is the
/// PartitionKey of the entity before the block, if known.
fn block_parts(block: &BlockRecord, before: Option<&str>) -> Vec<Part> {
    let starts = std::iter::once((
        &block.first_key,
        0,
        before.is_some_and(|pk| pk != block.first_key.pk),
    ))
    .chain(
        block
            .marks
            .iter()
            .map(|m| (&m.key, m.before, m.starts_partition)),
    )
    .collect::<Vec<_>>();
    starts
        .iter()
        .enumerate()
        .map(|(i, (key, before, starts_partition))| {
            let next = starts.get(i + 1).map_or(block.entities, |n| n.1);
            Part {
                first: (*key).clone(),
                entities: next.saturating_sub(*before),
                starts_partition: *starts_partition,
            }
        })
        .collect()
}

/// `parts` merged into at most `most` parts (at least one) of about equal entities, in
/// order, keeping the total: each merged part starts where one of `parts` starts and
/// says whether that key starts its partition. A merged part ends once it holds its
/// share, or, up to half a share later, where a partition starts: a range cut there is
/// read with one query per task instead of up to three.
pub fn merge_parts(parts: &[Part], most: usize) -> Vec<Part> {
    let most = most.max(1);
    if parts.len() <= most {
        return parts.to_vec();
    }
    let total: u64 = parts.iter().map(|p| p.entities).sum();
    // Every merged part but the last holds at least `share`, so there are at most
    // `most` of them.
    let share = total.div_ceil((most as u64 - 1).max(1)).max(1);
    let mut out: Vec<Part> = Vec::with_capacity(most);
    let mut i = 0;
    while i < parts.len() {
        let mut merged = parts[i].clone();
        let mut j = i + 1;
        while j < parts.len() && merged.entities < share {
            merged.entities += parts[j].entities;
            j += 1;
        }
        // Its share held: end it at a partition start within half a share, if any.
        let mut held = merged.entities;
        let mut k = j;
        while k < parts.len() && !parts[k].starts_partition {
            held += parts[k].entities;
            if held > share + share / 2 {
                break;
            }
            k += 1;
        }
        if k < parts.len() && parts[k].starts_partition && k > j {
            merged.entities = held;
            j = k;
        }
        out.push(merged);
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::BackupState;
    use crate::keys::EntityKey;
    use proptest::prelude::*;

    fn part(i: usize, entities: u64, starts_partition: bool) -> Part {
        Part {
            first: EntityKey::new(format!("p{i:06}"), "r"),
            entities,
            starts_partition,
        }
    }

    proptest! {
        /// Merging keeps the order, the total and original starts, and the bound.
        #[test]
        fn merged_parts_keep_order_total_and_starts(
            sizes in proptest::collection::vec((0u64..5_000, any::<bool>()), 1..600),
            most in 1usize..200,
        ) {
            let parts: Vec<Part> = sizes
                .iter()
                .enumerate()
                .map(|(i, &(n, s))| part(i, n, s))
                .collect();
            let merged = merge_parts(&parts, most);
            prop_assert!(!merged.is_empty());
            prop_assert!(merged.len() <= most);
            prop_assert_eq!(
                merged.iter().map(|p| p.entities).sum::<u64>(),
                parts.iter().map(|p| p.entities).sum::<u64>()
            );
            prop_assert_eq!(&merged[0].first, &parts[0].first);
            for w in merged.windows(2) {
                prop_assert!(w[0].first < w[1].first);
            }
            for m in &merged {
                let original = parts.iter().find(|p| p.first == m.first);
                prop_assert!(original.is_some());
                prop_assert_eq!(original.unwrap().starts_partition, m.starts_partition);
            }
        }
    }

    #[test]
    fn merged_parts_are_about_equal_and_end_at_partition_starts_nearby() {
        // 10,000 parts of 100, a partition starting every 7th.
        let parts: Vec<Part> = (0..10_000).map(|i| part(i, 100, i % 7 == 0)).collect();
        let merged = merge_parts(&parts, 100);
        assert!(merged.len() <= 100, "{} parts", merged.len());
        let share = 1_000_000 / 99;
        for m in &merged[1..merged.len() - 1] {
            assert!(m.starts_partition, "{m:?}");
            assert!(
                m.entities >= share && m.entities <= share + share / 2 + 100,
                "{}",
                m.entities
            );
        }
    }

    /// A commit record of `table`'s task `task` over `range`, by `worker`, of one blob
    /// of `blocks` blocks of 1,000 entities, their keys `pk-NNNNN` from `first`.
    fn committed(
        table: &str,
        task: &str,
        range: crate::keys::KeyRange,
        worker: &str,
        first: usize,
        blocks: usize,
    ) -> CommitRecord {
        use crate::protocol::BlobRecord;
        use crate::testing::test_block;
        let key = |i: usize| EntityKey::new(format!("pk-{i:05}"), "r");
        CommitRecord {
            range,
            entities: 1_000 * blocks as u64,
            worker: worker.into(),
            blobs: vec![BlobRecord {
                name: format!("{task}-blob"),
                entities: 1_000 * blocks as u64,
                length: 0,
                blocks: (0..blocks)
                    .map(|b| test_block(b, key(first + b), key(first + b), 1_000))
                    .collect(),
                inline: None,
            }],
            ..crate::testing::empty_commit(ID, table, task)
        }
    }

    const ID: &str = "20261205T120000Z-1a2b3c4d";

    /// A job of a large table planned in two ranges and a small one, all committed.
    fn finished(large_blocks: usize, small_blocks: usize) -> BackupState {
        use crate::keys::KeyRange;
        use crate::protocol::{PlannedTask, TablePlan};
        let cut = Some(EntityKey::partition_start("pk-00003"));
        let lower = KeyRange::new(None, cut.clone());
        let upper = KeyRange::new(cut, None);
        let planned = |name: &str, ranges: &[&KeyRange]| TablePlan {
            name: name.into(),
            planning: "whole".into(),
            tasks: ranges
                .iter()
                .enumerate()
                .map(|(i, r)| PlannedTask {
                    task: format!("r{i}"),
                    range: (*r).clone(),
                })
                .collect(),
        };
        let job = crate::testing::test_job(
            ID,
            vec![
                planned("Large", &[&lower, &upper]),
                planned("Small", &[&KeyRange::all()]),
            ],
        );
        let mut state = BackupState::new(job);
        let done = &mut state.records.done;
        done.insert(
            ("Large".into(), "r0".into()),
            committed("Large", "r0", lower, "w1", 0, 3),
        );
        done.insert(
            ("Large".into(), "r1".into()),
            committed("Large", "r1", upper, "w2", 3, large_blocks - 3),
        );
        done.insert(
            ("Small".into(), "r0".into()),
            committed("Small", "r0", KeyRange::all(), "w1", 0, small_blocks),
        );
        state
    }

    /// A fresh in-memory store holding `state`'s job file (finalize checks it is there).
    async fn planned_in_memory(
        state: &BackupState,
    ) -> (
        std::sync::Arc<crate::testing::MemoryBlobs>,
        crate::store::Store,
    ) {
        let blobs = std::sync::Arc::new(crate::testing::MemoryBlobs::new("c"));
        let store = crate::store::Store::new(blobs.clone());
        let job = crate::store::BackupPaths::new(&state.job.backup_id).job();
        store.overwrite(&job, &state.job).await.unwrap();
        (blobs, store)
    }

    #[tokio::test]
    async fn finalize_writes_what_the_large_tables_teach_the_next_plan() {
        use crate::store::BackupPaths;
        let paths = BackupPaths::new(ID);
        let state = finished(9, 2);
        let (_, store) = planned_in_memory(&state).await;
        let manifest = super::super::finalize::finalize(&store, &state)
            .await
            .unwrap()
            .expect("tiled");
        assert_eq!(manifest.entities, 11_000);
        let learned: Learned = store
            .read(&paths.learned())
            .await
            .unwrap()
            .expect("written");
        assert_eq!(learned.backup_id, ID);
        assert_eq!(learned.source, state.job.source);
        // The small table (2,000 entities) is planned whole next time: nothing to learn.
        assert_eq!(learned.tables.len(), 1);
        let large = &learned.tables[0];
        assert_eq!((large.name.as_str(), large.entities), ("Large", 9_000));
        assert_eq!(large.writers, 2);
        assert_eq!(large.parts.len(), 9);
        assert!(large.parts[1..].iter().all(|p| p.starts_partition));
        // A backup of small tables only learns nothing and writes nothing more.
        let state = finished(4, 2);
        let (blobs, store) = planned_in_memory(&state).await;
        super::super::finalize::finalize(&store, &state)
            .await
            .unwrap()
            .expect("tiled");
        assert!(blobs.blob(&paths.learned()).is_none());
    }

    /// learned.json is a hint: a backup whose finalizer cannot write it is complete all
    /// the same, and the next plan reads the commit records.
    #[tokio::test]
    async fn a_backup_whose_learned_file_cannot_be_written_is_complete() {
        use crate::store::BackupPaths;
        use crate::testing::{Op, Strike, busy};
        let paths = BackupPaths::new(ID);
        let state = finished(9, 2);
        let (blobs, store) = planned_in_memory(&state).await;
        blobs.fail(
            Op::PutBlob,
            "learned.json",
            Strike::Before,
            busy("Put Blob"),
        );
        let manifest = super::super::finalize::finalize(&store, &state)
            .await
            .unwrap()
            .expect("complete");
        assert_eq!(manifest.entities, 11_000);
        assert!(blobs.blob(&paths.manifest()).is_some());
        assert!(blobs.blob(&paths.learned()).is_none());
    }

    #[test]
    fn a_backup_over_its_key_budget_keeps_fewer_parts_of_each_table() {
        // Two tables of 9,000 blocks under keys of 1,400 bytes: 4,096 parts of each
        // would hold 11.5 MB of keys.
        let mut state = finished(9_000, 9_000);
        let long = "é".repeat(700);
        for c in state.records.done.values_mut() {
            for b in c.blobs.iter_mut().flat_map(|b| b.blocks.iter_mut()) {
                b.first_key.pk = format!("{long}{}", b.first_key.pk);
                b.last_key.pk = b.first_key.pk.clone();
            }
        }
        let learned = learned(&state.job, &state.tilings().unwrap()).expect("large tables");
        let bytes: usize = learned
            .tables
            .iter()
            .flat_map(|t| &t.parts)
            .map(key_bytes)
            .sum();
        assert!(bytes <= MAX_KEY_BYTES, "{bytes} bytes of keys");
        for t in &learned.tables {
            assert!(
                (MAX_TABLE_PARTS / 4..=MAX_TABLE_PARTS / 2).contains(&t.parts.len()),
                "{}: {} parts",
                t.name,
                t.parts.len()
            );
            assert_eq!(t.parts.iter().map(|p| p.entities).sum::<u64>(), t.entities);
        }
    }

    #[test]
    fn a_table_learned_out_of_order_or_miscounted_is_not_sound() {
        let table = |parts: Vec<Part>, entities| LearnedTable {
            name: "T".into(),
            entities,
            writers: 1,
            parts,
        };
        let good: Vec<Part> = (0..10).map(|i| part(i, 100, false)).collect();
        assert!(is_sound(&table(good.clone(), 1_000)));
        assert!(!is_sound(&table(good.clone(), 999)), "the sum disagrees");
        assert!(!is_sound(&table(Vec::new(), 0)), "no parts");
        let mut backwards = good.clone();
        backwards.swap(3, 4);
        assert!(!is_sound(&table(backwards, 1_000)));
        let mut twice = good.clone();
        twice[4].first = twice[3].first.clone();
        assert!(!is_sound(&table(twice, 1_000)));
        let mut huge = good;
        huge[0].entities = u64::MAX;
        assert!(!is_sound(&table(huge, u64::MAX)), "the sum overflows");
        let many: Vec<Part> = (0..=MAX_TABLE_PARTS).map(|i| part(i, 1, false)).collect();
        let n = many.len() as u64;
        assert!(!is_sound(&table(many, n)));
    }

    #[test]
    fn few_parts_stay_as_they_are() {
        let parts: Vec<Part> = (0..10).map(|i| part(i, 100, false)).collect();
        assert_eq!(merge_parts(&parts, 10), parts);
        assert_eq!(merge_parts(&parts, 1).len(), 1);
    }
}
