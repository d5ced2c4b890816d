//! `tablevault-bench`: throughput and memory of tablevault on the Azurite emulator, next
//! to the emulator's own ceiling. Build with `cargo build --release --bins` first; see
//! the README's "Benchmarks" section.

use clap::{Parser, Subcommand};
use tablevault_coordinator::bench::{BenchOptions, run_backup_bench, run_restore_bench};

/// Measures tablevault on a local Azurite (installed and started by the harness).
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Args {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// Backup entities/s, MB/s and peak RSS, with the emulator's scan rate as the ceiling.
    Backup {
        /// Table sizes (comma-separated), each loaded into a fresh emulator.
        #[arg(long, value_delimiter = ',', default_value = "50000")]
        entities: Vec<u64>,
        /// Worker counts (comma-separated) to measure at each size.
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        workers: Vec<usize>,
        /// Block compression.
        #[arg(long, default_value = "zstd")]
        compression: String,
        /// Rounds per size (each re-measures the ceiling); medians are reported.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Restore entities/s and peak RSS, with the emulator's batch-insert rate as the
    /// ceiling.
    Restore {
        /// Table sizes (comma-separated), each loaded into a fresh emulator.
        #[arg(long, value_delimiter = ',', default_value = "50000")]
        entities: Vec<u64>,
        /// Worker counts (comma-separated) to measure at each size.
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        workers: Vec<usize>,
        /// Block compression of the backup restored from.
        #[arg(long, default_value = "zstd")]
        compression: String,
        /// Rounds per size (each re-measures the ceiling); medians are reported.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Bench::Backup {
            entities,
            workers,
            compression,
            repeat,
            json,
        } => {
            run_backup_bench(&BenchOptions {
                sizes: entities,
                workers,
                compression,
                repeat,
                json,
            })
            .await
        }
        Bench::Restore {
            entities,
            workers,
            compression,
            repeat,
            json,
        } => {
            run_restore_bench(&BenchOptions {
                sizes: entities,
                workers,
                compression,
                repeat,
                json,
            })
            .await
        }
    };
    match result {
        Ok(code) => std::process::ExitCode::from(code as u8),
        Err(f) => {
            eprintln!("error: {}", f.message);
            std::process::ExitCode::from(f.code as u8)
        }
    }
}
