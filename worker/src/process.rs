//! Process plumbing shared by the `tablevault` and `tablevault-worker` binaries: logging,
//! shutdown signals and allocator tuning.

use std::io::Write as _;
use tablevault_azure::config::AccountSetting;
use tokio_util::sync::CancellationToken;

/// The account holding backups and the task queue, as both binaries name it.
pub const BACKUP: AccountSetting = AccountSetting {
    what: "backup",
    flag: "--backup",
    env: "TABLEVAULT_BACKUP",
};
/// The account tables are backed up from.
pub const SOURCE: AccountSetting = AccountSetting {
    what: "source",
    flag: "--source",
    env: "TABLEVAULT_SOURCE",
};
/// The account tables are restored into.
pub const TARGET: AccountSetting = AccountSetting {
    what: "target",
    flag: "--target",
    env: "TABLEVAULT_TARGET",
};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the tracing subscriber: `RUST_LOG` (default `default_level`) to stderr.
pub fn init_logging(format: LogFormat, default_level: &str) {
    use tracing_subscriber::EnvFilter;
    let _ = LOG_FORMAT.set(format);
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A log line that cannot be written is dropped: reported with `eprintln!` to
        // the same closed stderr (`tablevault … 2>&1 | head -1`), it panicked (exit 101).
        .log_internal_errors(false)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The log format [`init_logging`] installed.
static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// A line a command writes to stderr itself, in the log format: `prefix` and the
/// message, or with `--log-format json` one JSON object shaped like the log lines (at
/// `level`), so a collector that parses every line does not trip over one.
pub fn stderr_line(format: LogFormat, level: &str, prefix: &str, message: &str) -> String {
    match format {
        LogFormat::Text => format!("{prefix}{message}"),
        LogFormat::Json => serde_json::json!({
            "timestamp": tablevault_core::protocol::now_rfc3339(),
            "level": level,
            "fields": { "message": message },
        })
        .to_string(),
    }
}

/// Writes a command's failure to stderr in the installed log format ([`stderr_line`]:
/// `error: …`); a closed stderr is ignored (`eprintln!` panics).
pub fn print_failure(message: &str) {
    print_line("ERROR", "error: ", message);
}

/// Writes what a command is about to do to stderr, in the installed log format.
pub fn print_notice(message: &str) {
    print_line("INFO", "", message);
}

fn print_line(level: &str, prefix: &str, message: &str) {
    let format = LOG_FORMAT.get().copied().unwrap_or(LogFormat::Text);
    let _ = writeln!(
        std::io::stderr(),
        "{}",
        stderr_line(format, level, prefix, message)
    );
}

/// Makes glibc's allocator give memory back: buffers of 256 KiB and more (entity pages,
/// blocks, compression contexts) are mapped and unmapped instead of coming from heaps
/// that glibc grows and keeps, and two arenas serve all threads. Without this, glibc
/// raises its mmap threshold after the first large free and peak RSS creeps up with the
/// number of blocks written, not with the working set. Call before any thread starts.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator parameters; it is called at start-up, before
    // other threads exist, with documented parameter values.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Lets a closed standard output end the process quietly, with exit code 141 (what a
/// shell reports for a tool ended by SIGPIPE), as it ends other Unix tools
/// (`tablevault list --json | head -1`): the first print to a closed pipe made
/// `println!` panic with a backtrace (exit code 101). SIGPIPE itself stays ignored:
/// with its default action, a write to an HTTP connection the service had reset
/// (vectored writes send no `MSG_NOSIGNAL`) would kill the process instead of failing
/// one request that is retried.
pub fn end_quietly_on_closed_output() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("os error 32") {
            std::process::exit(CLOSED_OUTPUT_EXIT);
        }
        report(info);
    }));
}

/// Exit code after standard output was closed by its reader: 128 + SIGPIPE.
pub const CLOSED_OUTPUT_EXIT: i32 = 141;

/// A token cancelled on the first Ctrl-C or SIGTERM. A second one exits the process at
/// once with code 130 (what a job leaves behind is always resumable).
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        signal().await;
        tracing::info!("shutdown requested; press Ctrl-C again to exit at once");
        t.cancel();
        signal().await;
        let _ = writeln!(std::io::stderr(), "interrupted");
        std::process::exit(130);
    });
    token
}

async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `--log-format json`, the lines a command writes itself are JSON log lines
    /// too; as text, they read as before.
    #[test]
    fn lines_a_command_writes_keep_the_log_format() {
        let line = stderr_line(LogFormat::Json, "INFO", "", "restoring \"x\"");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["fields"]["message"], "restoring \"x\"");
        assert_eq!(
            stderr_line(LogFormat::Text, "ERROR", "error: ", "boom"),
            "error: boom"
        );
    }
}
