//! tablevault's control plane: plans backups into key-range tasks and restores into block
//! tasks, enqueues them, watches their records appear (with in-process workers if the
//! caller provides them), finalizes backups, verifies them, and lists them. Every step
//! reads and writes only the job's store and the queue, so any coordinator can take over
//! a job another one started.
//!
//! Outcomes are typed ([`Error`], `JobStatus`, the reports); turning them into output and
//! exit codes is the command line's business.

pub mod backup;
pub mod compare;
mod enqueue;
pub mod error;
pub mod listing;
pub mod location;
pub mod plan;
pub mod report;
pub mod restore;
pub mod retention;
pub mod selection;
pub mod state;
pub mod verify;
pub mod watch;

pub use error::{Error, Result};
pub use location::Location;
pub use watch::{LocalWorkers, Progress, RunningWorkers, Snapshot, WatchOptions};
