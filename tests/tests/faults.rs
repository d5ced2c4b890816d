//! The at-least-once protocol under injected faults: a proxy in front of every Azurite
//! service answers a share of requests with 503 ServerBusy, 500 OperationTimedOut after
//! the operation was applied, resets before and after forwarding, and delays. Backup and
//! restore must still end with exactly the source's entities, no block lost or doubled,
//! and nothing left on the queue.
//!
//! The suite runs one seed at 15 % with a few thousand entities. The soak
//! (`TABLEVAULT_FAULT_SOAK=1`, see the README) runs 5 % and 15 % with three seeds each on
//! 20,000 entities, and prints each run's figures.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{backup_of, restore_renamed, watch_opts, worker_config};
use tablevault_azure::queue::QueueClient;
use tablevault_azure::table::TableClient;
use tablevault_azure::{ClientOptions, RetryPolicy, StorageAccount};
use tablevault_coordinator::Location;
use tablevault_coordinator::backup::{BackupRequest, run_backup};
use tablevault_coordinator::restore::run_restore;
use tablevault_tests::fault_proxy::{
    FaultCounts, FaultPlan, FaultProxy, proxied_connection_string,
};
use tablevault_tests::{
    TestEnv, load_many_tables, load_numbered, scan_all, unique_lower, unique_table,
};
use tablevault_worker::{Worker, WorkerStats};
use tokio_util::sync::CancellationToken;

/// Retries quick enough for a test, as many as a bad day needs.
fn patient() -> ClientOptions {
    ClientOptions {
        retry: RetryPolicy {
            max_retries: 12,
            min_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(500),
            observer: None,
        },
        request_timeout: Duration::from_secs(10),
        deadline: Duration::from_secs(60),
        ..ClientOptions::default()
    }
}

fn sum(proxies: &[FaultProxy]) -> FaultCounts {
    let mut c = FaultCounts::default();
    for p in proxies {
        let n = p.counts();
        c.requests += n.requests;
        c.busy += n.busy;
        c.error_after += n.error_after;
        c.reset_before += n.reset_before;
        c.reset_after += n.reset_after;
        c.slow += n.slow;
        c.stall += n.stall;
    }
    c
}

/// A fresh container and queue in `account`, reached with [`patient`] retries.
fn patient_location(account: &StorageAccount) -> Location {
    Location {
        account: account.clone(),
        container: unique_lower("bk"),
        queue: unique_lower("tasks"),
        client_options: patient(),
        backends: None,
    }
}

/// One backup and restore of `partitions × per` entities with every request through
/// proxies injecting `rate` faults; returns a line of figures.
async fn backup_and_restore_under_faults(
    rate: f64,
    seed: u64,
    partitions: usize,
    per: usize,
) -> String {
    let env = TestEnv::start().await;
    let direct = TableClient::new(&env.account).unwrap();
    let table = unique_table("flt");
    let source = load_numbered(&direct, &table, partitions, per).await;

    let (conn, proxies) =
        proxied_connection_string(&env.connection_string(), &FaultPlan::mixed(rate, seed)).await;
    let account = StorageAccount::from_connection_string(&conn).unwrap();
    let t = patient_location(&account);
    let started = Instant::now();
    let mut req = backup_of(&account, &table);
    req.ranges_per_table = Some(6);
    req.block_bytes = 64 * 1024;
    req.blocks_per_blob = 2;
    let backup = run_backup(&req, &t, &watch_opts(3, &account))
        .await
        .unwrap_or_else(|e| panic!("backup under {rate} faults, seed {seed}: {e}"));
    assert_eq!(backup.status, "complete", "{backup:?}");
    assert_eq!(backup.entities, source.len() as u64);

    let restored = unique_table("dst");
    let r = restore_renamed(&backup.backup_id, &account, &table, &restored);
    let restore = run_restore(&r, &t, &watch_opts(3, &account))
        .await
        .unwrap_or_else(|e| panic!("restore under {rate} faults, seed {seed}: {e}"));
    assert_eq!(restore.status, "complete", "{restore:?}");
    let seconds = started.elapsed().as_secs_f64();
    let injected = sum(&proxies);

    // Read the results back without faults.
    for p in &proxies {
        p.set_plan(FaultPlan::none());
    }
    // Timestamps and ETags are the target's own; compare data.
    let back = scan_all(&direct, &restored).await;
    assert_eq!(back.len(), source.len(), "no entity lost or added");
    for (b, s) in back.iter().zip(&source) {
        assert!(
            b.same_data(s),
            "{:?}/{:?} differs",
            s.partition_key,
            s.row_key
        );
    }
    assert_verified(&t, &backup.backup_id, &env).await;
    assert_queue_drains(&t, &account, &env).await;
    format!(
        "rate {:>4.0}% seed {seed}: {} entities backed up and restored exactly in {seconds:.1} s; \
         {} requests, injected {} busy, {} 500-after-apply, {} reset-before, {} reset-after, {} delayed",
        rate * 100.0,
        source.len(),
        injected.requests,
        injected.busy,
        injected.error_after,
        injected.reset_before,
        injected.reset_after,
        injected.slow
    )
}

/// Verifies a backup block by block against the source account, without faults.
async fn assert_verified(t: &Location, backup_id: &str, env: &TestEnv) {
    let verify = tablevault_coordinator::verify::verify(
        t,
        &tablevault_coordinator::verify::VerifyRequest {
            backup_id: backup_id.to_string(),
            tables: None,
            renames: vec![],
            against: Some(env.account.clone()),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        verify.status, "ok",
        "no block lost or doubled: {:?}",
        verify.problems
    );
}

/// Messages of tasks whose delete was lost come back and are dropped as done: a worker
/// empties the queue.
async fn assert_queue_drains(t: &Location, account: &StorageAccount, env: &TestEnv) {
    let w = Worker::new(
        worker_config(t, account, Duration::from_secs(2)),
        Arc::new(WorkerStats::default()),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let h = tokio::spawn(w.run(stop.clone()));
    let queue = QueueClient::new(&env.account, &t.queue).unwrap();
    let mut left = u64::MAX;
    for _ in 0..200 {
        left = queue.approximate_count().await.unwrap();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    let _ = h.await;
    assert_eq!(left, 0, "nothing left on the queue");
}

/// A backup of many small tables (sent a few to a message), one of them large enough to
/// hand the rest of its group on, in backup format `format` (2: each small table's data
/// inline in its commit record), with every request through proxies injecting `rate`
/// faults: every table is backed up exactly and the queue ends empty.
async fn many_small_tables_under_faults(rate: f64, seed: u64, format: u32) -> String {
    let env = TestEnv::start().await;
    let direct = TableClient::new(&env.account).unwrap();
    let prefix = unique_table("fltg");
    let loaded = load_many_tables(&direct, &prefix, 72, Some(10)).await;
    let (conn, proxies) =
        proxied_connection_string(&env.connection_string(), &FaultPlan::mixed(rate, seed)).await;
    let account = StorageAccount::from_connection_string(&conn).unwrap();
    let t = patient_location(&account);
    let started = Instant::now();
    let mut req = BackupRequest::new(account.clone());
    req.format = format;
    let backup = run_backup(&req, &t, &watch_opts(3, &account))
        .await
        .unwrap_or_else(|e| panic!("backup under {rate} faults, seed {seed}: {e}"));
    assert_eq!(backup.status, "complete", "{backup:?}");
    let seconds = started.elapsed().as_secs_f64();
    let injected = sum(&proxies);
    for p in &proxies {
        p.set_plan(FaultPlan::none());
    }
    let mut backed_up: Vec<(String, u64)> = backup
        .tables
        .iter()
        .map(|t| (t.name.clone(), t.entities))
        .collect();
    backed_up.sort();
    let expected: Vec<(String, u64)> = loaded
        .iter()
        .map(|(name, e)| (name.clone(), e.len() as u64))
        .collect();
    assert_eq!(backed_up, expected);
    assert_verified(&t, &backup.backup_id, &env).await;
    assert_queue_drains(&t, &account, &env).await;
    format!(
        "rate {:>4.0}% seed {seed}: {} tables backed up exactly (format {format}) in {seconds:.1} s; \
         {} requests, injected {} busy, {} 500-after-apply, {} reset-before, {} reset-after",
        rate * 100.0,
        loaded.len(),
        injected.requests,
        injected.busy,
        injected.error_after,
        injected.reset_before,
        injected.reset_after,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_tables_are_exact_at_15_percent_faults() {
    println!("{}", many_small_tables_under_faults(0.15, 11, 1).await);
}

/// The same in format 2: each small table's commit, which now carries its data, is the
/// one write that faults can make uncertain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_tables_in_format_2_are_exact_at_15_percent_faults() {
    println!("{}", many_small_tables_under_faults(0.15, 12, 2).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_and_restore_are_exact_at_15_percent_faults() {
    let line = backup_and_restore_under_faults(0.15, 7, 6, 250).await;
    println!("{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_soak() {
    if std::env::var_os("TABLEVAULT_FAULT_SOAK").is_none() {
        return;
    }
    // `TABLEVAULT_FAULT_SEEDS=4,5,6` draws other faults than the default three seeds.
    let seeds: Vec<u64> = std::env::var("TABLEVAULT_FAULT_SEEDS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .filter(|v: &Vec<u64>| !v.is_empty())
        .unwrap_or_else(|| vec![1, 2, 3]);
    let mut lines = Vec::new();
    for rate in [0.05, 0.15] {
        for &seed in &seeds {
            lines.push(backup_and_restore_under_faults(rate, seed, 40, 500).await);
            println!("{}", lines.last().unwrap());
            for format in [1, 2] {
                lines.push(many_small_tables_under_faults(rate, seed, format).await);
                println!("{}", lines.last().unwrap());
            }
        }
    }
    println!("{}", lines.join("\n"));
}
