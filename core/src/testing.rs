//! In-memory fakes of blob storage and the task queue, for unit tests of the protocol's
//! steps (leases, settling, commits, block writing) where Azurite cannot produce the fault
//! under test: an answer lost after the write landed, a 409 on a retried create, a stale
//! pop receipt at a chosen moment. Visibility timeouts follow tokio's clock, so tests can
//! pause and advance time. Also the key characters tests of splitting draw from.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tablevault_azure::blob::{BlobItem, BlobProperties, ListPage, PutOptions};
use tablevault_azure::error::TransportKind;
use tablevault_azure::{Error, Result};
use tokio::time::Instant;

use crate::queue::{ReceivedMessage, TaskQueue};
use crate::store::BlobStorage;

/// Which operation a scripted fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Put Block.
    PutBlock,
    /// Put Block List.
    PutBlockList,
    /// Put Blob.
    PutBlob,
    /// Get Blob (whole or ranged).
    Get,
    /// Get Blob Properties.
    Properties,
    /// Delete Blob.
    Delete,
    /// List Blobs.
    List,
    /// Put Message.
    Put,
    /// Get Messages.
    Receive,
    /// Update Message.
    Update,
    /// Delete Message.
    DeleteMessage,
}

/// When a scripted fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strike {
    /// The request fails before it reaches the service: nothing happened.
    Before,
    /// The service applies the request, then the answer is lost.
    After,
    /// The request is never answered (a stalled endpoint); the error is not used.
    Hang,
}

#[derive(Debug)]
struct Fault {
    op: Op,
    path: String,
    strike: Strike,
    error: Error,
}

/// Calls made and faults to inject (matched in order by operation and a path fragment),
/// shared by both fakes.
#[derive(Debug, Default)]
struct Recorder {
    calls: Mutex<HashMap<Op, usize>>,
    faults: Mutex<VecDeque<Fault>>,
}

impl Recorder {
    fn fail(&self, op: Op, path: &str, strike: Strike, error: Error) {
        self.faults.lock().expect("faults").push_back(Fault {
            op,
            path: path.to_string(),
            strike,
            error,
        });
    }

    fn calls(&self, op: Op) -> usize {
        self.calls
            .lock()
            .expect("calls")
            .get(&op)
            .copied()
            .unwrap_or(0)
    }

    /// Counts the call and applies the first scripted fault for `op` whose fragment
    /// `path` contains: `Err` means fail now, `Ok(Some)` means apply and then fail with
    /// that error.
    async fn enter(&self, op: Op, path: &str) -> Result<Option<Error>> {
        *self.calls.lock().expect("calls").entry(op).or_default() += 1;
        let fault = {
            let mut faults = self.faults.lock().expect("faults");
            faults
                .iter()
                .position(|f| f.op == op && path.contains(&f.path))
                .and_then(|i| faults.remove(i))
        };
        let Some(f) = fault else {
            return Ok(None);
        };
        match f.strike {
            Strike::Before => Err(f.error),
            Strike::After => Ok(Some(f.error)),
            Strike::Hang => {
                std::future::pending::<()>().await;
                unreachable!("a hung request never completes")
            }
        }
    }
}

/// A commit record of an empty whole-table range with no blobs: a task as done as it
/// can be, for tests of what watches records.
pub fn empty_commit(job: &str, table: &str, task: &str) -> crate::protocol::CommitRecord {
    crate::protocol::CommitRecord {
        format: crate::format::FORMAT_VERSION,
        job: job.into(),
        table: table.into(),
        task: task.into(),
        attempt: "a".into(),
        range: crate::keys::KeyRange::all(),
        entities: 0,
        raw_bytes: 0,
        stored_bytes: 0,
        blobs: Vec::new(),
        started_at: String::new(),
        finished_at: String::new(),
        worker: String::new(),
        split_off: Vec::new(),
    }
}

/// The account tests' jobs and manifests name.
pub fn test_account() -> crate::protocol::AccountRef {
    crate::protocol::AccountRef {
        account: "a".into(),
        table_endpoint: "e".into(),
    }
}

/// A backup job `id` of [`test_account`] planning `tables`, with settings no test
/// depends on.
pub fn test_job(id: &str, tables: Vec<crate::protocol::TablePlan>) -> crate::protocol::BackupJob {
    crate::protocol::BackupJob {
        protocol: crate::protocol::PROTOCOL_VERSION,
        format: crate::format::FORMAT_VERSION,
        backup_id: id.into(),
        created_at: String::new(),
        source: test_account(),
        options: crate::protocol::BackupOptions {
            dynamic_split: true,
            compression: crate::format::Compression::None,
            blocks_per_blob: 20,
            block_bytes: 1,
            batch_bytes: 1,
            max_attempts: 1,
            queue: "q".into(),
            max_rate: None,
        },
        tables,
        tool_version: String::new(),
    }
}

/// A manifest of backup `id` of `source` holding `tables`, with no other content.
pub fn test_manifest(
    id: &str,
    source: crate::protocol::AccountRef,
    tables: Vec<crate::protocol::ManifestTable>,
) -> crate::protocol::Manifest {
    crate::protocol::Manifest {
        format: crate::format::FORMAT_VERSION,
        backup_id: id.into(),
        created_at: String::new(),
        completed_at: String::new(),
        source,
        compression: crate::format::Compression::None,
        entities: tables.iter().map(|t| t.entities).sum(),
        raw_bytes: 0,
        stored_bytes: 0,
        tables,
        tool_version: String::new(),
    }
}

/// A block record of `entities` from `first` to `last`, unmarked, locating nothing: what
/// planning reads of a block.
pub fn test_block(
    id: usize,
    first: crate::keys::EntityKey,
    last: crate::keys::EntityKey,
    entities: u64,
) -> crate::protocol::BlockRecord {
    crate::protocol::BlockRecord {
        id: format!("{id}"),
        offset: 0,
        length: 0,
        raw_length: 0,
        entities,
        batches: entities.div_ceil(100),
        sha256: String::new(),
        first_key: first,
        last_key: last,
        marks: Vec::new(),
    }
}

/// A reset connection: the request may or may not have been applied.
pub fn reset(op: &'static str) -> Error {
    Error::Transport {
        op,
        kind: TransportKind::Interrupted,
        detail: "connection reset (injected)".into(),
    }
}

/// A 503 ServerBusy: the service refused before doing anything.
pub fn busy(op: &'static str) -> Error {
    service(op, 503, "ServerBusy")
}

/// A service error with a status and code.
pub fn service(op: &'static str, status: u16, code: &str) -> Error {
    Error::Service {
        op,
        status,
        code: Some(code.to_string()),
        message: format!("{code} (injected)"),
        retry_after: None,
    }
}

#[derive(Debug, Clone)]
struct StoredBlob {
    data: Bytes,
    metadata: BTreeMap<String, String>,
    etag: u64,
}

/// Blob storage in memory, with scriptable faults.
#[derive(Debug, Default)]
pub struct MemoryBlobs {
    container: String,
    blobs: Mutex<BTreeMap<String, StoredBlob>>,
    staged: Mutex<HashMap<(String, String), Bytes>>,
    recorder: Recorder,
    scope: Option<String>,
}

impl MemoryBlobs {
    /// An empty container.
    pub fn new(container: &str) -> Self {
        MemoryBlobs {
            container: container.to_string(),
            ..Default::default()
        }
    }

    /// Makes the next `op` on a blob whose name contains `path` fail with `error`,
    /// before or after applying it.
    pub fn fail(&self, op: Op, path: &str, strike: Strike, error: Error) {
        self.recorder.fail(op, path, strike, error);
    }

    /// Lets the store remember the records it creates here, under `scope` (unique per
    /// test: the memory is the process's).
    pub fn with_scope(mut self, scope: &str) -> Self {
        self.scope = Some(scope.to_string());
        self
    }

    /// A blob's bytes, if it exists.
    pub fn blob(&self, name: &str) -> Option<Bytes> {
        self.blobs
            .lock()
            .expect("blobs")
            .get(name)
            .map(|b| b.data.clone())
    }

    /// Replaces (or creates) a blob's bytes, as a test's tampering.
    pub fn tamper(&self, name: &str, data: Bytes) {
        let mut blobs = self.blobs.lock().expect("blobs");
        let etag = blobs.values().map(|b| b.etag).max().unwrap_or(0) + 1;
        blobs.insert(
            name.to_string(),
            StoredBlob {
                data,
                metadata: BTreeMap::new(),
                etag,
            },
        );
    }

    /// Names of every blob, sorted.
    pub fn names(&self) -> Vec<String> {
        self.blobs.lock().expect("blobs").keys().cloned().collect()
    }

    /// How many times an operation was called (faulted calls included).
    pub fn calls(&self, op: Op) -> usize {
        self.recorder.calls(op)
    }

    fn store(&self, name: &str, data: Bytes, options: &PutOptions) -> Result<String> {
        let mut blobs = self.blobs.lock().expect("blobs");
        if options.if_none_match && blobs.contains_key(name) {
            return Err(service("Put Blob", 409, "BlobAlreadyExists"));
        }
        if options.if_exists && !blobs.contains_key(name) {
            return Err(service("Put Blob", 412, "ConditionNotMet"));
        }
        if let Some(etag) = &options.if_match {
            match blobs.get(name) {
                None => return Err(service("Put Blob", 404, "BlobNotFound")),
                Some(b) if format!("\"{}\"", b.etag) != *etag => {
                    return Err(service("Put Blob", 412, "ConditionNotMet"));
                }
                Some(_) => {}
            }
        }
        let etag = blobs.values().map(|b| b.etag).max().unwrap_or(0) + 1;
        blobs.insert(
            name.to_string(),
            StoredBlob {
                data,
                metadata: options
                    .metadata
                    .iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                    .collect(),
                etag,
            },
        );
        Ok(format!("\"{etag}\""))
    }
}

fn then<T>(result: Result<T>, after: Option<Error>) -> Result<T> {
    match after {
        Some(e) => Err(e),
        None => result,
    }
}

#[async_trait]
impl BlobStorage for MemoryBlobs {
    fn container(&self) -> &str {
        &self.container
    }

    fn scope(&self) -> Option<String> {
        self.scope.clone()
    }

    async fn create_container(&self) -> Result<bool> {
        Ok(true)
    }

    async fn put_block(&self, blob: &str, block_id: &str, data: Bytes) -> Result<()> {
        let after = self.recorder.enter(Op::PutBlock, blob).await?;
        self.staged
            .lock()
            .expect("staged")
            .insert((blob.to_string(), block_id.to_string()), data);
        then(Ok(()), after)
    }

    async fn put_block_list(
        &self,
        blob: &str,
        block_ids: &[String],
        options: &PutOptions,
    ) -> Result<String> {
        let after = self.recorder.enter(Op::PutBlockList, blob).await?;
        let mut data = Vec::new();
        {
            let staged = self.staged.lock().expect("staged");
            for id in block_ids {
                let block = staged
                    .get(&(blob.to_string(), id.clone()))
                    .ok_or_else(|| service("Put Block List", 400, "InvalidBlockList"))?;
                data.extend_from_slice(block);
            }
        }
        let etag = self.store(blob, Bytes::from(data), options);
        then(etag, after)
    }

    async fn put_blob(&self, blob: &str, data: Bytes, options: &PutOptions) -> Result<String> {
        let after = self.recorder.enter(Op::PutBlob, blob).await?;
        let etag = self.store(blob, data, options);
        then(etag, after)
    }

    async fn get(&self, blob: &str) -> Result<Option<Bytes>> {
        let after = self.recorder.enter(Op::Get, blob).await?;
        then(Ok(self.blob(blob)), after)
    }

    async fn get_range(&self, blob: &str, offset: u64, length: u64) -> Result<Bytes> {
        let after = self.recorder.enter(Op::Get, blob).await?;
        let data = self
            .blob(blob)
            .ok_or_else(|| service("Get Blob Range", 404, "BlobNotFound"))?;
        let end = offset.saturating_add(length);
        if end > data.len() as u64 {
            return Err(service("Get Blob Range", 416, "InvalidRange"));
        }
        then(Ok(data.slice(offset as usize..end as usize)), after)
    }

    async fn properties(&self, blob: &str) -> Result<Option<BlobProperties>> {
        let after = self.recorder.enter(Op::Properties, blob).await?;
        let props = self
            .blobs
            .lock()
            .expect("blobs")
            .get(blob)
            .map(|b| BlobProperties {
                content_length: b.data.len() as u64,
                etag: format!("\"{}\"", b.etag),
                metadata: b.metadata.clone(),
                last_modified: None,
            });
        then(Ok(props), after)
    }

    async fn delete(&self, blob: &str) -> Result<bool> {
        let after = self.recorder.enter(Op::Delete, blob).await?;
        let existed = self.blobs.lock().expect("blobs").remove(blob).is_some();
        then(Ok(existed), after)
    }

    async fn delete_if_match(&self, blob: &str, etag: &str) -> Result<bool> {
        let after = self.recorder.enter(Op::Delete, blob).await?;
        let mut blobs = self.blobs.lock().expect("blobs");
        let matches = blobs
            .get(blob)
            .is_some_and(|b| format!("\"{}\"", b.etag) == etag);
        if matches {
            blobs.remove(blob);
        }
        then(Ok(matches), after)
    }

    async fn list(&self, prefix: &str, delimiter: Option<&str>) -> Result<ListPage> {
        let after = self.recorder.enter(Op::List, prefix).await?;
        let mut page = ListPage::default();
        for (name, b) in self.blobs.lock().expect("blobs").iter() {
            let Some(rest) = name.strip_prefix(prefix) else {
                continue;
            };
            match delimiter.and_then(|d| rest.find(d).map(|i| (i, d))) {
                Some((i, d)) => {
                    let dir = format!("{prefix}{}{d}", &rest[..i]);
                    if page.prefixes.last() != Some(&dir) {
                        page.prefixes.push(dir);
                    }
                }
                None => page.blobs.push(BlobItem {
                    name: name.clone(),
                    content_length: b.data.len() as u64,
                    etag: format!("\"{}\"", b.etag),
                    metadata: b.metadata.clone(),
                    // Unknown, as the records' own times are what retention tests plant.
                    last_modified: None,
                }),
            }
        }
        then(Ok(page), after)
    }
}

#[derive(Debug, Clone)]
struct QueuedMessage {
    id: String,
    text: String,
    visible_at: Instant,
    dequeue_count: u64,
    receipt: Option<String>,
}

/// A task queue in memory: at-least-once delivery, visibility timeouts on tokio's clock,
/// pop receipts that go stale, and scriptable faults.
#[derive(Debug, Default)]
pub struct MemoryQueue {
    name: String,
    messages: Mutex<Vec<QueuedMessage>>,
    next_id: Mutex<u64>,
    recorder: Recorder,
}

impl MemoryQueue {
    /// An empty queue.
    pub fn new(name: &str) -> Self {
        MemoryQueue {
            name: name.to_string(),
            ..Default::default()
        }
    }

    /// Makes the next `op` (on a message whose id contains `id`, or any message for `""`)
    /// fail with `error`, before or after applying it.
    pub fn fail(&self, op: Op, id: &str, strike: Strike, error: Error) {
        self.recorder.fail(op, id, strike, error);
    }

    /// How many times an operation was called.
    pub fn calls(&self, op: Op) -> usize {
        self.recorder.calls(op)
    }

    /// Every message's text, visible or not, in insertion order.
    pub fn texts(&self) -> Vec<String> {
        self.messages
            .lock()
            .expect("messages")
            .iter()
            .map(|m| m.text.clone())
            .collect()
    }

    /// `(text, dequeue count, visible now)` of every message.
    pub fn snapshot(&self) -> Vec<(String, u64, bool)> {
        let now = Instant::now();
        self.messages
            .lock()
            .expect("messages")
            .iter()
            .map(|m| (m.text.clone(), m.dequeue_count, m.visible_at <= now))
            .collect()
    }

    fn owned<'a>(
        messages: &'a mut [QueuedMessage],
        op: &'static str,
        id: &str,
        receipt: &str,
    ) -> Result<&'a mut QueuedMessage> {
        let lost = |code: &str| Error::LostOwnership {
            op,
            message_id: id.to_string(),
            code: code.to_string(),
        };
        let m = messages
            .iter_mut()
            .find(|m| m.id == id)
            .ok_or_else(|| lost("MessageNotFound"))?;
        if m.receipt.as_deref() != Some(receipt) {
            return Err(lost("PopReceiptMismatch"));
        }
        Ok(m)
    }
}

#[async_trait]
impl TaskQueue for MemoryQueue {
    fn name(&self) -> &str {
        &self.name
    }

    async fn create(&self) -> Result<()> {
        Ok(())
    }

    async fn put(&self, text: &str, visible_after: Option<Duration>) -> Result<()> {
        let after = self.recorder.enter(Op::Put, "").await?;
        let id = {
            let mut n = self.next_id.lock().expect("ids");
            *n += 1;
            format!("m{n}")
        };
        self.messages.lock().expect("messages").push(QueuedMessage {
            id,
            text: text.to_string(),
            visible_at: Instant::now() + visible_after.unwrap_or_default(),
            dequeue_count: 0,
            receipt: None,
        });
        then(Ok(()), after)
    }

    async fn receive(&self, max: u8, visibility: Duration) -> Result<Vec<ReceivedMessage>> {
        let after = self.recorder.enter(Op::Receive, "").await?;
        let now = Instant::now();
        let mut out = Vec::new();
        for m in self.messages.lock().expect("messages").iter_mut() {
            if out.len() >= max.max(1) as usize {
                break;
            }
            if m.visible_at > now {
                continue;
            }
            m.dequeue_count += 1;
            m.visible_at = now + visibility;
            let receipt = uuid::Uuid::new_v4().simple().to_string();
            m.receipt = Some(receipt.clone());
            out.push(ReceivedMessage {
                message_id: m.id.clone(),
                pop_receipt: receipt,
                dequeue_count: m.dequeue_count,
                text: m.text.clone(),
            });
        }
        then(Ok(out), after)
    }

    async fn update(
        &self,
        message_id: &str,
        pop_receipt: &str,
        visibility: Duration,
        new_text: Option<&str>,
    ) -> Result<String> {
        let after = self.recorder.enter(Op::Update, message_id).await?;
        let mut messages = self.messages.lock().expect("messages");
        let m = Self::owned(&mut messages, "Update Message", message_id, pop_receipt)?;
        let receipt = uuid::Uuid::new_v4().simple().to_string();
        m.receipt = Some(receipt.clone());
        m.visible_at = Instant::now() + visibility;
        if let Some(t) = new_text {
            m.text = t.to_string();
        }
        then(Ok(receipt), after)
    }

    async fn delete(&self, message_id: &str, pop_receipt: &str) -> Result<()> {
        let after = self.recorder.enter(Op::DeleteMessage, message_id).await?;
        let mut messages = self.messages.lock().expect("messages");
        Self::owned(&mut messages, "Delete Message", message_id, pop_receipt)?;
        messages.retain(|m| m.id != message_id);
        then(Ok(()), after)
    }

    async fn approximate_count(&self) -> Result<u64> {
        Ok(self.messages.lock().expect("messages").len() as u64)
    }

    async fn first_waiting(&self) -> Result<Option<String>> {
        let now = Instant::now();
        Ok(self
            .messages
            .lock()
            .expect("messages")
            .iter()
            .find(|m| m.visible_at <= now)
            .map(|m| m.text.clone()))
    }
}

/// Kills a process at a chosen protocol step: every storage or queue operation made
/// through [`CrashingBlobs`] and [`CrashingQueue`] sharing one switch counts as a step,
/// and from step `at` on each operation hangs forever, as if the process had died just
/// before it. Tests then abort the hung task and check that whoever comes next finishes
/// the job exactly.
#[derive(Debug)]
pub struct CrashSwitch {
    at: usize,
    steps: Mutex<Vec<String>>,
    crashed: tokio::sync::Notify,
}

impl CrashSwitch {
    /// A switch that crashes before step `at` (0-based); `usize::MAX` never crashes.
    pub fn at(at: usize) -> std::sync::Arc<Self> {
        std::sync::Arc::new(CrashSwitch {
            at,
            steps: Mutex::new(Vec::new()),
            crashed: tokio::sync::Notify::new(),
        })
    }

    /// The steps seen so far, as `operation path`.
    pub fn steps(&self) -> Vec<String> {
        self.steps.lock().expect("steps").clone()
    }

    /// Waits until the crash happened.
    pub async fn crashed(&self) {
        let notified = self.crashed.notified();
        if self.steps.lock().expect("steps").len() > self.at {
            return;
        }
        notified.await;
    }

    async fn step(&self, op: &str, path: &str) {
        let n = {
            let mut steps = self.steps.lock().expect("steps");
            steps.push(format!("{op} {path}"));
            steps.len() - 1
        };
        if n >= self.at {
            self.crashed.notify_waiters();
            std::future::pending::<()>().await;
        }
    }
}

/// Blob storage that dies at its switch's step.
pub struct CrashingBlobs {
    /// The storage underneath.
    pub inner: std::sync::Arc<dyn BlobStorage>,
    /// The shared switch.
    pub switch: std::sync::Arc<CrashSwitch>,
}

#[async_trait]
impl BlobStorage for CrashingBlobs {
    fn container(&self) -> &str {
        self.inner.container()
    }
    async fn create_container(&self) -> Result<bool> {
        self.switch.step("create-container", "").await;
        self.inner.create_container().await
    }
    async fn put_block(&self, blob: &str, block_id: &str, data: Bytes) -> Result<()> {
        self.switch.step("put-block", blob).await;
        self.inner.put_block(blob, block_id, data).await
    }
    async fn put_block_list(
        &self,
        blob: &str,
        block_ids: &[String],
        options: &PutOptions,
    ) -> Result<String> {
        self.switch.step("put-block-list", blob).await;
        self.inner.put_block_list(blob, block_ids, options).await
    }
    async fn put_blob(&self, blob: &str, data: Bytes, options: &PutOptions) -> Result<String> {
        self.switch.step("put-blob", blob).await;
        self.inner.put_blob(blob, data, options).await
    }
    async fn get(&self, blob: &str) -> Result<Option<Bytes>> {
        self.switch.step("get", blob).await;
        self.inner.get(blob).await
    }
    async fn get_range(&self, blob: &str, offset: u64, length: u64) -> Result<Bytes> {
        self.switch.step("get-range", blob).await;
        self.inner.get_range(blob, offset, length).await
    }
    async fn properties(&self, blob: &str) -> Result<Option<BlobProperties>> {
        self.switch.step("properties", blob).await;
        self.inner.properties(blob).await
    }
    async fn delete(&self, blob: &str) -> Result<bool> {
        self.switch.step("delete", blob).await;
        self.inner.delete(blob).await
    }
    async fn delete_if_match(&self, blob: &str, etag: &str) -> Result<bool> {
        self.switch.step("delete-if-match", blob).await;
        self.inner.delete_if_match(blob, etag).await
    }
    async fn list(&self, prefix: &str, delimiter: Option<&str>) -> Result<ListPage> {
        self.switch.step("list", prefix).await;
        self.inner.list(prefix, delimiter).await
    }
}

/// A task queue that dies at its switch's step.
pub struct CrashingQueue {
    /// The queue underneath.
    pub inner: std::sync::Arc<dyn TaskQueue>,
    /// The shared switch.
    pub switch: std::sync::Arc<CrashSwitch>,
}

#[async_trait]
impl TaskQueue for CrashingQueue {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn create(&self) -> Result<()> {
        self.switch.step("create-queue", self.inner.name()).await;
        self.inner.create().await
    }
    async fn put(&self, text: &str, visible_after: Option<Duration>) -> Result<()> {
        self.switch.step("put-message", self.inner.name()).await;
        self.inner.put(text, visible_after).await
    }
    async fn receive(&self, max: u8, visibility: Duration) -> Result<Vec<ReceivedMessage>> {
        self.switch.step("get-messages", self.inner.name()).await;
        self.inner.receive(max, visibility).await
    }
    async fn update(
        &self,
        message_id: &str,
        pop_receipt: &str,
        visibility: Duration,
        new_text: Option<&str>,
    ) -> Result<String> {
        self.switch.step("update-message", self.inner.name()).await;
        self.inner
            .update(message_id, pop_receipt, visibility, new_text)
            .await
    }
    async fn delete(&self, message_id: &str, pop_receipt: &str) -> Result<()> {
        self.switch.step("delete-message", self.inner.name()).await;
        self.inner.delete(message_id, pop_receipt).await
    }
    async fn approximate_count(&self) -> Result<u64> {
        self.inner.approximate_count().await
    }
    async fn first_waiting(&self) -> Result<Option<String>> {
        // A read that changes nothing: not a protocol step a crash could fall before.
        self.inner.first_waiting().await
    }
}

/// Ranges of code points the tests of splitting draw key characters from: printable
/// ASCII, Latin-1, CJK, private use, the top of the BMP (above the surrogates in UTF-16
/// order, below astral characters in code point order) and astral characters. Their
/// orders disagree, and the split arithmetic ranks them differently.
pub const KEY_CHAR_CLASSES: &[(u32, u32)] = &[
    (0x20, 0x7E),
    (0xA0, 0xFF),
    (0x4E00, 0x4E20),
    (0xE000, 0xE008),
    (0xFF00, 0xFFFD),
    (0x1F600, 0x1F620),
    (0x10000, 0x10008),
];

/// A key character from [`KEY_CHAR_CLASSES`], never one of the four keys cannot hold;
/// `below(n)` draws a number under `n`.
pub fn key_char(mut below: impl FnMut(u64) -> u64) -> char {
    loop {
        let (lo, hi) = KEY_CHAR_CLASSES[below(KEY_CHAR_CLASSES.len() as u64) as usize];
        let unit = lo + below(u64::from(hi - lo + 1)) as u32;
        let c = char::from_u32(unit).expect("no surrogates in the classes");
        if !matches!(c, '/' | '\\' | '#' | '?') {
            return c;
        }
    }
}
