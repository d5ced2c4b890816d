//! `tablevault-worker`: the daemon deployed on many machines. It claims backup and restore
//! tasks from the queue in the backup account and runs them until stopped (Ctrl-C or
//! SIGTERM, after which tasks in flight give their messages back).

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tablevault_azure::StorageAccount;
use tablevault_azure::config::{AccountSetting, FALLBACK_ENV, fallback_configured};
use tablevault_worker::args::WorkerArgs;
use tablevault_worker::process::{BACKUP, SOURCE, TARGET};
use tablevault_worker::process::{init_logging, print_failure, shutdown_on_signal, tune_allocator};
use tablevault_worker::serve::serve;
use tablevault_worker::{AccountSet, Worker, WorkerConfig, WorkerStats};
use tokio_util::sync::CancellationToken;

fn main() -> std::process::ExitCode {
    tune_allocator();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(async {
            let args = WorkerArgs::parse();
            init_logging(args.log_format, "info");
            match run(args).await {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    print_failure(&format!("{e:#}"));
                    std::process::ExitCode::from(1)
                }
            }
        })
}

/// The accounts of a repeatable option. Optional: a worker may serve only backups, or
/// only restores; a fallback that is set but malformed is still an error.
fn accounts(given: &[String], setting: AccountSetting) -> anyhow::Result<Vec<StorageAccount>> {
    if given.is_empty() {
        if !fallback_configured() {
            return Ok(Vec::new());
        }
        return Ok(vec![StorageAccount::resolve(None, setting)?]);
    }
    Ok(given
        .iter()
        .map(|s| StorageAccount::resolve(Some(s), setting))
        .collect::<Result<Vec<_>, _>>()?)
}

async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    args.auth.install()?;
    let backup = StorageAccount::resolve(args.backup.as_deref(), BACKUP)?;
    let sources = accounts(&args.source, SOURCE)?;
    let targets = accounts(&args.target, TARGET)?;
    if sources.is_empty() && targets.is_empty() {
        anyhow::bail!(
            "no accounts to work on: pass --source and/or --target (or set TABLEVAULT_SOURCE, TABLEVAULT_TARGET or {FALLBACK_ENV})"
        );
    }
    let mut config = WorkerConfig::new(backup, &args.queue);
    config.sources = AccountSet::new(sources);
    config.targets = AccountSet::new(targets);
    config.concurrency = args.concurrency as usize;
    config.visibility = Duration::from_secs(args.visibility_timeout);
    config.shutdown_grace = Duration::from_secs(args.shutdown_grace);
    let shutdown = shutdown_on_signal();
    // The endpoint outlives the worker loop so readiness reads "draining" meanwhile.
    let stop_serving = CancellationToken::new();
    let server = match args.metrics_addr {
        Some(addr) => Some(
            serve(
                addr,
                config.metrics.clone(),
                config.health.clone(),
                stop_serving.clone(),
            )
            .await
            .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?,
        ),
        None => None,
    };
    let worker = Worker::new(config, Arc::new(WorkerStats::default()))?;
    let outcome = worker.run(shutdown).await;
    stop_serving.cancel();
    if let Some((_, handle)) = server {
        let _ = handle.await;
    }
    outcome?;
    tracing::info!("worker stopped");
    Ok(())
}
