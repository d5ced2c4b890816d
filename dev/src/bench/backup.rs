//! Backup throughput: for each table size, a fresh emulator and sample table; each round
//! measures the ceiling (the project's Table client scanning the whole table in
//! 1000-entity pages) and then a backup per worker count.

use std::time::Instant;

use serde::Serialize;
use tablevault_azure::table::TableClient;

use super::{
    BenchOptions, ChildRun, ScanResult, Tablevault, column, column_max, human_bytes, measure_scan,
    median,
};
use crate::emulator::Azurite;
use crate::sample::load_sample;

/// One backup run.
#[derive(Debug, Clone, Serialize)]
pub struct BackupRun {
    /// In-process workers.
    pub workers: usize,
    /// Entities backed up.
    pub entities: u64,
    /// Wall seconds of the whole command (planning, enqueueing, finalizing included).
    pub seconds: f64,
    /// Entities per second.
    pub entities_per_second: f64,
    /// Source MB read per second (same byte measure as the ceiling).
    pub source_mb_per_second: f64,
    /// Stored MB written per second.
    pub stored_mb_per_second: f64,
    /// Share of the scan ceiling.
    pub fraction_of_ceiling: f64,
    /// Peak RSS of the backup process.
    pub peak_rss_bytes: Option<u64>,
}

/// Medians over the rounds for one worker count.
#[derive(Debug, Clone, Serialize)]
pub struct BackupSummary {
    /// In-process workers.
    pub workers: usize,
    /// Median entities per second.
    pub entities_per_second: f64,
    /// Median source MB per second.
    pub source_mb_per_second: f64,
    /// Median stored MB per second.
    pub stored_mb_per_second: f64,
    /// Median of each round's rate over that round's ceiling.
    pub fraction_of_ceiling: f64,
    /// Largest peak RSS over the rounds.
    pub peak_rss_bytes: Option<u64>,
}

/// Results for one table size.
#[derive(Debug, Clone, Serialize)]
pub struct SizeResult {
    /// Entities in the table.
    pub entities: u64,
    /// Seconds to load it.
    pub load_seconds: f64,
    /// Median ceiling (entities/s) over the rounds.
    pub scan_entities_per_second: f64,
    /// Median ceiling (MB/s) over the rounds.
    pub scan_mb_per_second: f64,
    /// Medians per worker count.
    pub backups: Vec<BackupSummary>,
    /// Every measurement.
    pub rounds: Vec<(ScanResult, Vec<BackupRun>)>,
}

const TABLE: &str = "BenchTable";

async fn backup_run(
    tv: &Tablevault<'_>,
    opts: &BenchOptions,
    workers: usize,
    round: usize,
    scan: &ScanResult,
) -> anyhow::Result<BackupRun> {
    let name = format!("bench-{workers}w-{round}");
    let report = tv
        .run(&[
            "backup",
            "--tables",
            TABLE,
            "--workers",
            &workers.to_string(),
            "--compression",
            &opts.compression,
            "--container",
            &name,
            "--queue",
            &name,
        ])
        .await?;
    let run = ChildRun::from_report(&report, "entities");
    let eps = run.rate();
    let scan_bytes_per_entity = scan.mb_per_second * 1e6 / scan.entities_per_second;
    Ok(BackupRun {
        workers,
        entities: run.entities,
        seconds: run.seconds,
        entities_per_second: eps,
        source_mb_per_second: eps * scan_bytes_per_entity / 1e6,
        stored_mb_per_second: report["stored_bytes"].as_f64().unwrap_or(0.0) / 1e6 / run.seconds,
        fraction_of_ceiling: eps / scan.entities_per_second,
        peak_rss_bytes: run.peak_rss_bytes,
    })
}

/// Runs the backup benchmark and prints its table (or JSON).
pub async fn run_backup_bench(opts: &BenchOptions) -> anyhow::Result<()> {
    let mut results = Vec::new();
    for &size in &opts.sizes {
        let azurite = Azurite::start_split().await?;
        let tv = Tablevault::new(&azurite)?;
        let client = TableClient::new(&azurite.account())?;
        let partitions = (size / 500).clamp(1, 200);
        if !opts.json {
            eprintln!("loading {size} entities ({partitions} partitions) ...");
        }
        let t = Instant::now();
        load_sample(&client, TABLE, size, partitions, 4).await?;
        let load_seconds = t.elapsed().as_secs_f64();
        let mut rounds = Vec::new();
        for round in 0..opts.repeat.max(1) {
            let scan = measure_scan(&client, TABLE).await?;
            if !opts.json {
                eprintln!(
                    "  round {}: scan ceiling {:.0} entities/s, {:.2} MB/s",
                    round + 1,
                    scan.entities_per_second,
                    scan.mb_per_second
                );
            }
            let mut runs = Vec::new();
            for &w in &opts.workers {
                let run = backup_run(&tv, opts, w, round, &scan).await?;
                if !opts.json {
                    eprintln!(
                        "    backup, {w} worker(s): {:.0} entities/s ({:.0}% of ceiling), peak RSS {}",
                        run.entities_per_second,
                        run.fraction_of_ceiling * 100.0,
                        human_bytes(run.peak_rss_bytes)
                    );
                }
                runs.push(run);
            }
            rounds.push((scan, runs));
        }
        let backups = opts
            .workers
            .iter()
            .enumerate()
            .map(|(i, &w)| BackupSummary {
                workers: w,
                entities_per_second: column(&rounds, i, |r: &BackupRun| r.entities_per_second),
                source_mb_per_second: column(&rounds, i, |r: &BackupRun| r.source_mb_per_second),
                stored_mb_per_second: column(&rounds, i, |r: &BackupRun| r.stored_mb_per_second),
                fraction_of_ceiling: column(&rounds, i, |r: &BackupRun| r.fraction_of_ceiling),
                peak_rss_bytes: column_max(&rounds, i, |r: &BackupRun| r.peak_rss_bytes),
            })
            .collect();
        results.push(SizeResult {
            entities: size,
            load_seconds,
            scan_entities_per_second: median(
                rounds.iter().map(|(s, _)| s.entities_per_second).collect(),
            ),
            scan_mb_per_second: median(rounds.iter().map(|(s, _)| s.mb_per_second).collect()),
            backups,
            rounds,
        });
    }
    if opts.json {
        tablevault_cli::output::print_json(&results);
    } else {
        print_table(&results);
    }
    Ok(())
}

fn print_table(results: &[SizeResult]) {
    println!(
        "{:>9}  {:>7}  {:>12}  {:>9}  {:>9}  {:>8}  {:>10}",
        "entities", "workers", "entities/s", "src MB/s", "out MB/s", "ceiling", "peak RSS"
    );
    for r in results {
        println!(
            "{:>9}  {:>7}  {:>12.0}  {:>9.2}  {:>9}  {:>8}  {:>10}",
            r.entities, "scan", r.scan_entities_per_second, r.scan_mb_per_second, "-", "100%", "-"
        );
        for b in &r.backups {
            println!(
                "{:>9}  {:>7}  {:>12.0}  {:>9.2}  {:>9.2}  {:>7.0}%  {:>10}",
                r.entities,
                b.workers,
                b.entities_per_second,
                b.source_mb_per_second,
                b.stored_mb_per_second,
                b.fraction_of_ceiling * 100.0,
                human_bytes(b.peak_rss_bytes)
            );
        }
    }
    println!("(medians over the rounds; each round's rate is divided by that round's ceiling)");
}
