//! The backup control plane's steps on in-memory fakes, where faults can be placed
//! between any two of them.

use std::sync::Arc;

use tablevault_core::keys::KeyRange;
use tablevault_core::protocol::{PoisonRecord, TablePlan};
use tablevault_core::testing::{MemoryBlobs, MemoryQueue, Op, Strike, busy, empty_commit};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::location::Backends;

/// A location on fakes, holding a planned one-task backup whose task was poisoned.
pub(crate) struct Fakes {
    pub blobs: Arc<MemoryBlobs>,
    pub queue: Arc<MemoryQueue>,
    pub location: Location,
    pub job: BackupJob,
}

pub(crate) async fn fakes() -> Fakes {
    let blobs = Arc::new(MemoryBlobs::new("c"));
    let queue = Arc::new(MemoryQueue::new("q"));
    let location = Location {
        account: StorageAccount::emulator(),
        container: "c".into(),
        queue: "q".into(),
        client_options: Default::default(),
        backends: Some(Backends {
            store: Store::new(blobs.clone()),
            queue: queue.clone(),
            poison: Arc::new(MemoryQueue::new("q-poison")),
        }),
    };
    let job = BackupJob {
        protocol: PROTOCOL_VERSION,
        format: tablevault_core::format::FORMAT_VERSION,
        backup_id: new_backup_id(),
        created_at: now_rfc3339(),
        source: AccountRef::of(&location.account).unwrap(),
        options: BackupOptions {
            dynamic_split: false,
            compression: Compression::Zstd,
            blocks_per_blob: 20,
            block_bytes: DEFAULT_BLOCK_BYTES,
            batch_bytes: DEFAULT_BATCH_BYTES,
            max_attempts: 5,
            queue: "q".into(),
            max_rate: None,
        },
        tables: vec![TablePlan {
            name: "Tbl".into(),
            planning: "whole".into(),
            tasks: vec![PlannedTask {
                task: "r0000".into(),
                range: KeyRange::all(),
            }],
        }],
        tool_version: "test".into(),
    };
    let store = location.store().unwrap();
    let paths = BackupPaths::new(&job.backup_id);
    store.create(&paths.job(), &job, Vec::new()).await.unwrap();
    store.mark(&paths.enqueued_marker(), "1").await.unwrap();
    let poison = PoisonRecord {
        job: job.backup_id.clone(),
        table: "Tbl".into(),
        task: "r0000".into(),
        reason: "TableNotFound".into(),
        dequeue_count: 1,
        at: now_rfc3339(),
        worker: "w".into(),
        range: Some(KeyRange::all()),
    };
    store
        .overwrite(&paths.poison("Tbl", "r0000"), &poison)
        .await
        .unwrap();
    Fakes {
        blobs,
        queue,
        location,
        job,
    }
}

fn retry_poisoned() -> StatusOptions {
    StatusOptions {
        wait: false,
        retry_poisoned: true,
    }
}

#[tokio::test]
async fn retrying_a_poisoned_task_queues_it_before_forgetting_its_record() {
    let f = fakes().await;
    let opts = WatchOptions::new(CancellationToken::new());
    f.queue
        .fail(Op::Put, "", Strike::Before, busy("Put Message"));
    let id = f.job.backup_id.clone();
    assert!(
        status(&f.location, &id, retry_poisoned(), &opts)
            .await
            .is_err()
    );
    let poison_path = BackupPaths::new(&id).poison("Tbl", "r0000");
    assert!(
        f.blobs.blob(&poison_path).is_some(),
        "the task is still poisoned with its record, not neither queued nor poisoned"
    );
    // Once the queue works, the task is queued and the record goes.
    let report = status(&f.location, &id, retry_poisoned(), &opts)
        .await
        .unwrap();
    assert_eq!(report.status, JobStatus::InProgress);
    assert_eq!(f.queue.texts().len(), 1);
    assert!(f.blobs.blob(&poison_path).is_none());
}

#[tokio::test]
async fn a_failed_enqueue_names_the_job_and_how_to_carry_on() {
    let f = fakes().await;
    let store = f.location.store().unwrap();
    let marker = BackupPaths::new(&f.job.backup_id).enqueued_marker();
    store.delete(&marker).await.unwrap();
    f.queue
        .fail(Op::Put, "", Strike::Before, busy("Put Message"));
    let err = enqueue(&f.location, &f.job, None).await.unwrap_err();
    let text = err.to_string();
    let id = &f.job.backup_id;
    assert!(
        text.contains(&format!("tablevault status {id} --wait")),
        "{text}"
    );
    assert!(text.contains("0 of 1 task messages"), "{text}");
    assert!(text.contains("ServerBusy"), "{text}");
    // The marker is not written, so `status --wait` queues what is missing.
    assert!(!store.exists(&marker).await.unwrap());
}

/// Fakes whose one task is outstanding (not poisoned).
async fn outstanding() -> Fakes {
    let f = fakes().await;
    let path = BackupPaths::new(&f.job.backup_id).poison("Tbl", "r0000");
    f.location.store().unwrap().delete(&path).await.unwrap();
    f
}

fn quick_watch(stall: std::time::Duration) -> WatchOptions {
    let mut opts = WatchOptions::new(CancellationToken::new());
    opts.stall_timeout = stall;
    opts
}

#[tokio::test(start_paused = true)]
async fn a_watch_with_nobody_working_says_so_instead_of_waiting_forever() {
    let f = outstanding().await;
    let opts = quick_watch(std::time::Duration::from_secs(60));
    let started = tokio::time::Instant::now();
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(3600),
        watch(&f.location, f.job.clone(), &opts),
    )
    .await
    .expect("the watch ends")
    .unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(70));
    let text = err.to_string();
    assert!(
        text.contains("tablevault-worker") && text.contains("--wait"),
        "{text}"
    );
    assert!(matches!(err, Error::Stalled(_)));
}

#[tokio::test(start_paused = true)]
async fn heartbeats_keep_a_quiet_job_alive() {
    let f = outstanding().await;
    let store = f.location.store().unwrap();
    let beat = format!(
        "{}worker-1",
        BackupPaths::new(&f.job.backup_id).heartbeats_root()
    );
    let beating = tokio::spawn(async move {
        for i in 0..30 {
            store.overwrite(&beat, &i).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_secs(20)).await;
        }
    });
    let opts = quick_watch(std::time::Duration::from_secs(60));
    let started = tokio::time::Instant::now();
    let err = watch(&f.location, f.job.clone(), &opts).await.unwrap_err();
    let waited = started.elapsed();
    beating.await.unwrap();
    assert!(matches!(err, Error::Stalled(_)));
    assert!(
        waited >= std::time::Duration::from_secs(600),
        "alive while heartbeats changed, stalled only after they stopped: {waited:?}"
    );
}

struct DyingWorkers;

struct Dead(Arc<tablevault_core::stats::WorkerStats>);

#[async_trait::async_trait]
impl crate::RunningWorkers for Dead {
    fn stats(&self) -> Arc<tablevault_core::stats::WorkerStats> {
        self.0.clone()
    }
    fn stopped(&mut self) -> Option<String> {
        Some("Get Messages: HTTP 403 AuthorizationFailure".into())
    }
    async fn stop(self: Box<Self>) {}
}

impl crate::LocalWorkers for DyingWorkers {
    fn start(&self, _: &Location, _: &str) -> Result<Box<dyn crate::RunningWorkers>> {
        Ok(Box::new(Dead(Default::default())))
    }
}

#[tokio::test(start_paused = true)]
async fn a_dead_in_process_worker_fails_the_watch() {
    let f = outstanding().await;
    let mut opts = quick_watch(std::time::Duration::from_secs(3600));
    opts.workers = Some(Arc::new(DyingWorkers));
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        watch(&f.location, f.job.clone(), &opts),
    )
    .await
    .expect("the watch ends")
    .unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_enqueue_ends_the_watch_it_overlaps() {
    let f = outstanding().await;
    let store = f.location.store().unwrap();
    let marker = BackupPaths::new(&f.job.backup_id).enqueued_marker();
    store.delete(&marker).await.unwrap();
    f.queue
        .fail(Op::Put, "", Strike::Before, busy("Put Message"));
    // Nobody works on the job: without the enqueue's error, the watch would wait for
    // its stall timeout.
    let opts = quick_watch(std::time::Duration::from_secs(3600));
    let started = tokio::time::Instant::now();
    let err = enqueue_and_watch(&f.location, f.job.clone(), None, &opts)
        .await
        .unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    let text = err.to_string();
    assert!(
        text.contains("0 of 1 task messages") && text.contains("--wait"),
        "{text}"
    );
    assert!(!store.exists(&marker).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_job_enqueued_while_watched_is_marked_enqueued_when_it_completes() {
    let f = outstanding().await;
    let store = f.location.store().unwrap();
    let paths = BackupPaths::new(&f.job.backup_id);
    store.delete(&paths.enqueued_marker()).await.unwrap();
    let job = f.job.clone();
    let location = f.location.clone();
    // A "worker": once the task is on the queue, it commits an empty range record.
    let queue = f.queue.clone();
    let worker = tokio::spawn(async move {
        while queue.texts().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let record = empty_commit(&job.backup_id, "Tbl", "r0000");
        let store = location.store().unwrap();
        store
            .create(
                &BackupPaths::new(&job.backup_id).commit("Tbl", "r0000"),
                &record,
                Vec::new(),
            )
            .await
            .unwrap();
    });
    let opts = quick_watch(std::time::Duration::from_secs(3600));
    let report = enqueue_and_watch(&f.location, f.job.clone(), None, &opts)
        .await
        .unwrap();
    worker.await.unwrap();
    assert_eq!(report.status, JobStatus::Complete);
    assert_eq!(f.queue.texts().len(), 1);
    assert!(store.exists(&paths.enqueued_marker()).await.unwrap());
    assert!(store.exists(&paths.manifest()).await.unwrap());
}
