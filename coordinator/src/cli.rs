//! The `tablevault` command line: argument definitions and dispatch to the library. Each
//! command prints a human summary, or one JSON object with `--json`, and exits with a code
//! from [`crate::exit::ExitCode`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use tablevault_common::ClientOptions;
use tablevault_common::format::{Compression, DEFAULT_BLOCK_BYTES};
use tablevault_common::job::{DEFAULT_CONTAINER, DEFAULT_QUEUE, RestoreMode};
use tablevault_worker::AccountSet;
use tablevault_worker::runtime::{LogFormat, init_logging, resolve_account, shutdown_on_signal};

use crate::backup::{BackupRequest, Target, WatchOptions};
use crate::exit::{CmdResult, ExitCode, Failure};

/// Backup and restore for Azure Table Storage, at any scale.
///
/// A coordinator splits each table into key ranges and puts one task per range on a
/// queue; workers (in this process with --workers, or `tablevault-worker` daemons on any
/// number of machines) claim the tasks and write the backup to block blobs. All state
/// lives in the backup container, so an interrupted job can be resumed with
/// `tablevault status <ID> --wait`.
///
/// Connection strings can be given as options or in the environment (TABLEVAULT_SOURCE,
/// TABLEVAULT_BACKUP; AZURE_STORAGE_CONNECTION_STRING is the fallback for all). Prefer
/// the environment: command lines are visible to other users of the machine.
///
/// Exit codes: 0 success, 1 failure (may succeed if retried), 2 usage or configuration
/// error, 3 incomplete (poisoned tasks), 4 verification mismatch, 130 interrupted.
#[derive(Parser, Debug)]
#[command(name = "tablevault", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More log output on stderr (-v: info, -vv: debug). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Back up tables: plan ranges, enqueue tasks, run or watch workers, write the manifest.
    Backup(BackupArgs),
    /// Show a backup's state; with --wait, take it over and see it to the end.
    Status(StatusArgs),
    /// List the backups in the container.
    List(ListArgs),
    /// Restore tables from a complete backup: into the original tables, renamed tables,
    /// or another account.
    Restore(RestoreArgs),
    /// Check a backup block by block; with --against, compare it with live tables.
    Verify(VerifyArgs),
    /// Run the whole flow on a local Azurite emulator that it installs and starts itself.
    Demo(DemoArgs),
}

/// Where backups live.
#[derive(Args, Debug, Clone)]
struct StoreArgs {
    /// Connection string of the account holding backups and the task queue.
    #[arg(
        long,
        env = "TABLEVAULT_BACKUP",
        hide_env_values = true,
        value_name = "CONN"
    )]
    backup: Option<String>,
    /// Container for backups.
    #[arg(long, env = "TABLEVAULT_CONTAINER", default_value = DEFAULT_CONTAINER)]
    container: String,
    /// Task queue (shared with `tablevault-worker` daemons).
    #[arg(long, env = "TABLEVAULT_QUEUE", default_value = DEFAULT_QUEUE)]
    queue: String,
}

impl StoreArgs {
    fn target(&self) -> CmdResult<Target> {
        Ok(Target {
            account: resolve_account(
                self.backup.as_deref(),
                "backup",
                "--backup",
                "TABLEVAULT_BACKUP",
            )?,
            container: self.container.clone(),
            queue: self.queue.clone(),
            client_options: ClientOptions::default(),
        })
    }
}

#[derive(Args, Debug)]
struct BackupArgs {
    /// Connection string of the account whose tables are backed up.
    #[arg(
        long,
        env = "TABLEVAULT_SOURCE",
        hide_env_values = true,
        value_name = "CONN"
    )]
    source: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
    /// Tables to back up (comma-separated). Default: every table in the source account.
    #[arg(long, value_delimiter = ',', value_name = "T1,T2")]
    tables: Option<Vec<String>>,
    /// PartitionKeys at which to split every table into ranges (comma-separated).
    /// Without split keys, ranges are discovered by probing each table.
    #[arg(long, value_delimiter = ',', value_name = "K1,K2")]
    split_keys: Vec<String>,
    /// A file of split keys, one per line (for keys containing commas).
    #[arg(long, value_name = "FILE")]
    split_keys_file: Option<PathBuf>,
    /// Ranges per table to aim for when discovering them [default: 2 per in-process
    /// worker, at least 8; 32 with --workers 0].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    ranges: Option<u32>,
    /// Workers to run in this process; 0 only plans and watches while
    /// `tablevault-worker` daemons elsewhere do the work.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(0..=1024))]
    workers: u16,
    /// Compression of each block.
    #[arg(long, default_value = "zstd", value_parser = parse_compression)]
    compression: Compression,
    /// Blocks per data blob (each block is one ranged read at restore).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..50_000))]
    blocks_per_blob: u32,
    /// Uncompressed bytes at which a block is sealed.
    #[arg(long, default_value_t = DEFAULT_BLOCK_BYTES as u64, value_parser = clap::value_parser!(u64).range(65_536..=100_000_000))]
    block_size: u64,
    /// Deliveries of a task before it is poisoned.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    max_attempts: u64,
    /// Seconds a claimed task stays hidden from other workers between extensions.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(5..=3600))]
    visibility_timeout: u64,
    /// Print one JSON object (and no progress bar).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// The backup id (see `tablevault list`).
    backup_id: String,
    #[command(flatten)]
    store: StoreArgs,
    /// Watch until the backup is complete (or cannot complete), finalizing it.
    #[arg(long)]
    wait: bool,
    /// Put poisoned tasks back on the queue (after fixing their cause).
    #[arg(long)]
    retry_poisoned: bool,
    /// With --wait: workers to run in this process.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1024))]
    workers: u16,
    /// Source account, for in-process workers.
    #[arg(
        long,
        env = "TABLEVAULT_SOURCE",
        hide_env_values = true,
        value_name = "CONN"
    )]
    source: Option<String>,
    /// Print one JSON object (and no progress bar).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct RestoreArgs {
    /// The backup id (see `tablevault list`).
    backup_id: String,
    #[command(flatten)]
    store: StoreArgs,
    /// Connection string of the account to restore into.
    #[arg(
        long,
        env = "TABLEVAULT_TARGET",
        hide_env_values = true,
        value_name = "CONN"
    )]
    target: Option<String>,
    /// Tables of the backup to restore (comma-separated). Default: all of them.
    #[arg(long, value_delimiter = ',', value_name = "T1,T2")]
    tables: Option<Vec<String>>,
    /// Restore tables under other names (comma-separated SOURCE=TARGET pairs).
    #[arg(long, value_delimiter = ',', value_name = "T1=T1restored")]
    rename: Vec<String>,
    /// How restored entities meet existing ones: upsert replaces them (safe to repeat),
    /// merge keeps their other properties, insert-skip leaves them alone, insert-fail
    /// reports those that differ as failures.
    #[arg(long, default_value = "upsert", value_parser = parse_mode)]
    mode: RestoreMode,
    /// Workers to run in this process; 0 only plans and watches while
    /// `tablevault-worker --target …` daemons do the work.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(0..=1024))]
    workers: u16,
    /// Blobs holding at most this many uncompressed bytes are restored by one task;
    /// larger blobs get one task per block.
    #[arg(long, default_value_t = crate::restore::DEFAULT_PER_BLOB_MAX_BYTES, hide = true)]
    per_blob_max_bytes: u64,
    /// Deliveries of a task before it is poisoned.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    max_attempts: u64,
    /// Print one JSON object (and no progress bar).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct VerifyArgs {
    /// The backup id (see `tablevault list`).
    backup_id: String,
    #[command(flatten)]
    store: StoreArgs,
    /// Compare the backup with the tables of this account (connection string).
    #[arg(
        long,
        env = "TABLEVAULT_AGAINST",
        hide_env_values = true,
        value_name = "CONN"
    )]
    against: Option<String>,
    /// Tables to check (comma-separated). Default: all of them.
    #[arg(long, value_delimiter = ',', value_name = "T1,T2")]
    tables: Option<Vec<String>>,
    /// With --against: compare backup table SOURCE with live table TARGET.
    #[arg(long, value_delimiter = ',', value_name = "T1=T1restored")]
    rename: Vec<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ListArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Entities in the sample table.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    entities: u64,
    /// In-process workers.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    workers: u16,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn parse_compression(s: &str) -> Result<Compression, String> {
    s.parse()
}

fn parse_mode(s: &str) -> Result<RestoreMode, String> {
    s.parse()
}

/// Parses the command line, runs the command, and returns the process exit code.
pub async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    init_logging(cli.log_format, level);
    let json = match &cli.command {
        Command::Backup(a) => a.json,
        Command::Status(a) => a.json,
        Command::List(a) => a.json,
        Command::Restore(a) => a.json,
        Command::Verify(a) => a.json,
        Command::Demo(a) => a.json,
    };
    let code = match dispatch(cli.command).await {
        Ok(code) => code,
        Err(f) => {
            if json {
                print_json(&serde_json::json!({ "error": f.message, "exit_code": f.code as i32 }));
            } else {
                eprintln!("error: {}", f.message);
            }
            f.code
        }
    };
    std::process::ExitCode::from(code as u8)
}

fn print_json<T: Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("reports serialize")
    );
}

async fn dispatch(command: Command) -> CmdResult<ExitCode> {
    match command {
        Command::Backup(a) => backup(a).await,
        Command::Status(a) => status(a).await,
        Command::List(a) => list(a).await,
        Command::Restore(a) => restore(a).await,
        Command::Verify(a) => verify(a).await,
        Command::Demo(a) => crate::demo::run(a.entities, a.workers as usize, a.json).await,
    }
}

fn report_exit(report: &crate::report::BackupReport, json: bool) -> ExitCode {
    if json {
        print_json(report);
    } else {
        report.print_human();
    }
    match report.status.as_str() {
        "complete" => ExitCode::Ok,
        "incomplete" => ExitCode::Incomplete,
        "interrupted" => ExitCode::Interrupted,
        _ => ExitCode::Ok,
    }
}

async fn backup(a: BackupArgs) -> CmdResult<ExitCode> {
    let source = resolve_account(
        a.source.as_deref(),
        "source",
        "--source",
        "TABLEVAULT_SOURCE",
    )?;
    let target = a.store.target()?;
    let mut split_keys = a.split_keys.clone();
    if let Some(file) = &a.split_keys_file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", file.display())))?;
        split_keys.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_string));
    }
    let mut req = BackupRequest::new(source);
    req.tables = a.tables.clone();
    req.split_keys = split_keys;
    req.ranges_per_table = a.ranges.map_or_else(
        || crate::backup::default_ranges(a.workers as usize),
        |r| r as usize,
    );
    req.compression = a.compression;
    req.blocks_per_blob = a.blocks_per_blob as usize;
    req.block_bytes = a.block_size as usize;
    req.max_attempts = a.max_attempts;
    let mut opts = WatchOptions::new(shutdown_on_signal());
    opts.workers = a.workers as usize;
    opts.visibility = Duration::from_secs(a.visibility_timeout);
    opts.quiet = a.json;
    let report = crate::backup::run_backup(&req, &target, opts).await?;
    Ok(report_exit(&report, a.json))
}

async fn status(a: StatusArgs) -> CmdResult<ExitCode> {
    let target = a.store.target()?;
    let mut opts = WatchOptions::new(shutdown_on_signal());
    opts.workers = a.workers as usize;
    opts.quiet = a.json;
    if a.workers > 0 {
        let source = resolve_account(
            a.source.as_deref(),
            "source",
            "--source",
            "TABLEVAULT_SOURCE",
        )?;
        opts.accounts = AccountSet::new(vec![source]);
    }
    let report =
        crate::backup::status(&target, &a.backup_id, a.wait, a.retry_poisoned, &opts).await?;
    Ok(report_exit(&report, a.json))
}

async fn restore(a: RestoreArgs) -> CmdResult<ExitCode> {
    let store = a.store.target()?;
    let target = resolve_account(
        a.target.as_deref(),
        "target",
        "--target",
        "TABLEVAULT_TARGET",
    )?;
    let mut req = crate::restore::RestoreRequest::new(&a.backup_id, target);
    req.tables = a.tables.clone();
    req.renames = crate::selection::parse_renames(&a.rename)?;
    req.mode = a.mode;
    req.per_blob_max_bytes = a.per_blob_max_bytes;
    req.max_attempts = a.max_attempts;
    let mut opts = WatchOptions::new(shutdown_on_signal());
    opts.workers = a.workers as usize;
    opts.quiet = a.json;
    let report = crate::restore::run_restore(&req, &store, opts).await?;
    if a.json {
        print_json(&report);
    } else {
        report.print_human();
    }
    Ok(match report.status.as_str() {
        "complete" => ExitCode::Ok,
        "interrupted" => ExitCode::Interrupted,
        _ => ExitCode::Incomplete,
    })
}

async fn verify(a: VerifyArgs) -> CmdResult<ExitCode> {
    let store = a.store.target()?;
    let against = match &a.against {
        Some(c) => Some(resolve_account(
            Some(c),
            "comparison",
            "--against",
            "TABLEVAULT_AGAINST",
        )?),
        None => None,
    };
    let req = crate::verify::VerifyRequest {
        backup_id: a.backup_id.clone(),
        tables: a.tables.clone(),
        renames: crate::selection::parse_renames(&a.rename)?,
        against,
    };
    let report = crate::verify::verify(&store.blobs()?, &req).await?;
    if a.json {
        print_json(&report);
    } else {
        report.print_human();
    }
    Ok(if report.status == "ok" {
        ExitCode::Ok
    } else {
        ExitCode::Mismatch
    })
}

async fn list(a: ListArgs) -> CmdResult<ExitCode> {
    let target = a.store.target()?;
    let entries = crate::listing::list(&target).await?;
    if a.json {
        print_json(&serde_json::json!({ "container": target.container, "backups": entries }));
    } else if entries.is_empty() {
        println!("no backups in container {:?}", target.container);
    } else {
        for e in &entries {
            println!(
                "{}  {:<11}  {}  {} table(s){}",
                e.backup_id,
                e.status,
                e.source_account,
                e.tables.len(),
                e.entities
                    .map(|n| format!(", {n} entities"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::Ok)
}
