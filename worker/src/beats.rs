//! When this worker's heartbeat for each job must be written, so the other workers count
//! it (`fleet`) while it works on the job and stop soon after it runs out of work,
//! without costing requests per task: a stream of short tasks writes the heartbeat at
//! most every `HEARTBEAT_PERIOD`, and a worker between two tasks is not marked idle
//! unless no task follows within [`IDLE_GRACE`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// How long a worker with no task of a job in flight waits before marking its heartbeat
/// idle: the next task usually comes sooner.
pub const IDLE_GRACE: Duration = Duration::from_secs(2);

/// How often a working heartbeat is rewritten (also by each running task).
pub const HEARTBEAT_PERIOD: Duration = Duration::from_secs(20);

#[derive(Default)]
struct JobBeat {
    in_flight: usize,
    /// When a task start last wrote the heartbeat as working.
    written: Option<Instant>,
    /// Whether the heartbeat was last written idle.
    idle: bool,
    /// Changes with every task start, so a pending idle mark can tell one came.
    generation: u64,
}

/// Per heartbeat (container/path, one per job), what this worker has in flight and
/// last wrote.
#[derive(Clone, Default)]
pub struct Beats(Arc<Mutex<HashMap<String, JobBeat>>>);

impl Beats {
    /// A task of the job starts; `true` if the heartbeat must say so now (it was never
    /// written, was marked idle, or was last written a period ago).
    pub fn task_started(&self, path: &str) -> bool {
        let mut jobs = self.0.lock().expect("beats lock");
        if jobs.len() >= 10_000 && !jobs.contains_key(path) {
            jobs.retain(|_, b| b.in_flight > 0);
        }
        let beat = jobs.entry(path.to_string()).or_default();
        beat.in_flight += 1;
        beat.generation += 1;
        let now = Instant::now();
        let due = beat.idle || beat.written.is_none_or(|t| now - t >= HEARTBEAT_PERIOD);
        if due {
            beat.written = Some(now);
            beat.idle = false;
        }
        due
    }

    /// A task of the job ended; with none left in flight, the generation to pass to
    /// [`Beats::still_idle`] after [`IDLE_GRACE`].
    pub fn task_ended(&self, path: &str) -> Option<u64> {
        let mut jobs = self.0.lock().expect("beats lock");
        let beat = jobs.get_mut(path)?;
        beat.in_flight = beat.in_flight.saturating_sub(1);
        (beat.in_flight == 0 && !beat.idle).then_some(beat.generation)
    }

    /// Whether no task of the job started since `generation`; if so the heartbeat is
    /// to be marked idle now.
    pub fn still_idle(&self, path: &str, generation: u64) -> bool {
        let mut jobs = self.0.lock().expect("beats lock");
        match jobs.get_mut(path) {
            Some(beat) if beat.in_flight == 0 && beat.generation == generation => {
                beat.idle = true;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn short_tasks_beat_once_a_period_and_idle_only_after_the_grace() {
        let beats = Beats::default();
        let job = "c/job/heartbeats/w";
        assert!(beats.task_started(job), "the first task beats at once");
        let g = beats.task_ended(job).expect("none left");
        // The next task comes within the grace: no idle mark, no new beat.
        assert!(!beats.task_started(job));
        assert!(!beats.still_idle(job, g));
        // Two in flight: the first to end leaves one.
        assert!(!beats.task_started(job));
        assert_eq!(beats.task_ended(job), None);
        let g = beats.task_ended(job).expect("none left");
        tokio::time::advance(HEARTBEAT_PERIOD).await;
        // A period later, a task start beats again (short tasks never reach their own).
        assert!(beats.task_started(job));
        assert!(!beats.still_idle(job, g), "a task came");
        let g = beats.task_ended(job).unwrap();
        tokio::time::advance(IDLE_GRACE).await;
        assert!(beats.still_idle(job, g), "then marked idle");
        assert_eq!(beats.task_ended(job), None, "already idle");
        assert!(beats.task_started(job), "back from idle: beats at once");
        assert!(!beats.still_idle("c/other", 0));
    }
}
