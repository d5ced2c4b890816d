//! Ending a claimed message's life: delete it when its task is done, give it back for a
//! retry (recording the error in it), hand a foreign task back without spending one of
//! its deliveries, or poison it (a record next to the job, a copy with the reason on the
//! poison queue). Every worker settles messages through a [`Settler`].

use std::sync::Arc;
use std::time::Duration;

use tablevault_core::keys::KeyRange;
use tablevault_core::protocol::{PoisonEntry, PoisonRecord, TaskMessage, handed_back, now_rfc3339};
use tablevault_core::queue::{ReceivedMessage, TaskQueue};
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::Store;

use crate::TaskError;
use crate::lease::Lease;
use crate::metrics::{Kind, WorkerMetrics};

/// Settles messages of one task queue.
#[derive(Clone)]
pub struct Settler {
    queue: Arc<dyn TaskQueue>,
    poison: Arc<dyn TaskQueue>,
    stats: Arc<WorkerStats>,
    metrics: Arc<WorkerMetrics>,
    identity: String,
    /// Until when this worker claims nothing, having offered tasks it cannot run
    /// ([`step_aside`]); shared by the worker's clones.
    aside_until: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
}

/// Where a task's poison record goes.
pub struct PoisonTarget<'a> {
    /// The job's store.
    pub store: &'a Store,
    /// The record's path.
    pub path: &'a str,
    /// The task.
    pub task: &'a TaskMessage,
    /// The keys it would have written.
    pub range: Option<KeyRange>,
}

/// The delay before a task is offered again after its `n`th hand-back: 2 s, doubling,
/// at most 10 minutes. Short at first: another worker that can run it is likely idle and
/// polling (at 30 s, doubling, an idle worker of another account claimed each task
/// again as it reappeared, and a restore of 12 s took over 12 minutes).
pub fn offer_delay(n: u64) -> Duration {
    Duration::from_secs(
        2u64.saturating_mul(1 << n.saturating_sub(1).min(9))
            .min(600),
    )
}

/// Past a young offer's reappearance, the margin a worker that offered it keeps from
/// claiming: other workers' idle polls are at most a second apart
/// ([`MAX_POLL_INTERVAL`](crate::worker::MAX_POLL_INTERVAL)).
const STEP_ASIDE_MARGIN: Duration = Duration::from_secs(3);

/// How long a worker claims nothing after its `n`th offer of a task: until a worker
/// that can run the task has claimed it where it reappears. A worker that cannot run a
/// task and is idle otherwise polls as often as the ones that can, and took a task back
/// each time it reappeared (the offers then doubling). Only for the first four offers
/// (up to 19 s): a task offered more often likely has no taker, and stepping aside for
/// it would hold up this worker's own work.
pub fn step_aside(n: u64) -> Option<Duration> {
    (n <= 4).then(|| offer_delay(n) + STEP_ASIDE_MARGIN)
}

/// The delay before a failed task is tried again: longer with each delivery.
pub fn retry_delay(dequeue_count: u64) -> Duration {
    Duration::from_secs((5 * dequeue_count).min(120))
}

impl Settler {
    /// A settler for a task queue and its poison queue.
    pub fn new(
        queue: Arc<dyn TaskQueue>,
        poison: Arc<dyn TaskQueue>,
        stats: Arc<WorkerStats>,
        metrics: Arc<WorkerMetrics>,
        identity: &str,
    ) -> Self {
        Settler {
            queue,
            poison,
            stats,
            metrics,
            identity: identity.to_string(),
            aside_until: Arc::default(),
        }
    }

    /// Until when the worker claims nothing, having just offered a task it cannot run
    /// to the others; `None` once that has passed.
    pub fn stepping_aside(&self) -> Option<tokio::time::Instant> {
        let until = (*self.aside_until.lock().expect("step aside"))?;
        (until > tokio::time::Instant::now()).then_some(until)
    }

    /// The task queue.
    pub fn queue(&self) -> &Arc<dyn TaskQueue> {
        &self.queue
    }

    /// The poison queue.
    pub fn poison_queue(&self) -> &Arc<dyn TaskQueue> {
        &self.poison
    }

    /// Acts on an attempt's end: delete the message when done, give it back on a
    /// transient failure (recording the error in it), poison it on a permanent one.
    pub async fn settle(
        &self,
        lease: Lease,
        outcome: Result<(), TaskError>,
        message: &ReceivedMessage,
        poison: PoisonTarget<'_>,
    ) {
        match outcome {
            Ok(()) => {
                self.stats.changed.notify_one();
                if let Err(e) = lease.complete().await {
                    tracing::warn!(error = %e, "task done but its message could not be deleted; a duplicate delivery will be dropped");
                }
            }
            Err(TaskError::Lost) => {
                self.metrics.lease_lost();
                tracing::warn!("lost the message mid-task; another worker has it");
            }
            Err(TaskError::Shutdown) => {
                // Not the task's fault: hand it back with all its deliveries.
                let receipt = lease.stop().await;
                self.hand_back(message, &receipt, Duration::ZERO).await;
            }
            Err(TaskError::Transient(why)) => {
                WorkerStats::add(&self.stats.tasks_retried, 1);
                self.stats.note_failure(&why);
                self.metrics.failed(Kind::of(&poison.task.kind));
                let delay = retry_delay(message.dequeue_count);
                tracing::warn!(reason = %why, retry_in_s = delay.as_secs(), "task failed; it will be retried");
                let text = poison.task.encode_with_last_error(&why);
                if let Err(e) = lease.release(delay, Some(&text)).await {
                    tracing::warn!(error = %e, "could not give the message back; it reappears when its lease lapses");
                }
            }
            Err(TaskError::Permanent(why)) => {
                let receipt = lease.stop().await;
                self.poison_task(poison, message, &receipt, &why).await;
            }
        }
    }

    /// Offers a task this worker cannot run (it holds no credentials for the job's
    /// account) to the other workers: handed back without spending a delivery, but later
    /// each time, so a task nobody can take does not spin on the queue. The watching
    /// coordinator reports the job as stalled.
    ///
    /// While the offer is young, the worker then steps aside ([`step_aside`]).
    pub async fn offer_to_others(&self, message: &ReceivedMessage, receipt: &str) {
        let (text, n) = handed_back(&message.text);
        let delay = offer_delay(n);
        if let Some(aside) = step_aside(n) {
            let until = tokio::time::Instant::now() + aside;
            let mut current = self.aside_until.lock().expect("step aside");
            *current = Some(current.map_or(until, |c| c.max(until)));
        }
        tracing::warn!(
            offered = n,
            retry_in_s = delay.as_secs(),
            "no credentials for this task's account; offering it to other workers"
        );
        let again = ReceivedMessage {
            text,
            ..message.clone()
        };
        self.hand_back(&again, receipt, delay).await;
    }

    /// Gives a message we will not work on back without spending one of its deliveries:
    /// a fresh copy goes on the queue (dequeue count 0) and the claimed one is deleted.
    /// `receipt` is the message's current pop receipt.
    pub async fn hand_back(&self, message: &ReceivedMessage, receipt: &str, delay: Duration) {
        match self.queue.put(&message.text, Some(delay)).await {
            Ok(()) => {
                let _ = self.queue.delete(&message.message_id, receipt).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not re-queue a task; releasing it");
                let _ = self
                    .queue
                    .update(&message.message_id, receipt, delay, None)
                    .await;
            }
        }
    }

    /// Gives a task up: first its poison record next to the job, then the message moves
    /// to the poison queue (using `receipt`, the message's current pop receipt). If the
    /// record cannot be written the message is given back instead, so the task is always
    /// queued or poisoned with its record, never neither.
    pub async fn poison_task(
        &self,
        target: PoisonTarget<'_>,
        message: &ReceivedMessage,
        receipt: &str,
        reason: &str,
    ) {
        let task = target.task;
        let record = PoisonRecord {
            job: task.job.clone(),
            table: task.table.clone(),
            task: task.task.clone(),
            reason: reason.to_string(),
            dequeue_count: message.dequeue_count,
            at: now_rfc3339(),
            worker: self.identity.clone(),
            range: target.range.clone(),
        };
        if let Err(e) = target.store.overwrite(target.path, &record).await {
            tracing::warn!(error = %e, "could not write the poison record; giving the task back to poison it later");
            let delay = retry_delay(message.dequeue_count);
            let _ = self
                .queue
                .update(&message.message_id, receipt, delay, None)
                .await;
            return;
        }
        WorkerStats::add(&self.stats.tasks_poisoned, 1);
        self.metrics.poisoned(Kind::of(&task.kind));
        tracing::error!(
            reason,
            "task poisoned: it will not be retried and its job cannot complete"
        );
        self.move_to_poison(message, receipt, reason, Some(task))
            .await;
        self.stats.changed.notify_one();
    }

    /// Moves a message to the poison queue with the reason, untouched otherwise: the copy
    /// is put first, then the original deleted with `receipt`, its current pop receipt.
    pub async fn move_to_poison(
        &self,
        message: &ReceivedMessage,
        receipt: &str,
        reason: &str,
        task: Option<&TaskMessage>,
    ) {
        let entry = PoisonEntry {
            reason: reason.to_string(),
            dequeue_count: message.dequeue_count,
            job: task.map(|t| t.job.clone()),
            table: task.map(|t| t.table.clone()),
            task: task.map(|t| t.task.clone()),
            original: message.text.clone(),
            at: now_rfc3339(),
            worker: self.identity.clone(),
        };
        match self.poison.put(&entry.encode(), None).await {
            Ok(()) => {
                let _ = self.queue.delete(&message.message_id, receipt).await;
            }
            Err(e) => {
                tracing::error!(error = %e, "could not move the message to the poison queue; it will be redelivered")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablevault_core::protocol::{PROTOCOL_VERSION, TaskKind, last_error};
    use tablevault_core::testing::{MemoryBlobs, MemoryQueue, Op, Strike, busy};

    struct Fixture {
        queue: Arc<MemoryQueue>,
        poison: Arc<MemoryQueue>,
        blobs: Arc<MemoryBlobs>,
        store: Store,
        settler: Settler,
        task: TaskMessage,
    }

    fn fixture() -> Fixture {
        let queue = Arc::new(MemoryQueue::new("q"));
        let poison = Arc::new(MemoryQueue::new("q-poison"));
        let blobs = Arc::new(MemoryBlobs::new("c"));
        Fixture {
            settler: Settler::new(
                queue.clone(),
                poison.clone(),
                Arc::new(WorkerStats::default()),
                Arc::new(WorkerMetrics::new()),
                "test-worker",
            ),
            store: Store::new(blobs.clone()),
            queue,
            poison,
            blobs,
            task: TaskMessage {
                v: PROTOCOL_VERSION,
                container: "c".into(),
                job: "job1".into(),
                table: "Tbl".into(),
                task: "r0000".into(),
                kind: TaskKind::Backup {
                    range: KeyRange::all(),
                    ceiling: None,
                    estimate: None,
                },
            },
        }
    }

    async fn claim(f: &Fixture) -> (ReceivedMessage, Lease) {
        f.queue.put(&f.task.encode(), None).await.unwrap();
        let m = f
            .queue
            .receive(1, Duration::from_secs(30))
            .await
            .unwrap()
            .remove(0);
        let lease = Lease::start(
            f.queue.clone(),
            &m,
            Duration::from_secs(30),
            Duration::from_secs(30),
        );
        (m, lease)
    }

    fn target<'a>(f: &'a Fixture) -> PoisonTarget<'a> {
        PoisonTarget {
            store: &f.store,
            path: "job1/poison/Tbl/r0000.json",
            task: &f.task,
            range: Some(KeyRange::all()),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn done_deletes_the_message() {
        let f = fixture();
        let (m, lease) = claim(&f).await;
        f.settler.settle(lease, Ok(()), &m, target(&f)).await;
        assert!(f.queue.texts().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_gives_the_message_back_later_with_the_error() {
        let f = fixture();
        let (m, lease) = claim(&f).await;
        let outcome = Err(TaskError::Transient("HTTP 503 ServerBusy".into()));
        f.settler.settle(lease, outcome, &m, target(&f)).await;
        let snapshot = f.queue.snapshot();
        assert_eq!(snapshot.len(), 1);
        assert!(!snapshot[0].2, "not visible at once");
        assert_eq!(
            last_error(&snapshot[0].0).as_deref(),
            Some("HTTP 503 ServerBusy")
        );
        tokio::time::sleep(retry_delay(1) + Duration::from_secs(1)).await;
        assert!(f.queue.snapshot()[0].2, "visible after the retry delay");
        assert!(f.poison.texts().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_permanent_failure_poisons_the_task_with_its_record() {
        let f = fixture();
        let (m, lease) = claim(&f).await;
        let outcome = Err(TaskError::Permanent("TableNotFound".into()));
        f.settler.settle(lease, outcome, &m, target(&f)).await;
        assert!(f.queue.texts().is_empty(), "gone from the task queue");
        let poisoned = f.poison.texts();
        assert_eq!(poisoned.len(), 1);
        let entry = PoisonEntry::decode(&poisoned[0]).unwrap();
        assert_eq!(entry.reason, "TableNotFound");
        assert_eq!(entry.original, f.task.encode());
        let record: PoisonRecord = f
            .store
            .read("job1/poison/Tbl/r0000.json")
            .await
            .unwrap()
            .expect("a poison record next to the job");
        assert_eq!((record.task.as_str(), record.dequeue_count), ("r0000", 1));
        assert_eq!(
            record.range,
            Some(KeyRange::all()),
            "what is missing is named"
        );
        assert_eq!(f.blobs.names().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_is_not_dropped_when_its_poison_record_cannot_be_written() {
        let f = fixture();
        let (m, lease) = claim(&f).await;
        f.blobs
            .fail(Op::PutBlob, "/poison/", Strike::Before, busy("Put Blob"));
        let outcome = Err(TaskError::Permanent("TableNotFound".into()));
        f.settler.settle(lease, outcome, &m, target(&f)).await;
        assert!(
            f.poison.texts().is_empty(),
            "not poisoned without its record"
        );
        assert_eq!(
            f.queue.texts().len(),
            1,
            "the message stays, so the task is queued or poisoned, never neither"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn poisoning_after_a_lease_extension_uses_the_current_receipt() {
        let f = fixture();
        let (m, lease) = claim(&f).await;
        // The keeper extends at a third of the visibility: the claim's receipt is stale.
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(f.queue.calls(Op::Update) >= 1);
        let outcome = Err(TaskError::Permanent("TableNotFound".into()));
        f.settler.settle(lease, outcome, &m, target(&f)).await;
        assert_eq!(f.poison.texts().len(), 1);
        assert!(
            f.queue.texts().is_empty(),
            "the original is deleted, not redelivered and poisoned again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_graceful_shutdown_does_not_spend_a_delivery() {
        let f = fixture();
        let (m, lease) = claim(&f).await;
        tokio::time::sleep(Duration::from_secs(11)).await; // a lease extension happened
        f.settler
            .settle(lease, Err(TaskError::Shutdown), &m, target(&f))
            .await;
        assert_eq!(
            f.queue.snapshot(),
            vec![(f.task.encode(), 0, true)],
            "visible at once, with all its deliveries"
        );
    }

    #[test]
    fn offers_grow_rarer() {
        let delays: Vec<u64> = (1..=11).map(|n| offer_delay(n).as_secs()).collect();
        assert_eq!(delays, vec![2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]);
        let aside: Vec<Option<u64>> = (1..=6)
            .map(|n| step_aside(n).map(|d| d.as_secs()))
            .collect();
        assert_eq!(
            aside,
            vec![Some(5), Some(7), Some(11), Some(19), None, None]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_touches_nothing() {
        let f = fixture();
        let (m, lease) = claim(&f).await;
        f.settler
            .settle(lease, Err(TaskError::Lost), &m, target(&f))
            .await;
        assert_eq!(f.queue.texts().len(), 1);
        assert!(f.poison.texts().is_empty() && f.blobs.names().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_handed_back_task_keeps_all_its_deliveries() {
        let f = fixture();
        let (m, lease) = claim(&f).await;
        let receipt = lease.stop().await;
        f.settler.hand_back(&m, &receipt, Duration::ZERO).await;
        assert_eq!(f.queue.snapshot(), vec![(f.task.encode(), 0, true)]);
    }
}
