//! The benchmark behind `tablevault-bench`: backup and restore throughput and memory on
//! the Azurite emulator, next to the emulator's own ceilings measured in the same run.
//!
//! Azurite runs one process per service, so blob traffic does not queue behind table
//! work on one Node.js thread. Each backup or restore runs as a child `tablevault … --json`
//! process (built next to this binary) so its peak RSS is its own.

mod backup;
mod plan;
mod restore;
mod shapes;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, bail};
use serde::Serialize;
use tablevault_azure::table::{Query, TableClient};

use crate::emulator::Azurite;

pub use backup::run_backup_bench;
pub use plan::{PlanOptions, run_plan_bench};
pub use restore::{known_restore_shape, run_restore_bench};
pub use shapes::{ShapeOptions, run_shape_bench};

/// Benchmark settings.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Table sizes to measure.
    pub sizes: Vec<u64>,
    /// Worker counts to measure at each size.
    pub workers: Vec<usize>,
    /// Compression for the backups.
    pub compression: String,
    /// Rounds per size: each measures the ceiling again, then every worker count.
    pub repeat: usize,
    /// Key shapes of the restore benchmark's table (none: its sample table).
    pub shapes: Vec<String>,
    /// Print JSON.
    pub json: bool,
}

/// The median of some measurements (NaN for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median over the rounds of one measurement of run `i` (one worker count).
fn column<C, R>(rounds: &[(C, Vec<R>)], i: usize, f: impl Fn(&R) -> f64) -> f64 {
    median(rounds.iter().map(|(_, runs)| f(&runs[i])).collect())
}

/// The largest peak RSS over the rounds of run `i`.
fn column_max<C, R>(
    rounds: &[(C, Vec<R>)],
    i: usize,
    f: impl Fn(&R) -> Option<u64>,
) -> Option<u64> {
    rounds.iter().filter_map(|(_, runs)| f(&runs[i])).max()
}

fn human_bytes(b: Option<u64>) -> String {
    b.map_or("?".into(), |x| indicatif::HumanBytes(x).to_string())
}

/// The emulator's scan ceiling.
#[derive(Debug, Clone, Serialize)]
pub struct ScanResult {
    /// Entities scanned.
    pub entities: u64,
    /// Seconds.
    pub seconds: f64,
    /// Entities per second.
    pub entities_per_second: f64,
    /// Response MB (10^6 bytes) per second.
    pub mb_per_second: f64,
    /// Query Entities requests (pages) it took.
    pub queries: u64,
}

/// Scans the whole table sequentially with the project's client.
pub async fn measure_scan(client: &TableClient, table: &str) -> anyhow::Result<ScanResult> {
    let started = Instant::now();
    let (mut entities, mut bytes, mut queries) = (0u64, 0u64, 0u64);
    let mut pages = client.pages(table, Query::scan(None));
    while let Some(page) = pages.next_page().await {
        let page = page?;
        queries += 1;
        entities += page.entities.len() as u64;
        bytes += page.response_bytes as u64;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(ScanResult {
        entities,
        seconds,
        entities_per_second: entities as f64 / seconds,
        mb_per_second: bytes as f64 / 1e6 / seconds,
        queries,
    })
}

/// Runs the `tablevault` binary next to this one against an emulator.
struct Tablevault<'a> {
    exe: PathBuf,
    azurite: &'a Azurite,
    /// How the commands reach the emulator (directly, or through a delay line).
    conn: String,
}

impl<'a> Tablevault<'a> {
    fn new(azurite: &'a Azurite) -> anyhow::Result<Self> {
        let me = std::env::current_exe()?;
        let exe = me.with_file_name("tablevault");
        if !exe.exists() {
            bail!(
                "{} not found next to {}; build it with `cargo build --release --bins`",
                exe.display(),
                me.display()
            );
        }
        Ok(Tablevault {
            exe,
            azurite,
            conn: azurite.connection_string(),
        })
    }

    /// The same, reaching the emulator by `conn` (its connection string through a
    /// [`crate::delay::DelayLine`]).
    fn reaching_by(self, conn: String) -> Self {
        Tablevault { conn, ..self }
    }

    /// Runs a command with `--json` and returns its report (which must say `complete`).
    async fn run(&self, args: &[&str]) -> anyhow::Result<serde_json::Value> {
        Ok(self.run_logged(args, None).await?.0)
    }

    /// Runs a command as [`Tablevault::run`] does, with the requests it sent to the
    /// emulator counted by operation (`Query Entities`, `Put Blob`, …), from its
    /// request log (JSON lines at debug level for the request pipeline, so the logging
    /// costs a line per request). A `RUST_LOG` the bench was given still applies, the
    /// pipeline's debug events added to it, so `TABLEVAULT_BENCH_LOG` keeps what it
    /// asked for.
    async fn run_counted(
        &self,
        args: &[&str],
    ) -> anyhow::Result<(serde_json::Value, BTreeMap<String, u64>)> {
        const REQUESTS: &str = "tablevault_azure::pipeline=debug";
        let filter = std::env::var("RUST_LOG")
            .ok()
            .filter(|f| !f.trim().is_empty())
            .map_or_else(|| format!("warn,{REQUESTS}"), |f| format!("{f},{REQUESTS}"));
        let (report, stderr) = self.run_logged(args, Some(&filter)).await?;
        Ok((report, requests_by_op(&stderr)))
    }

    /// Runs a command with `--json`; with `log`, with that `RUST_LOG` and JSON log lines.
    /// Returns its report and its stderr.
    async fn run_logged(
        &self,
        args: &[&str],
        log: Option<&str>,
    ) -> anyhow::Result<(serde_json::Value, Vec<u8>)> {
        let conn = &self.conn;
        let mut command = tokio::process::Command::new(&self.exe);
        command
            .args(args)
            .arg("--json")
            .env("TABLEVAULT_SOURCE", conn)
            .env("TABLEVAULT_BACKUP", conn)
            .env("TABLEVAULT_TARGET", conn)
            .stdin(Stdio::null());
        if let Some(filter) = log {
            command
                .args(["--log-format", "json"])
                .env("RUST_LOG", filter);
        }
        let out = command
            .output()
            .await
            .with_context(|| format!("cannot run {}", self.exe.display()))?;
        // TABLEVAULT_BENCH_LOG=<file> keeps each child's log (with RUST_LOG) for profiling.
        if let Ok(path) = std::env::var("TABLEVAULT_BENCH_LOG") {
            use std::io::Write;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = f.write_all(&out.stderr);
            }
        }
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "{} did not print a report: {}{}",
                args[0],
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        if report["status"] != "complete" {
            bail!("{} did not complete: {report}", args[0]);
        }
        Ok((report, out.stderr))
    }
}

/// Requests by operation in a JSON request log (the pipeline's `request` events; every
/// attempt of a retried request counts, as the service served it).
fn requests_by_op(log: &[u8]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in log.split(|&b| b == b'\n') {
        let Ok(event) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        let fields = &event["fields"];
        if fields["message"] == "request"
            && let Some(op) = fields["op"].as_str()
        {
            *counts.entry(op.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// The numbers of one child run: entities, seconds, peak RSS.
struct ChildRun {
    entities: u64,
    seconds: f64,
    peak_rss_bytes: Option<u64>,
}

impl ChildRun {
    fn from_report(report: &serde_json::Value, entities_field: &str) -> Self {
        ChildRun {
            entities: report[entities_field].as_u64().unwrap_or(0),
            seconds: report["duration_seconds"].as_f64().unwrap_or(f64::NAN),
            peak_rss_bytes: report["peak_rss_bytes"].as_u64(),
        }
    }

    fn rate(&self) -> f64 {
        self.entities as f64 / self.seconds
    }
}

#[cfg(test)]
mod tests {
    use super::requests_by_op;

    #[test]
    fn requests_are_counted_by_operation_from_a_json_log() {
        let log = br#"{"timestamp":"t","level":"DEBUG","fields":{"message":"request","op":"Query Entities","method":"GET","path":"/t()"}}
{"timestamp":"t","level":"DEBUG","fields":{"message":"response","op":"Query Entities","status":200}}
{"timestamp":"t","level":"DEBUG","fields":{"message":"request","op":"Query Entities","method":"GET","path":"/t()"}}
not json
{"timestamp":"t","level":"WARN","fields":{"message":"request","op":"Put Blob"}}
{"timestamp":"t","level":"DEBUG","fields":{"message":"request"}}
"#;
        let counts = requests_by_op(log);
        assert_eq!(counts.get("Query Entities"), Some(&2));
        assert_eq!(counts.get("Put Blob"), Some(&1));
        assert_eq!(counts.len(), 2);
    }
}
