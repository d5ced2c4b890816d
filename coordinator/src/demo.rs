//! `tablevault demo`: the main job end to end on a local emulator the project installs and
//! starts itself. It loads a sample table, backs it up with in-process workers, restores
//! the backup into a new table and verifies the backup against it, all through the same
//! code paths as the `backup`, `restore` and `verify` commands.

use std::time::{Duration, Instant};

use serde::Serialize;
use tablevault_common::ClientOptions;
use tablevault_common::emulator::Azurite;
use tablevault_common::format::Compression;
use tablevault_common::table::TableClient;
use tablevault_worker::runtime::shutdown_on_signal;

use crate::backup::{BackupRequest, Target, WatchOptions, run_backup};
use crate::exit::{CmdResult, ExitCode, Failure};
use crate::report::BackupReport;
use crate::restore::{RestoreReport, RestoreRequest, run_restore};
use crate::verify::{VerifyReport, VerifyRequest};

/// The sample table's name.
pub const DEMO_TABLE: &str = "DemoOrders";

/// The table the demo restores into.
pub const DEMO_RESTORED: &str = "DemoOrdersRestored";

#[derive(Serialize)]
struct DemoReport {
    table: String,
    loaded_entities: u64,
    load_seconds: f64,
    backup: BackupReport,
    restore: RestoreReport,
    verify: VerifyReport,
}

/// Runs the demo.
pub async fn run(entities: u64, workers: usize, json: bool) -> CmdResult<ExitCode> {
    let say = |s: &str| {
        if !json {
            println!("{s}");
        }
    };
    say("starting Azurite (installing the pinned version with npm on first use) ...");
    let azurite = Azurite::start()
        .await
        .map_err(|e| Failure::failed(format!("cannot start the emulator: {e}")))?;
    let account = azurite.account();
    let tables = TableClient::new(&account)?;

    let partitions = (entities / 200).clamp(1, 50);
    say(&format!(
        "loading {entities} sample entities into {DEMO_TABLE} ({partitions} partitions) ..."
    ));
    let t = Instant::now();
    crate::sample::load_sample(&tables, DEMO_TABLE, entities, partitions, 4).await?;
    let load_seconds = t.elapsed().as_secs_f64();

    say(&format!(
        "\n1. backing up {DEMO_TABLE} with {workers} in-process workers ..."
    ));
    let target = Target {
        account: account.clone(),
        container: tablevault_common::job::DEFAULT_CONTAINER.into(),
        queue: tablevault_common::job::DEFAULT_QUEUE.into(),
        client_options: ClientOptions::default(),
    };
    let mut req = BackupRequest::new(account.clone());
    req.tables = Some(vec![DEMO_TABLE.into()]);
    req.compression = Compression::Zstd;
    req.ranges_per_table = crate::backup::default_ranges(workers);
    let watch = || {
        let mut opts = WatchOptions::new(shutdown_on_signal());
        opts.workers = workers;
        opts.quiet = json;
        opts.poll = Duration::from_millis(250);
        opts
    };
    let backup = run_backup(&req, &target, watch()).await?;
    if !json {
        backup.print_human();
    }
    if backup.status != "complete" || backup.entities != entities {
        return Err(Failure::failed(format!(
            "demo backup is {} with {} of {entities} entities",
            backup.status, backup.entities
        )));
    }

    say(&format!(
        "\n2. restoring it into a new table, {DEMO_RESTORED} ..."
    ));
    let mut restore_req = RestoreRequest::new(&backup.backup_id, account.clone());
    restore_req.renames = vec![(DEMO_TABLE.into(), DEMO_RESTORED.into())];
    let restore = run_restore(&restore_req, &target, watch()).await?;
    if !json {
        restore.print_human();
    }

    say(&format!(
        "\n3. verifying the backup block by block, and against {DEMO_RESTORED} ..."
    ));
    let verify = crate::verify::verify(
        &target.blobs()?,
        &VerifyRequest {
            backup_id: backup.backup_id.clone(),
            tables: None,
            renames: vec![(DEMO_TABLE.into(), DEMO_RESTORED.into())],
            against: Some(account.clone()),
        },
    )
    .await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&DemoReport {
                table: DEMO_TABLE.into(),
                loaded_entities: entities,
                load_seconds,
                backup,
                restore: restore.clone(),
                verify: verify.clone(),
            })
            .expect("reports serialize")
        );
    } else {
        verify.print_human();
    }
    if restore.status != "complete" || restore.written != entities || verify.status != "ok" {
        return Err(Failure {
            code: ExitCode::Mismatch,
            message: format!(
                "demo failed: restore {} ({} of {entities} written), verify {}",
                restore.status, restore.written, verify.status
            ),
        });
    }
    say(&format!(
        "\nok: {entities} entities backed up, restored into {DEMO_RESTORED} and verified identical; the emulator stops now"
    ));
    drop(azurite);
    Ok(ExitCode::Ok)
}
