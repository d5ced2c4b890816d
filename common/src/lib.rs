//! Shared foundation of tablevault: hand-written REST clients for Azure Table, Queue and
//! Blob storage (no Azure SDK), their configuration, authentication and retries, and the
//! emulator launcher used by tests, the demo and benchmarks.

#![warn(missing_docs)]

pub mod auth;
pub mod blob;
pub mod config;
pub mod emulator;
pub mod error;
pub mod format;
mod http;
pub mod job;
pub mod keys;
pub mod queue;
pub mod redact;
pub mod retry;
pub mod table;

pub use config::{ConfigError, Service, StorageAccount};
pub use error::{Error, Result};
pub use http::ClientOptions;
