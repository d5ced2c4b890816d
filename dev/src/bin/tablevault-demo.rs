//! `tablevault-demo`: the main job end to end on a local Azurite emulator that it installs
//! and starts itself. It loads a sample table, backs it up with in-process workers,
//! restores the backup into a new table and verifies the backup against it, through the
//! same code the `tablevault backup`, `restore` and `verify` commands run.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use serde::Serialize;
use tablevault_azure::table::TableClient;
use tablevault_cli::commands::watch_options;
use tablevault_cli::output::{print_backup, print_json, print_restore, print_verify};
use tablevault_coordinator::Location;
use tablevault_coordinator::backup::{BackupRequest, default_ranges, run_backup};
use tablevault_coordinator::report::{BackupReport, RestoreReport};
use tablevault_coordinator::restore::{RestoreRequest, run_restore};
use tablevault_coordinator::verify::{VerifyReport, VerifyRequest, VerifyStatus, verify};
use tablevault_core::format::Compression;
use tablevault_core::protocol::{DEFAULT_CONTAINER, DEFAULT_QUEUE, JobStatus};
use tablevault_dev::emulator::Azurite;
use tablevault_dev::sample::load_sample;

/// The sample table's name.
const DEMO_TABLE: &str = "DemoOrders";
/// The table the demo restores into.
const DEMO_RESTORED: &str = "DemoOrdersRestored";

/// Backs up a sample table on a local emulator, restores it and verifies it.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Args {
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

#[derive(Serialize)]
struct DemoReport {
    /// `ok` when the restored table was verified identical, else `failed`.
    status: &'static str,
    /// What failed, when something did.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
    table: String,
    loaded_entities: u64,
    load_seconds: f64,
    backup: BackupReport,
    restore: RestoreReport,
    verify: VerifyReport,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tablevault_worker::process::end_quietly_on_closed_output();
    let args = Args::parse();
    let json = args.json;
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // With --json, stdout holds one object whatever happened: the report, or
            // where the demo stopped before it, the error.
            if json && e.downcast_ref::<Reported>().is_none() {
                print_json(&serde_json::json!({
                    "status": "failed",
                    "problem": format!("{e:#}"),
                }));
            }
            eprintln!("demo failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A failure the `--json` report already carries.
#[derive(Debug)]
struct Reported(String);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Reported {}

async fn run(args: Args) -> anyhow::Result<()> {
    let (entities, workers, json) = (args.entities, args.workers as usize, args.json);
    let say = |s: &str| {
        if !json {
            println!("{s}");
        }
    };
    say("starting Azurite (installing the pinned version with npm on first use) ...");
    let azurite = Azurite::start()
        .await
        .context("cannot start the emulator")?;
    let account = azurite.account();
    let tables = TableClient::new(&account)?;
    let partitions = (entities / 200).clamp(1, 50);
    say(&format!(
        "loading {entities} sample entities into {DEMO_TABLE} ({partitions} partitions) ..."
    ));
    let t = Instant::now();
    load_sample(&tables, DEMO_TABLE, entities, partitions, 4).await?;
    let load_seconds = t.elapsed().as_secs_f64();

    let location = Location {
        account: account.clone(),
        container: DEFAULT_CONTAINER.into(),
        queue: DEFAULT_QUEUE.into(),
        client_options: Default::default(),
        backends: None,
    };
    let shutdown = tablevault_worker::process::shutdown_on_signal();
    let watch = |what| {
        let mut opts = watch_options(
            what,
            workers,
            vec![account.clone()],
            Duration::from_secs(60),
            json,
            &shutdown,
        );
        opts.poll = Duration::from_millis(250);
        opts
    };

    say(&format!(
        "\n1. backing up {DEMO_TABLE} with {workers} in-process workers ..."
    ));
    let mut req = BackupRequest::new(account.clone());
    req.tables = Some(vec![DEMO_TABLE.into()]);
    req.compression = Compression::Zstd;
    req.max_tasks_per_table = default_ranges(workers);
    req.fleet_known = true;
    let backup = run_backup(&req, &location, &watch("backup")).await?;
    if !json {
        print_backup(&backup);
    }
    if backup.status != JobStatus::Complete || backup.entities != entities {
        bail!(
            "the backup is {} with {} of {entities} entities",
            backup.status,
            backup.entities
        );
    }

    say(&format!(
        "\n2. restoring it into a new table, {DEMO_RESTORED} ..."
    ));
    let mut restore_req = RestoreRequest::new(&backup.backup_id, account.clone());
    restore_req.renames = vec![(DEMO_TABLE.into(), DEMO_RESTORED.into())];
    let restore = run_restore(&restore_req, &location, &watch("restore")).await?;
    if !json {
        print_restore(&restore);
    }

    say(&format!(
        "\n3. verifying the backup block by block, and against {DEMO_RESTORED} ..."
    ));
    let verified = verify(
        &location,
        &VerifyRequest {
            backup_id: backup.backup_id.clone(),
            tables: None,
            renames: vec![(DEMO_TABLE.into(), DEMO_RESTORED.into())],
            against: Some(account.clone()),
        },
    )
    .await?;
    let ok = restore.status == JobStatus::Complete
        && restore.written == entities
        && verified.status == VerifyStatus::Ok;
    let failure = format!(
        "restore {} ({} of {entities} written), verify {:?}",
        restore.status, restore.written, verified.status
    );
    if json {
        print_json(&DemoReport {
            status: if ok { "ok" } else { "failed" },
            problem: (!ok).then(|| failure.clone()),
            table: DEMO_TABLE.into(),
            loaded_entities: entities,
            load_seconds,
            backup,
            restore,
            verify: verified,
        });
    } else {
        print_verify(&verified);
    }
    if !ok {
        if json {
            return Err(Reported(failure).into());
        }
        bail!(failure);
    }
    say(&format!(
        "\nok: {entities} entities backed up, restored into {DEMO_RESTORED} and verified identical; the emulator stops now"
    ));
    drop(azurite);
    Ok(())
}
