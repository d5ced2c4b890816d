//! How many workers are working on a job, told by their heartbeats: each worker rewrites
//! its heartbeat blob under the job every `HEARTBEAT_PERIOD` while it runs a task, so a
//! heartbeat whose ETag changed between two listings a period or more apart belongs to
//! a live worker. The count sets each worker's share of the account's rate (see
//! [`crate::limiter::AdaptiveLimit::set_fleet_size`]).
//!
//! One listing per job per [`LISTING_PERIOD`] per worker: 64 workers cost about three
//! List Blobs a second, against the thousands of requests they send.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tablevault_core::store::Store;
use tokio::time::Instant;

/// Least time between two listings of one job's heartbeats (longer than a heartbeat
/// period, so a live worker's heartbeat changes between two of them).
pub const LISTING_PERIOD: Duration = Duration::from_secs(25);

/// What the last listing of one job's heartbeats saw.
struct Seen {
    at: Instant,
    etags: HashMap<String, String>,
    live: usize,
}

/// The live workers of each job, from listings of their heartbeats.
#[derive(Default)]
pub struct FleetWatch {
    jobs: Mutex<HashMap<String, Seen>>,
}

impl FleetWatch {
    /// Live workers under `root` (this one counted even before its first heartbeat),
    /// listing again if the last listing is a period old. `None` when nothing is known
    /// yet or the listing failed (the caller keeps what it had).
    pub async fn live_workers(&self, store: &Store, root: &str) -> Option<usize> {
        let key = format!("{}/{root}", store.container());
        let previous = {
            let jobs = self.jobs.lock().expect("fleet lock");
            match jobs.get(&key) {
                Some(s) if s.at.elapsed() < LISTING_PERIOD => return Some(s.live),
                Some(s) => Some(s.etags.clone()),
                None => None,
            }
        };
        let page = match store.blobs().list(root, None).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "cannot list the job's heartbeats");
                return None;
            }
        };
        let etags: HashMap<String, String> =
            page.blobs.into_iter().map(|b| (b.name, b.etag)).collect();
        let live = match &previous {
            // A heartbeat that changed since the last listing is a live worker's.
            Some(before) => etags
                .iter()
                .filter(|(name, etag)| before.get(*name) != Some(etag))
                .count(),
            // First look: every heartbeat may be live (an overestimate only lowers the
            // share until the next listing).
            None => etags.len(),
        }
        .max(1);
        self.jobs.lock().expect("fleet lock").insert(
            key,
            Seen {
                at: Instant::now(),
                etags,
                live,
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

    #[tokio::test(start_paused = true)]
    async fn counts_the_heartbeats_that_changed_between_listings() {
        let store = Store::new(Arc::new(MemoryBlobs::new("c")));
        let watch = FleetWatch::default();
        let root = "job/heartbeats/";
        assert_eq!(
            watch.live_workers(&store, root).await,
            Some(1),
            "none yet: itself"
        );
        for w in ["a", "b", "c"] {
            store
                .overwrite(&format!("{root}{w}"), &serde_json::json!({"at": 0}))
                .await
                .unwrap();
        }
        assert_eq!(
            watch.live_workers(&store, root).await,
            Some(1),
            "cached within the period"
        );
        tokio::time::advance(LISTING_PERIOD).await;
        assert_eq!(watch.live_workers(&store, root).await, Some(3));
        // Only a and b beat again: c's worker has gone.
        tokio::time::advance(LISTING_PERIOD).await;
        for w in ["a", "b"] {
            store
                .overwrite(&format!("{root}{w}"), &serde_json::json!({"at": 1}))
                .await
                .unwrap();
        }
        assert_eq!(watch.live_workers(&store, root).await, Some(2));
        tokio::time::advance(LISTING_PERIOD).await;
        assert_eq!(
            watch.live_workers(&store, root).await,
            Some(1),
            "nobody beat: at least itself"
        );
    }
}
