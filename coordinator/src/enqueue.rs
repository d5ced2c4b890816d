//! Putting a job's tasks on the queue: shuffled, so concurrent workers spread over the
//! key space and partitions, with a bounded number of puts in flight.

use std::sync::Arc;

use futures::StreamExt;
use rand::seq::SliceRandom;
use tablevault_core::protocol::TaskMessage;
use tablevault_core::queue::TaskQueue;

use crate::Result;

/// Puts in flight at once.
const PUTS_IN_FLIGHT: usize = 32;

/// Enqueues `tasks` in random order; returns how many.
pub(crate) async fn enqueue_shuffled(
    queue: &Arc<dyn TaskQueue>,
    mut tasks: Vec<TaskMessage>,
) -> Result<usize> {
    tasks.shuffle(&mut rand::rng());
    let count = tasks.len();
    let results: Vec<_> = futures::stream::iter(tasks)
        .map(|t| {
            let queue = queue.clone();
            async move { queue.put(&t.encode(), None).await }
        })
        .buffer_unordered(PUTS_IN_FLIGHT)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(count)
}
