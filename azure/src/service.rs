//! The three storage services tablevault talks to.

use std::fmt;

/// The three services tablevault talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Blob storage: backup data, commit records, manifests.
    Blob,
    /// Queue storage: work distribution.
    Queue,
    /// Table storage: what is backed up and restored.
    Table,
}

impl Service {
    /// The connection-string key of its endpoint (`BlobEndpoint`, ...).
    pub fn key(self) -> &'static str {
        match self {
            Service::Blob => "BlobEndpoint",
            Service::Queue => "QueueEndpoint",
            Service::Table => "TableEndpoint",
        }
    }

    /// The host label of its public endpoint (`blob`, ...).
    pub fn subdomain(self) -> &'static str {
        match self {
            Service::Blob => "blob",
            Service::Queue => "queue",
            Service::Table => "table",
        }
    }

    /// The emulator's default port for it.
    pub fn emulator_port(self) -> u16 {
        match self {
            Service::Blob => 10000,
            Service::Queue => 10001,
            Service::Table => 10002,
        }
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.subdomain())
    }
}
