//! Helpers shared by the backup and restore test files that need the coordinator and
//! in-process workers (the harness library itself depends only on the Azure clients and
//! the emulator launcher).
#![allow(dead_code)] // each test file uses a different subset

use std::sync::Arc;
use std::time::Duration;

use tablevault_azure::StorageAccount;
use tablevault_azure::blob::BlobClient;
use tablevault_azure::table::{Entity, TableClient};
use tablevault_cli::local_workers::InProcessWorkers;
use tablevault_coordinator::backup::BackupRequest;
use tablevault_coordinator::restore::RestoreRequest;
use tablevault_coordinator::{Location, WatchOptions};
use tablevault_core::store::Store;
use tablevault_tests::{TestEnv, load_numbered, unique_lower, unique_table};
use tablevault_worker::{AccountSet, WorkerConfig};
use tokio_util::sync::CancellationToken;

/// A fresh container and queue in the test's account.
pub fn target(account: &StorageAccount) -> Location {
    Location {
        account: account.clone(),
        container: unique_lower("bk"),
        queue: unique_lower("tasks"),
        client_options: Default::default(),
        backends: None,
    }
}

/// The raw container client of a location, for tests that look at or tamper with blobs.
pub fn blob_client(t: &Location) -> BlobClient {
    BlobClient::new(&t.account, &t.container).unwrap()
}

/// The location's store.
pub fn store(t: &Location) -> Store {
    t.store().unwrap()
}

/// Watch settings for tests: `workers` in-process workers (none for 0) with short leases
/// and quick polls, no progress display.
pub fn watch_opts(workers: usize, account: &StorageAccount) -> WatchOptions {
    let shutdown = CancellationToken::new();
    let mut o = WatchOptions::new(shutdown.clone());
    o.poll = Duration::from_millis(100);
    if workers > 0 {
        let mut w =
            InProcessWorkers::new(workers, AccountSet::new(vec![account.clone()]), shutdown);
        w.visibility = Duration::from_secs(3);
        o.workers = Some(Arc::new(w));
    }
    o
}

/// A one-task worker on the target's queue, with a short lease, for killing mid-task.
pub fn worker_config(t: &Location, account: &StorageAccount, visibility: Duration) -> WorkerConfig {
    let mut c = WorkerConfig::new(t.account.clone(), &t.queue);
    c.sources = AccountSet::new(vec![account.clone()]);
    c.targets = AccountSet::new(vec![account.clone()]);
    c.concurrency = 1;
    c.visibility = visibility;
    c.max_poll_interval = Duration::from_millis(200);
    c
}

/// A backup request for one table of the test's account, with defaults.
pub fn backup_of(account: &StorageAccount, table: &str) -> BackupRequest {
    let mut req = BackupRequest::new(account.clone());
    req.tables = Some(vec![table.to_string()]);
    req
}

/// A restore of backup `backup_id`'s table `from` into table `to` of the test's account,
/// with defaults.
pub fn restore_renamed(
    backup_id: &str,
    account: &StorageAccount,
    from: &str,
    to: &str,
) -> RestoreRequest {
    let mut r = RestoreRequest::new(backup_id, account.clone());
    r.renames = vec![(from.to_string(), to.to_string())];
    r
}

/// A complete backup of `table` into `t`, by `workers` in-process workers.
pub async fn back_up(
    account: &StorageAccount,
    table: &str,
    t: &Location,
    workers: usize,
) -> tablevault_coordinator::report::BackupReport {
    tablevault_coordinator::backup::run_backup(
        &backup_of(account, table),
        t,
        &watch_opts(workers, account),
    )
    .await
    .unwrap()
}

/// A test's emulator, a numbered table in it, and a fresh backup location.
pub struct Setup {
    /// The emulator.
    pub env: TestEnv,
    /// Its Table client.
    pub client: TableClient,
    /// The loaded table.
    pub table: String,
    /// The table's entities as the service holds them.
    pub source: Vec<Entity>,
    /// A fresh container and queue.
    pub t: Location,
}

/// Starts an emulator and loads a table of `partitions × per` numbered entities.
pub async fn numbered(prefix: &str, partitions: usize, per: usize) -> Setup {
    let env = TestEnv::start().await;
    let client = TableClient::new(&env.account).unwrap();
    let table = unique_table(prefix);
    let source = load_numbered(&client, &table, partitions, per).await;
    let t = target(&env.account);
    Setup {
        env,
        client,
        table,
        source,
        t,
    }
}
