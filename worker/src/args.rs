//! The `tablevault-worker` daemon's command line (in the library, so tests can check
//! deployment manifests against the very parser the binary uses).

use clap::Parser;
use tablevault_core::protocol::{DEFAULT_QUEUE, DEFAULT_WORKER_CONCURRENCY};

use crate::auth::AuthArgs;
use crate::lease::{MAX_VISIBILITY_SECONDS, MIN_VISIBILITY_SECONDS};
use crate::process::LogFormat;

/// Runs tablevault backup and restore tasks from the queue in the backup account.
///
/// Start as many as you like, anywhere: they share the queue, and each task is committed
/// exactly once however often it is delivered. Connection strings can come from the
/// environment instead of the command line (recommended: arguments are visible to other
/// users of the machine).
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
pub struct WorkerArgs {
    /// Connection string of the account holding the task queue and the backups.
    #[arg(
        long,
        env = "TABLEVAULT_BACKUP",
        hide_env_values = true,
        value_name = "CONN"
    )]
    pub backup: Option<String>,
    /// Connection string of an account to back up tables from (repeat for several).
    /// Falls back to AZURE_STORAGE_CONNECTION_STRING.
    #[arg(
        long,
        env = "TABLEVAULT_SOURCE",
        hide_env_values = true,
        value_name = "CONN"
    )]
    pub source: Vec<String>,
    /// Connection string of an account to restore tables into (repeat for several).
    /// Falls back to AZURE_STORAGE_CONNECTION_STRING.
    #[arg(
        long,
        env = "TABLEVAULT_TARGET",
        hide_env_values = true,
        value_name = "CONN"
    )]
    pub target: Vec<String>,
    /// Tasks to run at once. Each holds two pages of entities (at most 8 MiB of
    /// response each, however large the entities) and a block or two in memory: a few
    /// MiB with compressed blocks and entities of a few KB, up to about 30 MiB with
    /// large entities or with --compression none on the coordinator.
    #[arg(
        long,
        default_value_t = DEFAULT_WORKER_CONCURRENCY as u16,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub concurrency: u16,
    /// Task queue name (the coordinator's --queue). Separate queues let separate pools
    /// serve backups and restores with separate credentials.
    #[arg(long, env = "TABLEVAULT_QUEUE", default_value = DEFAULT_QUEUE)]
    pub queue: String,
    /// Seconds a claimed task stays invisible to other workers between extensions.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(MIN_VISIBILITY_SECONDS..=MAX_VISIBILITY_SECONDS))]
    pub visibility_timeout: u64,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub auth: AuthArgs,
    /// Serve Prometheus metrics on /metrics, liveness on /healthz and readiness on
    /// /readyz at this address (for example 0.0.0.0:9464). Off by default.
    #[arg(long, env = "TABLEVAULT_METRICS_ADDR", value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Seconds tasks in flight may take to finish after SIGTERM or Ctrl-C; the worker
    /// claims nothing new meanwhile, then gives back what is left (another worker takes
    /// it over at once) and exits 0. Keep it below Kubernetes'
    /// terminationGracePeriodSeconds.
    #[arg(long, env = "TABLEVAULT_SHUTDOWN_GRACE", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub shutdown_grace: u64,
}
