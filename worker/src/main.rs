//! `tablevault-worker`: the daemon deployed on many machines. It claims backup and restore
//! tasks from the queue in the backup account and runs them until stopped (Ctrl-C or
//! SIGTERM, after which tasks in flight give their messages back).

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tablevault_azure::StorageAccount;
use tablevault_azure::config::{AccountSetting, FALLBACK_ENV, fallback_configured};
use tablevault_core::protocol::{DEFAULT_QUEUE, DEFAULT_WORKER_CONCURRENCY};
use tablevault_worker::auth::AuthArgs;
use tablevault_worker::lease::{MAX_VISIBILITY_SECONDS, MIN_VISIBILITY_SECONDS};
use tablevault_worker::process::{BACKUP, SOURCE, TARGET};
use tablevault_worker::process::{
    LogFormat, init_logging, print_failure, shutdown_on_signal, tune_allocator,
};
use tablevault_worker::serve::serve;
use tablevault_worker::{AccountSet, Worker, WorkerConfig, WorkerStats};
use tokio_util::sync::CancellationToken;

/// Runs tablevault backup and restore tasks from the queue in the backup account.
///
/// Start as many as you like, anywhere: they share the queue, and each task is committed
/// exactly once however often it is delivered. Connection strings can come from the
/// environment instead of the command line (recommended: arguments are visible to other
/// users of the machine).
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Args {
    /// Connection string of the account holding the task queue and the backups.
    #[arg(
        long,
        env = "TABLEVAULT_BACKUP",
        hide_env_values = true,
        value_name = "CONN"
    )]
    backup: Option<String>,
    /// Connection string of an account to back up tables from (repeat for several).
    /// Falls back to AZURE_STORAGE_CONNECTION_STRING.
    #[arg(
        long,
        env = "TABLEVAULT_SOURCE",
        hide_env_values = true,
        value_name = "CONN"
    )]
    source: Vec<String>,
    /// Connection string of an account to restore tables into (repeat for several).
    /// Falls back to AZURE_STORAGE_CONNECTION_STRING.
    #[arg(
        long,
        env = "TABLEVAULT_TARGET",
        hide_env_values = true,
        value_name = "CONN"
    )]
    target: Vec<String>,
    /// Tasks to run at once. Each holds two pages of entities (at most 8 MiB of
    /// response each, however large the entities) and a block or two in memory: a few
    /// MiB with compressed blocks and entities of a few KB, up to about 30 MiB with
    /// large entities or with --compression none on the coordinator.
    #[arg(
        long,
        default_value_t = DEFAULT_WORKER_CONCURRENCY as u16,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    concurrency: u16,
    /// Task queue name (the coordinator's --queue). Separate queues let separate pools
    /// serve backups and restores with separate credentials.
    #[arg(long, env = "TABLEVAULT_QUEUE", default_value = DEFAULT_QUEUE)]
    queue: String,
    /// Seconds a claimed task stays invisible to other workers between extensions.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(MIN_VISIBILITY_SECONDS..=MAX_VISIBILITY_SECONDS))]
    visibility_timeout: u64,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(flatten)]
    auth: AuthArgs,
    /// Serve Prometheus metrics on /metrics, liveness on /healthz and readiness on
    /// /readyz at this address (for example 0.0.0.0:9464). Off by default.
    #[arg(long, env = "TABLEVAULT_METRICS_ADDR", value_name = "HOST:PORT")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Seconds tasks in flight may take to finish after SIGTERM or Ctrl-C; the worker
    /// claims nothing new meanwhile, then gives back what is left (another worker takes
    /// it over at once) and exits 0. Keep it below Kubernetes'
    /// terminationGracePeriodSeconds.
    #[arg(long, env = "TABLEVAULT_SHUTDOWN_GRACE", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    shutdown_grace: u64,
}

fn main() -> std::process::ExitCode {
    tune_allocator();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(async {
            let args = Args::parse();
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

async fn run(args: Args) -> anyhow::Result<()> {
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
