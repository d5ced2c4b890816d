//! Writes the sealed blocks of one attempt into data blobs: each block is uploaded as it
//! arrives (at most two in flight), and a blob is committed with its metadata once it
//! holds `blocks_per_blob` blocks. A blob's first block is held back until a second one
//! comes: a blob of one block (a small table, a short range) is then written with a
//! single Put Blob instead of Put Block and Put Block List, one request less per task.
//! Readers find blocks by offset and length, never by block id, so both are the same
//! blob to them. Where the job allows it ([`BlockWriter::inline_up_to`]), an attempt whose
//! whole range is one small block writes no data blob at all: the block goes into the
//! commit record as an inline blob, so a small table costs one Put Blob, the commit. It
//! remembers every block's place, size, count and checksum for the commit record.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use tablevault_azure::Error;
use tablevault_azure::blob::PutOptions;
use tablevault_azure::error::TransportKind;
use tokio::task::JoinSet;

use super::{BackupPaths, BlobStorage, Store};
use crate::format::{BLOCK_VERSION, Compression, SealedBlock};
use crate::protocol::{BlobRecord, BlockRecord};

/// Uploads in flight per attempt; with the block being built and the one queued this
/// bounds an attempt's block memory at about four blocks.
const MAX_INFLIGHT: usize = 2;

/// Most blocks the service lets one blob commit is 50,000.
const MAX_BLOCKS_PER_BLOB: usize = 49_999;

/// Block ids are fixed-width: the service needs every id of a blob to have one length.
fn block_id(index: usize) -> String {
    format!("{index:08}")
}

/// Writer of one attempt's data blobs, under `<id>/data/<table>/<task>/<attempt>/`.
pub struct BlockWriter {
    blobs: Arc<dyn BlobStorage>,
    paths: BackupPaths,
    table: String,
    task: String,
    attempt: String,
    compression: Compression,
    blocks_per_blob: usize,
    blob_index: usize,
    blocks: Vec<BlockRecord>,
    /// The current blob's first block, not uploaded yet (id, bytes).
    held: Option<(String, bytes::Bytes)>,
    offset: u64,
    inflight: JoinSet<Result<(), Error>>,
    committed: Vec<BlobRecord>,
    /// Largest stored block that goes into the commit record when it is the attempt's
    /// only one; `None`: never.
    inline_max: Option<u64>,
}

impl Store {
    /// A writer for one attempt of one task.
    pub fn block_writer(
        &self,
        paths: &BackupPaths,
        table: &str,
        task: &str,
        attempt: &str,
        compression: Compression,
        blocks_per_blob: usize,
    ) -> BlockWriter {
        BlockWriter {
            blobs: self.blobs().clone(),
            paths: paths.clone(),
            table: table.to_string(),
            task: task.to_string(),
            attempt: attempt.to_string(),
            compression,
            blocks_per_blob: blocks_per_blob.clamp(1, MAX_BLOCKS_PER_BLOB),
            blob_index: 0,
            blocks: Vec::new(),
            held: None,
            offset: 0,
            inflight: JoinSet::new(),
            committed: Vec::new(),
            inline_max: None,
        }
    }
}

impl BlockWriter {
    fn current_blob(&self) -> String {
        self.paths
            .data_blob(&self.table, &self.task, &self.attempt, self.blob_index)
    }

    async fn join_one(&mut self) -> Result<(), Error> {
        match self.inflight.join_next().await {
            Some(Ok(r)) => r,
            Some(Err(join)) => Err(Error::Transport {
                op: "Put Block",
                kind: TransportKind::Interrupted,
                detail: format!("upload task ended abnormally: {join}"),
            }),
            None => Ok(()),
        }
    }

    /// Lets an attempt whose only block stores at most `max_bytes` keep it in its commit
    /// record (an inline blob, backup format 2) instead of writing a data blob.
    pub fn inline_up_to(mut self, max_bytes: u64) -> Self {
        self.inline_max = Some(max_bytes);
        self
    }

    /// Uploads a block (returns once at most two uploads are in flight).
    pub async fn add(&mut self, block: SealedBlock) -> Result<(), Error> {
        // A full blob is committed when the next block comes, not when it fills: a
        // blob of one block is held until then, so a range that turns out to be that
        // one block can still keep it inline.
        if self.blocks.len() >= self.blocks_per_blob {
            self.commit_blob().await?;
        }
        while self.inflight.len() >= MAX_INFLIGHT {
            self.join_one().await?;
        }
        let id = block_id(self.blocks.len());
        let length = block.data.len() as u64;
        self.blocks.push(block.record(id.clone(), self.offset));
        self.offset += length;
        if self.blocks.len() == 1 {
            self.held = Some((id, block.data));
        } else {
            if let Some((first, data)) = self.held.take() {
                self.upload(first, data);
            }
            self.upload(id, block.data);
        }
        Ok(())
    }

    fn upload(&mut self, id: String, data: bytes::Bytes) {
        let blobs = self.blobs.clone();
        let blob = self.current_blob();
        self.inflight
            .spawn(async move { blobs.put_block(&blob, &id, data).await });
    }

    async fn commit_blob(&mut self) -> Result<(), Error> {
        while !self.inflight.is_empty() {
            self.join_one().await?;
        }
        if self.blocks.is_empty() {
            return Ok(());
        }
        let name = self.current_blob();
        let ids: Vec<String> = self.blocks.iter().map(|b| b.id.clone()).collect();
        let entities: u64 = self.blocks.iter().map(|b| b.entities).sum();
        let options = PutOptions {
            metadata: vec![
                ("tvformat".into(), BLOCK_VERSION.to_string()),
                (
                    "tvcompression".into(),
                    self.compression.as_str().to_string(),
                ),
                ("tvtable".into(), self.table.clone()),
                ("tvtask".into(), self.task.clone()),
                ("tvattempt".into(), self.attempt.clone()),
                ("tventities".into(), entities.to_string()),
                ("tvblocks".into(), ids.len().to_string()),
            ],
            content_type: Some("application/vnd.tablevault.blocks".into()),
            ..PutOptions::default()
        };
        match self.held.take() {
            Some((_, data)) => self.blobs.put_blob(&name, data, &options).await?,
            None => self.blobs.put_block_list(&name, &ids, &options).await?,
        };
        self.committed.push(BlobRecord {
            name,
            entities,
            length: self.offset,
            blocks: std::mem::take(&mut self.blocks),
            inline: None,
        });
        self.blob_index += 1;
        self.offset = 0;
        Ok(())
    }

    /// Commits the last blob and returns every blob written, or the inline blob that
    /// holds the attempt's only block.
    pub async fn finish(mut self) -> Result<Vec<BlobRecord>, Error> {
        if let Some(inline) = self.take_inline() {
            return Ok(vec![inline]);
        }
        self.commit_blob().await?;
        Ok(self.committed)
    }

    /// The attempt's only block as an inline blob, if it is small enough.
    fn take_inline(&mut self) -> Option<BlobRecord> {
        let small = self.inline_max.is_some_and(|max| self.offset <= max);
        if !small || !self.committed.is_empty() || self.blocks.len() != 1 {
            return None;
        }
        let (_, data) = self.held.take()?;
        Some(BlobRecord {
            name: String::new(),
            entities: self.blocks[0].entities,
            length: self.offset,
            blocks: std::mem::take(&mut self.blocks),
            inline: Some(BASE64.encode(&data)),
        })
    }

    /// Names of the blobs committed so far (for cleanup after a failure).
    pub fn committed_names(&self) -> Vec<String> {
        self.committed.iter().map(|b| b.name.clone()).collect()
    }

    /// Abandons the attempt: waits for uploads in flight and deletes committed blobs.
    /// Uncommitted blocks cannot be deleted; the service discards them after a week.
    pub async fn abandon(mut self) {
        while self.inflight.join_next().await.is_some() {}
        Store::new(self.blobs.clone())
            .delete_unreferenced(&self.committed_names())
            .await;
    }
}

#[cfg(test)]
mod tests {
    use tablevault_azure::table::{EdmValue, Entity};

    use super::*;
    use crate::format::{Packer, PackerConfig};
    use crate::protocol::BlockRecord;
    use crate::store::StoreError;
    use crate::testing::{MemoryBlobs, Op, Strike, busy};

    /// Blocks of about 64 KiB from `n` entities.
    fn blocks(n: usize) -> Vec<SealedBlock> {
        let mut config = PackerConfig::new("Tbl", Compression::Zstd);
        config.block_bytes = 64 * 1024;
        let mut packer = Packer::new(config);
        let mut out = Vec::new();
        for i in 0..n {
            let e = Entity::new(format!("p{:03}", i / 100), format!("r{i:06}"))
                .with("S", EdmValue::String(format!("{i}-").repeat(40)));
            out.extend(packer.push(e));
        }
        out.extend(packer.finish());
        out
    }

    /// Entities in every block of `written`, each read back through the store's checks.
    async fn entities_read_back(store: &Store, written: &[BlobRecord]) -> usize {
        let mut entities = 0;
        for blob in written {
            for record in &blob.blocks {
                let decoded = store
                    .read_block(blob, record, Compression::Zstd)
                    .await
                    .unwrap();
                entities += decoded.entity_count();
            }
        }
        entities
    }

    fn writer(store: &Store, blocks_per_blob: usize) -> BlockWriter {
        store.block_writer(
            &BackupPaths::new("job1"),
            "Tbl",
            "r0000",
            "att",
            Compression::Zstd,
            blocks_per_blob,
        )
    }

    #[tokio::test]
    async fn blocks_fill_blobs_and_read_back_exactly() {
        let memory = Arc::new(MemoryBlobs::new("c"));
        let store = Store::new(memory.clone());
        let input = blocks(3000);
        assert!(input.len() >= 5, "{} blocks", input.len());
        let mut w = writer(&store, 2);
        for b in input.clone() {
            w.add(b).await.unwrap();
        }
        let written = w.finish().await.unwrap();
        assert_eq!(
            written.len(),
            input.len().div_ceil(2),
            "two blocks per blob"
        );
        assert_eq!(memory.names().len(), written.len());
        let mut entities = 0;
        for blob in &written {
            assert!(blob.blocks.len() <= 2);
            let mut offset = 0;
            for record in &blob.blocks {
                assert_eq!(record.offset, offset, "blocks lie end to end");
                offset += record.length;
                let decoded = store
                    .read_block(blob, record, Compression::Zstd)
                    .await
                    .unwrap();
                entities += decoded.entity_count();
            }
            assert_eq!(blob.length, offset);
        }
        assert_eq!(entities, 3000);
    }

    #[tokio::test]
    async fn a_failed_upload_fails_the_writer_and_abandon_removes_what_it_committed() {
        let memory = Arc::new(MemoryBlobs::new("c"));
        let store = Store::new(memory.clone());
        let input = blocks(3000);
        let mut w = writer(&store, 2);
        // A full blob is committed when the next block comes.
        for b in &input[..3] {
            w.add(b.clone()).await.unwrap();
        }
        assert_eq!(memory.names().len(), 1, "the first blob is committed");
        memory.fail(Op::PutBlock, "", Strike::Before, busy("Put Block"));
        let mut failed = false;
        for b in input[2..].iter().cloned() {
            if w.add(b).await.is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "the upload error reaches the writer");
        w.abandon().await;
        assert!(memory.names().is_empty(), "{:?}", memory.names());
    }

    #[tokio::test]
    async fn a_blob_of_one_block_is_one_put_blob_and_reads_back_the_same() {
        let memory = Arc::new(MemoryBlobs::new("c"));
        let store = Store::new(memory.clone());
        let input = blocks(3000);
        let n = input.len();
        // One blob per block; then every blob of one block (the last is partial).
        for (per_blob, single) in [(1, n), (2, n % 2), (n + 1, 0)] {
            let before = (
                memory.calls(Op::PutBlob),
                memory.calls(Op::PutBlock),
                memory.calls(Op::PutBlockList),
            );
            let mut w = writer(&store, per_blob);
            for b in input.clone() {
                w.add(b).await.unwrap();
            }
            let written = w.finish().await.unwrap();
            let blobs = n.div_ceil(per_blob);
            assert_eq!(written.len(), blobs);
            assert_eq!(memory.calls(Op::PutBlob) - before.0, single, "{per_blob}");
            assert_eq!(
                memory.calls(Op::PutBlock) - before.1,
                n - single,
                "{per_blob}"
            );
            assert_eq!(memory.calls(Op::PutBlockList) - before.2, blobs - single);
            for blob in &written {
                let props = memory.properties(&blob.name).await.unwrap().unwrap();
                assert_eq!(
                    props.metadata.get("tvblocks").map(String::as_str),
                    Some(&*blob.blocks.len().to_string())
                );
            }
            assert_eq!(entities_read_back(&store, &written).await, 3000);
        }
    }

    /// For any number of blocks and blocks per blob, with inlining allowed or not: a
    /// range is inline exactly when it is one block within the limit, then writes no
    /// blob at all; every other range writes its blobs as before; all read back whole.
    #[tokio::test]
    async fn only_a_range_of_one_small_block_is_inline() {
        let all = blocks(3000);
        let one_block = all[0].data.len() as u64;
        for n in 0..4 {
            for per_blob in 1..=3 {
                for inline_max in [None, Some(one_block - 1), Some(one_block), Some(1 << 30)] {
                    let memory = Arc::new(MemoryBlobs::new("c"));
                    let store = Store::new(memory.clone());
                    let mut w = writer(&store, per_blob);
                    if let Some(max) = inline_max {
                        w = w.inline_up_to(max);
                    }
                    for b in &all[..n] {
                        w.add(b.clone()).await.unwrap();
                    }
                    let written = w.finish().await.unwrap();
                    let case =
                        format!("{n} blocks, {per_blob} per blob, inline up to {inline_max:?}");
                    let inline = n == 1 && inline_max.is_some_and(|max| max >= one_block);
                    assert_eq!(written.iter().any(BlobRecord::is_inline), inline, "{case}");
                    if inline {
                        assert_eq!(written.len(), 1, "{case}");
                        assert!(memory.names().is_empty(), "{case}: {:?}", memory.names());
                        assert_eq!(memory.calls(Op::PutBlob) + memory.calls(Op::PutBlock), 0);
                        assert_eq!(written[0].length, one_block, "{case}");
                    } else {
                        assert!(written.iter().all(|b| b.inline.is_none()), "{case}");
                        assert_eq!(memory.names().len(), written.len(), "{case}");
                        assert_eq!(written.len(), n.div_ceil(per_blob), "{case}");
                    }
                    let expected: usize = all[..n].iter().map(|b| b.entities).sum();
                    assert_eq!(
                        entities_read_back(&store, &written).await,
                        expected,
                        "{case}"
                    );
                }
            }
        }
    }

    /// An inline blob is read only if it is what its record says: bytes that are there,
    /// base64, as long as recorded, holding the block where recorded, unchanged, and no
    /// data blob named besides. Anything else is refused as corrupt, never a panic.
    #[tokio::test]
    async fn a_damaged_inline_blob_is_refused() {
        let memory = Arc::new(MemoryBlobs::new("c"));
        let store = Store::new(memory.clone());
        let mut w = writer(&store, 20).inline_up_to(1 << 30);
        w.add(blocks(50).remove(0)).await.unwrap();
        let good = w.finish().await.unwrap().remove(0);
        assert!(good.is_inline());
        let block = good.blocks[0].clone();
        store
            .read_block(&good, &block, Compression::Zstd)
            .await
            .unwrap();
        let bytes = BASE64.decode(good.inline.as_deref().unwrap()).unwrap();
        let flipped = {
            let mut b = bytes.clone();
            b[bytes.len() / 2] ^= 1;
            BASE64.encode(b)
        };
        let with = |f: &dyn Fn(&mut BlobRecord, &mut BlockRecord)| {
            let (mut blob, mut block) = (good.clone(), block.clone());
            f(&mut blob, &mut block);
            (blob, block)
        };
        let cases: Vec<(&str, (BlobRecord, BlockRecord), &str)> = vec![
            ("no bytes", with(&|b, _| b.inline = None), "holds no bytes"),
            (
                "not base64",
                with(&|b, _| b.inline = Some("**".into())),
                "not base64",
            ),
            ("shorter", with(&|b, _| b.length += 1), "recorded"),
            (
                "block past the end",
                with(&|_, k| k.offset = 1),
                "ends before block",
            ),
            (
                "huge offset",
                with(&|_, k| k.offset = u64::MAX),
                "ends before block",
            ),
            (
                "huge length",
                with(&|_, k| k.length = u64::MAX),
                "ends before block",
            ),
            (
                "a bit flipped",
                with(&|b, _| b.inline = Some(flipped.clone())),
                "checksum mismatch",
            ),
            (
                "a data blob too",
                with(&|b, _| b.name = "c/x".into()),
                "cannot also name",
            ),
        ];
        for (case, (blob, block), expected) in cases {
            let err = store
                .read_block(&blob, &block, Compression::Zstd)
                .await
                .unwrap_err();
            assert!(matches!(err, StoreError::Corrupt(_)), "{case}: {err}");
            assert!(err.to_string().contains(expected), "{case}: {err}");
        }
    }

    #[tokio::test]
    async fn a_damaged_block_is_refused_whole() {
        let memory = Arc::new(MemoryBlobs::new("c"));
        let store = Store::new(memory.clone());
        let mut w = writer(&store, 20);
        for b in blocks(500) {
            w.add(b).await.unwrap();
        }
        let blob = w.finish().await.unwrap().remove(0);
        let mut bytes = memory.blob(&blob.name).unwrap().to_vec();
        let i = (blob.blocks[0].length / 2) as usize;
        bytes[i] ^= 1;
        memory.tamper(&blob.name, bytes::Bytes::from(bytes));
        let err = store
            .read_block(&blob, &blob.blocks[0], Compression::Zstd)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("checksum mismatch"), "{err}");
    }
}
