//! Records this process created, by container URL, path and ETag. A coordinator with
//! in-process workers lists the commit records they have just written; reading each back
//! is one request per task, a good part of a backup of many small tables. Only a process
//! that watches with in-process workers remembers ([`remember_from_now`]). A listed ETag
//! equal to the one our own create returned means the blob still holds exactly the bytes
//! we sent (every write changes the ETag), so those are used; anything else is read.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

/// Bytes of records kept; the oldest are forgotten beyond it.
const BUDGET_BYTES: usize = 16 << 20;

type Key = (String, String);

#[derive(Default)]
struct Written {
    entries: HashMap<Key, (String, Bytes)>,
    order: VecDeque<Key>,
    bytes: usize,
}

static WRITTEN: Mutex<Option<Written>> = Mutex::new(None);

/// Whether anything in this process reads records back (a coordinator's watch): a worker
/// daemon alone never does, and keeps nothing.
static WANTED: AtomicBool = AtomicBool::new(false);

/// From now on, records this process creates are remembered (see the module).
pub fn remember_from_now() {
    WANTED.store(true, Ordering::Relaxed);
}

/// The same ETag as the service quotes it in headers and in listings.
fn normalized(etag: &str) -> &str {
    etag.trim_start_matches("W/").trim_matches('"')
}

/// Remembers that `path` in `container` (its URL) was created with `body` and got `etag`.
pub(crate) fn remember(container: &str, path: &str, etag: &str, body: Bytes) {
    let etag = normalized(etag);
    if !WANTED.load(Ordering::Relaxed) || etag.is_empty() || body.len() > BUDGET_BYTES / 16 {
        return;
    }
    let mut guard = WRITTEN.lock().expect("written lock");
    let w = guard.get_or_insert_with(Written::default);
    let key = (container.to_string(), path.to_string());
    w.bytes += body.len();
    if let Some((_, old)) = w.entries.insert(key.clone(), (etag.to_string(), body)) {
        w.bytes -= old.len();
    } else {
        w.order.push_back(key);
    }
    while w.bytes > BUDGET_BYTES {
        let Some(oldest) = w.order.pop_front() else {
            break;
        };
        if let Some((_, b)) = w.entries.remove(&oldest) {
            w.bytes -= b.len();
        }
    }
}

/// The bytes of `container/path` if this process created it and it still has `etag`.
pub(crate) fn recall(container: &str, path: &str, etag: &str) -> Option<Bytes> {
    let guard = WRITTEN.lock().expect("written lock");
    let (known, body) = guard
        .as_ref()?
        .entries
        .get(&(container.to_string(), path.to_string()))?;
    (known == normalized(etag) && !known.is_empty()).then(|| body.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_etag_recalls_and_the_budget_holds() {
        remember_from_now();
        remember("c-written", "a.json", "\"0x1\"", Bytes::from_static(b"one"));
        assert_eq!(
            recall("c-written", "a.json", "0x1").as_deref(),
            Some(&b"one"[..])
        );
        assert_eq!(recall("c-written", "a.json", "\"0x2\""), None);
        assert_eq!(recall("other", "a.json", "0x1"), None);
        remember("c-written", "b.json", "", Bytes::from_static(b"x"));
        assert_eq!(recall("c-written", "b.json", ""), None);
        let big = Bytes::from(vec![0u8; BUDGET_BYTES / 16]);
        for i in 0..40 {
            remember("c-budget", &format!("{i}"), "e", big.clone());
        }
        let kept = (0..40)
            .filter(|i| recall("c-budget", &format!("{i}"), "e").is_some())
            .count();
        assert!(kept <= 16, "{kept}");
        assert!(
            recall("c-budget", "39", "e").is_some(),
            "the newest is kept"
        );
    }
}
