//! The `tablevault` command line's arguments. Options that several commands share
//! (accounts, where backups live, `--json`) are defined once and flattened in.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use tablevault_azure::config::AccountSetting;
use tablevault_azure::{ClientOptions, StorageAccount};
use tablevault_coordinator::Location;
use tablevault_coordinator::retention::{Count, Span};
use tablevault_core::format::{Compression, DEFAULT_BLOCK_BYTES, DEFAULT_FORMAT, FORMAT_VERSION};
use tablevault_core::protocol::{DEFAULT_CONTAINER, DEFAULT_QUEUE, RestoreMode};
use tablevault_worker::auth::AuthArgs;
use tablevault_worker::lease::{MAX_VISIBILITY_SECONDS, MIN_VISIBILITY_SECONDS};
use tablevault_worker::process::{BACKUP, LogFormat};
use tokio_util::sync::CancellationToken;

/// Backup and restore for Azure Table Storage, at any scale.
///
/// A coordinator splits each table into key ranges and puts one task per range on a
/// queue; workers (in this process with --workers, or `tablevault-worker` daemons on any
/// number of machines) claim the tasks and write the backup to block blobs. All state
/// lives in the backup container, so an interrupted job can be resumed with
/// `tablevault status <ID> --wait`.
///
/// Connection strings can be given as options or in the environment (TABLEVAULT_SOURCE,
/// TABLEVAULT_BACKUP, TABLEVAULT_TARGET; AZURE_STORAGE_CONNECTION_STRING is the fallback
/// for all, then AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY). Prefer the environment:
/// command lines are visible to other users of the machine. With --auth-mode login
/// (Microsoft Entra ID) no key is needed: an account URL or name will do.
///
/// To see the whole flow on a local emulator first, run the demo from a source checkout:
/// `cargo run --release --bin tablevault-demo`.
///
/// Exit codes: 0 success, 1 failure (may succeed if retried; for prune and forget, some
/// backup could not be removed: run again to finish), 2 usage or configuration error
/// (also prune without a keep rule, and forget of a backup that must stay: the newest
/// complete one, one a live restore reads, one still in progress), 3 incomplete
/// (poisoned tasks), 4 verification mismatch, 130 interrupted, 141 output closed by its
/// reader (`... | head`).
#[derive(Parser, Debug)]
#[command(name = "tablevault", version, about, long_about)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
    /// More log output on stderr (-v: info, -vv: debug). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Authentication (`--auth-mode`, `--identity`).
    #[command(flatten)]
    pub auth: AuthArgs,
}

impl Cli {
    /// The default log level `-v` asks for.
    pub fn log_level(&self) -> &'static str {
        match self.verbose {
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
    }
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Back up tables: plan ranges, enqueue tasks, run or watch workers, write the manifest.
    Backup(BackupArgs),
    /// Show a backup's or a restore's state; with --wait, take a backup over and see it
    /// to the end.
    Status(StatusArgs),
    /// List the backups in the container and their restores.
    List(ListArgs),
    /// Restore tables from a complete backup: into the original tables, renamed tables,
    /// or another account. Prints the target first; asks before writing into tables that
    /// hold entities (--yes to skip); reads the result back and compares it with the
    /// backup (--no-verify to skip). --dry-run shows the plan and changes nothing.
    Restore(RestoreArgs),
    /// Carry on an interrupted restore (or backup) from what was committed.
    Resume(ResumeArgs),
    /// Cancel a restore: its queued tasks are dropped, what was written stays.
    Cancel(CancelArgs),
    /// Check a backup block by block; with --against, compare it with live tables.
    Verify(VerifyArgs),
    /// Remove backups a keep policy does not keep (restic's `forget` rules), abandoned
    /// unfinished backups and unfinished deletions. --dry-run shows what goes and why.
    ///
    /// Backups are grouped by source account and each group is pruned on its own. Each
    /// --keep-hourly/-daily/-weekly/-monthly/-yearly N keeps the newest backup of each of
    /// the N most recent hours, days, ISO weeks (Monday to Sunday), months or years that
    /// have a backup, computed in UTC; if there are fewer such buckets than N, the oldest
    /// backup is kept too. --keep-last N keeps the N newest. A backup kept by any rule
    /// stays, and the output names every rule that keeps it. Only complete backups count.
    ///
    /// Always kept: the newest complete backup of each account, and any backup a restore
    /// still reads (in progress or interrupted; cancel it to release the backup).
    /// Unfinished backups stay while they show activity (heartbeats, commit or poison
    /// records) within --abandoned-after, and are removed after that, with their partial
    /// data; unfinished deletions are finished.
    Prune(PruneArgs),
    /// Remove the named backups (never the newest complete one or one a restore reads).
    Forget(ForgetArgs),
}

impl Command {
    /// Whether output is JSON.
    pub fn json(&self) -> bool {
        match self {
            Command::Backup(a) => a.output.json,
            Command::Status(a) => a.output.json,
            Command::List(a) => a.output.json,
            Command::Restore(a) => a.output.json,
            Command::Resume(a) => a.output.json,
            Command::Cancel(a) => a.output.json,
            Command::Verify(a) => a.output.json,
            Command::Prune(a) => a.retention.output.json,
            Command::Forget(a) => a.retention.output.json,
        }
    }
}

/// `--json`.
#[derive(Args, Debug, Clone, Copy)]
pub struct OutputArgs {
    /// Print one JSON object (and no progress bar).
    #[arg(long)]
    pub json: bool,
}

/// How long to wait for a job.
#[derive(Args, Debug, Clone, Copy)]
pub struct WaitArgs {
    /// Seconds a job may go with no task finishing and no worker reporting progress
    /// before the command stops waiting and says nothing is working on it.
    #[arg(long, env = "TABLEVAULT_STALL_TIMEOUT", default_value_t = 300, value_parser = clap::value_parser!(u64).range(10..=86_400))]
    pub stall_timeout: u64,
}

/// Where backups live.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// Connection string of the account holding backups and the task queue.
    #[arg(
        long,
        env = "TABLEVAULT_BACKUP",
        hide_env_values = true,
        value_name = "CONN"
    )]
    pub backup: Option<String>,
    /// Container for backups.
    #[arg(long, env = "TABLEVAULT_CONTAINER", default_value = DEFAULT_CONTAINER)]
    pub container: String,
    /// Seconds one storage operation may take, retries included, before it fails naming
    /// the host (a dead or hung endpoint).
    #[arg(long, env = "TABLEVAULT_DEADLINE", default_value_t = 90, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub deadline: u64,
    /// Task queue (shared with `tablevault-worker` daemons).
    #[arg(long, env = "TABLEVAULT_QUEUE", default_value = DEFAULT_QUEUE)]
    pub queue: String,
}

/// The account verify compares with.
pub const AGAINST: AccountSetting = AccountSetting {
    what: "comparison",
    flag: "--against",
    env: "TABLEVAULT_AGAINST",
};

impl StoreArgs {
    /// The backup account, container and queue; every request made through it stops
    /// when `cancel` fires.
    pub fn location(
        &self,
        cancel: &CancellationToken,
    ) -> Result<Location, tablevault_azure::ConfigError> {
        Ok(Location {
            account: StorageAccount::resolve(self.backup.as_deref(), BACKUP)?,
            container: self.container.clone(),
            queue: self.queue.clone(),
            client_options: ClientOptions {
                cancel: Some(cancel.clone()),
                deadline: std::time::Duration::from_secs(self.deadline),
                ..ClientOptions::default()
            },
            backends: None,
        })
    }
}

/// `--source`.
#[derive(Args, Debug, Clone)]
pub struct SourceArgs {
    /// Connection string of the account whose tables are backed up.
    #[arg(
        long,
        env = "TABLEVAULT_SOURCE",
        hide_env_values = true,
        value_name = "CONN"
    )]
    pub source: Option<String>,
}

/// `--tables` and `--rename`.
#[derive(Args, Debug, Clone)]
pub struct SelectionArgs {
    /// Tables of the backup to work on (comma-separated). Default: all of them.
    #[arg(long, value_delimiter = ',', value_name = "T1,T2")]
    pub tables: Option<Vec<String>>,
    /// Tables under other names in the target (comma-separated SOURCE=TARGET pairs).
    #[arg(long, value_delimiter = ',', value_name = "T1=T1restored")]
    pub rename: Vec<String>,
}

/// `tablevault backup`.
#[derive(Args, Debug)]
pub struct BackupArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Tables to back up (comma-separated). Default: every table in the source account.
    #[arg(long, value_delimiter = ',', value_name = "T1,T2")]
    pub tables: Option<Vec<String>>,
    /// PartitionKeys at which to split every table into ranges (comma-separated).
    /// Without split keys or --ranges, a table the last backup of the account holds is
    /// cut into ranges of equal entity counts from that backup's block list, and any
    /// other table starts as one task; workers split large ranges as they scan.
    #[arg(long, value_delimiter = ',', value_name = "K1,K2")]
    pub split_keys: Vec<String>,
    /// A file of split keys, one per line (for keys containing commas).
    #[arg(long, value_name = "FILE")]
    pub split_keys_file: Option<PathBuf>,
    /// Discover this many ranges per table by probing it before the backup starts
    /// (instead of planning from the last backup). Not with split keys, which set the
    /// ranges themselves.
    #[arg(
        long,
        value_parser = clap::value_parser!(u32).range(1..=10_000),
        conflicts_with_all = ["split_keys", "split_keys_file"]
    )]
    pub ranges: Option<u32>,
    /// Never split a range while scanning it: each planned range is one task to the end
    /// (for reproducing a plan exactly; balance then depends on the plan alone).
    #[arg(long)]
    pub no_split: bool,
    /// Workers to run in this process; 0 only plans and watches while
    /// `tablevault-worker` daemons elsewhere do the work.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub workers: u16,
    /// Compression of each block.
    #[arg(long, default_value = "zstd", value_parser = parse_compression)]
    pub compression: Compression,
    /// Blocks per data blob (each block is one ranged read at restore).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..50_000))]
    pub blocks_per_blob: u32,
    /// Uncompressed bytes at which a block is sealed.
    #[arg(long, default_value_t = DEFAULT_BLOCK_BYTES as u64, value_parser = clap::value_parser!(u64).range(65_536..=100_000_000))]
    pub block_size: u64,
    /// Deliveries of a task before it is poisoned.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub max_attempts: u64,
    /// Backup format version to write. 1 (the default) writes every range to data blobs,
    /// readable by every tablevault version; 2 keeps a range that is one small block
    /// (a small table) in its commit record, one write instead of two per small table,
    /// which halves the blob writes of an account of many small tables, and needs a
    /// tablevault that reads format 2 to restore.
    #[arg(long, default_value_t = DEFAULT_FORMAT, value_parser = clap::value_parser!(u32).range(1..=FORMAT_VERSION as i64))]
    pub format: u32,
    /// Most entities per second all workers together read from the source account, to
    /// leave room for the application using it (Azure serves about 20,000 per account).
    /// Each live worker keeps to its share once the workers have counted each other from
    /// their heartbeats (within seconds of starting). Default: the account's target
    /// alone, which workers approach and back off from when the service refuses.
    #[arg(long, value_name = "ENTITIES_PER_S", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_rate: Option<u32>,
    /// Seconds a claimed task stays hidden from other workers between extensions.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(MIN_VISIBILITY_SECONDS..=MAX_VISIBILITY_SECONDS))]
    pub visibility_timeout: u64,
    #[command(flatten)]
    pub wait_for: WaitArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `tablevault status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// A backup id or a restore id (see `tablevault list`).
    pub backup_id: String,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Watch until the backup is complete (or cannot complete), finalizing it.
    #[arg(long)]
    pub wait: bool,
    /// Put poisoned tasks back on the queue (after fixing their cause).
    #[arg(long)]
    pub retry_poisoned: bool,
    /// With --wait: workers to run in this process.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub workers: u16,
    /// Source account, for in-process workers.
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub wait_for: WaitArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `tablevault restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup id (see `tablevault list`).
    pub backup_id: String,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Connection string of the account to restore into.
    #[arg(
        long,
        env = "TABLEVAULT_TARGET",
        hide_env_values = true,
        value_name = "CONN"
    )]
    pub target: Option<String>,
    #[command(flatten)]
    pub selection: SelectionArgs,
    /// How restored entities meet existing ones: upsert replaces them (safe to repeat),
    /// merge keeps their other properties, insert-skip leaves them alone, insert-fail
    /// reports those that differ as failures, replace makes each table exactly the backup
    /// (upsert, then delete every entity the backup does not hold; see --dry-run first).
    #[arg(long, default_value = "upsert", value_parser = parse_mode)]
    pub mode: RestoreMode,
    /// Show what the restore would do (target, tables, counts of entities that would be
    /// written, overwritten and deleted) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Write into target tables that already hold entities without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Do not read the target back and compare it with the backup after writing.
    #[arg(long)]
    pub no_verify: bool,
    /// Workers to run in this process; 0 only plans and watches while
    /// `tablevault-worker --target …` daemons do the work.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub workers: u16,
    /// Blobs holding at most this many uncompressed bytes are restored by one task;
    /// larger blobs get one task per block.
    #[arg(long, default_value_t = tablevault_coordinator::restore::DEFAULT_PER_BLOB_MAX_BYTES, hide = true)]
    pub per_blob_max_bytes: u64,
    /// Deliveries of a task before it is poisoned.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub max_attempts: u64,
    /// Most entities per second all workers together write to the target account, to
    /// leave room for the application using it (Azure serves about 20,000 per account).
    /// Each live worker keeps to its share once the workers have counted each other
    /// (within seconds of starting); the check after the restore is not held to it.
    /// Default: the account's target alone.
    #[arg(long, value_name = "ENTITIES_PER_S", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_rate: Option<u32>,
    #[command(flatten)]
    pub wait_for: WaitArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `tablevault resume`.
#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// The restore id (or a backup id: then the same as `status ID --wait`).
    pub id: String,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Connection string of the restore's target account (the backup's source account
    /// for a backup).
    #[arg(
        long,
        env = "TABLEVAULT_TARGET",
        hide_env_values = true,
        value_name = "CONN"
    )]
    pub target: Option<String>,
    /// For a backup: the source account, for in-process workers.
    #[command(flatten)]
    pub source: SourceArgs,
    /// Workers to run in this process; 0 only watches while daemons do the work.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub workers: u16,
    #[command(flatten)]
    pub wait_for: WaitArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `tablevault cancel`.
#[derive(Args, Debug)]
pub struct CancelArgs {
    /// The restore id (see `tablevault list`).
    pub restore_id: String,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `tablevault verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The backup id (see `tablevault list`).
    pub backup_id: String,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Compare the backup with the tables of this account (connection string).
    #[arg(
        long,
        env = "TABLEVAULT_AGAINST",
        hide_env_values = true,
        value_name = "CONN"
    )]
    pub against: Option<String>,
    #[command(flatten)]
    pub selection: SelectionArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `tablevault list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

fn parse_compression(s: &str) -> Result<Compression, String> {
    s.parse()
}

fn parse_mode(s: &str) -> Result<RestoreMode, String> {
    s.parse()
}

/// `tablevault prune`.
#[derive(Args, Debug)]
pub struct PruneArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Keep the N newest complete backups (`unlimited`: all).
    #[arg(long, value_name = "N")]
    pub keep_last: Option<Count>,
    /// Keep the newest backup of each of the last N hours with one (UTC).
    #[arg(long, value_name = "N")]
    pub keep_hourly: Option<Count>,
    /// Keep the newest backup of each of the last N days with one (UTC).
    #[arg(long, value_name = "N")]
    pub keep_daily: Option<Count>,
    /// Keep the newest backup of each of the last N ISO weeks with one (UTC).
    #[arg(long, value_name = "N")]
    pub keep_weekly: Option<Count>,
    /// Keep the newest backup of each of the last N months with one (UTC).
    #[arg(long, value_name = "N")]
    pub keep_monthly: Option<Count>,
    /// Keep the newest backup of each of the last N years with one (UTC).
    #[arg(long, value_name = "N")]
    pub keep_yearly: Option<Count>,
    /// Keep every complete backup started within DURATION before the newest one
    /// (e.g. 14d, 2w, 1y6m; y years, m months, w weeks, d days, h hours).
    #[arg(long, value_name = "DURATION")]
    pub keep_within: Option<Span>,
    #[command(flatten)]
    pub retention: RetentionArgs,
    /// Only backups of this source account (its name).
    #[arg(long, value_name = "NAME")]
    pub source_account: Option<String>,
}

/// `tablevault forget`.
#[derive(Args, Debug)]
pub struct ForgetArgs {
    /// The backups to remove (see `tablevault list`).
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub retention: RetentionArgs,
}

/// What `prune` and `forget` share.
#[derive(Args, Debug)]
pub struct RetentionArgs {
    /// An unfinished backup with no activity (heartbeat, commit or poison record) for
    /// this long is abandoned and may be removed (e.g. 7d, 36h).
    #[arg(long, default_value = "7d", value_name = "DURATION")]
    pub abandoned_after: Span,
    /// Show what would be removed and what stays, and why; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}
