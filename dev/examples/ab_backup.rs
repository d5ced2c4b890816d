//! Compares builds of `tablevault` on one loaded emulator: each round scans the data
//! once with one connection, then runs a first backup (`--workers 4`, a new container)
//! with each binary in turn, and prints wall time and the CPU seconds each emulator
//! process spent. Azurite serves each service from one Node.js thread, so the Table
//! process's CPU is the work a backup cost it: steadier than rates on a small machine.
//!
//! ```text
//! cargo run --release -p tablevault-dev --example ab_backup -- \
//!     ENTITIES PARTITIONS ROUNDS path/to/old/tablevault path/to/new/tablevault
//! ```
//!
//! `PARTITIONS` spreads the sample entities over that many partitions (1: one
//! partition). With `AB_SMALL_TABLES=N` the entities go into N tables instead of one.
//! With `AB_STDERR_DIR=dir` each backup's log (set `RUST_LOG`) is kept as `dir/<name>.log`.

use std::time::Instant;

use anyhow::{Context, ensure};
use tablevault_azure::table::{Query, TableClient};
use tablevault_dev::emulator::Azurite;
use tablevault_dev::sample::load_sample;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: ab_backup ENTITIES PARTITIONS ROUNDS BINARY...";
    ensure!(args.len() >= 5, "{usage}");
    let entities: u64 = args[1].parse().context(usage)?;
    let partitions: u64 = args[2].parse().context(usage)?;
    let rounds: usize = args[3].parse().context(usage)?;
    let bins = &args[4..];
    let azurite = Azurite::start_split().await?;
    let client = TableClient::new(&azurite.account())?;
    let tables: Vec<String> = match std::env::var("AB_SMALL_TABLES") {
        Ok(n) => (0..n.parse::<u64>()?)
            .map(|i| format!("Small{i:04}"))
            .collect(),
        Err(_) => vec!["Abtable".to_string()],
    };
    let per_table = entities / tables.len() as u64;
    for t in &tables {
        load_sample(&client, t, per_table, partitions.min(per_table), 8).await?;
    }
    let cpu = || azurite.cpu_seconds().context("no /proc to read CPU from");
    let list = tables.join(",");
    let conn = azurite.connection_string();
    let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); bins.len()];
    let mut scans = Vec::new();
    for round in 0..rounds {
        let (before, started) = (cpu()?, Instant::now());
        for t in &tables {
            let mut pages = client.pages(t, Query::scan(None));
            while let Some(page) = pages.next_page().await {
                page?;
            }
        }
        let table_cpu = cpu()?[2] - before[2];
        println!(
            "round {round} scan: wall {:.2} s, table CPU {table_cpu:.2} s",
            started.elapsed().as_secs_f64()
        );
        scans.push(table_cpu);
        for (b, bin) in bins.iter().enumerate() {
            let name = format!("ab{b}r{round}");
            let (before, started) = (cpu()?, Instant::now());
            let out = tokio::process::Command::new(bin)
                .args(["backup", "--tables", &list, "--workers", "4"])
                .args(["--container", &name, "--queue", &name, "--json"])
                .env("TABLEVAULT_SOURCE", &conn)
                .env("TABLEVAULT_BACKUP", &conn)
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .with_context(|| format!("cannot run {bin}"))?;
            let wall = started.elapsed().as_secs_f64();
            let after = cpu()?;
            if let Ok(dir) = std::env::var("AB_STDERR_DIR") {
                std::fs::write(format!("{dir}/{name}.log"), &out.stderr)?;
            }
            ensure!(
                out.status.success(),
                "{bin} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let used: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
            println!(
                "round {round} binary {b}: wall {wall:.2} s, CPU blob {:.2} / queue {:.2} / table {:.2} s",
                used[0], used[1], used[2]
            );
            results[b].push((wall, used[2]));
        }
    }
    println!("scan: median table CPU {:.2} s", median(scans));
    for (bin, r) in bins.iter().zip(results) {
        println!(
            "{bin}: median wall {:.2} s, median table CPU {:.2} s",
            median(r.iter().map(|x| x.0).collect()),
            median(r.iter().map(|x| x.1).collect())
        );
    }
    Ok(())
}
