//! Helpers shared by the backup and restore test files that need the coordinator (the
//! harness library itself depends only on `common`, so the coordinator's own tests can
//! use it without a dependency cycle).
#![allow(dead_code)] // each test file uses a different subset

use std::time::Duration;

use tablevault_common::{ClientOptions, StorageAccount};
use tablevault_coordinator::backup::{BackupRequest, Target, WatchOptions};
use tablevault_tests::unique_lower;
use tablevault_worker::{AccountSet, WorkerConfig};
use tokio_util::sync::CancellationToken;

/// A fresh container and queue in the test's account.
pub fn target(account: &StorageAccount) -> Target {
    Target {
        account: account.clone(),
        container: unique_lower("bk"),
        queue: unique_lower("tasks"),
        client_options: ClientOptions::default(),
    }
}

/// Watch settings for tests: quick polls, short leases, no progress bar.
pub fn watch_opts(workers: usize, account: &StorageAccount) -> WatchOptions {
    let mut o = WatchOptions::new(CancellationToken::new());
    o.workers = workers;
    o.accounts = AccountSet::new(vec![account.clone()]);
    o.poll = Duration::from_millis(100);
    o.quiet = true;
    o.visibility = Duration::from_secs(3);
    o
}

/// A one-task worker on the target's queue, with a short lease, for killing mid-task.
pub fn worker_config(t: &Target, account: &StorageAccount, visibility: Duration) -> WorkerConfig {
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
