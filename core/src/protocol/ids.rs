//! Names and identities of the job protocol: default container and queue, backup ids,
//! timestamps, and which worker did something.

use std::time::SystemTime;

/// Default container for backups.
pub const DEFAULT_CONTAINER: &str = "tablevault";
/// Default task queue.
pub const DEFAULT_QUEUE: &str = "tablevault-tasks";
/// Tasks a worker runs at once unless told otherwise (`tablevault-worker
/// --concurrency`); coordinators size plans for a fleet by it.
pub const DEFAULT_WORKER_CONCURRENCY: usize = 4;
/// Version of the job files and messages.
pub const PROTOCOL_VERSION: u32 = 1;

/// The poison queue that goes with a task queue.
pub fn poison_queue_name(queue: &str) -> String {
    format!("{queue}-poison")
}

/// Now, as RFC 3339 UTC with seconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// A new backup id: sortable by time, unique by a random suffix
/// (`20261122T114600Z-1a2b3c4d`).
pub fn new_backup_id() -> String {
    let t: String = now_rfc3339()
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    let r = uuid::Uuid::new_v4().simple().to_string();
    format!("{t}-{}", &r[..8])
}

/// Whether a string is a plausible backup id (safe as a blob path segment).
pub fn is_valid_backup_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !id.starts_with('.')
}

/// The id of a task split off from another: the same range of the same table always gets
/// the same id, so a split repeated by a redelivered attempt is a harmless duplicate, and
/// different ranges never share a commit record.
pub fn split_task_id(table: &str, range: &crate::keys::KeyRange) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(table.as_bytes());
    h.update([0]);
    h.update(serde_json::to_vec(range).expect("ranges serialize"));
    let digest = h.finalize();
    let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("s{hex}")
}

/// `host/pid`, to say which worker did something.
pub fn worker_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into());
    format!("{host}/{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        let id = new_backup_id();
        assert!(is_valid_backup_id(&id), "{id}");
        assert_eq!(id.len(), "20261122T114600Z-1a2b3c4d".len());
        assert!(!is_valid_backup_id("../x"));
        assert!(!is_valid_backup_id(".hidden"));
        assert!(!is_valid_backup_id(""));
        assert_eq!(poison_queue_name("q"), "q-poison");
    }
}
