//! Distributed backup against Azurite: exact format round trip, split keys and
//! discovery, killed workers, racing attempts, poisoned tasks, bad messages, and a
//! coordinator that dies mid-job.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{Setup, backup_of, blob_client, numbered, store, target, watch_opts, worker_config};
use tablevault_azure::StorageAccount;
use tablevault_azure::blob::ListOptions;
use tablevault_azure::queue::{MessageTtl, QueueClient};
use tablevault_azure::table::{Entity, TableClient};
use tablevault_coordinator::Location;
use tablevault_coordinator::backup::{
    BackupRequest, StatusOptions, enqueue, plan, run_backup, status, watch,
};
use tablevault_coordinator::state::load_manifest;
use tablevault_core::format::Compression;
use tablevault_core::keys::EntityKey;
use tablevault_core::protocol::{
    BackupJob, Learned, Manifest, TaskKind, TaskMessage, poison_queue_name,
};
use tablevault_core::store::{BackupPaths, Store};
use tablevault_tests::fault_proxy::{FaultPlan, proxied_connection_string};
use tablevault_tests::{
    AWKWARD_KEYS, TestEnv, env_number, load_edge_table, load_many_tables, load_numbered, scan_all,
    unique_table,
};
use tablevault_worker::attempt::backup::{BackupAttempt, BackupOutcome};
use tablevault_worker::{Worker, WorkerStats};
use tokio_util::sync::CancellationToken;

/// Every entity of a complete backup, in manifest order, read block by block.
async fn read_backup(blobs: &Store, manifest: &Manifest, table: &str) -> Vec<Entity> {
    let t = manifest.tables.iter().find(|t| t.name == table).unwrap();
    let mut out = Vec::new();
    for r in &t.ranges {
        let commit = blobs.commit_record(&r.commit).await.unwrap();
        assert_eq!(commit.range, r.range);
        for b in &commit.blobs {
            for block in &b.blocks {
                let decoded = blobs
                    .read_block(b, block, manifest.compression)
                    .await
                    .unwrap();
                assert_eq!(decoded.table, table);
                for batch in decoded.batches {
                    for e in batch {
                        assert!(
                            r.range
                                .contains(&EntityKey::new(&e.partition_key, &e.row_key))
                        );
                        out.push(e);
                    }
                }
            }
        }
    }
    out
}

#[tokio::test]
async fn every_type_and_awkward_key_round_trips_exactly() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("edge");
    let source = load_edge_table(&client, &table).await;
    assert_eq!(source.len(), AWKWARD_KEYS.len() * AWKWARD_KEYS.len());

    for compression in [Compression::None, Compression::Zstd, Compression::Gzip] {
        let t = target(&env.account);
        let mut req = backup_of(&env.account, &table);
        // Split keys that are themselves awkward, including ones above the BMP whose
        // UTF-16 order differs from UTF-8.
        req.split_keys = vec![
            "o'neil".into(),
            "😀".into(),
            "\u{E000}".into(),
            "100% sure".into(),
        ];
        req.compression = compression;
        req.block_bytes = 64 * 1024;
        req.blocks_per_blob = 2;
        let report = run_backup(&req, &t, &watch_opts(2, &env.account))
            .await
            .unwrap();
        assert_eq!(report.status, "complete", "{compression}");
        assert_eq!(report.entities, source.len() as u64);
        let blobs = store(&t);
        let manifest = load_manifest(&blobs, &report.backup_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(manifest.tables[0].ranges.len(), 5);
        assert_eq!(manifest.compression, compression);
        let backed_up = read_backup(&blobs, &manifest, &table).await;
        assert_eq!(backed_up.len(), source.len());
        for (b, s) in backed_up.iter().zip(&source) {
            // Property by property, type by type, bit for bit; Timestamp and ETag too.
            assert_eq!(b, s, "{:?}/{:?}", s.partition_key, s.row_key);
        }
    }
}

/// Runs a backup with in-process workers, checks it completed with `entities`, and
/// returns its store and manifest.
async fn complete_backup(
    req: &BackupRequest,
    t: &Location,
    workers: usize,
    entities: u64,
) -> (Store, Manifest) {
    let report = run_backup(req, t, &watch_opts(workers, &req.source))
        .await
        .unwrap();
    assert_eq!(
        (report.status.as_str(), report.entities),
        ("complete", entities)
    );
    let blobs = store(t);
    let manifest = load_manifest(&blobs, &report.backup_id)
        .await
        .unwrap()
        .unwrap();
    (blobs, manifest)
}

#[tokio::test]
async fn thousands_of_entities_with_split_keys_and_with_discovery() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("many");
    let n = load_numbered(&client, &table, 12, 250).await.len();
    assert_eq!(n, 3000);
    let source = scan_all(&client, &table).await;

    // Split keys between, on and beyond partitions.
    let t = target(&env.account);
    let mut req = backup_of(&env.account, &table);
    req.split_keys = vec!["p003".into(), "p007x".into(), "p010".into(), "zzz".into()];
    req.dynamic_split = false; // the plan alone decides the ranges here
    let (blobs, manifest) = complete_backup(&req, &t, 3, 3000).await;
    let counts: Vec<u64> = manifest.tables[0]
        .ranges
        .iter()
        .map(|r| r.entities)
        .collect();
    // (-inf,p003): p000-p002; [p003,p007x): p003-p007; [p007x,p010): p008-p009; [p010,zzz): p010-p011.
    assert_eq!(counts, vec![750, 1250, 500, 500, 0]);
    assert_eq!(read_backup(&blobs, &manifest, &table).await, source);

    // Discovery, aiming for 8 ranges.
    let t = target(&env.account);
    let mut req = backup_of(&env.account, &table);
    req.ranges_per_table = Some(8);
    let (blobs, manifest) = complete_backup(&req, &t, 4, 3000).await;
    let ranges = &manifest.tables[0].ranges;
    assert!(
        ranges.len() >= 6 && ranges.len() <= 12,
        "{} ranges",
        ranges.len()
    );
    let counts: Vec<u64> = ranges.iter().map(|r| r.entities).collect();
    assert!(
        ranges.iter().all(|r| r.entities <= 1000),
        "no range holds most of the table: {counts:?} {:?}",
        ranges
            .iter()
            .map(|r| r.range.to_string())
            .collect::<Vec<_>>()
    );
    assert_eq!(read_backup(&blobs, &manifest, &table).await, source);
}

/// Regression: the emulator continues a query inside the partition whose PartitionKey
/// is empty with an empty NextPartitionKey, which the scan took for the end: a backup
/// of 3,000 such entities and 10 more kept 1,000 and reported complete. Backed up
/// whole, by one task and by tasks that split it.
#[tokio::test]
async fn a_partition_with_an_empty_key_is_backed_up_whole() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("emptypk");
    load_keys(&client, &table, 3_010, |i| {
        if i < 3_000 {
            (String::new(), format!("{i:05}"))
        } else {
            ("a".into(), format!("{i:05}"))
        }
    })
    .await;
    let source = scan_all(&client, &table).await;
    assert_eq!(source.len(), 3_010);
    for (workers, dynamic_split) in [(1, false), (3, true)] {
        let t = target(&env.account);
        let mut req = backup_of(&env.account, &table);
        req.dynamic_split = dynamic_split;
        let (blobs, manifest) = complete_backup(&req, &t, workers, 3_010).await;
        assert_eq!(read_backup(&blobs, &manifest, &table).await, source);
    }
}

/// Loads `count` entities with the keys `key(i)` returns (batched by partition).
async fn load_keys(
    client: &TableClient,
    table: &str,
    count: u64,
    key: impl Fn(u64) -> (String, String),
) -> Vec<Entity> {
    use futures::StreamExt;
    use tablevault_azure::table::EdmValue;
    client.create_table(table).await.unwrap();
    let entities: Vec<Entity> = (0..count)
        .map(|i| {
            let (pk, rk) = key(i);
            Entity::new(pk, rk).with("N", EdmValue::Int64(i as i64))
        })
        .collect();
    let mut by_partition: std::collections::BTreeMap<String, Vec<Entity>> = Default::default();
    for e in entities {
        by_partition
            .entry(e.partition_key.clone())
            .or_default()
            .push(e);
    }
    let batches: Vec<Vec<tablevault_azure::table::BatchOperation>> = by_partition
        .into_values()
        .flat_map(|es| {
            es.chunks(100)
                .map(|c| {
                    c.iter()
                        .cloned()
                        .map(tablevault_azure::table::BatchOperation::InsertOrReplace)
                        .collect()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let mut puts = futures::stream::iter(batches)
        .map(|ops| async move { client.submit_batch(table, &ops).await })
        .buffer_unordered(16);
    while let Some(r) = puts.next().await {
        r.unwrap();
    }
    scan_all(client, table).await
}

/// One whole-table task to start with (no previous backup, no probes): workers split the
/// unread part of their ranges while they scan, by PartitionKey and, inside one huge
/// partition, by RowKey; the committed ranges tile the table, the backup is exact, and
/// the work is spread.
#[tokio::test]
async fn large_ranges_are_split_while_scanning_for_every_key_shape() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let guid = |i: u64| {
        format!(
            "{:032x}",
            (i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
        )
    };
    type Shape = (&'static str, u64, Box<dyn Fn(u64) -> (String, String)>);
    let shapes: Vec<Shape> = vec![
        ("Guids", 3000, Box::new(move |i| (guid(i), String::new()))),
        (
            "Giant",
            8000,
            Box::new(|i| ("tenant".to_string(), format!("{i:08}"))),
        ),
        (
            "Skewed",
            8000,
            // Zipf-like: a few partitions hold most entities.
            Box::new(move |i| {
                let p = ((i as f64 / 8000.0).powi(3) * 60.0) as u64;
                (guid(p + 1_000_000), format!("{i:06}"))
            }),
        ),
    ];
    for (table, count, key) in shapes {
        let source = load_keys(&client, table, count, key).await;
        assert_eq!(source.len() as u64, count, "{table}");
        let t = target(&env.account);
        let req = backup_of(&env.account, table);
        assert_eq!(req.ranges_per_table, None, "whole-table planning");
        let (blobs, manifest) = complete_backup(&req, &t, 4, count).await;
        let job = blobs
            .backup_job(&manifest.backup_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(job.tables[0].tasks.len(), 1, "{table}: planned as one task");
        assert_eq!(job.tables[0].planning, "whole");
        let ranges = &manifest.tables[0].ranges;
        let counts: Vec<u64> = ranges.iter().map(|r| r.entities).collect();
        // Splits wait for an idle worker to take the last one, so a table of a few
        // pages is cut a few times; large tables are cut many times.
        let (min_ranges, max_share) = if count < 5000 { (2, 0.75) } else { (3, 0.65) };
        assert!(ranges.len() >= min_ranges, "{table}: split into {counts:?}");
        let largest = *counts.iter().max().unwrap();
        assert!(
            largest as f64 <= count as f64 * max_share,
            "{table}: no task holds most of the table: {counts:?}"
        );
        if table == "Giant" {
            assert!(
                ranges
                    .iter()
                    .any(|r| r.range.start.as_ref().is_some_and(|s| !s.rk.is_empty())),
                "the one partition was split by RowKey"
            );
        }
        assert_eq!(
            read_backup(&blobs, &manifest, table).await,
            source,
            "{table}"
        );
    }
}

/// A key unit from classes whose orders disagree (`KEY_CHAR_CLASSES`: printable ASCII
/// with quotes, percent signs, `+` and spaces, Latin-1, CJK, private use, the top of the
/// BMP, astral characters). Splits cut by value in these classes; only the key order of
/// the service (UTF-16) may decide where a range ends.
fn random_key_char(rng: &mut rand::rngs::StdRng) -> char {
    use rand::Rng;
    tablevault_core::testing::key_char(|n| rng.random_range(0..n))
}

fn random_key(
    rng: &mut rand::rngs::StdRng,
    prefix: &str,
    len: std::ops::RangeInclusive<usize>,
) -> String {
    use rand::Rng;
    let n = rng.random_range(len);
    let mut key = prefix.to_string();
    key.extend((0..n).map(|_| random_key_char(rng)));
    key
}

/// Loads `keys` (deduplicated) as entities: by batch where the emulator's batch parser
/// carries the keys, one by one where it does not (see docs/ARCHITECTURE.md).
async fn load_entity_keys(
    client: &TableClient,
    table: &str,
    keys: Vec<(String, String)>,
) -> Vec<Entity> {
    use futures::StreamExt;
    use tablevault_azure::table::{BatchOperation, EdmValue, batch_carries_keys};
    client.create_table(table).await.unwrap();
    let mut by_partition: std::collections::BTreeMap<
        String,
        std::collections::BTreeMap<String, Entity>,
    > = Default::default();
    for (i, (pk, rk)) in keys.into_iter().enumerate() {
        let e = Entity::new(pk.clone(), rk.clone()).with("N", EdmValue::Int64(i as i64));
        by_partition.entry(pk).or_default().insert(rk, e);
    }
    let mut singles = Vec::new();
    let mut batches = Vec::new();
    for rows in by_partition.into_values() {
        let (grouped, single): (Vec<Entity>, Vec<Entity>) = rows
            .into_values()
            .partition(|e| batch_carries_keys(&e.partition_key, &e.row_key));
        singles.extend(single);
        for c in grouped.chunks(100) {
            batches.push(
                c.iter()
                    .cloned()
                    .map(BatchOperation::InsertOrReplace)
                    .collect::<Vec<_>>(),
            );
        }
    }
    let mut puts = futures::stream::iter(batches)
        .map(|ops| async move { client.submit_batch(table, &ops).await })
        .buffer_unordered(8);
    while let Some(r) = puts.next().await {
        r.unwrap();
    }
    for e in singles {
        client.upsert_entity(table, &e, false).await.unwrap();
    }
    scan_all(client, table).await
}

/// The split soak's tables for `seed` ([`splits_tile_tables_whose_keys_come_from_the_whole_alphabet`]):
/// its shapes' names and keys.
fn soak_shapes(seed: u64) -> Vec<(&'static str, Vec<(String, String)>)> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut shapes: Vec<(&str, Vec<(String, String)>)> = Vec::new();
    // Many partitions of random keys, of random sizes.
    let mut keys = Vec::new();
    while keys.len() < 3500 {
        let pk = random_key(&mut rng, "", 0..=5);
        for _ in 0..rng.random_range(1..=120) {
            keys.push((pk.clone(), random_key(&mut rng, "", 0..=6)));
        }
    }
    shapes.push(("Scripts", keys));
    // One partition of random RowKeys.
    let pk = random_key(&mut rng, "", 1..=3);
    let keys = (0..4000)
        .map(|_| (pk.clone(), random_key(&mut rng, "", 1..=6)))
        .collect();
    shapes.push(("Rows", keys));
    // A shared prefix, then units from the top of the BMP and above it.
    let prefix = random_key(&mut rng, "", 2..=3);
    let keys = (0..3500)
        .map(|i| {
            let tail: String = (0..rng.random_range(0..=3))
                .map(|_| {
                    ['\u{FF01}', '\u{FFFD}', '\u{1F600}', '\u{10000}', 'z', '~']
                        [rng.random_range(0..6)]
                })
                .collect();
            (format!("{prefix}{tail}"), format!("{:05}", i % 1000))
        })
        .collect();
    shapes.push(("Prefixed", keys));
    // A small tenant and a large one, under random prefixes: either may come first.
    let (small, large) = (
        random_key(&mut rng, "", 1..=2),
        random_key(&mut rng, "", 1..=2),
    );
    let keys = (0..4500u32)
        .map(|i| {
            let tenant = if i < 500 { &small } else { &large };
            (format!("{tenant}-{:05}", i / 10), format!("{i:05}"))
        })
        .collect();
    shapes.push(("Tenants", keys));
    // Names in one script (Cyrillic upper and lower case, Greek, accented Latin,
    // Armenian, Hebrew, CJK, Hangul, emoticons), 1-20 rows each: splits measure
    // them in its letters.
    // 6,000 entities: estimates from the first page vary by a fifth or so, so the
    // rest of 3,500 can be estimated under the 2,000 worth a split, and one task
    // then reads all four pages.
    let (first, letters) = [
        (0x410, 64),
        (0x3B1, 25),
        (0xC0, 63),
        (0x561, 38),
        (0x5D0, 27),
        (0x4E00, 20_992),
        (0xAC00, 11_172),
        (0x1F600, 80),
    ][rng.random_range(0..8)];
    let mut keys = Vec::new();
    while keys.len() < 6000 {
        let pk: String = (0..rng.random_range(3..=8))
            .map(|_| char::from_u32(first + rng.random_range(0..letters)).unwrap())
            .collect();
        for r in 0..rng.random_range(1..=20) {
            keys.push((pk.clone(), format!("{r:03}")));
        }
    }
    shapes.push(("Letters", keys));
    shapes.push(("Dates", date_keys(&mut rng)));
    shapes
}

/// A first backup, by four workers on Azurite, of the split soak's table of dates for
/// `seed`: no task reads three quarters of it.
async fn first_backup_of_soak_dates_is_shared(seed: u64) {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let (name, keys) = soak_shapes(seed)
        .into_iter()
        .find(|(name, _)| *name == "Dates")
        .unwrap();
    let table = unique_table(name);
    let count = load_entity_keys(&client, &table, keys).await.len() as u64;
    let req = backup_of(&env.account, &table);
    let (_, manifest) = complete_backup(&req, &target(&env.account), 4, count).await;
    let largest = manifest.tables[0].ranges.iter().map(|r| r.entities).max();
    assert!(
        largest.is_some_and(|n| n * 4 <= count * 3),
        "one task read {largest:?} of {count}"
    );
}

/// Regression: a first task whose first look for a cut finds none looks again on a
/// later page. Looks were also at least 50 ms apart; pages of a table of 6,022 dates
/// (the split soak's seed 67) came in faster, prefetched, so the first look, which
/// found no cut (10 probes), was the only one, and one task read the whole table. The
/// split model, looking once a page, split it at the third.
#[tokio::test]
async fn a_first_look_that_finds_no_cut_is_not_the_last() {
    first_backup_of_soak_dates_is_shared(67).await;
}

/// Regression: a look that finds the piece this task split off at its last look still
/// waiting, while idle workers' claims are under way, splits as if it had been claimed.
/// A table of 5,999 dates (the split soak's seed 38): the first cut, at page one, put
/// a third of what its estimate said above it; at the next page, prefetched, that piece
/// still waited, so the task did not split beside it, and at the page after, the 1,851
/// left were under what a split needs: one task read 4,851.
#[tokio::test]
async fn a_piece_still_being_claimed_does_not_stop_the_next_split() {
    first_backup_of_soak_dates_is_shared(38).await;
}

/// Dynamic splits (by PartitionKey, by RowKey inside a partition, in pieces for idle
/// workers) and the next backup's plan from block boundaries tile tables whose keys come
/// from the whole alphabet: many partitions of random keys, one partition of random
/// RowKeys, keys that share a prefix and differ in astral or top-of-BMP units, a
/// small tenant and a large one under random prefixes (so in either order, in one
/// character region or two), and names in one script (Cyrillic, Greek, accented
/// Latin, Armenian, Hebrew, CJK, Hangul, emoticons), and dates and times in several
/// formats ([`date_keys`]). Each backup is exact, its ranges
/// tile the key space, and no task of a first backup read three quarters of the
/// table. Seeds:
/// `TABLEVAULT_SPLIT_SEEDS` of them (default 1), from `TABLEVAULT_SPLIT_SEED_FROM`
/// (default 0).
#[tokio::test]
async fn splits_tile_tables_whose_keys_come_from_the_whole_alphabet() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let seeds: u64 = env_number("TABLEVAULT_SPLIT_SEEDS", 1);
    let from: u64 = env_number("TABLEVAULT_SPLIT_SEED_FROM", 0);
    for seed in from..from + seeds {
        for (name, keys) in soak_shapes(seed) {
            // Which seed a failure (or a hang of the emulator) came in, with --nocapture.
            eprintln!("split soak: seed {seed}, {name}, {} keys", keys.len());
            let table = unique_table(name);
            let source = load_entity_keys(&client, &table, keys).await;
            dump_keys(seed, name, &source);
            let count = source.len() as u64;
            let t = target(&env.account);
            let req = backup_of(&env.account, &table);
            for backup in ["first", "repeat"] {
                let (blobs, manifest) = complete_backup(&req, &t, 4, count).await;
                let ranges: Vec<tablevault_core::keys::KeyRange> = manifest.tables[0]
                    .ranges
                    .iter()
                    .map(|r| r.range.clone())
                    .collect();
                // In manifest order: from the bottom of the key space to its top, each
                // range starting where the one before ends.
                let tiled = ranges.first().is_some_and(|r| r.start.is_none())
                    && ranges.last().is_some_and(|r| r.end.is_none())
                    && ranges
                        .windows(2)
                        .all(|w| w[0].end.is_some() && w[0].end == w[1].start);
                assert!(
                    tiled,
                    "seed {seed}, {name}, {backup}: ranges do not tile: {ranges:?}"
                );
                if backup == "first" {
                    let largest = manifest.tables[0].ranges.iter().map(|r| r.entities).max();
                    assert!(
                        largest.is_some_and(|n| n * 4 <= count * 3),
                        "seed {seed}, {name}: one task read {largest:?} of {count}"
                    );
                }
                assert!(
                    read_backup(&blobs, &manifest, &table).await == source,
                    "seed {seed}, {name}, {backup}: the backup differs from the table"
                );
            }
        }
    }
}

/// Writes a soak table's keys, as `PartitionKey<TAB>RowKey` lines, to
/// `<TABLEVAULT_SPLIT_DUMP>/<seed>-<shape>.tsv` when that variable names a directory:
/// the split model replays them (`four_workers_share_dumped_tables` in tablevault-core).
/// Keys hold no control characters (the service refuses them), so a line is a key.
fn dump_keys(seed: u64, shape: &str, source: &[Entity]) {
    let Some(dir) = std::env::var_os("TABLEVAULT_SPLIT_DUMP") else {
        return;
    };
    let lines: String = source
        .iter()
        .map(|e| format!("{}\t{}\n", e.partition_key, e.row_key))
        .collect();
    let path = std::path::Path::new(&dir).join(format!("{seed}-{shape}.tsv"));
    std::fs::write(&path, lines).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// About 6,000 keys holding dates and times, which splits read in time: from a random
/// day of 1990-2044, in a random format (daily `2026-01-15`, `20260115` or
/// `log-2026-01-15`; hourly `2026-01-15T10`; or ISO times as RowKeys of three
/// partitions), with random gaps and partition sizes, and one partition in fifty out
/// of order: the 30th of its month (of February, which has none, where the date lay
/// in January or February) or the first of month 13. 6,000 as for names: from a first
/// page of such uneven partitions, the rest of 4,000 can be estimated under the 2,000
/// worth a split. In the split model, tables of 6,000 daily keys (plain, without
/// separators, under a prefix; 200 seeds each) had a first task read over three
/// quarters in 8-11 seeds before splits read dates in time, and in none after.
fn date_keys(rng: &mut rand::rngs::StdRng) -> Vec<(String, String)> {
    use rand::Rng;
    let date = |seconds: i64| {
        let (y, m, d) = tablevault_core::civil::civil_from_days(seconds.div_euclid(86_400));
        let s = seconds.rem_euclid(86_400);
        (
            format!("{y:04}-{m:02}-{d:02}"),
            format!("{:02}:{:02}:{:02}", s / 3_600, s / 60 % 60, s % 60),
        )
    };
    let format = rng.random_range(0..5);
    let mut at = (7_305 + rng.random_range(0..20_000i64)) * 86_400;
    let mut keys = Vec::new();
    while keys.len() < 6000 {
        if format == 4 {
            at += rng.random_range(1..=600);
            let (d, t) = date(at);
            let pk = ["events", "jobs", "logs"][rng.random_range(0..3)];
            keys.push((pk.to_string(), format!("{d}T{t}.000Z-{}", keys.len())));
            continue;
        }
        let (d, t) = date(at);
        let d = match rng.random_range(0..50) {
            0 => format!("{}-30", &d[..7].replace("-01", "-02")),
            1 => format!("{}-13-01", &d[..4]),
            _ => d,
        };
        let pk = match format {
            0 => d,
            1 => d.replace('-', ""),
            2 => format!("log-{d}"),
            _ => format!("{d}T{}", &t[..2]),
        };
        for r in 0..rng.random_range(1..=150) {
            keys.push((pk.clone(), format!("{r:04}")));
        }
        at += match format {
            3 => 3_600 * rng.random_range(1..=5),
            _ => 86_400 * rng.random_range(1..=3),
        };
    }
    keys
}

/// A table's first task hands the rest to idle workers in pieces of one size, so no task
/// ends much larger than the others: cut in two as each idle worker asked, the first
/// pieces were a quarter of the table each (with 4 workers) and the last a few
/// thousand entities, up to 2.75 times the mean task.
#[tokio::test]
async fn idle_workers_get_a_table_in_pieces_of_one_size() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let t = target(&env.account);
    for (partitions, per) in [(40, 500), (1, 20_000)] {
        let table = unique_table("pieces");
        let source = load_numbered(&client, &table, partitions, per).await;
        let count = source.len() as u64;
        let req = backup_of(&env.account, &table);
        let (blobs, manifest) = complete_backup(&req, &t, 4, count).await;
        let counts: Vec<u64> = manifest.tables[0]
            .ranges
            .iter()
            .map(|r| r.entities)
            .collect();
        let largest = *counts.iter().max().unwrap() as f64;
        let mean = count as f64 / counts.len() as f64;
        assert!(
            largest <= 0.2 * count as f64 && largest <= 2.0 * mean,
            "{partitions} partitions: {counts:?}"
        );
        assert_eq!(read_backup(&blobs, &manifest, &table).await, source);
        // `status` counts the ranges split off too, as the manifest does (it counted
        // the one planned task: "1 ranges" of 13).
        let look = StatusOptions {
            wait: false,
            retry_poisoned: false,
        };
        let report = status(&t, &manifest.backup_id, look, &watch_opts(0, &env.account))
            .await
            .unwrap();
        assert_eq!(
            report.tables[0].ranges,
            counts.len(),
            "{partitions} partitions"
        );
    }
}

/// The request lines a proxy forwarded, percent-decoded.
fn decoded_requests(proxy: &tablevault_tests::fault_proxy::FaultProxy) -> Vec<String> {
    proxy
        .request_lines()
        .iter()
        .map(|l| {
            percent_encoding::percent_decode_str(l)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect()
}

/// A numbered table of `partitions` × `per` entities (prefix `name`), backed up
/// complete by `workers` in-process workers whose requests go through a proxy with
/// `plan`, and checked exact: its manifest, and the proxies (the Table one is `[2]`).
async fn numbered_backup_through_proxy(
    env: &TestEnv,
    name: &str,
    (partitions, per): (usize, usize),
    workers: usize,
    plan: &FaultPlan,
) -> (Manifest, Vec<tablevault_tests::fault_proxy::FaultProxy>) {
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table(name);
    let source = load_numbered(&client, &table, partitions, per).await;
    let (conn, proxies) = proxied_connection_string(&env.connection_string(), plan).await;
    let through_proxy = StorageAccount::from_connection_string(&conn).unwrap();
    let req = backup_of(&through_proxy, &table);
    let entities = (partitions * per) as u64;
    let (blobs, manifest) = complete_backup(&req, &target(&env.account), workers, entities).await;
    assert_eq!(read_backup(&blobs, &manifest, &table).await, source);
    (manifest, proxies)
}

/// The `$top=1` probes a proxy forwarded.
fn probes_sent(proxy: &tablevault_tests::fault_proxy::FaultProxy) -> Vec<String> {
    decoded_requests(proxy)
        .into_iter()
        .filter(|l| l.contains("$top=1&") || l.contains("$top=1 "))
        .collect()
}

/// A task that splits goes on reading with a query that stops at the cut, so the service
/// is not asked to read on into the part another task now holds (the emulator sorts
/// every match of a query for each page it serves: a query left open to the end of the
/// table made a split backup cost it more than a plain scan).
#[tokio::test]
async fn a_task_that_splits_narrows_its_query_to_the_cut() {
    let env = TestEnv::start().await;
    let (manifest, proxies) =
        numbered_backup_through_proxy(&env, "narrow", (16, 500), 2, &FaultPlan::none()).await;
    let cuts: Vec<&EntityKey> = manifest.tables[0]
        .ranges
        .iter()
        .filter_map(|r| r.range.start.as_ref())
        .collect();
    assert!(!cuts.is_empty(), "the table was split");
    let queries: Vec<String> = decoded_requests(&proxies[2])
        .into_iter()
        .filter(|l| l.contains("$filter="))
        .collect();
    // A cut close ahead of the scan may already lie inside the pages it fetched; the
    // first one is thousands of entities ahead.
    let narrowed: Vec<&&EntityKey> = cuts
        .iter()
        .filter(|c| {
            let bound = if c.rk.is_empty() {
                format!("PartitionKey lt '{}'", c.pk)
            } else {
                format!("RowKey lt '{}'", c.rk)
            };
            queries.iter().any(|q| q.contains(&bound))
        })
        .collect();
    assert!(
        !narrowed.is_empty(),
        "no query stopped at a cut {cuts:?}: {queries:#?}"
    );
}

/// The next backup of the same account plans from the last one's block list: several
/// ranges of about equal entity counts, with no probe.
#[tokio::test]
async fn the_next_backup_plans_equal_ranges_from_the_last_one() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let table = "Planned";
    load_numbered(&client, table, 30, 1000).await;
    let source = scan_all(&client, table).await;
    let t = target(&env.account);
    let mut req = backup_of(&env.account, table);
    req.block_bytes = 64 * 1024;
    req.max_tasks_per_table = 3;
    let (blobs, first) = complete_backup(&req, &t, 2, 30_000).await;
    // What it learned for the next plan is written beside its manifest; the next plan
    // reads that alone, not the commit records (removed here to show it).
    let paths = BackupPaths::new(&first.backup_id);
    let learned: Learned = blobs
        .read(&paths.learned())
        .await
        .unwrap()
        .expect("learned");
    assert_eq!(learned.tables.len(), 1);
    assert_eq!(learned.tables[0].entities, 30_000);
    assert!(learned.tables[0].writers >= 1);
    let records = blobs.list_names(&paths.commits_root()).await.unwrap();
    blobs.delete_all(&records).await.unwrap();
    let (blobs, second) = complete_backup(&req, &t, 2, 30_000).await;
    assert_ne!(first.backup_id, second.backup_id);
    let planned_evenly = |job: BackupJob| {
        assert_eq!(job.tables[0].planning, "previous-backup");
        let planned: Vec<u64> = job.tables[0]
            .tasks
            .iter()
            .map(|task| {
                source
                    .iter()
                    .filter(|e| {
                        task.range
                            .contains(&EntityKey::new(&e.partition_key, &e.row_key))
                    })
                    .count() as u64
            })
            .collect();
        // At most 3 per table, or one per task slot of the last backup's workers (two
        // in-process workers, each with an identity of its own, counted at 4 slots
        // each).
        assert!((3..=8).contains(&planned.len()), "{planned:?}");
        let even = 30_000 / planned.len() as u64;
        assert!(
            planned
                .iter()
                .all(|&n| (even * 8 / 10..=even * 12 / 10).contains(&n)),
            "{planned:?}"
        );
    };
    planned_evenly(blobs.backup_job(&second.backup_id).await.unwrap().unwrap());
    assert_eq!(read_backup(&blobs, &second, table).await, source);
    // Without it (a backup of an earlier version), the commit records plan as well.
    blobs
        .delete(&BackupPaths::new(&second.backup_id).learned())
        .await
        .unwrap();
    let (blobs, third) = complete_backup(&req, &t, 2, 30_000).await;
    planned_evenly(blobs.backup_job(&third.backup_id).await.unwrap().unwrap());
}

#[tokio::test]
async fn all_tables_are_backed_up_when_none_are_named() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let a = unique_table("a");
    let b = unique_table("b");
    load_numbered(&client, &a, 2, 30).await;
    client.create_table(&b).await.unwrap(); // empty table
    let t = target(&env.account);
    let report = run_backup(
        &BackupRequest::new(env.account.clone()),
        &t,
        &watch_opts(2, &env.account),
    )
    .await
    .unwrap();
    assert_eq!(report.status, "complete");
    let mut names: Vec<_> = report
        .tables
        .iter()
        .map(|t| (t.name.clone(), t.entities))
        .collect();
    names.sort();
    let mut expected = vec![(a.clone(), 60), (b, 0)];
    expected.sort();
    assert_eq!(names, expected);

    // Named tables: a missing one and an empty name (a stray comma) are refused by
    // name, before anything is planned.
    for (tables, says) in [
        (vec![a.clone(), "nosuchtable".to_string()], "nosuchtable"),
        (vec![a.clone(), String::new()], "empty table"),
    ] {
        let mut req = BackupRequest::new(env.account.clone());
        req.tables = Some(tables);
        let e = run_backup(&req, &t, &watch_opts(1, &env.account))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(says), "{e}");
        assert!(
            matches!(e, tablevault_coordinator::Error::Invalid(_)),
            "{e}"
        );
    }
}

async fn data_blobs(blobs: &Store, id: &str) -> Vec<String> {
    blobs
        .list_names(&BackupPaths::new(id).data_root())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_killed_worker_is_redone_with_no_duplicate_and_no_loss() {
    let Setup {
        env,
        client,
        table,
        source,
        t,
    } = numbered("kill", 2, 1500).await;
    let n = source.len();
    let mut req = backup_of(&env.account, &table);
    req.split_keys = vec![]; // discovery finds 2 partitions
    req.ranges_per_table = Some(1); // one big task
    req.block_bytes = 64 * 1024;
    req.blocks_per_blob = 1;
    let job = plan(&req, &t).await.unwrap();
    assert_eq!(job.task_count(), 1);
    enqueue(&t, &job, None).await.unwrap();
    let blobs = store(&t);

    // Worker A starts, writes some blobs, and dies without a word.
    let stats = Arc::new(WorkerStats::default());
    let a = Worker::new(
        worker_config(&t, &env.account, Duration::from_secs(2)),
        stats.clone(),
    )
    .unwrap();
    let a_task = tokio::spawn(a.run(CancellationToken::new()));
    let mut waited = 0;
    while data_blobs(&blobs, &job.backup_id).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 1;
        assert!(waited < 1500, "worker A never wrote a blob");
    }
    a_task.abort();
    let _ = a_task.await;
    let dead_attempt_blobs = data_blobs(&blobs, &job.backup_id).await;
    assert!(!dead_attempt_blobs.is_empty());
    assert!(
        !blobs
            .exists(&BackupPaths::new(&job.backup_id).commit(&table, "r0000"))
            .await
            .unwrap()
    );

    // The coordinator (with a fresh in-process worker) sees the task redone once.
    let report = watch(&t, job.clone(), &watch_opts(1, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "complete");
    assert_eq!(report.entities, n as u64, "no loss, no duplicate");
    let manifest = load_manifest(&blobs, &job.backup_id)
        .await
        .unwrap()
        .unwrap();
    let backed_up = read_backup(&blobs, &manifest, &table).await;
    assert_eq!(backed_up, scan_all(&client, &table).await);
    // The dead attempt's blobs were collected at finalize.
    let remaining = data_blobs(&blobs, &job.backup_id).await;
    assert!(
        dead_attempt_blobs.iter().all(|b| !remaining.contains(b)),
        "dead attempt's blobs were collected"
    );
}

#[tokio::test]
async fn two_attempts_racing_on_one_task_commit_once() {
    let Setup {
        env,
        client,
        table,
        source,
        t,
    } = numbered("race", 3, 400).await;
    let n = source.len();
    let mut req = backup_of(&env.account, &table);
    req.ranges_per_table = Some(1);
    let job = plan(&req, &t).await.unwrap();
    let blobs = store(&t);
    let task = &job.tables[0].tasks[0];
    let stats = WorkerStats::default();
    let attempt = || BackupAttempt {
        store: &blobs,
        job: &job,
        source: &client,
        table: &table,
        task: &task.task,
        range: &task.range,
        lost: CancellationToken::new(),
        shutdown: CancellationToken::new(),
        stats: &stats,
        worker: "test",
        splitting: None,
        limiter: None,
        more_pages: None,
    };
    let (first, second) = (attempt(), attempt());
    let (x, y) = tokio::join!(first.run(), second.run());
    let outcomes = [x.unwrap(), y.unwrap()];
    assert_eq!(
        outcomes
            .iter()
            .filter(
                |o| matches!(o, BackupOutcome::Committed { entities, .. } if *entities == n as u64)
            )
            .count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == BackupOutcome::LostRace)
            .count(),
        1
    );
    // Only the winner's blobs remain, and the commit record points at them.
    let commit = blobs
        .commit_record(&BackupPaths::new(&job.backup_id).commit(&table, &task.task))
        .await
        .unwrap();
    let remaining = data_blobs(&blobs, &job.backup_id).await;
    assert!(!remaining.is_empty());
    assert!(
        remaining.iter().all(|b| b.contains(&commit.attempt)),
        "{remaining:?}"
    );
}

#[tokio::test]
async fn a_poisoned_task_leaves_the_backup_incomplete_until_retried() {
    let Setup {
        env,
        client,
        table,
        source: _,
        t,
    } = numbered("poison", 2, 50).await;
    let mut req = backup_of(&env.account, &table);
    req.split_keys = vec!["p001".into()];
    let job = plan(&req, &t).await.unwrap();
    enqueue(&t, &job, None).await.unwrap();
    // The table disappears after planning: no attempt can ever succeed.
    client.delete_table(&table).await.unwrap();
    let report = watch(&t, job.clone(), &watch_opts(2, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "incomplete", "never reported as a success");
    assert_eq!(report.poisoned.len(), 2);
    assert!(
        report.poisoned[0].reason.contains("404"),
        "{}",
        report.poisoned[0].reason
    );
    let blobs = store(&t);
    assert!(
        load_manifest(&blobs, &job.backup_id)
            .await
            .unwrap()
            .is_none()
    );
    // The messages are on the poison queue with their reason.
    let poison = QueueClient::new(&env.account, &poison_queue_name(&t.queue)).unwrap();
    let dead = poison.peek_messages(32).await.unwrap();
    assert_eq!(dead.len(), 2);

    // Fix the cause, retry the poisoned tasks, and the backup completes.
    load_numbered(&client, &table, 2, 50).await;
    let what = StatusOptions {
        wait: true,
        retry_poisoned: true,
    };
    let report = status(&t, &job.backup_id, what, &watch_opts(2, &env.account))
        .await
        .unwrap();
    assert_eq!((report.status.as_str(), report.entities), ("complete", 100));
}

#[tokio::test]
async fn a_task_delivered_too_often_is_poisoned_with_its_history() {
    let Setup {
        env,
        client: _,
        table,
        source: _,
        t,
    } = numbered("attempts", 1, 2000).await;
    let mut req = backup_of(&env.account, &table);
    req.max_attempts = 2;
    req.block_bytes = 64 * 1024;
    req.blocks_per_blob = 1;
    let job = plan(&req, &t).await.unwrap();
    enqueue(&t, &job, None).await.unwrap();
    let blobs = store(&t);
    // Two workers die mid-task, one after the other.
    for _ in 0..2 {
        let stats = Arc::new(WorkerStats::default());
        let w = Worker::new(
            worker_config(&t, &env.account, Duration::from_secs(1)),
            stats.clone(),
        )
        .unwrap();
        let h = tokio::spawn(w.run(CancellationToken::new()));
        while stats.entities.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        h.abort();
        let _ = h.await;
    }
    // The third delivery exceeds max_attempts = 2.
    let report = watch(&t, job.clone(), &watch_opts(1, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "incomplete");
    assert!(
        report.poisoned[0].reason.contains("delivered 3 times"),
        "{}",
        report.poisoned[0].reason
    );
    assert!(
        load_manifest(&blobs, &job.backup_id)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn malformed_foreign_and_stale_messages_lose_nothing() {
    let env = TestEnv::start().await;
    let t = target(&env.account);
    let queue = QueueClient::new(&env.account, &t.queue).unwrap();
    queue.create().await.unwrap();
    queue
        .put_message("this is not a task", None, MessageTtl::Never)
        .await
        .unwrap();
    let stale = TaskMessage {
        v: 1,
        container: t.container.clone(),
        job: "20200101T000000Z-deadbeef".into(),
        table: "Gone".into(),
        task: "r0000".into(),
        kind: TaskKind::Backup {
            range: Default::default(),
            ceiling: None,
            estimate: None,
        },
    };
    queue
        .put_message(&stale.encode(), None, MessageTtl::Never)
        .await
        .unwrap();
    store(&t).create_container().await.unwrap();
    // A well-formed message naming a complete backup and a table it never planned (one
    // the source does hold): regression, it was run, and wrote data and a commit record
    // into that backup.
    let client = TableClient::new(&env.account).unwrap();
    let planned = unique_table("planned");
    let forged = unique_table("forged");
    load_numbered(&client, &planned, 1, 10).await;
    load_numbered(&client, &forged, 1, 10).await;
    let backup = run_backup(
        &backup_of(&env.account, &planned),
        &t,
        &watch_opts(1, &env.account),
    )
    .await
    .unwrap();
    let foreign = TaskMessage {
        job: backup.backup_id.clone(),
        table: forged.clone(),
        ..stale.clone()
    };
    queue
        .put_message(&foreign.encode(), None, MessageTtl::Never)
        .await
        .unwrap();

    let stats = Arc::new(WorkerStats::default());
    let w = Worker::new(
        worker_config(&t, &env.account, Duration::from_secs(5)),
        stats,
    )
    .unwrap();
    let stop = CancellationToken::new();
    let h = tokio::spawn(w.run(stop.clone()));
    let mut waited = 0;
    while queue.approximate_count().await.unwrap() > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
        assert!(waited < 200, "messages were not handled");
    }
    stop.cancel();
    h.await.unwrap().unwrap();
    let poison = QueueClient::new(&env.account, &poison_queue_name(&t.queue)).unwrap();
    let dead = poison.peek_messages(32).await.unwrap();
    assert_eq!(
        dead.len(),
        1,
        "the malformed message is kept, with its reason"
    );
    let written: Vec<String> = store(&t)
        .list_names(&format!("{}/", backup.backup_id))
        .await
        .unwrap()
        .into_iter()
        .filter(|n| n.contains(&forged))
        .collect();
    assert!(written.is_empty(), "{written:?}");
}

#[tokio::test]
async fn a_restarted_coordinator_finishes_the_job() {
    let Setup {
        env,
        client,
        table,
        source,
        t,
    } = numbered("restart", 10, 200).await;
    let n = source.len();
    let mut req = backup_of(&env.account, &table);
    req.ranges_per_table = Some(10);
    let mut opts = watch_opts(1, &env.account);
    let stop = CancellationToken::new();
    opts.shutdown = stop.clone();
    // Planned on a queue of its own (`--queue`); the second coordinator is not told,
    // and finds the job's queue in its plan (regression: it watched its own default
    // queue until the stall timeout, naming that queue).
    let own = Location {
        queue: format!("{}own", t.queue),
        ..t.clone()
    };
    let first = {
        let req = req.clone();
        tokio::spawn(async move { run_backup(&req, &own, &opts).await })
    };
    // Let it commit a few tasks, then kill the coordinator (and its workers).
    let blobs = store(&t);
    let id = loop {
        let listing = blob_client(&t)
            .list_all(&ListOptions {
                delimiter: Some("/"),
                ..Default::default()
            })
            .await;
        if let Ok(l) = listing
            && let Some(p) = l.prefixes.first()
        {
            let id = p.trim_end_matches('/').to_string();
            let commits = blobs
                .list_names(&BackupPaths::new(&id).commits_root())
                .await
                .unwrap();
            if commits.len() >= 2 {
                break id;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.cancel();
    let interrupted = first.await.unwrap().unwrap();
    assert_eq!(interrupted.status, "interrupted");
    assert!(load_manifest(&blobs, &id).await.unwrap().is_none());

    let what = StatusOptions {
        wait: true,
        retry_poisoned: false,
    };
    let report = status(&t, &id, what, &watch_opts(2, &env.account))
        .await
        .unwrap();
    assert_eq!(
        (report.status.as_str(), report.entities),
        ("complete", n as u64)
    );
    let manifest = load_manifest(&blobs, &id).await.unwrap().unwrap();
    assert_eq!(
        read_backup(&blobs, &manifest, &table).await,
        scan_all(&client, &table).await
    );
}

#[tokio::test]
async fn the_worker_that_commits_the_last_task_finalizes_the_backup() {
    let Setup {
        env,
        client: _,
        table,
        source,
        t,
    } = numbered("last", 3, 100).await;
    let mut req = backup_of(&env.account, &table);
    req.split_keys = vec!["p001".into(), "p002".into()];
    let job = plan(&req, &t).await.unwrap();
    enqueue(&t, &job, None).await.unwrap();
    // Daemon workers only: no coordinator is watching.
    let w = Worker::new(
        worker_config(&t, &env.account, Duration::from_secs(5)),
        Arc::new(WorkerStats::default()),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let h = tokio::spawn(w.run(stop.clone()));
    let blobs = store(&t);
    let mut waited = 0;
    while load_manifest(&blobs, &job.backup_id)
        .await
        .unwrap()
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
        assert!(waited < 300, "no one finalized the backup");
    }
    stop.cancel();
    h.await.unwrap().unwrap();
    // Every view agrees.
    let listed = tablevault_coordinator::listing::list(&blobs).await.unwrap();
    assert_eq!(listed[0].status, "complete");
    let manifest = load_manifest(&blobs, &job.backup_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(manifest.entities, source.len() as u64);
}

/// A task with nothing waiting looks for a cut at every page. One that found none (its
/// remainder too small to split, and only shrinking) asked again at the next page, and
/// each search asked the same `$top=1` questions again (the tail task of a repeat backup
/// sent 25 probes for no split; each is a whole-table filter on the emulator). Now each
/// fruitless search doubles the looks skipped after it: here, no probe is sent twice.
#[tokio::test]
async fn a_split_search_that_found_nothing_is_not_asked_again() {
    let env = TestEnv::start().await;
    // Every request slower than the least time between two looks, so each page's look
    // is due.
    let slow = FaultPlan {
        slow: 1.0,
        delay: std::time::Duration::from_millis(60),
        ..FaultPlan::none()
    };
    let (manifest, proxies) =
        numbered_backup_through_proxy(&env, "fruitless", (25, 100), 1, &slow).await;
    let probes = probes_sent(&proxies[2]);
    assert!(
        !probes.is_empty(),
        "the first page's look searched for a cut"
    );
    let mut distinct = probes.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        probes.len(),
        "a probe was sent twice: {probes:#?}"
    );
    assert_eq!(manifest.tables[0].ranges.len(), 1, "nothing to split");
}

/// A page with no continuation, of the range's last query, holds all of its rest: a
/// look for idle workers made when it arrives can find nothing to cut. Each such look
/// had searched anyway (in the split model, 22 of the 64 probes a table of Zipf sizes
/// falling with the key cost, every one ending in no cut). Here the second page ends
/// the table, so the first page's look is not made and no probe is sent.
#[tokio::test]
async fn a_page_that_ends_the_range_is_not_searched_for_a_cut() {
    let env = TestEnv::start().await;
    let (manifest, proxies) =
        numbered_backup_through_proxy(&env, "inhand", (19, 100), 1, &FaultPlan::none()).await;
    assert_eq!(
        probes_sent(&proxies[2]),
        Vec::<String>::new(),
        "the rest was in hand"
    );
    assert_eq!(manifest.tables[0].ranges.len(), 1);
}

/// Regression: with the first fruitless split search ending all looking, a first
/// backup of a small tenant's keys below a large one's (1,000 under `acme-`, 19,000
/// under `zeta-`) was read by its first task alone: its first look, with only the small
/// tenant read, found no cut. Fruitless searches now only space the looks out.
#[tokio::test]
async fn a_first_task_that_found_no_cut_yet_still_splits_later() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table("latesplit");
    let n = 20_000u64;
    let mut source = load_keys(&client, &table, n, |i| {
        let pk = if i < 1_000 {
            format!("acme-{:05}", i / 50)
        } else {
            format!("zeta-{:05}", (i - 1_000) / 50)
        };
        (pk, format!("order-{i:010}"))
    })
    .await;
    source.sort_by(|a, b| (&a.partition_key, &a.row_key).cmp(&(&b.partition_key, &b.row_key)));
    let req = backup_of(&env.account, &table);
    let (blobs, manifest) = complete_backup(&req, &target(&env.account), 4, n).await;
    let counts: Vec<u64> = manifest.tables[0]
        .ranges
        .iter()
        .map(|r| r.entities)
        .collect();
    // Balance is timing's (others test it); here, no task reads three quarters.
    assert!(counts.iter().all(|&c| c * 4 <= n * 3), "{counts:?}");
    assert_eq!(read_backup(&blobs, &manifest, &table).await, source);
}

/// Many small tables go on the queue a few to a message (a put, a claim and a delete
/// per table saved), and a large table among them hands the rest of its group to other
/// workers: every table is backed up exactly, the large one split like any other.
#[tokio::test]
async fn many_small_tables_share_messages_and_a_large_one_among_them_is_exact() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let prefix = unique_table("grp");
    // 96 tables: groups of three; the large one is in the middle of its group.
    let loaded = load_many_tables(&client, &prefix, 96, Some(40)).await;
    let (conn, proxies) =
        proxied_connection_string(&env.connection_string(), &FaultPlan::none()).await;
    let through_proxy = StorageAccount::from_connection_string(&conn).unwrap();
    let t = target(&through_proxy);
    let report = run_backup(
        &BackupRequest::new(env.account.clone()),
        &t,
        &watch_opts(2, &env.account),
    )
    .await
    .unwrap();
    assert_eq!(report.status, "complete");
    let backed_up: std::collections::BTreeMap<String, u64> = report
        .tables
        .iter()
        .map(|t| (t.name.clone(), t.entities))
        .collect();
    let expected: std::collections::BTreeMap<String, u64> = loaded
        .iter()
        .map(|(name, entities)| (name.clone(), entities.len() as u64))
        .collect();
    assert_eq!(backed_up, expected);
    let puts = decoded_requests(&proxies[1])
        .iter()
        .filter(|l| l.starts_with("POST") && l.contains("/messages"))
        .count();
    // 32 groups, the hand-on and the large table's split-off tasks; one put per
    // table would be 96 or more.
    assert!(
        (32..64).contains(&puts),
        "{puts} messages put for 96 tables"
    );
    let blobs = store(&t);
    let manifest = load_manifest(&blobs, &report.backup_id)
        .await
        .unwrap()
        .unwrap();
    for i in [0, 39, 40, 41, 95] {
        let table = format!("{prefix}{i:03}");
        assert_eq!(read_backup(&blobs, &manifest, &table).await, loaded[&table]);
    }
}

/// A table of a group that cannot be backed up (it was deleted after planning) is
/// poisoned alone, with the service's reason: the others of its group are backed up,
/// and once the table is back, retrying the poisoned task completes the backup.
#[tokio::test]
async fn a_failing_table_of_a_group_is_poisoned_alone() {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let prefix = unique_table("grpfail");
    // 64 tables: groups of two.
    let loaded = load_many_tables(&client, &prefix, 64, None).await;
    let t = target(&env.account);
    let req = BackupRequest::new(env.account.clone());
    let job = plan(&req, &t).await.unwrap();
    enqueue(&t, &job, None).await.unwrap();
    let gone = format!("{prefix}021");
    client.delete_table(&gone).await.unwrap();
    let report = watch(&t, job.clone(), &watch_opts(2, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status, "incomplete");
    let poisoned: Vec<(&str, &str)> = report
        .poisoned
        .iter()
        .map(|p| (p.table.as_str(), p.task.as_str()))
        .collect();
    assert_eq!(poisoned, vec![(gone.as_str(), "r0000")]);
    assert!(
        report.poisoned[0].reason.contains("404"),
        "{}",
        report.poisoned[0].reason
    );
    assert_eq!(report.tasks_committed, 63, "the rest of the group too");
    load_numbered(&client, &gone, 1, 3).await;
    let what = StatusOptions {
        wait: true,
        retry_poisoned: true,
    };
    let report = status(&t, &job.backup_id, what, &watch_opts(2, &env.account))
        .await
        .unwrap();
    let total: usize = loaded.values().map(Vec::len).sum();
    assert_eq!(
        (report.status.as_str(), report.entities),
        ("complete", total as u64)
    );
}

/// Cuts backup `id`'s manifest short, as bit rot or a bad hand edit would: JSON that
/// begins like a manifest of `format` and stops mid-key.
async fn cut_manifest_short(t: &tablevault_coordinator::Location, id: &str, format: u32) {
    blob_client(t)
        .put_blob(
            &BackupPaths::new(id).manifest(),
            bytes::Bytes::from(format!(r#"{{"format": {format}, "backup_"#)),
            &Default::default(),
        )
        .await
        .unwrap();
}

/// Regression: a complete backup whose `manifest.json` could no longer be read (bit rot,
/// a bad hand edit) was listed as damaged and could only be forgotten, though its
/// records and data were whole. `status --wait` now rebuilds the manifest from the
/// commit records, and refuses when a data blob they name is gone.
#[tokio::test]
async fn status_wait_rebuilds_an_unreadable_manifest_from_the_commit_records() {
    let Setup {
        env,
        client,
        table,
        source,
        t,
    } = numbered("rebuild", 4, 150).await;
    let mut req = backup_of(&env.account, &table);
    req.split_keys = vec!["p001".into(), "p002".into(), "p003".into()];
    // Every range in data blobs (format 2 would keep ranges this small in their commit
    // records).
    req.format = 1;
    let report = run_backup(&req, &t, &watch_opts(2, &env.account))
        .await
        .unwrap();
    let id = report.backup_id;
    let blobs = store(&t);
    let before = load_manifest(&blobs, &id).await.unwrap().unwrap();
    let raw = blob_client(&t);
    let damage = || cut_manifest_short(&t, &id, 1);
    damage().await;
    let listed = tablevault_coordinator::listing::list(&blobs).await.unwrap();
    let damaged = listed.iter().find(|e| e.backup_id == id).unwrap();
    assert_eq!(
        damaged.status,
        tablevault_core::protocol::JobStatus::Damaged
    );
    assert!(
        damaged
            .problem
            .as_deref()
            .is_some_and(|p| p.contains("status") && p.contains("--wait")),
        "{damaged:?}"
    );

    let look = StatusOptions {
        wait: false,
        retry_poisoned: false,
    };
    let e = status(&t, &id, look, &watch_opts(0, &env.account))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("rebuilds the manifest"), "{e}");
    let wait = StatusOptions { wait: true, ..look };
    let report = status(&t, &id, wait, &watch_opts(0, &env.account))
        .await
        .unwrap();
    assert_eq!(
        (report.status.as_str(), report.entities),
        ("complete", source.len() as u64)
    );
    let rebuilt = load_manifest(&blobs, &id).await.unwrap().unwrap();
    assert_eq!(rebuilt.tables, before.tables);
    assert_eq!(
        read_backup(&blobs, &rebuilt, &table).await,
        scan_all(&client, &table).await
    );

    // A data blob gone as well: nothing is rewritten, and the error names the blob.
    damage().await;
    let commit = blobs
        .commit_record(&before.tables[0].ranges[1].commit)
        .await
        .unwrap();
    assert!(!commit.blobs[0].is_inline(), "format 1: data blobs");
    let lost = &commit.blobs[0].name;
    raw.delete(lost).await.unwrap();
    let e = status(&t, &id, wait, &watch_opts(0, &env.account))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("cannot be rebuilt") && e.to_string().contains(lost.as_str()),
        "{e}"
    );
    assert!(load_manifest(&blobs, &id).await.is_err(), "left as it was");
}

/// The same rebuild for a backup in format 2, whose small ranges have no data blob to
/// look for: `status --wait` rebuilds its unreadable manifest from the commit records,
/// and the backup reads back exactly.
#[tokio::test]
async fn status_wait_rebuilds_the_manifest_of_a_backup_with_inline_ranges() {
    let Setup {
        env,
        client,
        table,
        source: _,
        t,
    } = numbered("rebuild2", 2, 40).await;
    let mut req = backup_of(&env.account, &table);
    req.split_keys = vec!["p001".into()];
    req.compression = Compression::Zstd;
    req.format = 2;
    let report = run_backup(&req, &t, &watch_opts(2, &env.account))
        .await
        .unwrap();
    let id = report.backup_id;
    let blobs = store(&t);
    let before = load_manifest(&blobs, &id).await.unwrap().unwrap();
    for r in &before.tables[0].ranges {
        let commit = blobs.commit_record(&r.commit).await.unwrap();
        assert!(
            commit.blobs.iter().all(|b| b.is_inline()),
            "small ranges are inline"
        );
    }
    cut_manifest_short(&t, &id, 2).await;
    let wait = StatusOptions {
        wait: true,
        retry_poisoned: false,
    };
    let report = status(&t, &id, wait, &watch_opts(0, &env.account))
        .await
        .unwrap();
    assert_eq!(report.status.as_str(), "complete");
    let rebuilt = load_manifest(&blobs, &id).await.unwrap().unwrap();
    assert_eq!((rebuilt.format, &rebuilt.tables), (2, &before.tables));
    assert_eq!(
        read_backup(&blobs, &rebuilt, &table).await,
        scan_all(&client, &table).await
    );
}

/// Regression: a backup that a prune removed while it ran (its clock ahead judged it
/// abandoned) was finalized by its own coordinator from the state it held: it reported
/// `complete`, exit 0, and left a manifest over data blobs the deletion had taken. A
/// backup being removed now gets no manifest, and the watch says it was removed (exit 1).
#[tokio::test]
async fn a_backup_removed_while_it_runs_is_not_reported_complete() {
    let Setup { env, table, t, .. } = numbered("removed", 2, 50).await;
    let req = backup_of(&env.account, &table);
    let job = plan(&req, &t).await.unwrap();
    enqueue(&t, &job, None).await.unwrap();
    let blobs = store(&t);
    let paths = BackupPaths::new(&job.backup_id);
    // The deletion has begun: its marker is down.
    blobs.mark(&paths.deleting(), "pruned").await.unwrap();
    let e = watch(&t, job.clone(), &watch_opts(1, &env.account))
        .await
        .unwrap_err();
    assert!(
        matches!(e.root(), tablevault_coordinator::Error::Removed(_)),
        "{e}"
    );
    assert_eq!(
        tablevault_cli::exit::error_code(&e),
        tablevault_cli::exit::ExitCode::Failed
    );
    assert!(!blobs.exists(&paths.manifest()).await.unwrap());
}
