//! One watch loop for every kind of job: read the job's records as they appear, show
//! progress, and stop when the job is settled or the watch is cancelled. In-process
//! workers, when the caller provides them ([`LocalWorkers`]), are started for the job and
//! stopped at the end; their counters feed the progress and wake the loop on every
//! finished task.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tablevault_core::protocol::JobStatus;
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::Store;
use tokio_util::sync::CancellationToken;

use std::collections::HashMap;

use crate::{Error, Location, Result};

/// A look at a job's records lists them all (a Blob listing the service pays for per
/// record), so the next look waits this many times as long as the last one took, when
/// that is longer than the poll interval: watching a job of many thousand records stays
/// a small share of what the store serves.
const REFRESH_GAP_FACTOR: u32 = 10;

/// The longest wait between looks, however long the last one took: a look slowed by
/// timeouts and retries through a storage outage says nothing of the job's size. Uncapped,
/// a 40 s pause of the emulator spaced the next look 6 minutes out, and a backup complete
/// after 66 s returned after 406 s, reporting that as its duration (ninth audit, concurrent jobs).
const MAX_REFRESH_GAP: Duration = Duration::from_secs(15);

/// What a progress display is shown.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Tasks finished.
    pub tasks_done: u64,
    /// Tasks known.
    pub tasks_total: u64,
    /// Entities processed so far.
    pub entities: u64,
    /// Bytes written so far.
    pub bytes: u64,
    /// Tasks poisoned.
    pub poisoned: u64,
    /// Entities the job is expected to process: a restore's from its backup's manifest,
    /// a backup's from the last complete backup of the same tables (`None` when unknown:
    /// progress is then told by tasks).
    pub entities_expected: Option<u64>,
}

/// Shows a job's progress (a bar on a terminal, log lines elsewhere).
pub trait Progress: Send + Sync {
    /// The latest snapshot.
    fn update(&self, snapshot: Snapshot);
    /// The watch is over.
    fn finish(&self);
    /// A new phase of the same command starts (a restore's read-back after writing):
    /// the display starts over under this name.
    fn phase(&self, _name: &'static str) {}
}

/// Starts workers in the watching process, serving only the watched job.
pub trait LocalWorkers: Send + Sync {
    /// Starts them on the location's queue, for job `job`.
    fn start(&self, location: &Location, job: &str) -> Result<Box<dyn RunningWorkers>>;
}

/// In-process workers of one watch.
#[async_trait]
pub trait RunningWorkers: Send {
    /// Their shared live counters (and the signal that a task finished).
    fn stats(&self) -> Arc<WorkerStats>;
    /// Why a worker stopped on its own, if one did since the last call.
    fn stopped(&mut self) -> Option<String>;
    /// Stops them; tasks in flight give their messages back.
    async fn stop(self: Box<Self>);
}

/// How to watch a job.
#[derive(Clone)]
pub struct WatchOptions {
    /// Workers to run in this process while watching; `None` only watches.
    pub workers: Option<Arc<dyn LocalWorkers>>,
    /// How often to look at the job's records.
    pub poll: Duration,
    /// Stops the watch (and in-process workers) when cancelled.
    pub shutdown: CancellationToken,
    /// Where progress goes; `None` shows nothing.
    pub progress: Option<Arc<dyn Progress>>,
    /// How long the job may go without any task finishing, any worker's heartbeat and any
    /// in-process progress before the watch gives up and says nothing is working on it.
    pub stall_timeout: Duration,
}

/// Default of [`WatchOptions::stall_timeout`]: workers rewrite their heartbeat every 20 s,
/// so five minutes without one means nobody is there.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(300);

impl WatchOptions {
    /// Only watch, polling twice a second, showing nothing.
    pub fn new(shutdown: CancellationToken) -> Self {
        WatchOptions {
            workers: None,
            poll: Duration::from_millis(500),
            shutdown,
            progress: None,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
        }
    }
}

/// A job as the watch loop sees it.
#[async_trait]
pub(crate) trait Watched: Send + Sync {
    /// Reads records that appeared since the last call.
    async fn refresh(&mut self, store: &Store) -> Result<()>;
    /// Progress, with the in-process workers' live counters when there are some.
    fn snapshot(&self, live: Option<&WorkerStats>) -> Snapshot;
    /// `Some` once the job needs no more watching, with its status.
    fn settled(&mut self) -> Result<Option<JobStatus>>;
    /// Records read so far: when this grows, tasks are finishing.
    fn records_seen(&self) -> usize;
    /// Tasks the job was planned with (a backup's workers may split off more).
    fn planned_tasks(&self) -> u64;
    /// Where workers of this job leave their heartbeats.
    fn heartbeats_root(&self) -> String;
    /// How to carry the job on after this watch gives up.
    fn resume_hint(&self) -> String;
    /// A blob whose appearance says the job has most likely settled (a backup's
    /// manifest, written by the worker that commits its last task): checked between
    /// looks, one request each [`MARKER_POLL`], so a watch of other machines' workers
    /// ends with the job rather than up to [`MAX_REFRESH_GAP`] later.
    fn finish_marker(&self) -> Option<String> {
        None
    }
}

/// How often the watch asks whether the job's finish marker has appeared.
const MARKER_POLL: Duration = Duration::from_secs(1);

/// Tells whether anything is happening to a job: new records, rewritten heartbeats, or
/// in-process workers' counters moving. Only this process's clock is used (heartbeats are
/// compared by ETag, never by time), so clock skew between machines cannot fool it.
struct Liveness {
    last_progress: tokio::time::Instant,
    records: usize,
    live_entities: u64,
    heartbeats: HashMap<String, String>,
}

impl Liveness {
    fn new() -> Self {
        Liveness {
            last_progress: tokio::time::Instant::now(),
            records: 0,
            live_entities: 0,
            heartbeats: HashMap::new(),
        }
    }

    fn moved(&mut self) {
        self.last_progress = tokio::time::Instant::now();
    }

    /// Updates from the latest look at the job; returns how long nothing has moved.
    async fn observe(
        &mut self,
        store: &Store,
        state: &dyn Watched,
        live: Option<&WorkerStats>,
    ) -> Duration {
        if state.records_seen() != self.records {
            self.records = state.records_seen();
            self.moved();
        }
        if let Some(live) = live {
            let n = WorkerStats::get(&live.entities);
            if n != self.live_entities {
                self.live_entities = n;
                self.moved();
            }
        }
        let idle = self.last_progress.elapsed();
        if idle >= HEARTBEAT_CHECK_AFTER {
            match store.blobs().list(&state.heartbeats_root(), None).await {
                Ok(listing) => {
                    for b in listing.blobs {
                        if self.heartbeats.get(&b.name) != Some(&b.etag) {
                            self.heartbeats.insert(b.name, b.etag);
                            self.moved();
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "cannot list heartbeats"),
            }
        }
        self.last_progress.elapsed()
    }
}

/// Heartbeats are only looked at after this long without other signs of progress.
const HEARTBEAT_CHECK_AFTER: Duration = Duration::from_secs(10);

/// How long after a look began the next begins, unless the in-process workers have just
/// finished every task they know of: the poll interval, or ten times what the look took.
///
/// Looks mid-job refresh the progress shown and see what other workers commit; the end
/// of the in-process workers' share is seen at once ([`local_work_done`]). Looking after
/// each burst of commits instead (20-250 ms apart) cost a backup of 200 small tables a
/// listing of up to 400 records every few pages: up to 8% of its rate on the emulator,
/// whose one Blob thread also stores every block.
/// A look that failed is followed after the poll interval. At most [`MAX_REFRESH_GAP`]
/// (or the poll interval, if longer).
fn refresh_gap(look_took: Duration, looked: bool, poll: Duration) -> Duration {
    if !looked {
        return poll;
    }
    (look_took * REFRESH_GAP_FACTOR).clamp(poll, MAX_REFRESH_GAP.max(poll))
}

/// Whether the in-process workers have finished as many tasks as they know of (the
/// planned ones and those they split off): then the job is most likely done, and the
/// look that confirms it need not wait out the spacing meant for commits mid-job. If
/// other workers share the job, this only comes true early and costs one look.
fn local_work_done(planned: u64, stats: &WorkerStats) -> bool {
    let known = planned + WorkerStats::get(&stats.tasks_split);
    let done = WorkerStats::get(&stats.tasks_committed) + WorkerStats::get(&stats.tasks_poisoned);
    done >= known
}

/// Why a watch that runs workers of its own stops after `idle` without progress:
/// their tasks kept failing, most likely on storage that does not answer. (It said to
/// start workers or pass `--workers N`, which the command had done: audit 12, a
/// restore through a 150 s hang of the emulator.)
fn local_stall(job_id: &str, idle: Duration, stats: &WorkerStats, resume: &str) -> String {
    let retried = WorkerStats::get(&stats.tasks_retried);
    let failures = match stats.last_failure() {
        Some(why) if retried > 0 => {
            format!("; their tasks were given back for a retry {retried} times, the last: {why}")
        }
        _ => String::new(),
    };
    format!(
        "nothing has progressed on job {job_id} for {} s, though this command runs workers: \
         no task finished and none read or wrote an entity{failures}. The storage may not be \
         answering (the warnings above name each operation and host); fix the cause, then {resume}",
        idle.as_secs()
    )
}

/// Watches `job` until it settles or the watch is cancelled (then `Interrupted`).
pub(crate) async fn watch(
    location: &Location,
    job_id: &str,
    state: &mut dyn Watched,
    opts: &WatchOptions,
) -> Result<JobStatus> {
    let store = location.store()?;
    let store = &store;
    let mut workers = match &opts.workers {
        Some(w) => {
            // Their records need not be read back while their ETags stand.
            tablevault_core::store::remember_created_records();
            Some(w.start(location, job_id)?)
        }
        None => None,
    };
    let stats = workers.as_ref().map(|w| w.stats());
    let mut liveness = Liveness::new();
    let outcome = async {
        loop {
            let look = tokio::time::Instant::now();
            let looked = match state.refresh(store).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the job's state; retrying");
                    false
                }
            };
            let look_took = look.elapsed();
            if let Some(p) = &opts.progress {
                p.update(state.snapshot(stats.as_deref()));
            }
            if let Some(status) = state.settled()? {
                return Ok(status);
            }
            if let Some(why) = workers.as_mut().and_then(|w| w.stopped()) {
                return Err(Error::Stalled(format!(
                    "a worker of this process stopped: {why}; {}",
                    state.resume_hint()
                )));
            }
            let idle = liveness.observe(store, state, stats.as_deref()).await;
            if idle >= opts.stall_timeout {
                let resume = state.resume_hint();
                return Err(Error::Stalled(match &stats {
                    Some(stats) => local_stall(job_id, idle, stats, &resume),
                    None => format!(
                        "nothing has worked on job {job_id} for {} s: no task finished and no \
                         worker reported progress. Start `tablevault-worker` on queue {:?} with \
                         credentials for the job's accounts, or run this command with \
                         --workers N; then {resume}",
                        idle.as_secs(),
                        location.queue,
                    ),
                }));
            }
            // Wakes when a task of the in-process workers ends and they have finished
            // every task they know of (not before a task ends: if other workers hold the
            // rest, looking at once again would only spin).
            let local_done = async {
                let Some(s) = &stats else {
                    return std::future::pending().await;
                };
                let planned = state.planned_tasks();
                loop {
                    s.changed.notified().await;
                    if local_work_done(planned, s) {
                        return;
                    }
                }
            };
            // Wakes when the job's finish marker appears: the workers are elsewhere,
            // and looks spaced for a long job's listings came up to 15 s after its end
            // (its duration then reported that much too long: audit 13).
            let marker = state.finish_marker();
            let marker_seen = async {
                let Some(path) = &marker else {
                    return std::future::pending().await;
                };
                loop {
                    tokio::time::sleep(MARKER_POLL).await;
                    if matches!(store.exists(path).await, Ok(true)) {
                        return;
                    }
                }
            };
            tokio::select! {
                _ = opts.shutdown.cancelled() => return Ok(JobStatus::Interrupted),
                _ = local_done => {}
                _ = marker_seen => {}
                _ = tokio::time::sleep_until(look + refresh_gap(look_took, looked, opts.poll)) => {}
            }
        }
    }
    .await;
    if let Some(w) = workers {
        w.stop().await;
    }
    if let Some(p) = &opts.progress {
        p.finish();
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[test]
    fn looks_are_spaced_by_the_poll_interval_or_what_the_last_one_cost() {
        let poll = Duration::from_millis(500);
        // A small job's listing takes milliseconds: the poll interval spaces looks.
        assert_eq!(refresh_gap(Duration::from_millis(3), true, poll), poll);
        assert_eq!(refresh_gap(Duration::ZERO, true, poll), poll);
        // A job of many thousand records is listed for a tenth of the time at most.
        assert_eq!(
            refresh_gap(Duration::from_millis(400), true, poll),
            Duration::from_secs(4)
        );
    }

    /// Regression (ninth audit): a look slowed by retries through a 40 s storage
    /// outage spaced the next one 6 minutes out, so a backup complete after 66 s
    /// returned after 406 s. Looks are at most 15 s apart, and a failed one is followed
    /// after the poll interval.
    #[test]
    fn a_look_slowed_by_an_outage_does_not_space_the_next_far_out() {
        let poll = Duration::from_millis(500);
        assert_eq!(
            refresh_gap(Duration::from_secs(40), true, poll),
            MAX_REFRESH_GAP
        );
        assert_eq!(refresh_gap(Duration::from_secs(90), false, poll), poll);
        // A poll interval longer than the cap stands.
        let slow_poll = Duration::from_secs(60);
        assert_eq!(
            refresh_gap(Duration::from_secs(40), true, slow_poll),
            slow_poll
        );
    }

    /// A job of one planned task as the watch sees it: settled once `finished` is set
    /// and a look has followed; counts its looks.
    struct OneTask {
        finished: Arc<AtomicBool>,
        looks: Arc<AtomicUsize>,
        seen_finished: bool,
    }

    #[async_trait]
    impl Watched for OneTask {
        async fn refresh(&mut self, _store: &Store) -> Result<()> {
            self.looks.fetch_add(1, Ordering::SeqCst);
            self.seen_finished = self.finished.load(Ordering::SeqCst);
            Ok(())
        }
        fn snapshot(&self, _live: Option<&WorkerStats>) -> Snapshot {
            Snapshot::default()
        }
        fn settled(&mut self) -> Result<Option<JobStatus>> {
            Ok(self.seen_finished.then_some(JobStatus::Complete))
        }
        fn records_seen(&self) -> usize {
            0
        }
        fn planned_tasks(&self) -> u64 {
            1
        }
        fn heartbeats_root(&self) -> String {
            "job/heartbeats/".into()
        }
        fn resume_hint(&self) -> String {
            String::new()
        }
    }

    /// In-process workers that only have counters.
    struct Counters(Arc<WorkerStats>);

    impl LocalWorkers for Counters {
        fn start(&self, _: &Location, _: &str) -> Result<Box<dyn RunningWorkers>> {
            Ok(Box::new(Counters(self.0.clone())))
        }
    }

    #[async_trait]
    impl RunningWorkers for Counters {
        fn stats(&self) -> Arc<WorkerStats> {
            self.0.clone()
        }
        fn stopped(&mut self) -> Option<String> {
            None
        }
        async fn stop(self: Box<Self>) {}
    }

    fn location() -> Location {
        use tablevault_core::testing::{MemoryBlobs, MemoryQueue};
        Location {
            account: tablevault_azure::StorageAccount::emulator(),
            container: "c".into(),
            queue: "q".into(),
            client_options: Default::default(),
            backends: Some(crate::location::Backends {
                store: Store::new(Arc::new(MemoryBlobs::new("c"))),
                queue: Arc::new(MemoryQueue::new("q")),
                poison: Arc::new(MemoryQueue::new("q-poison")),
            }),
        }
    }

    fn options(stats: &Arc<WorkerStats>, poll: Duration) -> WatchOptions {
        WatchOptions {
            workers: Some(Arc::new(Counters(stats.clone()))),
            poll,
            ..WatchOptions::new(CancellationToken::new())
        }
    }

    /// However long the poll interval, the look after the in-process workers' last task
    /// comes at once, and the watch ends with the job.
    #[tokio::test]
    async fn the_end_of_local_work_is_seen_at_once() {
        let stats = Arc::new(WorkerStats::default());
        let finished = Arc::new(AtomicBool::new(false));
        let mut job = OneTask {
            finished: finished.clone(),
            looks: Default::default(),
            seen_finished: false,
        };
        let opts = options(&stats, Duration::from_secs(600));
        let worker = {
            let stats = stats.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                finished.store(true, Ordering::SeqCst);
                WorkerStats::add(&stats.tasks_committed, 1);
                stats.changed.notify_one();
            }
        };
        let location = location();
        let (status, ()) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(watch(&location, "job", &mut job, &opts), worker)
        })
        .await
        .expect("the watch saw the end at once, not after the poll interval");
        assert_eq!(status.unwrap(), JobStatus::Complete);
    }

    /// When the in-process workers have finished their tasks but the job is not settled
    /// (other workers hold the rest), the watch looks once per poll interval, and once
    /// more for a task that ends: it does not spin on the finished counters.
    #[tokio::test]
    async fn finished_local_workers_do_not_make_the_watch_spin() {
        let stats = Arc::new(WorkerStats::default());
        WorkerStats::add(&stats.tasks_committed, 1);
        stats.changed.notify_one();
        let looks = Arc::new(AtomicUsize::new(0));
        let mut job = OneTask {
            finished: Default::default(),
            looks: looks.clone(),
            seen_finished: false,
        };
        let mut opts = options(&stats, Duration::from_millis(200));
        let shutdown = CancellationToken::new();
        opts.shutdown = shutdown.clone();
        // A spinning watch never lets the stop run; it then ends here, stalled.
        opts.stall_timeout = Duration::from_secs(5);
        let stop = async {
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            shutdown.cancel();
        };
        let location = location();
        let (status, ()) = tokio::join!(watch(&location, "job", &mut job, &opts), stop);
        assert_eq!(status.unwrap(), JobStatus::Interrupted);
        let looks = looks.load(Ordering::SeqCst);
        // One look at the start, one for the stored wake-up, one per poll interval.
        assert!((4..=8).contains(&looks), "{looks} looks in one second");
    }

    /// Regression (audit 13): with the workers on other machines, a watch whose looks
    /// were spaced out for a long job's listings (up to 15 s) returned that long after
    /// the job's end, and reported its duration so much too long. The finish marker
    /// ends it within a second or two.
    #[tokio::test(start_paused = true)]
    async fn a_job_settled_elsewhere_is_seen_by_its_finish_marker() {
        struct Marked(OneTask);
        #[async_trait]
        impl Watched for Marked {
            async fn refresh(&mut self, store: &Store) -> Result<()> {
                self.0.refresh(store).await?;
                // A long job's listing: the next look is spaced out to the cap.
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok(())
            }
            fn snapshot(&self, live: Option<&WorkerStats>) -> Snapshot {
                self.0.snapshot(live)
            }
            fn settled(&mut self) -> Result<Option<JobStatus>> {
                self.0.settled()
            }
            fn records_seen(&self) -> usize {
                0
            }
            fn planned_tasks(&self) -> u64 {
                1
            }
            fn heartbeats_root(&self) -> String {
                self.0.heartbeats_root()
            }
            fn resume_hint(&self) -> String {
                String::new()
            }
            fn finish_marker(&self) -> Option<String> {
                Some("job/manifest.json".into())
            }
        }
        let finished = Arc::new(AtomicBool::new(false));
        let mut job = Marked(OneTask {
            finished: finished.clone(),
            looks: Default::default(),
            seen_finished: false,
        });
        let opts = WatchOptions::new(CancellationToken::new());
        let location = location();
        let store = location.store().unwrap();
        let start = tokio::time::Instant::now();
        // The last task ends elsewhere at 7 s: the look begun at 5 s (and taking 5 s)
        // has missed it, and the next would begin at 55 s, capped to 20 s.
        let elsewhere = async {
            tokio::time::sleep(Duration::from_secs(7)).await;
            finished.store(true, Ordering::SeqCst);
            store.overwrite("job/manifest.json", &1).await.unwrap();
        };
        let (status, ()) = tokio::join!(watch(&location, "job", &mut job, &opts), elsewhere);
        assert_eq!(status.unwrap(), JobStatus::Complete);
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(15),
            "the watch ended after {took:?}"
        );
    }

    /// Regression (audit 12): a watch running workers of its own that stops because
    /// nothing progresses (the storage hung) said to start workers or pass
    /// `--workers N`. It now says its workers' tasks kept failing, and why.
    #[test]
    fn a_stall_with_workers_of_its_own_names_their_failures() {
        let stats = WorkerStats::default();
        let text = local_stall("J", Duration::from_secs(80), &stats, "resume with X");
        assert!(text.contains("though this command runs workers"), "{text}");
        assert!(!text.contains("--workers N") && !text.contains("Start `tablevault-worker`"));
        WorkerStats::add(&stats.tasks_retried, 3);
        stats.note_failure("Entity Group Transaction to 127.0.0.1:24702: no success within 20 s");
        let text = local_stall("J", Duration::from_secs(80), &stats, "resume with X");
        assert!(
            text.contains("given back for a retry 3 times, the last: Entity Group Transaction to 127.0.0.1:24702"),
            "{text}"
        );
        assert!(
            text.ends_with("fix the cause, then resume with X"),
            "{text}"
        );
    }

    #[test]
    fn the_look_after_the_last_local_task_is_not_delayed() {
        let stats = WorkerStats::default();
        assert!(!local_work_done(2, &stats));
        WorkerStats::add(&stats.tasks_committed, 1);
        WorkerStats::add(&stats.tasks_split, 2);
        assert!(!local_work_done(2, &stats), "1 of 4 done");
        WorkerStats::add(&stats.tasks_committed, 2);
        assert!(!local_work_done(2, &stats), "3 of 4 done");
        WorkerStats::add(&stats.tasks_poisoned, 1);
        assert!(local_work_done(2, &stats), "3 done and 1 poisoned");
    }
}
