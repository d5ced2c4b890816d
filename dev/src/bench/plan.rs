//! `tablevault-bench plan`: how long a repeat backup's plan takes for an account of many
//! large tables, each backed up last time in many ranges, from what the last backup
//! learned (`learned.json`, one read) and from its commit records (one read each), side
//! by side on the same emulator, optionally behind a delay line.
//!
//! The last backup is written as the product writes one (job file, commit records with
//! their blocks and marks, then finalized by the product's own `settle_backup`, which
//! writes the manifest and `learned.json`); its tables exist, empty, in the source.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use serde::Serialize;
use tablevault_azure::StorageAccount;
use tablevault_azure::table::TableClient;
use tablevault_coordinator::Location;
use tablevault_coordinator::backup::{BackupRequest, plan};
use tablevault_core::format::{Compression, FORMAT_VERSION, MARK_ENTITIES};
use tablevault_core::job::finalize::{RANGE_METADATA, range_metadata, settle_backup};
use tablevault_core::keys::{EntityKey, KeyRange};
use tablevault_core::protocol::{
    AccountRef, BackupJob, BackupOptions, BlobRecord, BlockRecord, CommitRecord, KeyMark,
    PROTOCOL_VERSION, PlannedTask, TablePlan,
};
use tablevault_core::store::{BackupPaths, Store};

use crate::delay::DelayLine;
use crate::emulator::Azurite;

/// What `tablevault-bench plan` takes.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// Tables in the account.
    pub tables: usize,
    /// Ranges each table was backed up in last time.
    pub ranges: usize,
    /// Entities per range last time.
    pub entities_per_range: u64,
    /// Round trip added to every request the plan sends.
    pub round_trip: Duration,
    /// Plans timed per way.
    pub runs: usize,
    /// Print JSON.
    pub json: bool,
}

/// One way of planning, timed.
#[derive(Debug, Serialize)]
struct Timed {
    from: &'static str,
    median_seconds: f64,
    fastest_seconds: f64,
    slowest_seconds: f64,
    tasks: usize,
}

/// The id of the last backup (ids sort by time; this one is in the past).
const LAST: &str = "20260101T000000Z-0b5e7a11";

/// Runs the benchmark and prints its table.
pub async fn run_plan_bench(opts: &PlanOptions) -> anyhow::Result<()> {
    ensure!(
        opts.tables > 0 && opts.ranges > 0 && opts.runs > 0,
        "nothing to plan"
    );
    let azurite = Azurite::start_split().await?;
    let delay = if opts.round_trip.is_zero() {
        None
    } else {
        Some(DelayLine::start(&azurite.ports(), opts.round_trip).await?)
    };
    let direct = StorageAccount::from_connection_string(&azurite.connection_string())?;
    let delayed = match &delay {
        Some(d) => {
            let p = d.ports();
            StorageAccount::from_connection_string(
                &azurite.connection_string_at([p[0], p[1], p[2]]),
            )?
        }
        None => direct.clone(),
    };
    let names: Vec<String> = (0..opts.tables).map(|t| format!("Plan{t:04}")).collect();
    let client = TableClient::new(&direct)?;
    for name in &names {
        client.create_table(name).await?;
    }
    let location = |account: &StorageAccount| Location {
        account: account.clone(),
        container: "plan-bench".into(),
        queue: "plan-bench".into(),
        client_options: Default::default(),
        backends: None,
    };
    let store = location(&direct).store()?;
    store.create_container().await?;
    let loading = Instant::now();
    // Of the account as the plans see it (through the delay line), or it is another's.
    write_last_backup(&store, &delayed, &names, opts).await?;
    let learned_path = BackupPaths::new(LAST).learned();
    let learned = store
        .blobs()
        .get(&learned_path)
        .await?
        .context("the finalized backup has no learned.json")?;
    if !opts.json {
        println!(
            "last backup: {} tables x {} ranges x {} entities, {} commit records, learned.json {} KiB (written in {:.1} s)",
            opts.tables,
            opts.ranges,
            opts.entities_per_range,
            opts.tables * opts.ranges,
            learned.len() / 1024,
            loading.elapsed().as_secs_f64()
        );
    }
    let mut req = BackupRequest::new(delayed.clone());
    req.tables = Some(names.clone());
    let target = location(&delayed);
    let mut learned_times = Vec::new();
    let mut record_times = Vec::new();
    let mut tasks = (0, 0);
    // The two ways interleaved, so a slow spell of the machine costs both alike.
    for _ in 0..opts.runs {
        for with_learned in [true, false] {
            if with_learned {
                store
                    .blobs()
                    .put_blob(&learned_path, learned.clone(), &Default::default())
                    .await?;
            } else {
                store.delete(&learned_path).await?;
            }
            let started = Instant::now();
            let job = plan(&req, &target).await?;
            let seconds = started.elapsed().as_secs_f64();
            ensure!(
                job.tables.iter().all(|t| t.planning == "previous-backup"),
                "a table was not planned from the last backup"
            );
            let planned = job.tables.iter().map(|t| t.tasks.len()).sum();
            // The plan's own files go, so the next plan finds the same last backup first.
            let mine = store
                .list_names(&BackupPaths::new(&job.backup_id).root())
                .await?;
            store.delete_all(&mine).await?;
            if with_learned {
                learned_times.push(seconds);
                tasks.0 = planned;
            } else {
                record_times.push(seconds);
                tasks.1 = planned;
            }
        }
    }
    let rows = [
        timed("learned.json", learned_times, tasks.0),
        timed("commit records", record_times, tasks.1),
    ];
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "\nRepeat plan of {} tables, {} ranges each last time, round trip {} ms, {} runs each:\n",
        opts.tables,
        opts.ranges,
        opts.round_trip.as_millis(),
        opts.runs
    );
    println!("| planned from | median s | fastest s | slowest s | tasks planned |");
    println!("|---|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.3} | {:.3} | {:.3} | {} |",
            r.from, r.median_seconds, r.fastest_seconds, r.slowest_seconds, r.tasks
        );
    }
    Ok(())
}

fn timed(from: &'static str, mut seconds: Vec<f64>, tasks: usize) -> Timed {
    seconds.sort_by(f64::total_cmp);
    Timed {
        from,
        median_seconds: seconds[seconds.len() / 2],
        fastest_seconds: seconds[0],
        slowest_seconds: seconds[seconds.len() - 1],
        tasks,
    }
}

/// Writes a complete backup of `names`, each in `opts.ranges` ranges of
/// `opts.entities_per_range` entities under `customer-NNNNNNNN` PartitionKeys (a
/// thousand entities each), blocks of 50,000 entities marked every
/// [`MARK_ENTITIES`], by a worker per range; then finalizes it as the product does.
async fn write_last_backup(
    store: &Store,
    account: &StorageAccount,
    names: &[String],
    opts: &PlanOptions,
) -> anyhow::Result<()> {
    const BLOCK: u64 = 50_000;
    let per_range = opts.entities_per_range.max(1);
    let key = |i: u64| {
        EntityKey::new(
            format!("customer-{:08}", i / 1_000),
            format!("order-{i:012}"),
        )
    };
    let cut = |r: usize| (r > 0).then(|| key(r as u64 * per_range));
    let range = |r: usize| {
        KeyRange::new(
            cut(r),
            (r + 1 < opts.ranges).then(|| key((r + 1) as u64 * per_range)),
        )
    };
    let job = BackupJob {
        protocol: PROTOCOL_VERSION,
        format: FORMAT_VERSION,
        backup_id: LAST.into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        source: AccountRef::of(account)?,
        options: BackupOptions {
            dynamic_split: true,
            compression: Compression::None,
            blocks_per_blob: 20,
            block_bytes: 4 << 20,
            batch_bytes: 3_500_000,
            max_attempts: 5,
            queue: "plan-bench".into(),
            max_rate: None,
        },
        tables: names
            .iter()
            .map(|name| TablePlan {
                name: name.clone(),
                planning: "previous-backup".into(),
                tasks: (0..opts.ranges)
                    .map(|r| PlannedTask {
                        task: format!("r{r:04}"),
                        range: range(r),
                    })
                    .collect(),
            })
            .collect(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
    };
    let paths = &BackupPaths::new(LAST);
    store.overwrite(&paths.job(), &job).await?;
    let records = names.iter().flat_map(|name| {
        (0..opts.ranges).map(move |r| {
            let first = r as u64 * per_range;
            let blocks: Vec<BlockRecord> = (0..per_range.div_ceil(BLOCK))
                .map(|b| {
                    let start = first + b * BLOCK;
                    let entities = BLOCK.min(first + per_range - start);
                    BlockRecord {
                        id: format!("{b:08}"),
                        offset: 0,
                        length: 0,
                        raw_length: 0,
                        entities,
                        batches: entities.div_ceil(100),
                        sha256: String::new(),
                        first_key: key(start),
                        last_key: key(start + entities - 1),
                        marks: (1..entities.div_ceil(MARK_ENTITIES as u64))
                            .map(|m| {
                                let before = m * MARK_ENTITIES as u64;
                                KeyMark {
                                    key: key(start + before),
                                    before,
                                    starts_partition: (start + before).is_multiple_of(1_000),
                                }
                            })
                            .collect(),
                    }
                })
                .collect();
            CommitRecord {
                format: FORMAT_VERSION,
                job: LAST.into(),
                table: name.clone(),
                task: format!("r{r:04}"),
                attempt: "0".repeat(32),
                range: range(r),
                entities: per_range,
                raw_bytes: 0,
                stored_bytes: 0,
                blobs: vec![BlobRecord {
                    name: paths.data_blob(name, &format!("r{r:04}"), &"0".repeat(32), 0),
                    entities: per_range,
                    length: 0,
                    blocks,
                    inline: None,
                }],
                started_at: "2026-01-01T00:00:00Z".into(),
                finished_at: "2026-01-01T00:01:00Z".into(),
                worker: format!("host/{r}"),
                split_off: Vec::new(),
            }
        })
    });
    let writes: Vec<_> = records
        .map(|record| async move {
            let path = paths.commit(&record.table, &record.task);
            let metadata = vec![(RANGE_METADATA.to_string(), range_metadata(&record.range))];
            store.create(&path, &record, metadata).await
        })
        .collect();
    let written: Vec<_> = futures::StreamExt::collect(futures::StreamExt::buffer_unordered(
        futures::stream::iter(writes),
        32,
    ))
    .await;
    for w in written {
        w?;
    }
    settle_backup(store, &job)
        .await?
        .context("the last backup did not finalize")?;
    Ok(())
}
