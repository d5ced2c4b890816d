//! Backup speed by table shape: for each key shape, a fresh emulator is loaded with the
//! same number of sample entities under that shape's keys, a sequential single-connection
//! scan of all of it sets the baseline, and `tablevault backup --json` runs twice with the
//! default planning: a first backup (one task per table, split as the workers go) and a
//! repeat into the same container (planned from the first one's block counts); with
//! `--compare` also with the old planning (probing for 8 ranges, no splitting). All side
//! by side in one run; with `--runs N`, each scan and backup N times on the same loaded
//! data (variants interleaved), reporting the median run.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::bail;
use futures::StreamExt;
use serde::Serialize;
use tablevault_azure::StorageAccount;
use tablevault_azure::table::{BatchOperation, Entity, TableClient};

use super::{Tablevault, measure_scan};
use crate::emulator::Azurite;
use crate::sample::sample_entity;

/// Settings of the shape benchmark.
#[derive(Debug, Clone)]
pub struct ShapeOptions {
    /// Entities per shape.
    pub entities: u64,
    /// In-process workers.
    pub workers: usize,
    /// Tables of the many-small-tables shape.
    pub small_tables: u64,
    /// Shapes to run (names as printed); all when empty.
    pub only: Vec<String>,
    /// Also run the old planning (probed ranges, no splitting).
    pub compare: bool,
    /// A Python with `azure-data-tables`, to time the SDK export baseline.
    pub sdk_python: Option<std::path::PathBuf>,
    /// Times each scan and backup this many times and reports the median.
    pub runs: usize,
    /// A network round trip the scan, the SDK export and the backups pay on every
    /// request, through a [`crate::delay::DelayLine`] (loading goes direct); zero for none.
    pub round_trip: std::time::Duration,
    /// Backup format version to write (`--format`); the product's default when `None`.
    pub format: Option<u32>,
    /// Print JSON.
    pub json: bool,
}

/// The key shapes.
const SHAPES: &[&str] = &[
    "sequential",
    "guid",
    "zipf",
    "one-partition",
    "tenants",
    "cyrillic",
    "emoji",
    "dates",
    "hours",
    "times",
    "numbers",
    "falling",
    "guid-rows",
    "small-tables",
];

/// One backup of one shape.
#[derive(Debug, Clone, Serialize)]
pub struct ShapeRun {
    /// Shape.
    pub shape: String,
    /// `first` (a first backup), `repeat` (the next one, planned from the first) or
    /// `probed` (the old planning).
    pub planning: String,
    /// Entities backed up.
    pub entities: u64,
    /// Sequential scan of the same data, entities/s.
    pub scan_entities_per_second: f64,
    /// Backup entities/s (whole command).
    pub entities_per_second: f64,
    /// Backup over scan.
    pub ratio_to_scan: f64,
    /// The Python SDK export of the same data, entities/s (when asked for).
    pub sdk_entities_per_second: Option<f64>,
    /// Backup over the SDK export.
    pub ratio_to_sdk: Option<f64>,
    /// Seconds planning and enqueueing.
    pub planning_seconds: f64,
    /// Planning over the whole backup.
    pub planning_share: f64,
    /// Tasks in the manifest.
    pub tasks: usize,
    /// The largest task's share of all entities.
    pub largest_task_share: f64,
    /// The largest task over the mean task.
    pub largest_over_mean: f64,
    /// Peak RSS of the backup process.
    pub peak_rss_bytes: Option<u64>,
    /// CPU seconds the emulator's Table process spent on the scan (median run).
    pub scan_table_cpu_seconds: Option<f64>,
    /// CPU seconds the emulator's Table process spent on the backup.
    pub table_cpu_seconds: Option<f64>,
    /// CPU seconds its Blob process spent on the backup (the scan costs it nothing).
    pub blob_cpu_seconds: Option<f64>,
    /// CPU seconds its Queue process spent on the backup (the scan costs it nothing).
    pub queue_cpu_seconds: Option<f64>,
    /// Query Entities requests (pages) the scan sent.
    pub scan_queries: u64,
    /// Query Entities requests the backup sent: pages and probes, retries included.
    pub queries: u64,
    /// Every request the backup sent, by operation.
    pub requests: BTreeMap<String, u64>,
    /// Runs of this backup (and of the scan) the median was taken over.
    pub runs: usize,
    /// The round trip added to every request of the scan, the SDK export and the
    /// backup, in milliseconds (0: loopback).
    pub round_trip_ms: f64,
}

fn guid(i: u64) -> String {
    let h = (i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
    let s = format!("{h:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &s[..8],
        &s[8..12],
        &s[12..16],
        &s[16..20],
        &s[20..]
    )
}

/// Entity `i` of `n` under a shape's keys: (table index, entity).
fn shaped(shape: &str, i: u64, n: u64, small_tables: u64) -> (u64, Entity) {
    let mut e = sample_entity(i, 1);
    let (table, pk, rk) = match shape {
        "sequential" => (
            0,
            format!("customer-{:05}", i / 500),
            format!("order-{i:010}"),
        ),
        "guid" => (0, guid(i), String::new()),
        // Zipf-like partition sizes: partition rank r holds about n / (r * H) entities.
        "zipf" => {
            let rank = zipf_rank(i, n);
            (0, guid(1_000_000 + rank), format!("order-{i:010}"))
        }
        "one-partition" => (0, "tenant-0001".to_string(), format!("order-{i:010}")),
        // Two tenants far apart in the key space: a small one (5%) below a large one, so a
        // first backup's first pages say little of the rest.
        "tenants" => {
            let small = n / 20;
            let pk = if i < small {
                format!("acme-{:05}", i / 50)
            } else {
                format!("zeta-{:05}", (i - small) / 50)
            };
            (0, pk, format!("order-{i:010}"))
        }
        // Names in another script than ASCII: Cyrillic words of four to eight letters,
        // ten entities each.
        "cyrillic" => (0, cyrillic_word(i / 10), format!("order-{i:010}")),
        // Names in characters above the BMP (surrogate pairs in the service's order):
        // four to eight emoticons, ten entities each.
        "emoji" => (0, emoji_word(i / 10), format!("order-{i:010}")),
        // A partition per day (`2026-01-01`), 500 entities each: a common design, where
        // each place of the keys holds a few of the digits and the separators are fixed.
        "dates" => (0, day(i / 500), format!("order-{i:010}")),
        // A partition per hour (`2026-01-01T00`), 100 entities each.
        "hours" => (
            0,
            format!("{}T{:02}", day(i / 100 / 24), i / 100 % 24),
            format!("order-{i:010}"),
        ),
        // One partition of events keyed by the time they happened, one every 7 seconds
        // (`2026-01-01T00:00:07.000Z-7`).
        "times" => {
            let s = i * 7;
            let t = format!("{:02}:{:02}:{:02}", s / 3_600 % 24, s / 60 % 60, s % 60);
            (
                0,
                "events".to_string(),
                format!("{}T{t}.000Z-{i}", day(s / 86_400)),
            )
        }
        // Unpadded numbers as PartitionKeys (`0` to `4999` at 50,000), ten entities
        // each: in key order, ten times as many under `1` as under `5`.
        "numbers" => (0, format!("{}", i / 10), format!("order-{i:010}")),
        // Zipf-like sizes falling with the key: `customer-000001` is the largest
        // partition, and each after it smaller.
        "falling" => (
            0,
            format!("customer-{:06}", zipf_rank(i, n)),
            format!("order-{i:010}"),
        ),
        // Customers with GUID RowKeys (orders, devices): most partitions hold 1-20
        // entities, one in ten 100-5,000, in no order of size.
        "guid-rows" => (0, format!("customer-{:05}", mixed_partition(i)), guid(i)),
        _ => {
            let per = n.div_ceil(small_tables.max(1));
            (
                i / per,
                format!("customer-{:05}", (i % per) / 50),
                format!("order-{i:010}"),
            )
        }
    };
    e.partition_key = pk;
    e.row_key = rk;
    (table, e)
}

/// The date `d` days after 2026-01-01, as `YYYY-MM-DD` (years of 365 days).
fn day(d: u64) -> String {
    const MONTHS: [u64; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let (year, mut left) = (2026 + d / 365, d % 365);
    let mut month = 0;
    while left >= MONTHS[month] {
        left -= MONTHS[month];
        month += 1;
    }
    format!("{year}-{:02}-{:02}", month + 1, left + 1)
}

/// A pseudo-random lower-case Cyrillic word (`а`-`я`) of four to eight letters for
/// partition `p`.
fn cyrillic_word(p: u64) -> String {
    word_in(p, 0x430, 32)
}

/// A pseudo-random name of four to eight emoticons (U+1F600-U+1F64F) for partition `p`.
fn emoji_word(p: u64) -> String {
    word_in(p, 0x1F600, 80)
}

/// A pseudo-random word of four to eight of the `letters` characters from `first`, for
/// partition `p`.
fn word_in(p: u64, first: u32, letters: u64) -> String {
    let mut h = (p as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835) >> 64;
    let len = 4 + (h % 5) as usize;
    (0..len)
        .map(|_| {
            h = h
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407)
                & u128::from(u64::MAX);
            char::from_u32(first + ((h >> 33) as u64 % letters) as u32).expect("a letter")
        })
        .collect()
}

/// The partition rank of entity `i` of `n` when partition sizes follow 1/rank over
/// `n / 100` partitions (inverting the harmonic sums).
fn zipf_rank(i: u64, n: u64) -> u64 {
    let partitions = (n / 100).max(1);
    let h: f64 = (1..=partitions).map(|r| 1.0 / r as f64).sum();
    let target = (i as f64 + 0.5) / n as f64 * h;
    let mut acc = 0.0;
    for r in 1..=partitions {
        acc += 1.0 / r as f64;
        if acc >= target {
            return r;
        }
    }
    partitions
}

/// The size of partition `p` of the `guid-rows` shape: 1-20 entities, and every tenth
/// partition 100-5,000.
fn mixed_partition_size(p: u64) -> u64 {
    if p % 10 == 9 {
        100 + p.wrapping_mul(7_919) % 4_901
    } else {
        1 + p.wrapping_mul(31) % 20
    }
}

/// The partition entity `i` of the `guid-rows` shape lies in (partitions filled in turn).
fn mixed_partition(i: u64) -> u64 {
    let (mut p, mut first) = (0, 0);
    loop {
        let size = mixed_partition_size(p);
        if i < first + size {
            return p;
        }
        first += size;
        p += 1;
    }
}

fn table_name(shape: &str, t: u64) -> String {
    let base: String = shape.chars().filter(char::is_ascii_alphanumeric).collect();
    format!("Shape{base}{t:03}")
}

/// Loads a shape, batching by partition.
async fn load(
    client: &TableClient,
    shape: &str,
    opts: &ShapeOptions,
) -> anyhow::Result<Vec<String>> {
    let n = opts.entities;
    let entities = (0..n).map(|i| {
        let (t, e) = shaped(shape, i, n, opts.small_tables);
        (table_name(shape, t), e)
    });
    load_entities(client, entities).await
}

/// Whether `shape` names one of the shapes of a single table (every one but
/// `small-tables`); an error that lists them otherwise.
pub(super) fn single_table_shape(shape: &str) -> anyhow::Result<()> {
    unknown_shapes(&[shape.to_string()])?;
    anyhow::ensure!(
        shape != "small-tables",
        "small-tables is many tables; a restore is measured on one"
    );
    Ok(())
}

/// Loads `n` entities of `shape` (one of the single-table shapes) into `table`, as
/// [`load`] does: batches of one partition, 100 entities at most, 8 in flight. That is
/// also the fastest a restore can write them, which makes it the restore benchmark's
/// ceiling for the shape.
pub(super) async fn load_shape_into(
    client: &TableClient,
    shape: &str,
    n: u64,
    table: &str,
) -> anyhow::Result<()> {
    single_table_shape(shape)?;
    let entities = (0..n).map(|i| (table.to_string(), shaped(shape, i, n, 1).1));
    load_entities(client, entities).await?;
    Ok(())
}

/// Creates the tables of `entities` and writes them, grouped by table and partition
/// into batches of at most 100, 8 in flight. Returns the tables, in name order.
async fn load_entities(
    client: &TableClient,
    entities: impl Iterator<Item = (String, Entity)>,
) -> anyhow::Result<Vec<String>> {
    let mut groups: std::collections::BTreeMap<(String, String), Vec<Entity>> = Default::default();
    for (table, e) in entities {
        groups
            .entry((table, e.partition_key.clone()))
            .or_default()
            .push(e);
    }
    let mut tables: Vec<String> = groups.keys().map(|(t, _)| t.clone()).collect();
    tables.dedup();
    for t in &tables {
        client.create_table(t).await?;
    }
    let batches: Vec<(String, Vec<BatchOperation>)> = groups
        .into_iter()
        .flat_map(|((table, _), es)| {
            es.chunks(100)
                .map(|c| {
                    (
                        table.clone(),
                        c.iter()
                            .cloned()
                            .map(BatchOperation::InsertOrReplace)
                            .collect(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let mut puts = futures::stream::iter(batches)
        .map(|(t, ops)| async move { client.submit_batch(&t, &ops).await })
        .buffer_unordered(8);
    while let Some(r) = puts.next().await {
        r?;
    }
    Ok(tables)
}

/// How a measured backup is planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// The old planning: 8 probed ranges, no splitting (`--compare`).
    Probed,
    /// A first backup: one task per table, split as the workers go.
    First,
    /// The next backup into the same container: planned from the first one's block
    /// counts, split as the workers go.
    Repeat,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Probed => "probed",
            Variant::First => "first",
            Variant::Repeat => "repeat",
        }
    }
}

async fn backup(
    tv: &Tablevault<'_>,
    shape: &str,
    tables: &[String],
    opts: &ShapeOptions,
    scan_eps: f64,
    variant: Variant,
    run: usize,
) -> anyhow::Result<ShapeRun> {
    let old = variant == Variant::Probed;
    // A repeat backup goes where the first of the same run went, so the last backup is
    // found there; each run's first backup goes to a container of its own.
    let name = format!(
        "shape-{}-{}-{run}",
        if old { "old" } else { "new" },
        tables.len()
    );
    let workers = opts.workers.to_string();
    let list = tables.join(",");
    let mut args = vec![
        "backup",
        "--tables",
        &list,
        "--workers",
        &workers,
        "--container",
        &name,
        "--queue",
        &name,
    ];
    if old {
        args.extend(["--ranges", "8", "--no-split"]);
    }
    let format = opts.format.map(|f| f.to_string());
    if let Some(f) = &format {
        args.extend(["--format", f.as_str()]);
    }
    let cpu_before = tv.azurite.cpu_seconds();
    let (report, requests) = tv.run_counted(&args).await?;
    let cpu = cpu_before
        .zip(tv.azurite.cpu_seconds())
        .filter(|(b, a)| b.len() == 3 && a.len() == 3)
        .map(|(b, a)| [a[0] - b[0], a[1] - b[1], a[2] - b[2]]);
    let entities = report["entities"].as_u64().unwrap_or(0);
    if entities != opts.entities {
        bail!(
            "{shape}: backed up {entities} of {} entities",
            opts.entities
        );
    }
    let seconds = report["duration_seconds"].as_f64().unwrap_or(f64::NAN);
    let planning = report["planning_seconds"].as_f64().unwrap_or(f64::NAN);
    let tasks: usize = report["tables"]
        .as_array()
        .map(|ts| ts.iter().filter_map(|t| t["ranges"].as_u64()).sum::<u64>() as usize)
        .unwrap_or(0);
    let largest = report["largest_task_entities"].as_u64().unwrap_or(0) as f64;
    let eps = entities as f64 / seconds;
    Ok(ShapeRun {
        shape: shape.to_string(),
        planning: variant.name().to_string(),
        entities,
        scan_entities_per_second: scan_eps,
        entities_per_second: eps,
        ratio_to_scan: eps / scan_eps,
        sdk_entities_per_second: None,
        ratio_to_sdk: None,
        planning_seconds: planning,
        planning_share: planning / seconds,
        tasks,
        largest_task_share: largest / entities as f64,
        largest_over_mean: largest / (entities as f64 / tasks.max(1) as f64),
        peak_rss_bytes: report["peak_rss_bytes"].as_u64(),
        scan_table_cpu_seconds: None,
        table_cpu_seconds: cpu.map(|c| c[2]),
        blob_cpu_seconds: cpu.map(|c| c[0]),
        queue_cpu_seconds: cpu.map(|c| c[1]),
        scan_queries: 0,
        queries: requests.get("Query Entities").copied().unwrap_or(0),
        requests,
        runs: 1,
        round_trip_ms: 0.0,
    })
}

/// The item with the median `rate` (the lower middle one of an even count).
fn lower_median<T>(mut items: Vec<T>, rate: impl Fn(&T) -> f64) -> Option<T> {
    let middle = items.len().saturating_sub(1) / 2;
    items.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    items.into_iter().nth(middle)
}

/// The run with the median rate, noting how many runs it was taken over.
fn median_run(runs: Vec<ShapeRun>) -> Option<ShapeRun> {
    let n = runs.len();
    let mut median = lower_median(runs, |r| r.entities_per_second)?;
    median.runs = n;
    Some(median)
}

/// The median of some rates; NaN when there are none.
fn median(rates: Vec<f64>) -> f64 {
    lower_median(rates, |r| *r).unwrap_or(f64::NAN)
}

/// An error naming the shapes asked for that do not exist (a misspelt `--only` ran
/// nothing and printed an empty table).
fn unknown_shapes(only: &[String]) -> anyhow::Result<()> {
    let unknown: Vec<&str> = only
        .iter()
        .map(String::as_str)
        .filter(|o| !SHAPES.contains(o))
        .collect();
    anyhow::ensure!(
        unknown.is_empty(),
        "no shape named {}; the shapes are {}",
        unknown.join(", "),
        SHAPES.join(", ")
    );
    Ok(())
}

/// Runs the shape benchmark and prints its table (or JSON).
pub async fn run_shape_bench(opts: &ShapeOptions) -> anyhow::Result<()> {
    unknown_shapes(&opts.only)?;
    let mut runs = Vec::new();
    for shape in SHAPES
        .iter()
        .filter(|s| opts.only.is_empty() || opts.only.iter().any(|o| o == *s))
    {
        let azurite = Azurite::start_split().await?;
        let line = if opts.round_trip.is_zero() {
            None
        } else {
            Some(crate::delay::DelayLine::start(&azurite.ports(), opts.round_trip).await?)
        };
        // What the scan, the SDK export and the backups reach the emulator by.
        let conn = match &line {
            Some(line) => {
                let p = line.ports();
                azurite.connection_string_at([p[0], p[1], p[2]])
            }
            None => azurite.connection_string(),
        };
        let tv = Tablevault::new(&azurite)?.reaching_by(conn.clone());
        let loader = TableClient::new(&azurite.account())?;
        let client = TableClient::new(&StorageAccount::from_connection_string(&conn)?)?;
        let t = Instant::now();
        let tables = load(&loader, shape, opts).await?;
        if !opts.json {
            eprintln!(
                "{shape}: loaded {} entities into {} table(s) in {:.0} s",
                opts.entities,
                tables.len(),
                t.elapsed().as_secs_f64()
            );
        }
        // The baseline: one connection reading every table from start to end.
        let mut scan_rates = Vec::new();
        let mut scan_cpu = Vec::new();
        let mut scan_queries = 0;
        for _ in 0..opts.runs.max(1) {
            let cpu_before = azurite.cpu_seconds();
            let started = Instant::now();
            let (mut scanned, mut queries) = (0, 0);
            for table in &tables {
                let scan = measure_scan(&client, table).await?;
                scanned += scan.entities;
                queries += scan.queries;
            }
            scan_queries = queries;
            scan_rates.push(scanned as f64 / started.elapsed().as_secs_f64());
            if let Some((b, a)) = cpu_before.zip(azurite.cpu_seconds()) {
                scan_cpu.extend(b.last().zip(a.last()).map(|(b, a)| a - b));
            }
        }
        let scan_eps = median(scan_rates);
        let scan_cpu = (!scan_cpu.is_empty()).then(|| median(scan_cpu));
        let sdk_eps = match &opts.sdk_python {
            Some(python) => Some(sdk_export(python, &conn, &tables, opts.entities).await?),
            None => None,
        };
        let mut variants = vec![Variant::First, Variant::Repeat];
        if opts.compare {
            variants.insert(0, Variant::Probed);
        }
        // Runs interleave the variants, so a slow spell of the machine hits them alike.
        let mut by_variant: Vec<Vec<ShapeRun>> = vec![Vec::new(); variants.len()];
        for r in 0..opts.runs.max(1) {
            for (i, &variant) in variants.iter().enumerate() {
                by_variant[i].push(backup(&tv, shape, &tables, opts, scan_eps, variant, r).await?);
            }
        }
        for mut run in by_variant.into_iter().filter_map(median_run) {
            run.sdk_entities_per_second = sdk_eps;
            run.scan_table_cpu_seconds = scan_cpu;
            run.scan_queries = scan_queries;
            run.ratio_to_sdk = sdk_eps.map(|s| run.entities_per_second / s);
            run.round_trip_ms = opts.round_trip.as_secs_f64() * 1000.0;
            if !opts.json {
                eprintln!(
                    "  {:>6}: {:.0} entities/s ({:.2}x scan), planning {:.2} s, {} tasks, largest {:.1}%, {} queries (scan {}) (median of {})",
                    run.planning,
                    run.entities_per_second,
                    run.ratio_to_scan,
                    run.planning_seconds,
                    run.tasks,
                    run.largest_task_share * 100.0,
                    run.queries,
                    run.scan_queries,
                    run.runs
                );
            }
            runs.push(run);
        }
    }
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(());
    }
    if !opts.round_trip.is_zero() {
        println!(
            "\nEvery request of the scan, the SDK export and the backups paid a round trip of {} ms.",
            opts.round_trip.as_millis()
        );
    }
    println!(
        "\n| table shape | planning | scan e/s | SDK export e/s | backup e/s | vs scan | vs SDK | planning s (share) | tasks | largest task | largest / mean | peak RSS | table CPU s, scan / backup | blob / queue CPU s | queries, scan / backup | table CPU ms per query, scan / backup |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let seconds = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{s:.2}"));
    // What one query cost the emulator's Table process, on average.
    let per_query = |s: Option<f64>, queries: u64| match s {
        Some(s) if queries > 0 => format!("{:.1}", s * 1000.0 / queries as f64),
        _ => "-".to_string(),
    };
    for r in &runs {
        println!(
            "| {} | {} | {:.0} | {} | {:.0} | {:.2}x | {} | {:.2} ({:.1}%) | {} | {:.1}% | {:.2} | {} | {} / {} | {} / {} | {} / {} | {} / {} |",
            r.shape,
            r.planning,
            r.scan_entities_per_second,
            r.sdk_entities_per_second
                .map_or("-".to_string(), |s| format!("{s:.0}")),
            r.entities_per_second,
            r.ratio_to_scan,
            r.ratio_to_sdk
                .map_or("-".to_string(), |s| format!("{s:.2}x")),
            r.planning_seconds,
            r.planning_share * 100.0,
            r.tasks,
            r.largest_task_share * 100.0,
            r.largest_over_mean,
            super::human_bytes(r.peak_rss_bytes),
            seconds(r.scan_table_cpu_seconds),
            seconds(r.table_cpu_seconds),
            seconds(r.blob_cpu_seconds),
            seconds(r.queue_cpu_seconds),
            r.scan_queries,
            r.queries,
            per_query(r.scan_table_cpu_seconds, r.scan_queries),
            per_query(r.table_cpu_seconds, r.queries),
        );
    }
    Ok(())
}

/// Runs the Python SDK export of `tables` (`dev/sdk-export/export.py`) and returns its
/// entities/s, checking it read all `expected`.
async fn sdk_export(
    python: &std::path::Path,
    conn: &str,
    tables: &[String],
    expected: u64,
) -> anyhow::Result<f64> {
    use anyhow::Context;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/sdk-export/export.py");
    let out_dir =
        std::env::temp_dir().join(format!("tablevault-sdk-export-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir)?;
    let out = tokio::process::Command::new(python)
        .arg(script)
        .arg(tables.join(","))
        .arg(&out_dir)
        .env("TABLEVAULT_SDK_CONNECTION_STRING", conn)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {}", python.display()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let out = out?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "the SDK export failed (pip install -r dev/sdk-export/requirements.txt?): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let entities = report["entities"].as_u64().unwrap_or(0);
    if entities != expected {
        bail!("the SDK export read {entities} of {expected} entities");
    }
    Ok(entities as f64 / report["seconds"].as_f64().unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_run_is_the_middle_one_by_rate() {
        let run = |eps: f64| ShapeRun {
            shape: "s".into(),
            planning: "first".into(),
            entities: 1,
            scan_entities_per_second: 1.0,
            entities_per_second: eps,
            ratio_to_scan: eps,
            sdk_entities_per_second: None,
            ratio_to_sdk: None,
            planning_seconds: 0.0,
            planning_share: 0.0,
            tasks: 1,
            largest_task_share: 1.0,
            largest_over_mean: 1.0,
            peak_rss_bytes: None,
            scan_table_cpu_seconds: None,
            table_cpu_seconds: None,
            blob_cpu_seconds: None,
            queue_cpu_seconds: None,
            scan_queries: 0,
            queries: 0,
            requests: BTreeMap::new(),
            runs: 1,
            round_trip_ms: 0.0,
        };
        let m = median_run(vec![run(30.0), run(10.0), run(20.0)]).unwrap();
        assert_eq!((m.entities_per_second, m.runs), (20.0, 3));
        let m = median_run(vec![run(40.0), run(10.0)]).unwrap();
        assert_eq!(m.entities_per_second, 10.0, "the lower of two");
        assert!(median_run(Vec::new()).is_none());
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn cyrillic_names_are_cyrillic_words_of_four_to_eight_letters() {
        let words: std::collections::BTreeSet<String> = (0..2_000).map(cyrillic_word).collect();
        assert!(words.len() > 1_900, "{} distinct of 2,000", words.len());
        for w in &words {
            let n = w.chars().count();
            assert!((4..=8).contains(&n), "{w}");
            assert!(w.chars().all(|c| ('а'..='я').contains(&c)), "{w}");
        }
        let first: std::collections::BTreeSet<char> =
            words.iter().filter_map(|w| w.chars().next()).collect();
        assert_eq!(first.len(), 32, "every letter begins some word");
    }

    #[test]
    fn emoji_names_are_words_of_four_to_eight_emoticons() {
        let words: std::collections::BTreeSet<String> = (0..2_000).map(emoji_word).collect();
        assert!(words.len() > 1_900, "{} distinct of 2,000", words.len());
        for w in &words {
            assert!((4..=8).contains(&w.chars().count()), "{w}");
            assert!(w.chars().all(|c| ('😀'..='🙏').contains(&c)), "{w}");
        }
        let first: std::collections::BTreeSet<char> =
            words.iter().filter_map(|w| w.chars().next()).collect();
        assert!(first.len() > 70, "{} first letters", first.len());
    }

    #[test]
    fn a_shape_that_does_not_exist_is_an_error() {
        assert!(unknown_shapes(&[]).is_ok());
        assert!(unknown_shapes(&["dates".into(), "zipf".into()]).is_ok());
        let e = unknown_shapes(&["zipf".into(), "date".into()]).unwrap_err();
        assert!(e.to_string().contains("no shape named date;"), "{e}");
    }

    #[test]
    fn numbers_and_falling_sizes_are_as_named() {
        let keys = |shape: &str| -> Vec<String> {
            (0..50_000)
                .map(|i| shaped(shape, i, 50_000, 1).1.partition_key)
                .collect()
        };
        let numbers = keys("numbers");
        assert_eq!(
            (numbers[0].as_str(), numbers[49_999].as_str()),
            ("0", "4999")
        );
        let falling = keys("falling");
        let count = |pk: &str| falling.iter().filter(|k| *k == pk).count();
        assert!(count("customer-000001") > 5 * count("customer-000010"));
        assert!(falling.windows(2).all(|w| w[0] <= w[1]), "in key order");
    }

    #[test]
    fn hours_and_times_are_in_key_order_and_well_formed() {
        let keys = |shape: &str| -> Vec<(String, String)> {
            (0..3_000)
                .map(|i| {
                    let (_, e) = shaped(shape, i, 3_000, 1);
                    (e.partition_key, e.row_key)
                })
                .collect()
        };
        let hours = keys("hours");
        assert_eq!(hours[0].0, "2026-01-01T00");
        assert_eq!(hours[100 * 24].0, "2026-01-02T00");
        let times = keys("times");
        assert_eq!(times[1].1, "2026-01-01T00:00:07.000Z-1");
        // The 12,343rd event is the first of the next day.
        let (_, e) = shaped("times", 12_343, 20_000, 1);
        assert_eq!(e.row_key, "2026-01-02T00:00:01.000Z-12343");
        assert!(times.iter().all(|(pk, _)| pk == "events"));
        for shape in [hours, times] {
            assert!(shape.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn dates_run_through_the_calendar_in_key_order() {
        assert_eq!(day(0), "2026-01-01");
        assert_eq!(day(31), "2026-02-01");
        assert_eq!(day(58), "2026-02-28");
        assert_eq!(day(59), "2026-03-01");
        assert_eq!(day(364), "2026-12-31");
        assert_eq!(day(365), "2027-01-01");
        assert!(
            (0..800)
                .map(day)
                .collect::<Vec<_>>()
                .windows(2)
                .all(|w| w[0] < w[1])
        );
    }

    #[test]
    fn guid_rows_are_mostly_small_partitions_beside_large_ones() {
        let n = 20_000;
        let mut sizes = BTreeMap::<String, u64>::new();
        for i in 0..n {
            let (_, e) = shaped("guid-rows", i, n, 1);
            assert_eq!(e.row_key.len(), 36, "a GUID: {}", e.row_key);
            *sizes.entry(e.partition_key).or_default() += 1;
        }
        let small = sizes.values().filter(|&&s| s <= 20).count();
        let large = sizes.values().filter(|&&s| s >= 100).count();
        assert!(
            small > 8 * large && large >= 5,
            "{small} small, {large} large"
        );
        assert!(*sizes.values().max().unwrap() <= 5_000);
        assert_eq!(sizes.values().sum::<u64>(), n);
    }

    #[test]
    fn zipf_partitions_are_skewed_and_cover_every_entity() {
        let n = 10_000;
        let mut sizes = std::collections::BTreeMap::<u64, u64>::new();
        for i in 0..n {
            *sizes.entry(zipf_rank(i, n)).or_default() += 1;
        }
        let biggest = *sizes.values().max().unwrap();
        assert!(biggest > n / 10, "the largest partition holds {biggest}");
        assert_eq!(sizes.values().sum::<u64>(), n);
        assert!(sizes.len() > 50);
    }
}
