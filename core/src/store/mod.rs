//! The one owner of what lies under a backup: paths, JSON records (job files, commit,
//! poison and restore records, manifests), data blocks written and read back. Coordinators
//! and workers touch backup storage only through a [`Store`], so the rules for reading and
//! writing it (create-only commits, strict decoding, checksums) live in one place.

mod paths;
mod reader;
mod storage;
mod writer;
mod written;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tablevault_azure::blob::{BlobClient, PutOptions};

pub use paths::BackupPaths;
pub use reader::decode_checked;
pub use storage::BlobStorage;
pub use writer::BlockWriter;
pub use written::remember_from_now as remember_created_records;

use crate::format::{Compression, DecodedBlock};
use crate::protocol::{
    BackupJob, BlobRecord, BlockRecord, CommitRecord, JobStatus, Manifest, RestoreJob,
    RestoreStateRecord,
};

/// Why something under a backup could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Storage failed; [`tablevault_azure::Error::is_retryable`] says whether trying
    /// again can help.
    #[error(transparent)]
    Storage(#[from] tablevault_azure::Error),
    /// The data is damaged or not what the records say; retrying will not help.
    #[error("{0}")]
    Corrupt(String),
}

impl StoreError {
    /// The HTTP status, when storage answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            StoreError::Storage(e) => e.status(),
            StoreError::Corrupt(_) => None,
        }
    }
}

/// Shorthand for store results.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The outcome of a create-only write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateOutcome {
    /// This write created the record.
    Created,
    /// A record was already there; it was left untouched.
    AlreadyExists,
}

/// `(table, task)`: which task a record belongs to.
pub type RecordKey = (String, String);

/// Everything under the backups of one container.
#[derive(Clone)]
pub struct Store {
    blobs: Arc<dyn BlobStorage>,
}

impl Store {
    /// A store over any blob storage.
    pub fn new(blobs: Arc<dyn BlobStorage>) -> Self {
        Store { blobs }
    }

    /// A store over an Azure container.
    pub fn azure(client: BlobClient) -> Self {
        Store::new(Arc::new(client))
    }

    /// The container's name.
    pub fn container(&self) -> &str {
        self.blobs.container()
    }

    /// The blob storage underneath.
    pub fn blobs(&self) -> &Arc<dyn BlobStorage> {
        &self.blobs
    }

    /// Creates the container; `false` if it already existed.
    pub async fn create_container(&self) -> Result<bool> {
        Ok(self.blobs.create_container().await?)
    }

    /// Reads a JSON record; `None` if it does not exist.
    pub async fn read<T: DeserializeOwned>(&self, path: &str) -> Result<Option<T>> {
        let Some(bytes) = self.blobs.get(path).await? else {
            return Ok(None);
        };
        parse(path, &bytes).map(Some)
    }

    /// Writes a JSON record only if none exists (`If-None-Match: *`), with blob metadata.
    ///
    /// Every record this creates is unique (it names an attempt, a fresh id, a time), so
    /// an uncertain outcome is settled by reading the record back: a record equal to ours
    /// is ours, whatever the answer said. That covers a retried create whose first try
    /// landed (the retry sees `409`) and a timeout or reset after the write was applied.
    /// An error means the record is not known to exist.
    pub async fn create<T: Serialize>(
        &self,
        path: &str,
        value: &T,
        metadata: Vec<(String, String)>,
    ) -> Result<CreateOutcome> {
        let options = PutOptions {
            metadata,
            content_type: Some("application/json".into()),
            if_none_match: true,
            ..PutOptions::default()
        };
        let body = json(value);
        let err = match self.blobs.put_blob(path, body.clone(), &options).await {
            Ok(etag) => {
                if let Some(scope) = self.blobs.scope() {
                    written::remember(&scope, path, &etag, body);
                }
                return Ok(CreateOutcome::Created);
            }
            Err(e) if e.is_safe_to_resend() => return Err(e.into()),
            Err(e) => e,
        };
        let conflict = err.has_code("BlobAlreadyExists") || err.status() == Some(412);
        match self.blobs.get(path).await {
            Ok(Some(stored)) if stored == body => {
                tracing::debug!(path, error = %err, "the create had landed; the record is ours");
                Ok(CreateOutcome::Created)
            }
            Ok(Some(_)) => Ok(CreateOutcome::AlreadyExists),
            Ok(None) if conflict => Err(StoreError::Corrupt(format!(
                "{path} was reported to exist but cannot be read"
            ))),
            Ok(None) => Err(err.into()),
            Err(read) => {
                tracing::warn!(path, error = %read, "cannot read back a record whose create was uncertain");
                Err(err.into())
            }
        }
    }

    /// Writes a JSON record, replacing any earlier version (reports).
    pub async fn overwrite<T: Serialize>(&self, path: &str, value: &T) -> Result<()> {
        let options = PutOptions {
            content_type: Some("application/json".into()),
            ..PutOptions::default()
        };
        self.blobs.put_blob(path, json(value), &options).await?;
        Ok(())
    }

    /// Rewrites a JSON record only if it exists (`If-Match: *`), with blob metadata
    /// (seen in listings without a read); `false` if it does not (deleted meanwhile: a
    /// late write must not bring back a blob under a job that was removed).
    pub async fn replace_existing<T: Serialize>(
        &self,
        path: &str,
        value: &T,
        metadata: Vec<(String, String)>,
    ) -> Result<bool> {
        let options = PutOptions {
            metadata,
            content_type: Some("application/json".into()),
            if_exists: true,
            ..PutOptions::default()
        };
        match self.blobs.put_blob(path, json(value), &options).await {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.status(), Some(404 | 412)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes a small marker blob (replacing any earlier one).
    pub async fn mark(&self, path: &str, text: &str) -> Result<()> {
        self.blobs
            .put_blob(
                path,
                Bytes::copy_from_slice(text.as_bytes()),
                &PutOptions::default(),
            )
            .await?;
        Ok(())
    }

    /// Whether a blob exists.
    pub async fn exists(&self, path: &str) -> Result<bool> {
        Ok(self.blobs.properties(path).await?.is_some())
    }

    /// Deletes a blob; `false` if it did not exist.
    pub async fn delete(&self, path: &str) -> Result<bool> {
        Ok(self.blobs.delete(path).await?)
    }

    /// Deletes blobs, best effort: what cannot be deleted now is collected when the backup
    /// is finalized.
    pub async fn delete_unreferenced(&self, names: &[String]) {
        // Owned names and storage handles: the future stays `Send` for any caller.
        let results: Vec<_> = futures::stream::iter(names.to_vec())
            .map(|name| {
                let blobs = self.blobs.clone();
                async move { (blobs.delete(&name).await, name) }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        for (r, name) in results {
            if let Err(e) = r {
                tracing::warn!(blob = %name, error = %e, "could not delete an unreferenced blob; finalize will collect it");
            }
        }
    }

    /// Deletes blobs, 16 at a time; every failure is an error (what was deleted stays
    /// deleted, so the caller can simply run again). Returns how many existed.
    pub async fn delete_all(&self, names: &[String]) -> Result<usize> {
        let results: Vec<_> = futures::stream::iter(names.to_vec())
            .map(|name| {
                let blobs = self.blobs.clone();
                async move { blobs.delete(&name).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let mut existed = 0;
        for r in results {
            existed += usize::from(r?);
        }
        Ok(existed)
    }

    /// Names of every blob under `prefix`.
    pub async fn list_names(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .blobs
            .list(prefix, None)
            .await?
            .blobs
            .into_iter()
            .map(|b| b.name)
            .collect())
    }

    /// Every blob under `prefix` with its size in bytes.
    pub async fn blob_sizes(&self, prefix: &str) -> Result<BTreeMap<String, u64>> {
        Ok(self
            .blobs
            .list(prefix, None)
            .await?
            .blobs
            .into_iter()
            .map(|b| (b.name, b.content_length))
            .collect())
    }

    /// The virtual directories directly under `prefix` (without their trailing `/`).
    pub async fn list_dirs(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .blobs
            .list(prefix, Some("/"))
            .await?
            .prefixes
            .into_iter()
            .map(|p| p.trim_end_matches('/').to_string())
            .collect())
    }

    /// Reads the records `<prefix><table>/<task>.json` that `known` does not have yet:
    /// commit and poison records of a backup, done and poison records of a restore.
    /// Records are only ever added, so each is read once.
    pub async fn load_new_records<T: DeserializeOwned>(
        &self,
        prefix: &str,
        known: impl Fn(&RecordKey) -> bool,
    ) -> Result<Vec<(RecordKey, T)>> {
        let new: Vec<(RecordKey, String, String)> = self
            .blobs
            .list(prefix, None)
            .await?
            .blobs
            .into_iter()
            .filter_map(|b| parse_record_name(&b.name, prefix).map(|k| (k, b.name, b.etag)))
            .filter(|(k, _, _)| !known(k))
            .collect();
        let scope = &self.blobs.scope();
        let loaded: Vec<Result<Option<(RecordKey, T)>>> = futures::stream::iter(new)
            .map(|(key, name, etag)| async move {
                // A record this process wrote (an in-process worker's) and still the same.
                if let Some(bytes) = scope
                    .as_deref()
                    .and_then(|s| written::recall(s, &name, &etag))
                {
                    return parse::<T>(&name, &bytes).map(|r| Some((key, r)));
                }
                // `None`: deleted since the listing (a retried poison record).
                Ok(self.read::<T>(&name).await?.map(|r| (key, r)))
            })
            .buffer_unordered(16)
            .collect()
            .await;
        loaded.into_iter().filter_map(Result::transpose).collect()
    }

    /// A backup's plan; `None` if there is no such backup.
    pub async fn backup_job(&self, id: &str) -> Result<Option<BackupJob>> {
        self.read(&BackupPaths::new(id).job()).await
    }

    /// A backup's manifest; `None` while the backup is not complete.
    pub async fn manifest(&self, id: &str) -> Result<Option<Manifest>> {
        self.read(&BackupPaths::new(id).manifest()).await
    }

    /// A restore's plan; `None` if there is no such restore.
    pub async fn restore_job(&self, backup: &str, restore: &str) -> Result<Option<RestoreJob>> {
        self.read(&BackupPaths::new(backup).restore_job(restore))
            .await
    }

    /// Where a restore stands; `None` if nothing was recorded (a restore whose planning
    /// stopped before its tasks were enqueued).
    pub async fn restore_state(
        &self,
        backup: &str,
        restore: &str,
    ) -> Result<Option<RestoreStateRecord>> {
        self.read(&BackupPaths::new(backup).restore_state(restore))
            .await
    }

    /// Records where a restore stands, unless it was cancelled: a cancel is final, and a
    /// `resume` (or a watch) that read the state before a cancel landed wrote over it, so
    /// the restore went on writing after `cancel` said it was cancelled. Returns `false`,
    /// writing nothing, when the recorded state is `cancelled`.
    pub async fn set_restore_state_unless_cancelled(
        &self,
        backup: &str,
        restore: &str,
        state: &RestoreStateRecord,
    ) -> Result<bool> {
        let path = BackupPaths::new(backup).restore_state(restore);
        let mut tries = 0;
        loop {
            tries += 1;
            let etag = self.blobs.properties(&path).await?.map(|p| p.etag);
            let current: Option<RestoreStateRecord> = match &etag {
                Some(_) => self.read(&path).await?,
                None => None,
            };
            if current.is_some_and(|c| c.status == JobStatus::Cancelled) {
                return Ok(false);
            }
            let options = PutOptions {
                content_type: Some("application/json".into()),
                if_none_match: etag.is_none(),
                if_match: etag,
                ..PutOptions::default()
            };
            match self.blobs.put_blob(&path, json(state), &options).await {
                Ok(_) => return Ok(true),
                // Written (or removed) meanwhile: look again.
                Err(e) if matches!(e.status(), Some(409 | 412)) && tries < 10 => continue,
                Err(e) if e.has_code("BlobNotFound") && tries < 10 => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Records where a restore stands.
    pub async fn set_restore_state(
        &self,
        backup: &str,
        restore: &str,
        state: &RestoreStateRecord,
    ) -> Result<()> {
        self.overwrite(&BackupPaths::new(backup).restore_state(restore), state)
            .await
    }

    /// A commit record that a manifest or a task names; its absence is an error (the
    /// backup's data is gone).
    pub async fn commit_record(&self, path: &str) -> Result<CommitRecord> {
        self.read(path).await?.ok_or_else(|| {
            StoreError::Storage(tablevault_azure::Error::Service {
                op: "Read Commit Record",
                status: 404,
                code: Some("BlobNotFound".into()),
                message: format!("{path} does not exist"),
                retry_after: None,
            })
        })
    }

    /// Fetches one block of `blob` with a ranged read (or takes it from an inline blob's
    /// bytes) and decodes it, verifying checksum, size, counts and key bounds against its
    /// record.
    pub async fn read_block(
        &self,
        blob: &BlobRecord,
        block: &BlockRecord,
        compression: Compression,
    ) -> Result<DecodedBlock> {
        if let Some(decoded) = reader::read_inline(blob, block, compression)? {
            return Ok(decoded);
        }
        let blob = blob.name.as_str();
        let data = match self.blobs.get_range(blob, block.offset, block.length).await {
            Ok(data) => data,
            // The blob ends before the block its record names: damaged, for good.
            Err(e) if e.has_code("InvalidRange") => {
                return Err(StoreError::Corrupt(format!(
                    "{blob}: block {} (bytes {} to {}) lies past the blob's end: {e}",
                    block.id,
                    block.offset,
                    block.offset + block.length
                )));
            }
            Err(e) => return Err(e.into()),
        };
        decode_checked(&data, blob, block, compression)
    }
}

/// A JSON record read from `path`.
fn parse<T: DeserializeOwned>(path: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| StoreError::Corrupt(format!("{path} is unreadable: {e}")))
}

fn json<T: Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec_pretty(value).expect("records serialize"))
}

/// `(table, task)` from `<prefix><table>/<task>.json`.
fn parse_record_name(name: &str, prefix: &str) -> Option<RecordKey> {
    let rest = name.strip_prefix(prefix)?;
    let (table, file) = rest.split_once('/')?;
    let task = file.strip_suffix(".json")?;
    Some((table.to_string(), task.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{MemoryBlobs, Op, Strike, busy, reset, service};

    fn store() -> (Arc<MemoryBlobs>, Store) {
        let blobs = Arc::new(MemoryBlobs::new("c"));
        (blobs.clone(), Store::new(blobs))
    }

    /// Blobs where a cancel lands on a restore's state between the reading of it and
    /// the conditional write over it.
    struct CancelInBetween {
        inner: Arc<MemoryBlobs>,
        fired: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl BlobStorage for CancelInBetween {
        fn container(&self) -> &str {
            self.inner.container()
        }
        async fn create_container(&self) -> tablevault_azure::Result<bool> {
            self.inner.create_container().await
        }
        async fn put_block(&self, b: &str, id: &str, d: Bytes) -> tablevault_azure::Result<()> {
            self.inner.put_block(b, id, d).await
        }
        async fn put_block_list(
            &self,
            b: &str,
            ids: &[String],
            o: &PutOptions,
        ) -> tablevault_azure::Result<String> {
            self.inner.put_block_list(b, ids, o).await
        }
        async fn put_blob(
            &self,
            b: &str,
            d: Bytes,
            o: &PutOptions,
        ) -> tablevault_azure::Result<String> {
            if o.if_match.is_some() && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let cancelled = RestoreStateRecord::now(JobStatus::Cancelled, None);
                self.inner.tamper(b, json(&cancelled));
            }
            self.inner.put_blob(b, d, o).await
        }
        async fn get(&self, b: &str) -> tablevault_azure::Result<Option<Bytes>> {
            self.inner.get(b).await
        }
        async fn get_range(&self, b: &str, o: u64, l: u64) -> tablevault_azure::Result<Bytes> {
            self.inner.get_range(b, o, l).await
        }
        async fn properties(
            &self,
            b: &str,
        ) -> tablevault_azure::Result<Option<tablevault_azure::blob::BlobProperties>> {
            self.inner.properties(b).await
        }
        async fn delete(&self, b: &str) -> tablevault_azure::Result<bool> {
            self.inner.delete(b).await
        }
        async fn delete_if_match(&self, b: &str, e: &str) -> tablevault_azure::Result<bool> {
            self.inner.delete_if_match(b, e).await
        }
        async fn list(
            &self,
            p: &str,
            d: Option<&str>,
        ) -> tablevault_azure::Result<tablevault_azure::blob::ListPage> {
            self.inner.list(p, d).await
        }
    }

    /// Regression: `resume` read a restore's state, and a `cancel` landed before it wrote
    /// `in-progress` over it: `cancel` said cancelled (exit 0), and the restore went on
    /// to write everything. A state is now written over only the version read, and
    /// never over `cancelled`.
    #[tokio::test]
    async fn a_cancel_is_never_written_over() {
        let inner = Arc::new(MemoryBlobs::new("c"));
        let store = Store::new(Arc::new(CancelInBetween {
            inner: inner.clone(),
            fired: Default::default(),
        }));
        let live = |s| RestoreStateRecord::now(s, None);
        let state = |store: Store| async move {
            store.restore_state("b", "r").await.unwrap().unwrap().status
        };
        // No state yet: written.
        assert!(
            store
                .set_restore_state_unless_cancelled("b", "r", &live(JobStatus::Interrupted))
                .await
                .unwrap()
        );
        // A cancel lands between the read and the write: the write loses, and says so.
        assert!(
            !store
                .set_restore_state_unless_cancelled("b", "r", &live(JobStatus::InProgress))
                .await
                .unwrap()
        );
        assert_eq!(state(store.clone()).await, JobStatus::Cancelled);
        // Over a cancelled state, nothing is written.
        assert!(
            !store
                .set_restore_state_unless_cancelled("b", "r", &live(JobStatus::Complete))
                .await
                .unwrap()
        );
        assert_eq!(state(store.clone()).await, JobStatus::Cancelled);
    }

    #[tokio::test]
    async fn a_create_whose_first_try_landed_is_ours() {
        let (blobs, store) = store();
        let conflict = service("Put Blob", 409, "BlobAlreadyExists");
        blobs.fail(Op::PutBlob, "r", Strike::After, conflict);
        assert_eq!(
            store.create("r", &"mine", Vec::new()).await.unwrap(),
            CreateOutcome::Created
        );
        blobs.fail(Op::PutBlob, "s", Strike::After, reset("Put Blob"));
        assert_eq!(
            store.create("s", &"mine", Vec::new()).await.unwrap(),
            CreateOutcome::Created
        );
    }

    #[tokio::test]
    async fn records_this_process_created_are_listed_without_reads_until_rewritten() {
        remember_created_records();
        let blobs = Arc::new(MemoryBlobs::new("c").with_scope("memory://listed-records"));
        let store = Store::new(blobs.clone());
        for task in ["r0", "r1", "r2"] {
            store
                .create(&format!("j/tasks/T/{task}.json"), &task, Vec::new())
                .await
                .unwrap();
        }
        // Another writer's record, and one of ours rewritten behind our back.
        blobs.tamper("j/tasks/T/r3.json", json(&"theirs"));
        blobs.tamper("j/tasks/T/r1.json", json(&"changed"));
        let mut loaded: Vec<(RecordKey, String)> =
            store.load_new_records("j/tasks/", |_| false).await.unwrap();
        loaded.sort();
        let values: Vec<&str> = loaded.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(values, ["r0", "changed", "r2", "theirs"]);
        assert_eq!(blobs.calls(Op::Get), 2, "only r1 and r3 are read");
        // Without a scope, everything is read.
        let (plain, store) = self::store();
        store
            .create("j/tasks/T/r0.json", &"r0", Vec::new())
            .await
            .unwrap();
        store
            .load_new_records::<String>("j/tasks/", |_| false)
            .await
            .unwrap();
        assert_eq!(plain.calls(Op::Get), 1);
    }

    #[tokio::test]
    async fn replacing_never_creates() {
        let (blobs, store) = store();
        let meta = || vec![("k".to_string(), "v".to_string())];
        assert!(!store.replace_existing("gone", &"x", meta()).await.unwrap());
        assert!(blobs.blob("gone").is_none());
        store.overwrite("here", &"old").await.unwrap();
        assert!(
            store
                .replace_existing("here", &"new", meta())
                .await
                .unwrap()
        );
        assert_eq!(store.read::<String>("here").await.unwrap().unwrap(), "new");
    }

    #[tokio::test]
    async fn a_create_that_finds_another_record_leaves_it() {
        let (_, store) = store();
        store.create("r", &"theirs", Vec::new()).await.unwrap();
        assert_eq!(
            store.create("r", &"mine", Vec::new()).await.unwrap(),
            CreateOutcome::AlreadyExists
        );
        assert_eq!(store.read::<String>("r").await.unwrap().unwrap(), "theirs");
    }

    #[tokio::test]
    async fn a_create_that_did_not_land_is_an_error() {
        let (blobs, store) = store();
        blobs.fail(Op::PutBlob, "r", Strike::Before, reset("Put Blob"));
        assert!(store.create("r", &"mine", Vec::new()).await.is_err());
        blobs.fail(Op::PutBlob, "r", Strike::Before, busy("Put Blob"));
        assert!(store.create("r", &"mine", Vec::new()).await.is_err());
        assert_eq!(
            blobs.calls(Op::Get),
            1,
            "a refused create needs no read-back"
        );
    }

    #[tokio::test]
    async fn delete_all_deletes_what_exists_and_reports_failures() {
        let (blobs, store) = store();
        for n in ["b/1", "b/2", "b/3", "c/1"] {
            store.mark(n, "x").await.unwrap();
        }
        let names = store.list_names("b/").await.unwrap();
        assert_eq!(names, ["b/1", "b/2", "b/3"]);
        let mut with_gone = names.clone();
        with_gone.push("b/never".into());
        assert_eq!(store.delete_all(&with_gone).await.unwrap(), 3);
        assert_eq!(blobs.names(), ["c/1"]);
        // Deleting again is harmless; a failure is reported, not swallowed.
        assert_eq!(store.delete_all(&names).await.unwrap(), 0);
        blobs.fail(Op::Delete, "c/1", Strike::Before, busy("Delete Blob"));
        assert!(store.delete_all(&["c/1".into()]).await.is_err());
        assert_eq!(blobs.names(), ["c/1"]);
        assert_eq!(store.delete_all(&["c/1".into()]).await.unwrap(), 1);
        assert!(store.list_names("").await.unwrap().is_empty());
    }

    #[test]
    fn record_names() {
        assert_eq!(
            parse_record_name("b1/tasks/Orders/r0001.json", "b1/tasks/"),
            Some(("Orders".into(), "r0001".into()))
        );
        assert_eq!(parse_record_name("b1/tasks/Orders/x", "b1/tasks/"), None);
        assert_eq!(
            parse_record_name("b2/tasks/Orders/r.json", "b1/tasks/"),
            None
        );
    }
}
