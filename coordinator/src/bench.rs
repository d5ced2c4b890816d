//! The benchmark behind `tablevault-bench`: measures backup and restore throughput and
//! memory on the Azurite emulator against the emulator's own ceilings, measured by the
//! same harness.
//!
//! Azurite runs one process per service, so blob traffic does not queue behind table
//! work on one Node.js thread. The backup ceiling is the project's Table client scanning
//! the whole table sequentially (1000-entity pages); the restore ceiling is the same
//! client upserting the same entities as 100-entity batches, 8 in flight, into a fresh
//! table. Each restore measurement (ceiling included) starts on a freshly started Table
//! service, because the emulator's insert rate falls as its database grows. Each backup or restore runs as a child `tablevault … --json` process so its peak
//! RSS is its own.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use serde::Serialize;
use tablevault_common::emulator::Azurite;
use tablevault_common::table::{MAX_PAGE_SIZE, Query, TableClient};

use crate::exit::{CmdResult, ExitCode, Failure};

/// Benchmark settings.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Table sizes to measure.
    pub sizes: Vec<u64>,
    /// Worker counts to measure at each size.
    pub workers: Vec<usize>,
    /// Compression for the backups.
    pub compression: String,
    /// Rounds per size: each measures the ceiling again, then every worker count.
    pub repeat: usize,
    /// Print JSON.
    pub json: bool,
}

/// The median over the rounds of one measurement of run `i` (one worker count).
fn column<C, R>(rounds: &[(C, Vec<R>)], i: usize, f: impl Fn(&R) -> f64) -> f64 {
    median(rounds.iter().map(|(_, runs)| f(&runs[i])).collect())
}

/// The largest peak RSS over the rounds of run `i`.
fn column_max<C, R>(
    rounds: &[(C, Vec<R>)],
    i: usize,
    f: impl Fn(&R) -> Option<u64>,
) -> Option<u64> {
    rounds.iter().filter_map(|(_, runs)| f(&runs[i])).max()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The emulator's scan ceiling.
#[derive(Debug, Clone, Serialize)]
pub struct ScanResult {
    /// Entities scanned.
    pub entities: u64,
    /// Seconds.
    pub seconds: f64,
    /// Entities per second.
    pub entities_per_second: f64,
    /// Response MB (10^6 bytes) per second.
    pub mb_per_second: f64,
}

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

fn sibling_binary(name: &str) -> CmdResult<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| Failure::failed(e.to_string()))?;
    let path = exe.with_file_name(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(Failure::usage(format!(
            "{} not found next to {}; build it with `cargo build --release --bins`",
            path.display(),
            exe.display()
        )))
    }
}

/// Scans the whole table sequentially with the project's client.
pub async fn measure_scan(
    client: &TableClient,
    table: &str,
) -> tablevault_common::Result<ScanResult> {
    let started = Instant::now();
    let mut entities = 0u64;
    let mut bytes = 0u64;
    let query = Query {
        filter: None,
        top: Some(MAX_PAGE_SIZE),
    };
    let mut continuation = None;
    loop {
        let page = client
            .query_page(table, &query, continuation.as_ref())
            .await?;
        entities += page.entities.len() as u64;
        bytes += page.response_bytes as u64;
        match page.continuation {
            Some(c) => continuation = Some(c),
            None => break,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(ScanResult {
        entities,
        seconds,
        entities_per_second: entities as f64 / seconds,
        mb_per_second: bytes as f64 / 1e6 / seconds,
    })
}

/// What stays the same across the backup runs of one table size.
struct Runner<'a> {
    exe: &'a PathBuf,
    azurite: &'a Azurite,
    table: &'a str,
    compression: &'a str,
}

impl Runner<'_> {
    async fn run_json(&self, args: &[&str]) -> CmdResult<serde_json::Value> {
        let conn = self.azurite.connection_string();
        let out = tokio::process::Command::new(self.exe)
            .args(args)
            .env("TABLEVAULT_SOURCE", &conn)
            .env("TABLEVAULT_BACKUP", &conn)
            .env("TABLEVAULT_TARGET", &conn)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| Failure::failed(format!("cannot run {}: {e}", self.exe.display())))?;
        serde_json::from_slice(&out.stdout).map_err(|_| {
            Failure::failed(format!(
                "{} did not print a report: {}{}",
                args[0],
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        })
    }

    /// Takes the backup the restore runs read.
    async fn backup_id(&self) -> CmdResult<String> {
        let report = self
            .run_json(&[
                "backup",
                "--tables",
                self.table,
                "--workers",
                "4",
                "--compression",
                self.compression,
                "--container",
                "bench-restore",
                "--json",
            ])
            .await?;
        report["backup_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| Failure::failed(format!("backup failed: {report}")))
    }

    /// Runs `tablevault restore` into a fresh table in a child process.
    async fn restore(
        &self,
        backup_id: &str,
        workers: usize,
        round: usize,
        ceiling: f64,
    ) -> CmdResult<RestoreRun> {
        let rename = format!("{}={}R{workers}w{round}", self.table, self.table);
        let report = self
            .run_json(&[
                "restore",
                backup_id,
                "--container",
                "bench-restore",
                "--rename",
                &rename,
                "--workers",
                &workers.to_string(),
                "--json",
            ])
            .await?;
        if report["status"] != "complete" {
            return Err(Failure::failed(format!(
                "restore did not complete: {report}"
            )));
        }
        let entities = report["written"].as_u64().unwrap_or(0);
        let seconds = report["duration_seconds"].as_f64().unwrap_or(f64::NAN);
        let eps = entities as f64 / seconds;
        Ok(RestoreRun {
            workers,
            entities,
            seconds,
            entities_per_second: eps,
            fraction_of_ceiling: eps / ceiling,
            peak_rss_bytes: report["peak_rss_bytes"].as_u64(),
        })
    }

    /// Runs `tablevault backup` in a child process and reads its JSON report.
    async fn backup(
        &self,
        workers: usize,
        round: usize,
        scan: &ScanResult,
    ) -> CmdResult<BackupRun> {
        let (exe, table, compression) = (self.exe, self.table, self.compression);
        let scan_bytes_per_entity = scan.mb_per_second * 1e6 / scan.entities_per_second;
        let conn = self.azurite.connection_string();
        let out = tokio::process::Command::new(exe)
            .args([
                "backup",
                "--tables",
                table,
                "--workers",
                &workers.to_string(),
                "--compression",
                compression,
                "--container",
                &format!("bench-{workers}w-{round}"),
                "--queue",
                &format!("bench-{workers}w-{round}"),
                "--json",
            ])
            .env("TABLEVAULT_SOURCE", &conn)
            .env("TABLEVAULT_BACKUP", &conn)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| Failure::failed(format!("cannot run {}: {e}", exe.display())))?;
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|_| {
            Failure::failed(format!(
                "backup did not print a report: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        })?;
        if report["status"] != "complete" {
            return Err(Failure::failed(format!(
                "backup did not complete: {report}"
            )));
        }
        let entities = report["entities"].as_u64().unwrap_or(0);
        let seconds = report["duration_seconds"].as_f64().unwrap_or(f64::NAN);
        let eps = entities as f64 / seconds;
        Ok(BackupRun {
            workers,
            entities,
            seconds,
            entities_per_second: eps,
            source_mb_per_second: eps * scan_bytes_per_entity / 1e6,
            stored_mb_per_second: report["stored_bytes"].as_f64().unwrap_or(0.0) / 1e6 / seconds,
            fraction_of_ceiling: eps / scan.entities_per_second,
            peak_rss_bytes: report["peak_rss_bytes"].as_u64(),
        })
    }
}

/// Runs the backup benchmark.
pub async fn run_backup_bench(opts: &BenchOptions) -> CmdResult<ExitCode> {
    let exe = sibling_binary("tablevault")?;
    let mut results = Vec::new();
    for &size in &opts.sizes {
        let azurite = Azurite::start_split()
            .await
            .map_err(|e| Failure::failed(format!("cannot start the emulator: {e}")))?;
        let client = TableClient::new(&azurite.account())?;
        let table = "BenchTable";
        let partitions = (size / 500).clamp(1, 200);
        if !opts.json {
            eprintln!("loading {size} entities ({partitions} partitions) ...");
        }
        let t = Instant::now();
        crate::sample::load_sample(&client, table, size, partitions, 4).await?;
        let load_seconds = t.elapsed().as_secs_f64();
        let runner = Runner {
            exe: &exe,
            azurite: &azurite,
            table,
            compression: &opts.compression,
        };
        let mut rounds = Vec::new();
        for round in 0..opts.repeat.max(1) {
            let scan = measure_scan(&client, table).await?;
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
                let run = runner.backup(w, round, &scan).await?;
                if !opts.json {
                    eprintln!(
                        "    backup, {w} worker(s): {:.0} entities/s ({:.0}% of ceiling), peak RSS {}",
                        run.entities_per_second,
                        run.fraction_of_ceiling * 100.0,
                        run.peak_rss_bytes
                            .map_or("?".into(), |b| indicatif::HumanBytes(b).to_string())
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
        println!(
            "{}",
            serde_json::to_string_pretty(&results).expect("results serialize")
        );
    } else {
        print_table(&results);
    }
    Ok(ExitCode::Ok)
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
                b.peak_rss_bytes
                    .map_or("?".into(), |x| indicatif::HumanBytes(x).to_string())
            );
        }
    }
    println!("(medians over the rounds; each round's rate is divided by that round's ceiling)");
}

/// One restore run.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreRun {
    /// In-process workers.
    pub workers: usize,
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
    /// Median entities per second.
    pub entities_per_second: f64,
    /// Median of each round's rate over that round's ceiling.
    pub fraction_of_ceiling: f64,
    /// Largest peak RSS over the rounds.
    pub peak_rss_bytes: Option<u64>,
}

/// Results of the restore benchmark for one table size.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreSizeResult {
    /// Entities in the table.
    pub entities: u64,
    /// Median ceiling (entities/s) over the rounds.
    pub ceiling_entities_per_second: f64,
    /// Medians per worker count.
    pub restores: Vec<RestoreSummary>,
    /// Every measurement: the round's ceiling and its runs.
    pub rounds: Vec<(f64, Vec<RestoreRun>)>,
}

async fn fresh_tables(azurite: &mut Azurite) -> CmdResult<()> {
    azurite
        .restart_table()
        .await
        .map_err(|e| Failure::failed(format!("cannot restart the emulator's Table service: {e}")))
}

/// Runs the restore benchmark.
pub async fn run_restore_bench(opts: &BenchOptions) -> CmdResult<ExitCode> {
    let exe = sibling_binary("tablevault")?;
    let mut results = Vec::new();
    for &size in &opts.sizes {
        let mut azurite = Azurite::start_split()
            .await
            .map_err(|e| Failure::failed(format!("cannot start the emulator: {e}")))?;
        let client = TableClient::new(&azurite.account())?;
        let table = "BenchTable";
        let partitions = (size / 500).clamp(1, 200);
        if !opts.json {
            eprintln!("loading {size} entities ({partitions} partitions) and backing them up ...");
        }
        crate::sample::load_sample(&client, table, size, partitions, 4).await?;
        let backup_id = Runner {
            exe: &exe,
            azurite: &azurite,
            table,
            compression: &opts.compression,
        }
        .backup_id()
        .await?;
        let mut rounds = Vec::new();
        for round in 0..opts.repeat.max(1) {
            // Every measurement starts on an empty Table service: the emulator's insert
            // rate falls as its in-memory database grows. The backup stays in the Blob
            // service.
            fresh_tables(&mut azurite).await?;
            let started = Instant::now();
            crate::sample::load_sample(&client, &format!("Ceiling{round}"), size, partitions, 8)
                .await?;
            let ceiling = size as f64 / started.elapsed().as_secs_f64();
            if !opts.json {
                eprintln!(
                    "  round {}: batch-insert ceiling {ceiling:.0} entities/s",
                    round + 1
                );
            }
            let mut runs = Vec::new();
            for &w in &opts.workers {
                fresh_tables(&mut azurite).await?;
                let runner = Runner {
                    exe: &exe,
                    azurite: &azurite,
                    table,
                    compression: &opts.compression,
                };
                let run = runner.restore(&backup_id, w, round, ceiling).await?;
                if !opts.json {
                    eprintln!(
                        "    restore, {w} worker(s): {:.0} entities/s ({:.0}% of ceiling), peak RSS {}",
                        run.entities_per_second,
                        run.fraction_of_ceiling * 100.0,
                        run.peak_rss_bytes
                            .map_or("?".into(), |b| indicatif::HumanBytes(b).to_string())
                    );
                }
                runs.push(run);
            }
            rounds.push((ceiling, runs));
        }
        let restores = opts
            .workers
            .iter()
            .enumerate()
            .map(|(i, &w)| RestoreSummary {
                workers: w,
                entities_per_second: column(&rounds, i, |r: &RestoreRun| r.entities_per_second),
                fraction_of_ceiling: column(&rounds, i, |r: &RestoreRun| r.fraction_of_ceiling),
                peak_rss_bytes: column_max(&rounds, i, |r: &RestoreRun| r.peak_rss_bytes),
            })
            .collect();
        results.push(RestoreSizeResult {
            entities: size,
            ceiling_entities_per_second: median(rounds.iter().map(|(c, _)| *c).collect()),
            restores,
            rounds,
        });
    }
    if opts.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&results).expect("results serialize")
        );
    } else {
        println!(
            "{:>9}  {:>7}  {:>12}  {:>8}  {:>10}",
            "entities", "workers", "entities/s", "ceiling", "peak RSS"
        );
        for r in &results {
            println!(
                "{:>9}  {:>7}  {:>12.0}  {:>8}  {:>10}",
                r.entities, "batches", r.ceiling_entities_per_second, "100%", "-"
            );
            for s in &r.restores {
                println!(
                    "{:>9}  {:>7}  {:>12.0}  {:>7.0}%  {:>10}",
                    r.entities,
                    s.workers,
                    s.entities_per_second,
                    s.fraction_of_ceiling * 100.0,
                    s.peak_rss_bytes
                        .map_or("?".into(), |x| indicatif::HumanBytes(x).to_string())
                );
            }
        }
        println!("(medians over the rounds; each round's rate is divided by that round's ceiling)");
    }
    Ok(ExitCode::Ok)
}
