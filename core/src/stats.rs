//! Live counters a worker shares with whoever runs it in the same process (the CLI's
//! progress bar), and the signal that something finished.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters updated by workers as they go.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Entities read (backup) or written (restore) by attempts, abandoned ones included.
    pub entities: AtomicU64,
    /// Response bytes read from the source.
    pub read_bytes: AtomicU64,
    /// Bytes of blocks produced.
    pub stored_bytes: AtomicU64,
    /// Tasks finished by this worker.
    pub tasks_committed: AtomicU64,
    /// Tasks given back for a retry.
    pub tasks_retried: AtomicU64,
    /// Tasks poisoned.
    pub tasks_poisoned: AtomicU64,
    /// Tasks split off the unread part of a range for idle workers.
    pub tasks_split: AtomicU64,
    /// Signalled when a task is finished or poisoned, so a watcher can look at once.
    pub changed: tokio::sync::Notify,
    /// Why the last task given back for a retry failed (error text, already redacted),
    /// for a watch that stops because nothing progresses.
    last_failure: std::sync::Mutex<Option<String>>,
}

impl WorkerStats {
    /// Adds to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Notes why a task was given back for a retry.
    pub fn note_failure(&self, why: &str) {
        *self.last_failure.lock().expect("last failure") = Some(why.to_string());
    }

    /// Why the last task given back for a retry failed, if one was.
    pub fn last_failure(&self) -> Option<String> {
        self.last_failure.lock().expect("last failure").clone()
    }
}
