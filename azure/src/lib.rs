//! Hand-written REST clients for Azure Table, Queue and Blob storage (no Azure SDK):
//! account configuration, credentials and request signing, the retrying request pipeline,
//! secret redaction, and one client per service.
//!
//! Nothing here knows about backups; `tablevault-core` builds the backup protocol on top.

#![warn(missing_docs)]

pub mod blob;
pub mod config;
pub mod credential;
pub mod error;
pub mod identity;
pub mod pipeline;
pub mod queue;
pub mod redact;
mod service;
pub mod signing;
pub mod table;

pub use config::{ConfigError, StorageAccount};
pub use error::{Error, Result};
pub use pipeline::{
    AttemptOutcome, ClientOptions, Idempotency, RequestObserver, RetryObserver, RetryPolicy,
};
pub use service::Service;
