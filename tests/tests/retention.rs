//! Retention (`prune`, `forget`) against Azurite: real backups whose start times are set
//! by rewriting their plans, a dry run that changes nothing, a prune that removes
//! exactly what the policy does not keep (and abandoned unfinished backups with their
//! attempt blobs), protections (newest complete, live restore), and a deletion stopped
//! midway that the next prune finishes. On fakes: workers drop the queued tasks of a
//! removed backup without retrying or poisoning them.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{backup_of, numbered, restore_renamed, store, watch_opts};
use tablevault_azure::StorageAccount;
use tablevault_coordinator::backup::{enqueue, plan, run_backup};
use tablevault_coordinator::listing;
use tablevault_coordinator::restore::{self, RestoreRequest};
use tablevault_coordinator::retention::{
    self, Count, ForgetRequest, KeepPolicy, PruneRequest, RetentionReport,
};
use tablevault_core::keys::KeyRange;
use tablevault_core::protocol::{BackupJob, JobStatus, PROTOCOL_VERSION, TaskKind, TaskMessage};
use tablevault_core::queue::TaskQueue;
use tablevault_core::store::{BackupPaths, Store};
use tablevault_core::testing::{MemoryBlobs, MemoryQueue};
use tablevault_worker::{Worker, WorkerBackends, WorkerConfig, WorkerStats};
use tokio_util::sync::CancellationToken;

const DAY: i64 = 86_400;
const HOUR: i64 = 3_600;

fn rfc3339(t: i64) -> String {
    retention::policy::format_time(t)
}

/// Sets a backup's start time by rewriting its plan (and manifest, if any).
async fn started_at(store: &Store, id: &str, t: i64) {
    let p = BackupPaths::new(id);
    let mut job: BackupJob = store.read(&p.job()).await.unwrap().unwrap();
    job.created_at = rfc3339(t);
    store.overwrite(&p.job(), &job).await.unwrap();
    if let Some(mut m) = store.manifest(id).await.unwrap() {
        m.created_at = rfc3339(t);
        store.overwrite(&p.manifest(), &m).await.unwrap();
    }
}

fn under(names: &[String], id: &str) -> usize {
    names
        .iter()
        .filter(|n| n.starts_with(&format!("{id}/")))
        .count()
}

fn ids(d: &[retention::Decision]) -> Vec<String> {
    let mut v: Vec<String> = d.iter().map(|d| d.id.clone()).collect();
    v.sort();
    v
}

/// `prune --keep-last 1` with `--abandoned-after`, at `now`.
fn keep_last_one(abandoned_after: &str, dry_run: bool, now: i64) -> PruneRequest {
    PruneRequest {
        policy: KeepPolicy {
            last: Count::Last(1),
            ..Default::default()
        },
        abandoned_after: abandoned_after.parse().unwrap(),
        source_account: None,
        dry_run,
        now,
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn prune_keeps_what_the_policy_and_the_protections_say_and_removes_the_rest() {
    let s = numbered("ret", 2, 20).await;
    let blobs = store(&s.t);
    // The prune runs nine days from now: the service dates every blob written here
    // now, and an unfinished backup's last write by the service's clock counts as
    // activity, whatever times its records hold.
    let now = retention::now() + 9 * DAY;
    let today = now.div_euclid(DAY) * DAY;
    // Five complete backups: yesterday, two on the day before (10:00 and 11:00), 5 and 10
    // days ago.
    // Taken oldest first, a second apart at least: the service's clock dates their
    // manifests in the same order (the newest by it always stays too).
    let times = [
        today - 10 * DAY + 9 * HOUR,
        today - 5 * DAY + 9 * HOUR,
        today - 2 * DAY + 10 * HOUR,
        today - 2 * DAY + 11 * HOUR,
        today - DAY + 9 * HOUR,
    ];
    let mut complete = Vec::new();
    for t in times {
        if !complete.is_empty() {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let req = backup_of(&s.env.account, &s.table);
        let report = run_backup(&req, &s.t, &watch_opts(1, &s.env.account))
            .await
            .unwrap();
        assert_eq!(report.status, "complete");
        started_at(&blobs, &report.backup_id, t).await;
        complete.push(report.backup_id);
    }
    let [d10, d5, d2a, d2b, d1] = complete.clone().try_into().unwrap();
    // A restore of the 10-day-old backup, planned and left live (no workers).
    let target = s.table.clone() + "copy";
    let rr = restore_renamed(&d10, &s.env.account, &s.table, &target);
    let restore_job = restore::plan_and_enqueue(&rr, &s.t).await.unwrap();
    // Two unfinished backups: one abandoned 9 days ago with an attempt's blob, one whose
    // worker beat an hour ago.
    let mut unfinished = Vec::new();
    for (started, beat) in [
        (now - 10 * DAY, now - 9 * DAY),
        (now - 10 * DAY, now - HOUR),
    ] {
        let job = plan(&backup_of(&s.env.account, &s.table), &s.t)
            .await
            .unwrap();
        enqueue(&s.t, &job, None).await.unwrap();
        let p = BackupPaths::new(&job.backup_id);
        started_at(&blobs, &job.backup_id, started).await;
        blobs
            .mark(&p.data_blob(&s.table, "r0000", "deadbeef", 0), "partial")
            .await
            .unwrap();
        let hb = serde_json::json!({ "worker": "w/1", "at": rfc3339(beat) });
        blobs
            .overwrite(&format!("{}w_1", p.heartbeats_root()), &hb)
            .await
            .unwrap();
        unfinished.push(job.backup_id);
    }
    let [abandoned, active] = unfinished.clone().try_into().unwrap();

    let mut req = PruneRequest {
        policy: KeepPolicy {
            daily: Count::Last(2),
            ..Default::default()
        },
        abandoned_after: "7d".parse().unwrap(),
        source_account: None,
        dry_run: true,
        now,
    };
    let before = blobs.list_names("").await.unwrap();
    let dry = retention::prune(&blobs, &req).await.unwrap();
    print_example(&dry);
    assert_eq!(
        blobs.list_names("").await.unwrap(),
        before,
        "a dry run changes nothing"
    );
    let expected_removed = sorted(vec![d2a.clone(), d5.clone(), abandoned.clone()]);
    let expected_kept = sorted(vec![d1.clone(), d2b.clone(), d10.clone(), active.clone()]);
    assert_eq!(ids(&dry.removed), expected_removed);
    assert_eq!(ids(&dry.kept), expected_kept);
    let why = |id: &str| {
        dry.kept
            .iter()
            .find(|d| d.id == id)
            .unwrap()
            .reasons
            .join(", ")
    };
    assert!(
        why(&d1).starts_with("newest complete, daily "),
        "{}",
        why(&d1)
    );
    assert!(why(&d2b).starts_with("daily "), "{}", why(&d2b));
    assert!(
        why(&d10).contains(&format!("restore {} in-progress", restore_job.restore_id)),
        "{}",
        why(&d10)
    );
    assert!(why(&active).starts_with("in progress"), "{}", why(&active));

    req.dry_run = false;
    let done = retention::prune(&blobs, &req).await.unwrap();
    assert_eq!(ids(&done.removed), expected_removed);
    assert!(done.failed.is_empty(), "{:?}", done.failed);
    let after = blobs.list_names("").await.unwrap();
    for id in &expected_removed {
        assert_eq!(under(&after, id), 0, "{id}: every blob is gone");
    }
    for id in &expected_kept {
        assert_eq!(under(&after, id), under(&before, id), "{id}: untouched");
    }
    let listed: Vec<String> = listing::list(&blobs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.backup_id)
        .collect();
    assert_eq!(sorted(listed), expected_kept);
    // Again: nothing more goes.
    let again = retention::prune(&blobs, &req).await.unwrap();
    assert!(again.removed.is_empty(), "{:?}", again.removed);

    // forget refuses the newest complete backup and the one the restore reads, and
    // removes nothing when it refuses.
    let forget = |ids: &[&String]| ForgetRequest {
        ids: ids.iter().map(|s| s.to_string()).collect(),
        abandoned_after: "7d".parse().unwrap(),
        dry_run: false,
        now,
    };
    let e = retention::forget(&blobs, &forget(&[&d2b, &d1]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("newest complete"), "{e}");
    let e = retention::forget(&blobs, &forget(&[&d10]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("reads it"), "{e}");
    assert_eq!(blobs.list_names("").await.unwrap(), after);
    // Once the restore is cancelled, the backup can go.
    restore::cancel(&s.t, &restore_job.restore_id)
        .await
        .unwrap();
    let gone = retention::forget(&blobs, &forget(&[&d10])).await.unwrap();
    assert_eq!(ids(&gone.removed), std::slice::from_ref(&d10));
    assert_eq!(under(&blobs.list_names("").await.unwrap(), &d10), 0);
}

/// A deletion that stopped after removing the manifest and some data: `list` shows it
/// as being deleted, a restore refuses it saying so (it said "not found"), and the next
/// prune finishes it even though the policy would keep it.
#[tokio::test]
async fn an_interrupted_deletion_shows_and_is_finished_by_the_next_prune() {
    let s = numbered("half", 1, 30).await;
    let blobs = store(&s.t);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let mut req = backup_of(&s.env.account, &s.table);
        req.split_keys = vec!["p000".into()];
        req.dynamic_split = false;
        // Data blobs to lose (format 2 would keep ranges this small in their commit
        // records).
        req.format = 1;
        let report = run_backup(&req, &s.t, &watch_opts(1, &s.env.account))
            .await
            .unwrap();
        ids.push(report.backup_id);
    }
    let half = ids[0].clone();
    let p = BackupPaths::new(&half);
    // What a deletion leaves when it stops after its first steps: the marker written,
    // manifest and plan gone, part of the data gone.
    let record = serde_json::json!({
        "backup_id": half, "created_at": null, "source_account": s.env.account.name(),
        "tables": [s.table], "reason": "forgotten", "at": "2026-11-22T00:00:00Z", "by": "test/1"
    });
    blobs.overwrite(&p.deleting(), &record).await.unwrap();
    blobs.delete(&p.manifest()).await.unwrap();
    blobs.delete(&p.job()).await.unwrap();
    let data = blobs.list_names(&p.data_root()).await.unwrap();
    assert!(!data.is_empty());
    blobs.delete(&data[0]).await.unwrap();

    let listed = listing::list(&blobs).await.unwrap();
    let entry = listed.iter().find(|e| e.backup_id == half).unwrap();
    assert_eq!(entry.status, JobStatus::Deleting);
    let e = restore::plan_and_enqueue(&RestoreRequest::new(&half, s.env.account.clone()), &s.t)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("backup {half} is being deleted")),
        "{e}"
    );

    let req = PruneRequest {
        policy: KeepPolicy {
            last: Count::Last(10),
            ..Default::default()
        },
        abandoned_after: "7d".parse().unwrap(),
        source_account: None,
        dry_run: false,
        now: retention::now(),
    };
    let r = retention::prune(&blobs, &req).await.unwrap();
    assert_eq!(r.removed.len(), 1);
    assert_eq!(r.removed[0].id, half);
    assert_eq!(r.removed[0].reasons, ["deletion unfinished"]);
    assert_eq!(under(&blobs.list_names("").await.unwrap(), &half), 0);
    assert_eq!(r.kept.len(), 1, "the other backup stays");
}

fn print_example(r: &RetentionReport) {
    println!("--- prune --keep-daily 2 --dry-run ---");
    tablevault_cli::retention_output::print(r, false);
}

/// Tasks of a removed backup (queue messages cannot be deleted without their receipt)
/// are dropped by the workers that receive them: not run, not given back, not poisoned.
#[tokio::test]
async fn workers_drop_queued_tasks_of_a_removed_backup() {
    let queue = Arc::new(MemoryQueue::new("q"));
    let poison = Arc::new(MemoryQueue::new("q-poison"));
    let mem = Arc::new(MemoryBlobs::new("c"));
    let blobs = Store::new(mem.clone());
    let now = retention::now();
    let id = format!(
        "{}-0000abcd",
        rfc3339(now - 30 * DAY).replace(['-', ':'], "")
    );
    let p = BackupPaths::new(&id);
    let job = serde_json::json!({
        "protocol": 1, "format": 1, "backup_id": id, "created_at": rfc3339(now - 30 * DAY),
        "source": { "account": "gone", "table_endpoint": "http://127.0.0.1:9/gone" },
        "options": { "compression": "zstd", "blocks_per_blob": 20, "block_bytes": 100000,
                     "batch_bytes": 100000, "max_attempts": 1, "queue": "q" },
        "tables": [ { "name": "Orders", "planning": "whole",
                      "tasks": [ { "task": "r0000", "range": { "start": null, "end": null } } ] } ],
        "tool_version": "test"
    });
    blobs.overwrite(&p.job(), &job).await.unwrap();
    blobs
        .mark(&p.data_blob("Orders", "r0000", "a1", 0), "partial")
        .await
        .unwrap();
    for (task, kind) in [
        (
            "r0000",
            TaskKind::Backup {
                range: KeyRange::all(),
                ceiling: None,
                estimate: None,
            },
        ),
        (
            "r0000-b00000",
            TaskKind::Restore {
                restore: "20261101T000000Z-r0000001".into(),
                source_table: "Orders".into(),
                range_task: "r0000".into(),
                blob: 0,
                block: None,
            },
        ),
    ] {
        let m = TaskMessage {
            v: PROTOCOL_VERSION,
            container: "c".into(),
            job: id.clone(),
            table: "Orders".into(),
            task: task.into(),
            kind,
        };
        // With max_attempts 1, a task given back instead of dropped would be poisoned.
        queue.put(&m.encode(), None).await.unwrap();
    }
    let req = keep_last_one("7d", false, now);
    let r = retention::prune(&blobs, &req).await.unwrap();
    assert_eq!(r.removed.len(), 1);
    assert!(mem.names().is_empty());

    let backends = WorkerBackends {
        queue: queue.clone(),
        lease_queue: queue.clone(),
        poison: poison.clone(),
        store_for: Arc::new(move |_| Ok(Store::new(mem.clone()))),
    };
    let mut config = WorkerConfig::new(StorageAccount::emulator(), "q");
    config.max_poll_interval = Duration::from_millis(100);
    let worker = Worker::with_backends(config, Arc::new(WorkerStats::default()), backends);
    let stop = CancellationToken::new();
    let run = tokio::spawn(worker.run(stop.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !queue.texts().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    run.await.unwrap().unwrap();
    assert!(queue.texts().is_empty(), "both tasks were deleted");
    assert!(
        poison.texts().is_empty(),
        "nothing was poisoned: {:?}",
        poison.texts()
    );
    assert!(
        blobs.list_names("").await.unwrap().is_empty(),
        "nothing was written for the removed backup"
    );
}

/// Regression: retention judged "abandoned" by this machine's clock and by the times
/// written inside the records (their writers' clocks). A prune on a machine two hours
/// ahead, with `--abandoned-after 1h`, deleted a running backup under its coordinator;
/// so did a correct prune of a backup whose workers' clocks ran behind. Now is the
/// service's (`service_now`, from a listing's `Date`), and the service's last write
/// under the backup counts as activity.
#[tokio::test]
async fn a_running_backup_is_not_abandoned_by_a_skewed_clock() {
    let s = numbered("skew", 2, 20).await;
    let blobs = store(&s.t);
    // Written by a worker whose clock is a day behind.
    let job = plan(&backup_of(&s.env.account, &s.table), &s.t)
        .await
        .unwrap();
    let p = BackupPaths::new(&job.backup_id);
    let behind = retention::now() - DAY;
    started_at(&blobs, &job.backup_id, behind).await;
    let hb = serde_json::json!({ "worker": "w/1", "at": rfc3339(behind) });
    blobs
        .overwrite(&format!("{}w_1", p.heartbeats_root()), &hb)
        .await
        .unwrap();

    let now = retention::service_now(&blobs).await.unwrap();
    assert!(
        (now - retention::now()).abs() < 60,
        "Azurite runs on this machine's clock"
    );
    let req = keep_last_one("1h", false, now);
    let pruned = retention::prune(&blobs, &req).await.unwrap();
    assert!(pruned.removed.is_empty(), "{:?}", pruned.removed);
    assert!(blobs.exists(&p.job()).await.unwrap());
    // Two days on by the service's clock, it is abandoned.
    let later = PruneRequest {
        now: now + 2 * DAY,
        ..req
    };
    let pruned = retention::prune(&blobs, &later).await.unwrap();
    assert_eq!(ids(&pruned.removed), [job.backup_id.as_str()]);
}

/// The service's clock is read from a listing's `Date` header, whatever this machine's
/// says (a scripted endpoint two years ahead).
#[tokio::test]
async fn retention_goes_by_the_service_clock() {
    use tablevault_tests::mock_server::{MockServer, Reply};
    let listing = r#"<?xml version="1.0" encoding="utf-8"?><EnumerationResults ContainerName="c"><Blobs /><NextMarker /></EnumerationResults>"#;
    let server = MockServer::start(vec![Reply::new(
        200,
        &[
            ("Content-Type", "application/xml"),
            ("Date", "Tue, 01 Jan 2030 00:00:00 GMT"),
        ],
        listing,
    )])
    .await;
    let account = StorageAccount::from_connection_string(&format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={};BlobEndpoint={}",
        tablevault_azure::config::EMULATOR_KEY,
        server.endpoint()
    ))
    .unwrap();
    let store = Store::new(Arc::new(
        tablevault_azure::blob::BlobClient::new(&account, "clock").unwrap(),
    ));
    assert_eq!(
        retention::service_now(&store).await.unwrap(),
        1_893_456_000,
        "2030-01-01T00:00:00Z"
    );
}

/// Regression: backups are ranked by when they were planned, by their coordinator's
/// clock. A coordinator ten minutes slow planned the newer of two backups under the older
/// time, and `--keep-last 1` removed it, the only backup of the table's current state.
/// The newest complete backup by the service's clock (its manifest's write) stays too.
#[tokio::test]
async fn the_newest_backup_by_the_service_clock_stays() {
    let s = numbered("order", 2, 20).await;
    let blobs = store(&s.t);
    let back_up = || async {
        run_backup(
            &backup_of(&s.env.account, &s.table),
            &s.t,
            &watch_opts(1, &s.env.account),
        )
        .await
        .unwrap()
        .backup_id
    };
    let older = back_up().await;
    // Manifests a second apart at least, as the service dates them.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let newer = back_up().await;
    // The newer one's coordinator was ten minutes slow.
    let slow = retention::now() - 600;
    let p = BackupPaths::new(&newer);
    let mut job: BackupJob = blobs.read(&p.job()).await.unwrap().unwrap();
    job.created_at = rfc3339(slow);
    blobs.overwrite(&p.job(), &job).await.unwrap();

    let req = keep_last_one("7d", true, retention::service_now(&blobs).await.unwrap());
    let pruned = retention::prune(&blobs, &req).await.unwrap();
    assert!(pruned.removed.is_empty(), "{:?}", pruned.removed);
    let kept = pruned.kept.iter().find(|d| d.id == newer).unwrap();
    assert!(
        kept.reasons.iter().any(|r| r.contains("newest complete")),
        "{kept:?}"
    );
    assert!(pruned.kept.iter().any(|d| d.id == older));
}
