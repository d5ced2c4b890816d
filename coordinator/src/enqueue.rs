//! Putting a job's tasks on the queue: shuffled, so concurrent workers spread over the
//! key space and partitions, with a bounded number of puts in flight.

use std::sync::Arc;

use futures::StreamExt;
use rand::seq::SliceRandom;
use tablevault_core::protocol::TaskMessage;
use tablevault_core::queue::TaskQueue;

use crate::{Error, Result};

/// Puts in flight at once.
const PUTS_IN_FLIGHT: usize = 8;

/// Enqueues `tasks` in random order; returns how many. Each put is at least once (a
/// duplicate task is harmless); on failure the error says how many of the messages are on
/// the queue, and `next_step` what to do about the rest.
pub(crate) async fn enqueue_shuffled(
    queue: &Arc<dyn TaskQueue>,
    mut tasks: Vec<TaskMessage>,
    next_step: &str,
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
    let queued = results.iter().filter(|r| r.is_ok()).count();
    match results.into_iter().find_map(Result::err) {
        None => Ok(count),
        Some(e) => Err(Error::from(e).in_step(format!(
            "{queued} of {count} task messages were put on queue {:?}; {next_step}",
            queue.name()
        ))),
    }
}
