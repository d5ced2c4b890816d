//! tablevault's backup protocol, independent of who runs it: how keys are ordered and
//! ranges cut, the versioned backup format, the job files and task messages workers and
//! coordinators exchange, and the [`store`] that alone reads and writes what lies under a
//! backup. The [`queue`] and [`store::BlobStorage`] traits are the seams through which
//! Azure (or, in unit tests, an in-memory fake) is reached.

#![warn(missing_docs)]

pub mod civil;
pub mod format;
pub mod job;
pub mod keys;
pub mod protocol;
pub mod queue;
pub mod split;
pub mod stats;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
