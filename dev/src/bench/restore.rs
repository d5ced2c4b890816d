//! Restore throughput: one backup per table size and key shape, then rounds that each
//! measure the ceiling (the project's Table client upserting the same entities as batches
//! of one partition, at most 100 entities, 8 in flight, into a fresh table) and a restore
//! per worker count, each with the check that reads the target back (the default) and
//! without it (`--no-verify`). Every measurement starts on a freshly started Table
//! service, because the emulator's insert rate falls as its in-memory database grows.
//!
//! The shape decides how many entities a batch can carry: an entity group transaction
//! holds one partition, so a table of one entity per partition (GUID keys) is written one
//! entity per request by the ceiling and by a restore alike.

use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use tablevault_azure::table::TableClient;

use super::{BenchOptions, ChildRun, Tablevault, column, column_max, human_bytes, median};
use crate::emulator::Azurite;
use crate::sample::load_sample;

/// One restore run.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreRun {
    /// In-process workers.
    pub workers: usize,
    /// Whether the target was read back and compared (inside the measured time).
    pub verify: bool,
    /// Entities written.
    pub entities: u64,
    /// Wall seconds of the whole command (planning, enqueueing, reporting included).
    pub seconds: f64,
    /// Entities per second.
    pub entities_per_second: f64,
    /// Share of the batch-insert ceiling.
    pub fraction_of_ceiling: f64,
    /// Peak RSS of the restore process.
    pub peak_rss_bytes: Option<u64>,
}

/// Medians over the rounds of a restore with one worker count.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreSummary {
    /// In-process workers.
    pub workers: usize,
    /// Whether the target was read back and compared.
    pub verify: bool,
    /// Median entities per second.
    pub entities_per_second: f64,
    /// Median of each round's rate over that round's ceiling.
    pub fraction_of_ceiling: f64,
    /// Largest peak RSS over the rounds.
    pub peak_rss_bytes: Option<u64>,
}

/// Results of the restore benchmark for one table size and shape.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreSizeResult {
    /// Entities in the table.
    pub entities: u64,
    /// Their key shape: `sample` (the backup benchmark's table, 500 entities a
    /// partition) or one of `tablevault-bench shapes`' single-table shapes.
    pub shape: String,
    /// Median ceiling (entities/s) over the rounds.
    pub ceiling_entities_per_second: f64,
    /// Medians per worker count.
    pub restores: Vec<RestoreSummary>,
    /// Every measurement: the round's ceiling and its runs.
    pub rounds: Vec<(f64, Vec<RestoreRun>)>,
}

const TABLE: &str = "BenchTable";
const CONTAINER: &str = "bench-restore";

async fn fresh_tables(azurite: &mut Azurite) -> anyhow::Result<()> {
    azurite
        .restart_table()
        .await
        .context("cannot restart the emulator's Table service")
}

/// The shape of the backup benchmark's own table (`load_sample`).
pub const SAMPLE_SHAPE: &str = "sample";

/// `shape` if the restore benchmark can load it: `sample` (its own table) or a single-table
/// shape of the shape benchmark; otherwise why not.
pub fn known_restore_shape(shape: &str) -> Result<String, String> {
    if shape == SAMPLE_SHAPE {
        return Ok(shape.to_string());
    }
    super::shapes::single_table_shape(shape)
        .map(|()| shape.to_string())
        .map_err(|e| format!("{e} (or {SAMPLE_SHAPE}, the default)"))
}

/// Loads `size` entities of `shape` into `table` with batches 8 in flight.
async fn load_shape(
    client: &TableClient,
    shape: &str,
    size: u64,
    table: &str,
) -> anyhow::Result<()> {
    if shape == SAMPLE_SHAPE {
        let partitions = (size / 500).clamp(1, 200);
        Ok(load_sample(client, table, size, partitions, 8).await?)
    } else {
        super::shapes::load_shape_into(client, shape, size, table).await
    }
}

/// Every (workers, verify) pair measured, in order.
fn combos(opts: &BenchOptions) -> Vec<(usize, bool)> {
    opts.workers
        .iter()
        .flat_map(|&w| [(w, true), (w, false)])
        .collect()
}

/// Runs the restore benchmark and prints its table (or JSON).
pub async fn run_restore_bench(opts: &BenchOptions) -> anyhow::Result<()> {
    let mut results = Vec::new();
    let shapes = if opts.shapes.is_empty() {
        vec![SAMPLE_SHAPE.to_string()]
    } else {
        opts.shapes.clone()
    };
    for shape in &shapes {
        known_restore_shape(shape).map_err(anyhow::Error::msg)?;
    }
    for (&size, shape) in opts
        .sizes
        .iter()
        .flat_map(|size| shapes.iter().map(move |shape| (size, shape)))
    {
        let mut azurite = Azurite::start_split().await?;
        let client = TableClient::new(&azurite.account())?;
        if !opts.json {
            eprintln!("loading {size} entities ({shape}) and backing them up ...");
        }
        load_shape(&client, shape, size, TABLE).await?;
        let backup = Tablevault::new(&azurite)?
            .run(&[
                "backup",
                "--tables",
                TABLE,
                "--workers",
                "4",
                "--compression",
                &opts.compression,
                "--container",
                CONTAINER,
            ])
            .await?;
        let backup_id = backup["backup_id"]
            .as_str()
            .context("the backup report has no id")?
            .to_string();
        let mut rounds = Vec::new();
        for round in 0..opts.repeat.max(1) {
            // The backup stays in the Blob service; tables start empty.
            fresh_tables(&mut azurite).await?;
            let started = Instant::now();
            load_shape(&client, shape, size, &format!("Ceiling{round}")).await?;
            let ceiling = size as f64 / started.elapsed().as_secs_f64();
            if !opts.json {
                eprintln!(
                    "  round {}: batch-insert ceiling {ceiling:.0} entities/s",
                    round + 1
                );
            }
            let mut runs = Vec::new();
            for (w, verify) in combos(opts) {
                fresh_tables(&mut azurite).await?;
                let rename = format!("{TABLE}={TABLE}R{w}w{round}{}", u8::from(verify));
                let workers = w.to_string();
                let mut args = vec![
                    "restore",
                    &backup_id,
                    "--container",
                    CONTAINER,
                    "--rename",
                    &rename,
                    "--workers",
                    &workers,
                ];
                if !verify {
                    args.push("--no-verify");
                }
                let report = Tablevault::new(&azurite)?.run(&args).await?;
                let child = ChildRun::from_report(&report, "written");
                let run = RestoreRun {
                    workers: w,
                    verify,
                    entities: child.entities,
                    seconds: child.seconds,
                    entities_per_second: child.rate(),
                    fraction_of_ceiling: child.rate() / ceiling,
                    peak_rss_bytes: child.peak_rss_bytes,
                };
                if !opts.json {
                    eprintln!(
                        "    restore, {w} worker(s), verify {verify}: {:.0} entities/s ({:.0}% of ceiling), peak RSS {}",
                        run.entities_per_second,
                        run.fraction_of_ceiling * 100.0,
                        human_bytes(run.peak_rss_bytes)
                    );
                }
                runs.push(run);
            }
            rounds.push((ceiling, runs));
        }
        let restores = combos(opts)
            .into_iter()
            .enumerate()
            .map(|(i, (w, verify))| RestoreSummary {
                workers: w,
                verify,
                entities_per_second: column(&rounds, i, |r: &RestoreRun| r.entities_per_second),
                fraction_of_ceiling: column(&rounds, i, |r: &RestoreRun| r.fraction_of_ceiling),
                peak_rss_bytes: column_max(&rounds, i, |r: &RestoreRun| r.peak_rss_bytes),
            })
            .collect();
        results.push(RestoreSizeResult {
            entities: size,
            shape: shape.clone(),
            ceiling_entities_per_second: median(rounds.iter().map(|(c, _)| *c).collect()),
            restores,
            rounds,
        });
    }
    if opts.json {
        tablevault_cli::output::print_json(&results);
        return Ok(());
    }
    println!(
        "{:>9}  {:>13}  {:>7}  {:>6}  {:>12}  {:>8}  {:>10}",
        "entities", "shape", "workers", "verify", "entities/s", "ceiling", "peak RSS"
    );
    for r in &results {
        println!(
            "{:>9}  {:>13}  {:>7}  {:>6}  {:>12.0}  {:>8}  {:>10}",
            r.entities, r.shape, "batches", "-", r.ceiling_entities_per_second, "100%", "-"
        );
        for s in &r.restores {
            println!(
                "{:>9}  {:>13}  {:>7}  {:>6}  {:>12.0}  {:>7.0}%  {:>10}",
                r.entities,
                r.shape,
                s.workers,
                if s.verify { "on" } else { "off" },
                s.entities_per_second,
                s.fraction_of_ceiling * 100.0,
                human_bytes(s.peak_rss_bytes)
            );
        }
    }
    println!("(medians over the rounds; each round's rate is divided by that round's ceiling)");
    Ok(())
}
