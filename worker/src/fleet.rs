//! How many workers are working on a job, told by their heartbeats. Each worker writes
//! its heartbeat blob under the job when it starts a task of the job with none other in
//! flight, rewrites it every `HEARTBEAT_PERIOD` while it runs one, and marks it idle
//! (blob metadata [`IDLE_METADATA`], seen in listings) when its last task of the job
//! ends. A heartbeat not marked idle that appeared or whose ETag changed within
//! [`LIVE_WINDOW`] belongs to a live worker. The count sets each worker's share of the
//! account's rate (see [`crate::limiter::AdaptiveLimit::set_fleet_size`]), so the
//! workers still busy at the end of a job take the share of those that ran out of work.
//!
//! Listings: every [`GROWING_PERIOD`] while the fleet has changed (heartbeats appeared or
//! turned idle or busy) or one of this worker's tasks found the job's queue empty
//! ([`FleetWatch::queue_seen_empty`]) within the last [`LISTING_PERIOD`], else every
//! [`LISTING_PERIOD`]. A fleet starting together learns its size within seconds, and one
//! running out of work as fast: a job's end thins the fleet in steps, a few seconds
//! apart, and one quiet listing in between must not leave the workers still busy at the
//! share of a fleet twice their number for the next 25 s. 64 workers in the steady state
//! cost about three List Blobs a second, against the thousands of requests they send.
//! A count is *settled* when its listing saw no change since the one before: the pacer
//! then forgives cuts made while its worker took more than that share
//! ([`crate::pacer::RatePacer::set_ceiling`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablevault_core::store::Store;
use tokio::time::Instant;

use crate::limiter::AdaptiveLimit;

/// Least time between two listings of one job's heartbeats once the fleet is stable.
pub const LISTING_PERIOD: Duration = Duration::from_secs(25);

/// Metadata that marks a heartbeat idle: its worker has no task of the job in flight.
pub const IDLE_METADATA: &str = "tvidle";

/// Least time between two listings while the fleet changed within [`LISTING_PERIOD`].
pub const GROWING_PERIOD: Duration = Duration::from_secs(3);

/// Least time between two listings of one job's heartbeats when the fleet last changed
/// `since_change` ago and this worker last found the job's queue empty `since_drained`
/// ago: [`GROWING_PERIOD`] while either is within [`LISTING_PERIOD`], else
/// [`LISTING_PERIOD`]. An empty queue is a job's end coming: workers that find no task
/// turn idle, and those still reading take their share within seconds instead of at
/// the next quiet listing, up to 25 s later.
pub fn listing_period(since_change: Duration, since_drained: Option<Duration>) -> Duration {
    let recent = |d: Duration| d < LISTING_PERIOD;
    if recent(since_change) || since_drained.is_some_and(recent) {
        GROWING_PERIOD
    } else {
        LISTING_PERIOD
    }
}

/// How many workers are live on a job, from one listing of their heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetCount {
    /// Live workers, this one included.
    pub live: usize,
    /// Whether that listing found no heartbeat appearing or turning idle or busy since
    /// the listing before it: the count is confirmed, not a glimpse of a fleet still
    /// growing or thinning.
    pub settled: bool,
}

impl FleetCount {
    /// A confirmed count of `live` workers.
    pub fn settled(live: usize) -> Self {
        FleetCount {
            live,
            settled: true,
        }
    }
}

/// A job whose heartbeats were last listed this long ago is forgotten: its next listing
/// starts afresh.
const FORGET_AFTER: Duration = Duration::from_secs(3_600);

/// A heartbeat seen to change within this long is a live worker's: a heartbeat period
/// (20 s) plus a listing period, with room to spare.
pub const LIVE_WINDOW: Duration = Duration::from_secs(60);

/// What the listings of one job's heartbeats saw.
struct Seen {
    at: Instant,
    /// Per heartbeat: its ETag, when it was last seen to change (or appear), and
    /// whether it is marked idle.
    beats: HashMap<String, (String, Instant, bool)>,
    live: usize,
    /// When a listing last found heartbeats appearing or turning idle or busy.
    changed: Instant,
}

impl Seen {
    fn count(&self) -> FleetCount {
        FleetCount {
            live: self.live,
            settled: self.changed < self.at,
        }
    }
}

/// The live workers of each job, from listings of their heartbeats.
#[derive(Default)]
pub struct FleetWatch {
    jobs: Mutex<HashMap<String, Seen>>,
    /// Per job, when one of this worker's tasks last found its queue empty.
    drained: Mutex<HashMap<String, Instant>>,
}

/// The key of the job whose heartbeats are under `root` in `store`.
fn job_key(store: &Store, root: &str) -> String {
    format!("{}/{root}", store.container())
}

impl FleetWatch {
    /// Notes that a task of the job whose heartbeats are under `root` looked at the
    /// job's queue and found no task waiting: from now until a listing period has
    /// passed, the job's heartbeats are listed every [`GROWING_PERIOD`]
    /// ([`listing_period`]). In the simulator, a repeat backup of a million entities
    /// by 16 workers ended with one task read at a sixteenth of the account for 20 s
    /// (58.7% of the account's rate over the backup; 72.5% with this).
    pub fn queue_seen_empty(&self, store: &Store, root: &str) {
        let mut drained = self.drained.lock().expect("fleet lock");
        // Older marks no longer change a listing period.
        drained.retain(|_, at| at.elapsed() < LISTING_PERIOD);
        drained.insert(job_key(store, root), Instant::now());
    }

    /// Jobs this watch holds a listing or a mark of.
    #[cfg(test)]
    fn jobs_held(&self) -> usize {
        self.jobs.lock().expect("fleet lock").len() + self.drained.lock().expect("fleet lock").len()
    }

    /// When a task of the job under `root` last found its queue empty.
    #[cfg(test)]
    pub(crate) fn queue_seen_empty_at(&self, store: &Store, root: &str) -> Option<Instant> {
        let drained = self.drained.lock().expect("fleet lock");
        drained.get(&job_key(store, root)).copied()
    }

    /// Live workers under `root` (at least this one), listing again when the last
    /// listing is old enough. `None` when the listing failed and nothing is known (the
    /// caller keeps what it had).
    pub async fn live_workers(&self, store: &Store, root: &str) -> Option<FleetCount> {
        let key = job_key(store, root);
        let drained = self
            .drained
            .lock()
            .expect("fleet lock")
            .get(&key)
            .map(|at| at.elapsed());
        let (mut beats, last_change) = {
            let jobs = self.jobs.lock().expect("fleet lock");
            match jobs.get(&key) {
                Some(s) => {
                    if s.at.elapsed() < listing_period(s.changed.elapsed(), drained) {
                        return Some(s.count());
                    }
                    (s.beats.clone(), Some(s.changed))
                }
                None => (HashMap::new(), None),
            }
        };
        let page = match store.blobs().list(root, None).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "cannot list the job's heartbeats");
                let jobs = self.jobs.lock().expect("fleet lock");
                return jobs.get(&key).map(Seen::count);
            }
        };
        let now = Instant::now();
        let mut changing = last_change.is_none();
        for blob in page.blobs {
            let is_idle = blob.metadata.get(IDLE_METADATA).is_some_and(|v| v == "1");
            match beats.get_mut(&blob.name) {
                Some((etag, changed, idle)) if *etag != blob.etag => {
                    changing |= *idle != is_idle;
                    *etag = blob.etag;
                    *changed = now;
                    *idle = is_idle;
                }
                Some(_) => {}
                None => {
                    changing = true;
                    beats.insert(blob.name, (blob.etag, now, is_idle));
                }
            }
        }
        let live = beats
            .values()
            .filter(|(_, changed, idle)| !idle && now.duration_since(*changed) < LIVE_WINDOW)
            .count()
            .max(1);
        let seen = Seen {
            at: now,
            beats,
            live,
            changed: match last_change {
                Some(at) if !changing => at,
                _ => now,
            },
        };
        let count = seen.count();
        let mut jobs = self.jobs.lock().expect("fleet lock");
        // A daemon serves job after job for months: what it saw of jobs it has not
        // listed for an hour (ended, or their next task lists afresh) is dropped.
        jobs.retain(|_, s| s.at.elapsed() < FORGET_AFTER);
        jobs.insert(key, seen);
        Some(count)
    }
}

/// Keeps a limiter at its share of the account while a task runs: one task can last
/// minutes while the fleet grows or runs out of work. Stops when dropped.
pub struct FleetShare(tokio::task::JoinHandle<()>);

impl FleetShare {
    /// Every [`GROWING_PERIOD`], the live workers under `root` (listed only when the last
    /// listing is old enough) set `limiter`'s share of the account, or of `max_rate`.
    pub fn follow(
        fleet: Arc<FleetWatch>,
        store: Store,
        root: String,
        limiter: Arc<AdaptiveLimit>,
        max_rate: Option<u32>,
    ) -> Self {
        FleetShare(tokio::spawn(async move {
            loop {
                tokio::time::sleep(GROWING_PERIOD).await;
                if let Some(count) = fleet.live_workers(&store, &root).await {
                    limiter.set_fleet_size(count, max_rate);
                }
            }
        }))
    }
}

impl Drop for FleetShare {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tablevault_core::testing::MemoryBlobs;

    use super::*;

    /// An empty store and a watch that has listed nothing.
    fn fresh() -> (Store, FleetWatch) {
        (
            Store::new(Arc::new(MemoryBlobs::new("c"))),
            FleetWatch::default(),
        )
    }

    async fn beat(store: &Store, root: &str, worker: &str, n: u64) {
        store
            .overwrite(&format!("{root}{worker}"), &serde_json::json!({ "at": n }))
            .await
            .unwrap();
    }

    async fn live(watch: &FleetWatch, store: &Store, root: &str) -> Option<usize> {
        watch.live_workers(store, root).await.map(|c| c.live)
    }

    async fn idle(store: &Store, root: &str, worker: &str) {
        let metadata = vec![(IDLE_METADATA.to_string(), "1".to_string())];
        store
            .replace_existing(&format!("{root}{worker}"), &serde_json::json!({}), metadata)
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn workers_out_of_work_stop_counting_within_seconds() {
        let (store, watch) = fresh();
        let root = "job/heartbeats/";
        for w in ["a", "b", "c", "d"] {
            beat(&store, root, w, 0).await;
        }
        assert_eq!(live(&watch, &store, root).await, Some(4));
        tokio::time::advance(LISTING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(4), "stable");
        // The queue runs dry: c and d end their last tasks.
        idle(&store, root, "c").await;
        idle(&store, root, "d").await;
        tokio::time::advance(LISTING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(2));
        // A fleet that is changing is listed again soon: d gets work again, then
        // b runs out.
        beat(&store, root, "d", 1).await;
        tokio::time::advance(GROWING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(3));
        idle(&store, root, "b").await;
        tokio::time::advance(GROWING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(2));
    }

    /// A fleet stable for a listing period is listed rarely, but once a task found the
    /// queue empty (the job's end coming) it is listed every growing period again, so
    /// the workers still reading take the share of those that ran out of work within
    /// seconds; a listing period after the queue was last seen empty, rarely again.
    #[tokio::test(start_paused = true)]
    async fn an_empty_queue_has_the_fleet_listed_often() {
        let (store, watch) = fresh();
        let root = "job/heartbeats/";
        for w in ["a", "b", "c", "d"] {
            beat(&store, root, w, 0).await;
        }
        assert_eq!(live(&watch, &store, root).await, Some(4));
        tokio::time::advance(LISTING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(4), "stable");
        tokio::time::advance(LISTING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(4), "quiet");
        // Stable for a listing period: a change is not seen a growing period later...
        idle(&store, root, "d").await;
        tokio::time::advance(GROWING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(4), "cached");
        // ...unless a task found the queue empty.
        watch.queue_seen_empty(&store, root);
        assert_eq!(live(&watch, &store, root).await, Some(3));
        idle(&store, root, "c").await;
        tokio::time::advance(GROWING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(2));
        // Another job's empty queue says nothing of this one. (a and b keep beating.)
        watch.queue_seen_empty(&store, "other/heartbeats/");
        tokio::time::advance(LISTING_PERIOD).await;
        for w in ["a", "b"] {
            beat(&store, root, w, 1).await;
        }
        assert_eq!(live(&watch, &store, root).await, Some(2));
        idle(&store, root, "b").await;
        tokio::time::advance(GROWING_PERIOD).await;
        assert_eq!(
            live(&watch, &store, root).await,
            Some(2),
            "quiet and the queue not seen empty for a listing period: cached"
        );
    }

    /// A daemon serving job after job keeps what it saw of the jobs of the last hour,
    /// not of every job since it started.
    #[tokio::test(start_paused = true)]
    async fn jobs_not_listed_for_an_hour_are_forgotten() {
        let (store, watch) = fresh();
        for job in 0..100 {
            let root = format!("job{job}/heartbeats/");
            beat(&store, &root, "a", 0).await;
            assert_eq!(live(&watch, &store, &root).await, Some(1));
            watch.queue_seen_empty(&store, &root);
            tokio::time::advance(Duration::from_secs(600)).await;
        }
        assert!(watch.jobs_held() <= 8 + 1, "{}", watch.jobs_held());
    }

    #[tokio::test(start_paused = true)]
    async fn counts_heartbeats_that_appeared_or_changed_lately() {
        let (store, watch) = fresh();
        let root = "job/heartbeats/";
        assert_eq!(
            live(&watch, &store, root).await,
            Some(1),
            "none yet: itself"
        );
        for w in ["a", "b", "c"] {
            beat(&store, root, w, 0).await;
        }
        assert_eq!(
            live(&watch, &store, root).await,
            Some(1),
            "cached within the period"
        );
        tokio::time::advance(LISTING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(3));
        // A fleet still growing is listed again soon.
        beat(&store, root, "d", 0).await;
        tokio::time::advance(GROWING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(4));
        // Then only a, b and d keep beating: c's worker has gone.
        for n in 1..=3 {
            tokio::time::advance(LISTING_PERIOD).await;
            for w in ["a", "b", "d"] {
                beat(&store, root, w, n).await;
            }
            let live = live(&watch, &store, root).await;
            if n == 3 {
                assert_eq!(live, Some(3), "c stopped beating more than a window ago");
            }
        }
        tokio::time::advance(LIVE_WINDOW + LISTING_PERIOD).await;
        assert_eq!(
            live(&watch, &store, root).await,
            Some(1),
            "nobody beat: at least itself"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_thinning_fleet_is_listed_often_until_it_was_quiet_for_a_listing_period() {
        let (store, watch) = fresh();
        let root = "job/heartbeats/";
        for w in ["a", "b", "c", "d", "e"] {
            beat(&store, root, w, 0).await;
        }
        let first = watch.live_workers(&store, root).await.unwrap();
        assert_eq!(first.live, 5);
        assert!(!first.settled, "a first glimpse is not a confirmed count");
        tokio::time::advance(GROWING_PERIOD).await;
        let again = watch.live_workers(&store, root).await.unwrap();
        assert_eq!(
            again,
            FleetCount::settled(5),
            "unchanged since the last listing"
        );
        // A job's end: workers run out of work a few seconds apart, with quiet
        // listings in between. Each step is seen within a growing period.
        for (step, w) in ["e", "d", "c"].into_iter().enumerate() {
            tokio::time::advance(GROWING_PERIOD).await;
            let quiet = watch.live_workers(&store, root).await.unwrap();
            assert!(quiet.settled);
            idle(&store, root, w).await;
            tokio::time::advance(GROWING_PERIOD).await;
            let thinner = watch.live_workers(&store, root).await.unwrap();
            assert_eq!(thinner.live, 4 - step);
            assert!(!thinner.settled, "it just changed");
        }
        // Quiet for a listing period: back to listing rarely.
        tokio::time::advance(LISTING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(2));
        idle(&store, root, "b").await;
        tokio::time::advance(GROWING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(2), "cached");
        tokio::time::advance(LISTING_PERIOD).await;
        assert_eq!(live(&watch, &store, root).await, Some(1));
    }
}
