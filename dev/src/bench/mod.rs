//! The benchmark behind `tablevault-bench`: backup and restore throughput and memory on
//! the Azurite emulator, next to the emulator's own ceilings measured in the same run.
//!
//! Azurite runs one process per service, so blob traffic does not queue behind table
//! work on one Node.js thread. Each backup or restore runs as a child `tablevault … --json`
//! process (built next to this binary) so its peak RSS is its own.

mod backup;
mod restore;
mod shapes;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, bail};
use serde::Serialize;
use tablevault_azure::table::{Query, TableClient};

use crate::emulator::Azurite;

pub use backup::run_backup_bench;
pub use restore::run_restore_bench;
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
}

/// Scans the whole table sequentially with the project's client.
pub async fn measure_scan(client: &TableClient, table: &str) -> anyhow::Result<ScanResult> {
    let started = Instant::now();
    let (mut entities, mut bytes) = (0u64, 0u64);
    let mut pages = client.pages(table, Query::scan(None));
    while let Some(page) = pages.next_page().await {
        let page = page?;
        entities += page.entities.len() as u64;
        bytes += page.response_bytes as u64;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(ScanResult {
        entities,
        seconds,
        entities_per_second: entities as f64 / seconds,
        mb_per_second: bytes as f64 / 1e6 / seconds,
    })
}

/// Runs the `tablevault` binary next to this one against an emulator.
struct Tablevault<'a> {
    exe: PathBuf,
    azurite: &'a Azurite,
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
        Ok(Tablevault { exe, azurite })
    }

    /// Runs a command with `--json` and returns its report (which must say `complete`).
    async fn run(&self, args: &[&str]) -> anyhow::Result<serde_json::Value> {
        let conn = self.azurite.connection_string();
        let out = tokio::process::Command::new(&self.exe)
            .args(args)
            .arg("--json")
            .env("TABLEVAULT_SOURCE", &conn)
            .env("TABLEVAULT_BACKUP", &conn)
            .env("TABLEVAULT_TARGET", &conn)
            .stdin(Stdio::null())
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
        Ok(report)
    }
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
