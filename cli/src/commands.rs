//! Running each command: resolve its accounts and options, call the control plane (with
//! in-process workers and a progress display when asked), and return a typed outcome.

use std::sync::Arc;
use std::time::Duration;

use tablevault_azure::StorageAccount;
use tablevault_coordinator::Location;
use tablevault_coordinator::backup::{BackupRequest, StatusOptions, default_ranges};
use tablevault_coordinator::listing::{ListEntry, RestoreListEntry};
use tablevault_coordinator::report::{BackupReport, RestoreReport};
use tablevault_coordinator::restore::{self, RestorePlan, RestoreRequest};
use tablevault_coordinator::retention::{ForgetRequest, KeepPolicy, PruneRequest, RetentionReport};
use tablevault_coordinator::selection::parse_renames;
use tablevault_coordinator::verify::{VerifyReport, VerifyRequest};
use tablevault_coordinator::{Error, Result, WatchOptions};
use tablevault_core::protocol::{AccountRef, RestoreMode};
use tablevault_worker::AccountSet;
use tablevault_worker::process::{SOURCE, TARGET};
use tokio_util::sync::CancellationToken;

use crate::args::{
    AGAINST, BackupArgs, Command, ForgetArgs, ListArgs, PruneArgs, RestoreArgs, ResumeArgs,
    SourceArgs, StatusArgs, VerifyArgs, WaitArgs,
};
use crate::local_workers::InProcessWorkers;
use crate::progress::ProgressBar;

/// What a command produced.
#[derive(Debug)]
pub enum Outcome {
    /// `backup` and `status`.
    Backup(BackupReport),
    /// `restore` and `resume`.
    Restore(RestoreReport),
    /// `cancel`: the restore as it stands once cancelled (the command did what was
    /// asked, whatever the restore had written).
    Cancelled(RestoreReport),
    /// `status` of a restore: where it stands, not how this command ended.
    RestoreStatus(RestoreReport),
    /// `restore --dry-run`.
    RestorePlan(RestorePlan),
    /// `verify`.
    Verify(VerifyReport),
    /// `prune` and `forget`.
    Retention(RetentionReport),
    /// `list`.
    List {
        /// The container listed.
        container: String,
        /// Its backups.
        backups: Vec<ListEntry>,
        /// Their restores.
        restores: Vec<RestoreListEntry>,
    },
}

/// Runs a command until it is done or `shutdown` fires (Ctrl-C, SIGTERM).
pub async fn run(command: Command, shutdown: &CancellationToken) -> Result<Outcome> {
    match command {
        Command::Backup(a) => backup(a, shutdown).await.map(Outcome::Backup),
        Command::Status(a) => status(a, shutdown).await,
        Command::List(a) => list(a, shutdown).await,
        Command::Restore(a) => restore(a, shutdown).await,
        Command::Resume(a) => resume(a, shutdown).await,
        Command::Cancel(a) => {
            let location = a.store.location(shutdown)?;
            tablevault_coordinator::restore::cancel(&location, &a.restore_id)
                .await
                .map(Outcome::Cancelled)
        }
        Command::Verify(a) => verify(a, shutdown).await.map(Outcome::Verify),
        Command::Prune(a) => prune(a, shutdown).await.map(Outcome::Retention),
        Command::Forget(a) => forget(a, shutdown).await.map(Outcome::Retention),
    }
}

/// Watch settings: `workers` in-process workers holding credentials for `accounts`, a
/// progress bar unless output is JSON, and `shutdown` to stop.
pub fn watch_options(
    what: &'static str,
    workers: usize,
    accounts: Vec<StorageAccount>,
    visibility: Duration,
    json: bool,
    shutdown: &CancellationToken,
) -> WatchOptions {
    let shutdown = shutdown.clone();
    let mut opts = WatchOptions::new(shutdown.clone());
    if workers > 0 {
        let mut w = InProcessWorkers::new(workers, AccountSet::new(accounts), shutdown);
        w.visibility = visibility;
        opts.workers = Some(Arc::new(w));
    }
    if !json {
        opts.progress = Some(Arc::new(ProgressBar::new(what)));
    }
    opts
}

async fn backup(a: BackupArgs, shutdown: &CancellationToken) -> Result<BackupReport> {
    let source = StorageAccount::resolve(a.source.source.as_deref(), SOURCE)?;
    let location = a.store.location(shutdown)?;
    let mut split_keys = a.split_keys.clone();
    if let Some(file) = &a.split_keys_file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::invalid(format!("cannot read {}: {e}", file.display())))?;
        split_keys.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_string));
    }
    let mut req = BackupRequest::new(source.clone());
    req.tables = a.tables.clone();
    req.split_keys = split_keys;
    req.ranges_per_table = a.ranges.map(|r| r as usize);
    req.max_tasks_per_table = default_ranges(a.workers as usize);
    req.fleet_known = a.workers > 0;
    req.dynamic_split = !a.no_split;
    req.compression = a.compression;
    req.blocks_per_blob = a.blocks_per_blob as usize;
    req.block_bytes = a.block_size as usize;
    req.max_rate = a.max_rate;
    req.max_attempts = a.max_attempts;
    req.format = a.format;
    let mut opts = watch_options(
        "backup",
        a.workers as usize,
        vec![source],
        Duration::from_secs(a.visibility_timeout),
        a.output.json,
        shutdown,
    );
    opts.stall_timeout = Duration::from_secs(a.wait_for.stall_timeout);
    tablevault_coordinator::backup::run_backup(&req, &location, &opts).await
}

/// Whether `id` names a backup (rather than a restore) in the location's container.
async fn is_backup(location: &Location, id: &str) -> Result<bool> {
    Ok(tablevault_core::protocol::is_valid_backup_id(id)
        && location.store()?.backup_job(id).await?.is_some())
}

async fn status(a: StatusArgs, shutdown: &CancellationToken) -> Result<Outcome> {
    let location = a.store.location(shutdown)?;
    if !is_backup(&location, &a.backup_id).await? {
        let store = location.store()?;
        let job = restore::find_restore(&store, &a.backup_id)
            .await
            .map_err(|e| match e {
                // Not found (or not an id): say both kinds were looked for. Anything else
                // (access denied, a dead endpoint) keeps its own message and exit code.
                Error::Invalid(_) => Error::invalid(format!(
                    "no backup or restore {:?} in container {:?} (see `tablevault list`)",
                    a.backup_id, location.container
                )),
                other => other,
            })?;
        if a.wait || a.retry_poisoned {
            return Err(Error::invalid(format!(
                "{} is a restore: carry it on with `tablevault resume {}`",
                a.backup_id, a.backup_id
            )));
        }
        return restore::status(&location, &job)
            .await
            .map(Outcome::RestoreStatus);
    }
    let what = StatusOptions {
        wait: a.wait,
        retry_poisoned: a.retry_poisoned,
    };
    let watch = BackupWatch {
        workers: a.workers,
        source: &a.source,
        wait_for: &a.wait_for,
        json: a.output.json,
    };
    backup_status(&location, &a.backup_id, what, watch, shutdown).await
}

/// How `status` and `resume` watch a backup.
struct BackupWatch<'a> {
    workers: u16,
    source: &'a SourceArgs,
    wait_for: &'a WaitArgs,
    json: bool,
}

/// A backup's status, taking it over when `what` says so, with in-process workers
/// holding the source account's credentials.
async fn backup_status(
    location: &Location,
    id: &str,
    what: StatusOptions,
    watch: BackupWatch<'_>,
    shutdown: &CancellationToken,
) -> Result<Outcome> {
    let accounts = if watch.workers > 0 {
        vec![StorageAccount::resolve(
            watch.source.source.as_deref(),
            SOURCE,
        )?]
    } else {
        Vec::new()
    };
    let mut opts = watch_options(
        "backup",
        watch.workers as usize,
        accounts,
        Duration::from_secs(60),
        watch.json,
        shutdown,
    );
    opts.stall_timeout = Duration::from_secs(watch.wait_for.stall_timeout);
    tablevault_coordinator::backup::status(location, id, what, &opts)
        .await
        .map(Outcome::Backup)
}

async fn restore(a: RestoreArgs, shutdown: &CancellationToken) -> Result<Outcome> {
    let location = a.store.location(shutdown)?;
    let target = StorageAccount::resolve(a.target.as_deref(), TARGET)?;
    let mut req = RestoreRequest::new(&a.backup_id, target.clone());
    req.tables = a.selection.tables.clone();
    req.renames = parse_renames(&a.selection.rename)?;
    req.mode = a.mode;
    req.per_blob_max_bytes = a.per_blob_max_bytes;
    req.max_attempts = a.max_attempts;
    req.verify = !a.no_verify;
    req.max_rate = a.max_rate;
    if a.dry_run {
        return restore::preview(&req, &location)
            .await
            .map(Outcome::RestorePlan);
    }
    let endpoint = AccountRef::of(&target)?;
    if !a.output.json {
        tablevault_worker::process::print_notice(&format!(
            "restoring backup {} into account {} ({}), mode {}",
            a.backup_id,
            endpoint.account,
            endpoint.table_endpoint,
            a.mode.as_str()
        ));
    }
    if !a.yes {
        let occupied = restore::non_empty_targets(&req, &location).await?;
        if !occupied.is_empty() {
            confirm(&occupied, &endpoint, a.mode)?;
        }
    }
    let mut opts = watch_options(
        "restore",
        a.workers as usize,
        vec![target],
        Duration::from_secs(60),
        a.output.json,
        shutdown,
    );
    opts.stall_timeout = Duration::from_secs(a.wait_for.stall_timeout);
    restore::run_restore(&req, &location, &opts)
        .await
        .map(Outcome::Restore)
}

/// Asks on the terminal before writing into tables that hold entities; refuses without a
/// terminal (scripts pass --yes).
fn confirm(tables: &[String], target: &AccountRef, mode: RestoreMode) -> Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    let effect = match mode {
        RestoreMode::Upsert => {
            "entities with the backup's keys are replaced by the backup's version"
        }
        RestoreMode::Merge => {
            "entities with the backup's keys get the backup's properties merged in"
        }
        RestoreMode::InsertSkip | RestoreMode::InsertFail => {
            "existing entities are left alone; missing ones are inserted"
        }
        RestoreMode::Replace => {
            "each table becomes exactly the backup: entities the backup does not hold are DELETED"
        }
    };
    let what = format!(
        "table(s) {} in account {} ({}) already hold entities; mode {}: {effect}",
        tables.join(", "),
        target.account,
        target.table_endpoint,
        mode.as_str()
    );
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Err(Error::invalid(format!(
            "{what}. Pass --yes to go ahead (see --dry-run for what would change)"
        )));
    }
    let _ = write!(std::io::stderr(), "{what}.\nRestore into them? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Error::invalid(format!("cannot read the answer: {e}")))?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        Err(Error::invalid("restore not confirmed; nothing was written"))
    }
}

async fn resume(a: ResumeArgs, shutdown: &CancellationToken) -> Result<Outcome> {
    let location = a.store.location(shutdown)?;
    if is_backup(&location, &a.id).await? {
        let what = StatusOptions {
            wait: true,
            retry_poisoned: false,
        };
        let watch = BackupWatch {
            workers: a.workers,
            source: &a.source,
            wait_for: &a.wait_for,
            json: a.output.json,
        };
        return backup_status(&location, &a.id, what, watch, shutdown).await;
    }
    let target = StorageAccount::resolve(a.target.as_deref(), TARGET)?;
    let mut opts = watch_options(
        "restore",
        a.workers as usize,
        vec![target.clone()],
        Duration::from_secs(60),
        a.output.json,
        shutdown,
    );
    opts.stall_timeout = Duration::from_secs(a.wait_for.stall_timeout);
    restore::resume(&location, &a.id, &target, &opts)
        .await
        .map(Outcome::Restore)
}

async fn verify(a: VerifyArgs, shutdown: &CancellationToken) -> Result<VerifyReport> {
    let location = a.store.location(shutdown)?;
    let against = match &a.against {
        Some(c) => Some(StorageAccount::resolve(Some(c), AGAINST)?),
        None => None,
    };
    let req = VerifyRequest {
        backup_id: a.backup_id.clone(),
        tables: a.selection.tables.clone(),
        renames: parse_renames(&a.selection.rename)?,
        against,
    };
    let bar = (!a.output.json).then(|| ProgressBar::new("verify"));
    let report = tablevault_coordinator::verify::verify_with_progress(
        &location,
        &req,
        bar.as_ref()
            .map(|b| b as &dyn tablevault_coordinator::Progress),
    )
    .await;
    if let Some(b) = &bar {
        tablevault_coordinator::Progress::finish(b);
    }
    report
}

async fn list(a: ListArgs, shutdown: &CancellationToken) -> Result<Outcome> {
    let location = a.store.location(shutdown)?;
    let store = location.store()?;
    let backups = tablevault_coordinator::listing::list(&store).await?;
    let restores = tablevault_coordinator::listing::list_restores(&store).await?;
    Ok(Outcome::List {
        container: location.container,
        backups,
        restores,
    })
}

async fn prune(a: PruneArgs, shutdown: &CancellationToken) -> Result<RetentionReport> {
    let store = a.store.location(shutdown)?.store()?;
    let req = PruneRequest {
        policy: KeepPolicy {
            last: a.keep_last.unwrap_or_default(),
            hourly: a.keep_hourly.unwrap_or_default(),
            daily: a.keep_daily.unwrap_or_default(),
            weekly: a.keep_weekly.unwrap_or_default(),
            monthly: a.keep_monthly.unwrap_or_default(),
            yearly: a.keep_yearly.unwrap_or_default(),
            within: a.keep_within,
        },
        abandoned_after: a.retention.abandoned_after,
        source_account: a.source_account,
        dry_run: a.retention.dry_run,
        now: tablevault_coordinator::retention::service_now(&store).await?,
    };
    tablevault_coordinator::retention::prune(&store, &req).await
}

async fn forget(a: ForgetArgs, shutdown: &CancellationToken) -> Result<RetentionReport> {
    let store = a.store.location(shutdown)?.store()?;
    let req = ForgetRequest {
        ids: a.ids,
        abandoned_after: a.retention.abandoned_after,
        dry_run: a.retention.dry_run,
        now: tablevault_coordinator::retention::service_now(&store).await?,
    };
    tablevault_coordinator::retention::forget(&store, &req).await
}
