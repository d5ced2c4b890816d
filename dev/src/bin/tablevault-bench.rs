//! `tablevault-bench`: throughput and memory of tablevault on the Azurite emulator, next
//! to the emulator's own ceiling. Build with `cargo build --release --bins` first; see
//! the README's "Benchmarks" section. `simulate` needs no emulator: it models Azure's
//! published limits in virtual time (`tablevault_dev::sim`).

use clap::{Args, Parser, Subcommand};
use tablevault_core::protocol::DEFAULT_WORKER_CONCURRENCY;
use tablevault_dev::bench::{
    BenchOptions, PlanOptions, ShapeOptions, known_restore_shape, run_backup_bench, run_plan_bench,
    run_restore_bench, run_shape_bench,
};
use tablevault_dev::sim::{Plan, Policy, SimOptions};

/// Measures tablevault on a local Azurite (installed and started by the harness).
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// Backup entities/s, MB/s and peak RSS, with the emulator's scan rate as the ceiling.
    Backup(Common),
    /// Restore entities/s and peak RSS, with the emulator's batch-insert rate as the
    /// ceiling.
    Restore(RestoreBench),
    /// Backup speed by key shape (sequential, GUID, Zipf, one partition, two tenants,
    /// Cyrillic and emoji names, dates, hours, times as RowKeys, many small tables) next
    /// to a sequential
    /// single-connection scan of the same data.
    Shapes(Shapes),
    /// How long a repeat backup's plan takes for many large tables backed up in many
    /// ranges last time: from what that backup learned (`learned.json`) and from its
    /// commit records, side by side.
    Plan(PlanBench),
    /// Backup and restore against a model of Azure's published limits (2,000 entities/s
    /// per partition, 20,000/s per account, 503 beyond), in virtual time.
    Simulate(Simulate),
}

/// What the simulation takes.
#[derive(Args, Debug)]
struct Simulate {
    /// Entities in the table.
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    entities: u64,
    /// Partitions (default: one per 10,000 entities).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    partitions: Option<u32>,
    /// Worker counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64", value_parser = at_least_one)]
    workers: Vec<usize>,
    /// Policies (comma-separated): `product` (as built) and `paced` (prototype).
    #[arg(long, value_delimiter = ',', default_value = "product,paced")]
    policy: Vec<Policy>,
    /// Backup plans (comma-separated): `first` (one task per table, as the product
    /// plans a table's first backup), `repeat` (equal-count ranges from the last
    /// backup, as it plans the next ones for a fleet of daemons) and `probed`
    /// (`--ranges`: equal key spans).
    #[arg(long, value_delimiter = ',', default_value = "first,repeat")]
    plan: Vec<Plan>,
    /// Tasks each worker runs at once.
    #[arg(long, default_value_t = DEFAULT_WORKER_CONCURRENCY, value_parser = at_least_one)]
    tasks_per_worker: usize,
    /// Restore batches in flight per task.
    #[arg(long, default_value_t = 8, value_parser = at_least_one)]
    batches_in_flight: usize,
    /// Instead of the product's rule (split when the queue is empty), a backup task
    /// splits the middle of its remainder off after reading this many entities.
    #[arg(long)]
    split_after: Option<u64>,
    /// Have the service send this `Retry-After` (ms) with every 503 (Azure: none known).
    #[arg(long)]
    retry_after_ms: Option<u64>,
    /// Have other clients (production) use this share of the account's rate throughout
    /// (0.3: the backup or restore gets 70% of it).
    #[arg(long, default_value_t = 0.0, value_parser = share_below_one)]
    production_load: f64,
    /// Hold the fleet to this many entities per second, as the product's `--max-rate`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_rate: Option<u32>,
    /// Table sizes at which to measure peak RSS (comma-separated; 0 to skip).
    #[arg(long, value_delimiter = ',', default_value = "100000,1000000,10000000")]
    rss_sizes: Vec<u64>,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl From<Simulate> for SimOptions {
    fn from(s: Simulate) -> Self {
        SimOptions {
            entities: s.entities,
            partitions: s.partitions,
            workers: s.workers,
            policies: s.policy,
            plans: s.plan,
            tasks_per_worker: s.tasks_per_worker,
            batches_in_flight: s.batches_in_flight,
            split_after: s.split_after,
            retry_after: s.retry_after_ms.map(std::time::Duration::from_millis),
            production_load: s.production_load,
            max_rate: s.max_rate,
            rss_sizes: s.rss_sizes.into_iter().filter(|&n| n > 0).collect(),
            seed: s.seed,
            json: s.json,
        }
    }
}

/// What both benchmarks take.
#[derive(Args, Debug)]
struct Common {
    /// Table sizes (comma-separated), each loaded into a fresh emulator.
    #[arg(long, value_delimiter = ',', default_value = "50000", value_parser = clap::value_parser!(u64).range(1..))]
    entities: Vec<u64>,
    /// Worker counts (comma-separated) to measure at each size.
    #[arg(long, value_delimiter = ',', default_value = "1,4", value_parser = at_least_one)]
    workers: Vec<usize>,
    /// Block compression of the backups (`zstd`, `gzip` or `none`).
    #[arg(long, default_value = "zstd", value_parser = known_compression)]
    compression: String,
    /// Rounds per size (each re-measures the ceiling); medians are reported.
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    repeat: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl From<Common> for BenchOptions {
    fn from(c: Common) -> Self {
        BenchOptions {
            sizes: c.entities,
            workers: c.workers,
            compression: c.compression,
            repeat: c.repeat,
            shapes: Vec::new(),
            json: c.json,
        }
    }
}

/// What the restore benchmark takes.
#[derive(Args, Debug)]
struct RestoreBench {
    #[command(flatten)]
    common: Common,
    /// Key shapes of the restored table (comma-separated): `sample` (500 entities a
    /// partition, the default) or the single-table shapes of `shapes` (`guid`: one
    /// entity a partition, so each batch holds one entity; `one-partition`; `zipf` ...).
    /// Each is loaded, backed up and measured in a fresh emulator, its ceiling written
    /// with batches of one partition as a restore must.
    #[arg(long, value_delimiter = ',', value_parser = known_restore_shape)]
    shapes: Vec<String>,
}

impl From<RestoreBench> for BenchOptions {
    fn from(r: RestoreBench) -> Self {
        BenchOptions {
            shapes: r.shapes,
            ..r.common.into()
        }
    }
}

#[derive(Args, Debug)]
struct Shapes {
    /// Entities per shape.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    entities: u64,
    /// In-process workers.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    workers: u32,
    /// Tables of the many-small-tables shape.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    small_tables: u64,
    /// Only these shapes (sequential, guid, zipf, one-partition, tenants, cyrillic,
    /// emoji, dates, hours, times, numbers, falling, guid-rows, small-tables).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Also back up with the old planning (8 probed ranges, no splitting) in the same run.
    #[arg(long)]
    compare: bool,
    /// Also time a plain export with Microsoft's Python SDK (`dev/sdk-export/export.py`),
    /// run by this Python, which needs `pip install -r dev/sdk-export/requirements.txt`.
    #[arg(long, value_name = "PYTHON")]
    sdk_python: Option<std::path::PathBuf>,
    /// Times each scan and backup this many times on the same loaded data and reports
    /// the median run (this machine's timings vary by a third between runs).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    runs: u32,
    /// Adds this network round trip (milliseconds) to every request the scan, the SDK
    /// export and the backups send, through a delay line in front of the emulator
    /// (loading goes direct). On loopback a request costs only the emulator's work, which
    /// favours one connection reading in sequence; a client in the storage account's
    /// region pays a few milliseconds per request, one in another region tens.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    round_trip_ms: u64,
    /// Backup format version the backups are written in (`tablevault backup --format`);
    /// the product's default when absent. 2 keeps small ranges inline in their commit
    /// records.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=2))]
    format: Option<u32>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// What the planning benchmark takes.
#[derive(Args, Debug)]
struct PlanBench {
    /// Tables in the account.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    tables: u32,
    /// Ranges each table was backed up in last time.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    ranges: u32,
    /// Entities per range last time.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    entities_per_range: u64,
    /// Adds this round trip (milliseconds) to every request the plans send, through a
    /// delay line (writing the last backup goes direct).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    round_trip_ms: u64,
    /// Plans timed each way (medians reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    runs: u32,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tablevault_worker::process::end_quietly_on_closed_output();
    let command = Cli::parse().command;
    // Ctrl-C ends the bench at once: a terminal's interrupt also stops the emulators
    // (one process group), and the bench went on retrying them for 90 s. Dropping the
    // run stops the emulators it started.
    let run = async move {
        match command {
            Bench::Backup(c) => run_backup_bench(&c.into()).await,
            Bench::Restore(c) => run_restore_bench(&c.into()).await,
            Bench::Shapes(s) => {
                run_shape_bench(&ShapeOptions {
                    entities: s.entities,
                    workers: s.workers as usize,
                    small_tables: s.small_tables,
                    only: s.only,
                    compare: s.compare,
                    sdk_python: s.sdk_python,
                    runs: s.runs as usize,
                    round_trip: std::time::Duration::from_millis(s.round_trip_ms),
                    format: s.format,
                    json: s.json,
                })
                .await
            }
            Bench::Plan(p) => {
                run_plan_bench(&PlanOptions {
                    tables: p.tables as usize,
                    ranges: p.ranges as usize,
                    entities_per_range: p.entities_per_range,
                    round_trip: std::time::Duration::from_millis(p.round_trip_ms),
                    runs: p.runs as usize,
                    json: p.json,
                })
                .await
            }
            // Each simulation builds its own paused runtime, which must not nest in this one.
            Bench::Simulate(s) => {
                let opts = SimOptions::from(s);
                tokio::task::spawn_blocking(move || tablevault_dev::sim::run(&opts))
                    .await
                    .unwrap_or_else(|e| Err(anyhow::anyhow!("simulation panicked: {e}")))
            }
        }
    };
    let result = tokio::select! {
        result = run => result,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("interrupted");
            return std::process::ExitCode::from(130);
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A count of at least one: zero workers, rounds or tasks measure nothing (a
/// simulated backup by no workers "completed"; a bench backup waited for workers that
/// were never started until the stall timeout).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A share of the account other clients use: from 0 up to, not including, 1.
fn share_below_one(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..1.0).contains(&f) => Ok(f),
        Ok(_) => Err("must be at least 0 and under 1".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A compression the backup knows, checked before any table is loaded.
fn known_compression(s: &str) -> Result<String, String> {
    s.parse::<tablevault_core::format::Compression>()
        .map(|_| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_refuse_nothing_to_measure() {
        for args in [
            ["--entities", "0"],
            ["--workers", "0"],
            ["--small-tables", "0"],
        ] {
            let parsed =
                Cli::try_parse_from(["tablevault-bench", "shapes"].into_iter().chain(args));
            assert!(parsed.is_err(), "{args:?} is refused");
        }
        assert!(Cli::try_parse_from(["tablevault-bench", "shapes", "--entities", "1"]).is_ok());
    }

    /// Regression: `simulate --entities 0` never ended, `backup --workers 0` waited
    /// five minutes for workers that were never started, `--repeat 0` ran one round
    /// and a misspelt compression was reported after the table was loaded.
    #[test]
    fn every_command_refuses_nothing_to_measure() {
        let refused: [&[&str]; 12] = [
            &["simulate", "--entities", "0"],
            &["simulate", "--workers", "4,0"],
            &["simulate", "--partitions", "0"],
            &["simulate", "--tasks-per-worker", "0"],
            &["simulate", "--batches-in-flight", "0"],
            &["simulate", "--production-load", "1.5"],
            &["backup", "--workers", "0"],
            &["backup", "--entities", "0"],
            &["restore", "--repeat", "0"],
            &["backup", "--compression", "lz4"],
            &["restore", "--shapes", "sample,guids"],
            &["restore", "--shapes", "small-tables"],
        ];
        for args in refused {
            let parsed = Cli::try_parse_from(
                std::iter::once("tablevault-bench").chain(args.iter().copied()),
            );
            assert!(parsed.is_err(), "{args:?} is refused");
        }
        for args in [
            &["simulate", "--production-load", "0.3"][..],
            &["backup", "--compression", "gzip"],
            &["restore", "--shapes", "sample,guid,one-partition"],
        ] {
            let parsed = Cli::try_parse_from(
                std::iter::once("tablevault-bench").chain(args.iter().copied()),
            );
            assert!(parsed.is_ok(), "{args:?}");
        }
    }
}
