//! The job protocol shared by coordinators and workers: identities, task messages and the
//! job files they leave in blob storage. Everything a job knows lives in those files, so
//! coordinators and workers are stateless.

pub mod ids;
pub mod message;
pub mod records;
pub mod status;

#[cfg(test)]
mod fuzz;

pub use ids::{
    DEFAULT_CONTAINER, DEFAULT_QUEUE, DEFAULT_WORKER_CONCURRENCY, PROTOCOL_VERSION,
    is_valid_backup_id, new_backup_id, now_rfc3339, poison_queue_name, split_task_id,
    worker_identity,
};
pub use message::{
    MAX_GROUPED_TABLES, PoisonEntry, TaskKind, TaskMessage, WholeTable, handed_back, last_error,
};
pub use records::*;
pub use status::JobStatus;
