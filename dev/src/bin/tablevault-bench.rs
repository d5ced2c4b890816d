//! `tablevault-bench`: throughput and memory of tablevault on the Azurite emulator, next
//! to the emulator's own ceiling. Build with `cargo build --release --bins` first; see
//! the README's "Benchmarks" section.

use clap::{Args, Parser, Subcommand};
use tablevault_dev::bench::{BenchOptions, run_backup_bench, run_restore_bench};

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
    Restore(Common),
}

/// What both benchmarks take.
#[derive(Args, Debug)]
struct Common {
    /// Table sizes (comma-separated), each loaded into a fresh emulator.
    #[arg(long, value_delimiter = ',', default_value = "50000")]
    entities: Vec<u64>,
    /// Worker counts (comma-separated) to measure at each size.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    workers: Vec<usize>,
    /// Block compression of the backups.
    #[arg(long, default_value = "zstd")]
    compression: String,
    /// Rounds per size (each re-measures the ceiling); medians are reported.
    #[arg(long, default_value_t = 3)]
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
            json: c.json,
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Bench::Backup(c) => run_backup_bench(&c.into()).await,
        Bench::Restore(c) => run_restore_bench(&c.into()).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
