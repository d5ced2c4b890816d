//! How many workers are working on a job, told by their heartbeats. Each worker writes
//! its heartbeat blob under the job when it starts its first task of the job, then
//! rewrites it every `HEARTBEAT_PERIOD` while it runs one. A heartbeat that appeared or
//! whose ETag changed within [`LIVE_WINDOW`] belongs to a live worker. The count sets
//! each worker's share of the account's rate (see
//! [`crate::limiter::AdaptiveLimit::set_fleet_size`]).
//!
//! Listings: every [`GROWING_PERIOD`] while new heartbeats keep appearing (a fleet
//! starting together learns its size within seconds), else every [`LISTING_PERIOD`].
//! 64 workers in the steady state cost about three List Blobs a second, against the
//! thousands of requests they send.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tablevault_core::store::Store;
use tokio::time::Instant;

/// Least time between two listings of one job's heartbeats once the fleet is stable.
pub const LISTING_PERIOD: Duration = Duration::from_secs(25);

/// Least time between two listings while the last one found new heartbeats.
pub const GROWING_PERIOD: Duration = Duration::from_secs(3);

/// A heartbeat seen to change within this long is a live worker's: a heartbeat period
/// (20 s) plus a listing period, with room to spare.
pub const LIVE_WINDOW: Duration = Duration::from_secs(60);

/// What the listings of one job's heartbeats saw.
struct Seen {
    at: Instant,
    /// Per heartbeat: its ETag and when it was last seen to change (or appear).
    beats: HashMap<String, (String, Instant)>,
    live: usize,
    growing: bool,
}

/// The live workers of each job, from listings of their heartbeats.
#[derive(Default)]
pub struct FleetWatch {
    jobs: Mutex<HashMap<String, Seen>>,
}

impl FleetWatch {
    /// Live workers under `root` (at least this one), listing again when the last
    /// listing is old enough. `None` when the listing failed and nothing is known (the
    /// caller keeps what it had).
    pub async fn live_workers(&self, store: &Store, root: &str) -> Option<usize> {
        let key = format!("{}/{root}", store.container());
        let mut beats = {
            let jobs = self.jobs.lock().expect("fleet lock");
            match jobs.get(&key) {
                Some(s) => {
                    let period = if s.growing {
                        GROWING_PERIOD
                    } else {
                        LISTING_PERIOD
                    };
                    if s.at.elapsed() < period {
                        return Some(s.live);
                    }
                    s.beats.clone()
                }
                None => HashMap::new(),
            }
        };
        let page = match store.blobs().list(root, None).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "cannot list the job's heartbeats");
                let jobs = self.jobs.lock().expect("fleet lock");
                return jobs.get(&key).map(|s| s.live);
            }
        };
        let now = Instant::now();
        let mut growing = false;
        for blob in page.blobs {
            match beats.get_mut(&blob.name) {
                Some((etag, changed)) if *etag != blob.etag => {
                    *etag = blob.etag;
                    *changed = now;
                }
                Some(_) => {}
                None => {
                    growing = true;
                    beats.insert(blob.name, (blob.etag, now));
                }
            }
        }
        let live = beats
            .values()
            .filter(|(_, changed)| now.duration_since(*changed) < LIVE_WINDOW)
            .count()
            .max(1);
        self.jobs.lock().expect("fleet lock").insert(
            key,
            Seen {
                at: now,
                beats,
                live,
                growing,
            },
        );
        Some(live)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tablevault_core::testing::MemoryBlobs;

    use super::*;

    async fn beat(store: &Store, root: &str, worker: &str, n: u64) {
        store
            .overwrite(&format!("{root}{worker}"), &serde_json::json!({ "at": n }))
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn counts_heartbeats_that_appeared_or_changed_lately() {
        let store = Store::new(Arc::new(MemoryBlobs::new("c")));
        let watch = FleetWatch::default();
        let root = "job/heartbeats/";
        assert_eq!(
            watch.live_workers(&store, root).await,
            Some(1),
            "none yet: itself"
        );
        for w in ["a", "b", "c"] {
            beat(&store, root, w, 0).await;
        }
        assert_eq!(
            watch.live_workers(&store, root).await,
            Some(1),
            "cached within the period"
        );
        tokio::time::advance(LISTING_PERIOD).await;
        assert_eq!(watch.live_workers(&store, root).await, Some(3));
        // A fleet still growing is listed again soon.
        beat(&store, root, "d", 0).await;
        tokio::time::advance(GROWING_PERIOD).await;
        assert_eq!(watch.live_workers(&store, root).await, Some(4));
        // Then only a, b and d keep beating: c's worker has gone.
        for n in 1..=3 {
            tokio::time::advance(LISTING_PERIOD).await;
            for w in ["a", "b", "d"] {
                beat(&store, root, w, n).await;
            }
            let live = watch.live_workers(&store, root).await;
            if n == 3 {
                assert_eq!(live, Some(3), "c stopped beating more than a window ago");
            }
        }
        tokio::time::advance(LIVE_WINDOW + LISTING_PERIOD).await;
        assert_eq!(
            watch.live_workers(&store, root).await,
            Some(1),
            "nobody beat: at least itself"
        );
    }
}
