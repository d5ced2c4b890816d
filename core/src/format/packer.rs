//! Packs a stream of entities (in key order) into batches and blocks, so that memory is
//! bounded by one block whatever the table size.
//!
//! A batch closes on a PartitionKey change, at 100 entities, or before its restore request
//! would pass the batch byte budget. A block is sealed before the next batch would take it
//! past the block byte budget (a single oversized batch still makes one block).

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::Compression;
use super::block::{write_batch, write_footer, write_header};
use super::compress::{BlockEncoder, ZstdContext};
use crate::keys::EntityKey;
use crate::protocol::{BlockRecord, KeyMark};
use tablevault_azure::table::{Entity, MAX_BATCH_OPERATIONS};

/// Default uncompressed size at which a block is sealed (about 3.8 MiB).
pub const DEFAULT_BLOCK_BYTES: usize = 3_984_588;
/// Default budget for one batch's restore request body (the service's limit is 4 MiB).
pub const DEFAULT_BATCH_BYTES: usize = 3_500_000;
/// Per-operation overhead of a `$batch` request beyond the entity JSON and its keys
/// (MIME part headers, request line, endpoint URL).
const BATCH_OP_OVERHEAD: usize = 512;

/// Limits for packing.
#[derive(Debug, Clone)]
pub struct PackerConfig {
    /// Table name written into each block.
    pub table: String,
    /// Seal a block before its XML passes this many bytes.
    pub block_bytes: usize,
    /// Close a batch before its restore request passes this many bytes.
    pub batch_bytes: usize,
    /// How sealed blocks are compressed.
    pub compression: Compression,
}

impl PackerConfig {
    /// Defaults for a table.
    pub fn new(table: &str, compression: Compression) -> Self {
        PackerConfig {
            table: table.to_string(),
            block_bytes: DEFAULT_BLOCK_BYTES,
            batch_bytes: DEFAULT_BATCH_BYTES,
            compression,
        }
    }
}

/// A finished block, ready to upload.
#[derive(Debug, Clone)]
pub struct SealedBlock {
    /// The stored (possibly compressed) bytes.
    pub data: Bytes,
    /// Size of the XML before compression.
    pub raw_len: usize,
    /// Entities in the block.
    pub entities: usize,
    /// Batches in the block.
    pub batches: usize,
    /// Key of the first entity.
    pub first_key: EntityKey,
    /// Key of the last entity.
    pub last_key: EntityKey,
    /// Keys inside the block about every [`MARK_ENTITIES`] entities, at batch starts.
    pub marks: Vec<KeyMark>,
    /// Lower-case hex SHA-256 of `data`.
    pub sha256: String,
}

impl SealedBlock {
    /// How a commit record lists it, as block `id` at `offset` of its blob.
    pub fn record(&self, id: String, offset: u64) -> BlockRecord {
        BlockRecord {
            id,
            offset,
            length: self.data.len() as u64,
            raw_length: self.raw_len as u64,
            entities: self.entities as u64,
            batches: self.batches as u64,
            sha256: self.sha256.clone(),
            first_key: self.first_key.clone(),
            last_key: self.last_key.clone(),
            marks: self.marks.clone(),
        }
    }
}

/// Entities between two keys a block records for the next backup's planning
/// ([`KeyMark`]): about a page, so a plan can cut ranges finer than blocks of thousands.
pub const MARK_ENTITIES: usize = 1_000;

/// Room kept for the `<End …/></Block>` footer when deciding whether a batch still fits.
const FOOTER_RESERVE: usize = 96;
/// A batch scratch buffer larger than this is released after use.
const SCRATCH_KEEP: usize = 1 << 20;

/// Streaming packer.
pub struct Packer {
    config: PackerConfig,
    sink: Option<BlockEncoder>,
    raw_len: usize,
    block_entities: usize,
    block_batches: usize,
    first_key: Option<EntityKey>,
    last_key: Option<EntityKey>,
    marks: Vec<KeyMark>,
    /// The PartitionKey of the last batch packed (in this block or the one before).
    last_partition: Option<String>,
    /// Whether the open block began inside a partition (after some of its entities).
    began_inside: bool,
    batch: Vec<Entity>,
    batch_bytes: usize,
    scratch: String,
    zstd: Option<ZstdContext>,
}

fn request_bytes(e: &Entity) -> usize {
    // Keys appear percent-encoded (up to 3 bytes per byte, doubled quotes) in the URL.
    e.json_len() + 3 * (e.partition_key.len() + e.row_key.len()) + BATCH_OP_OVERHEAD
}

impl Packer {
    /// A packer with the given limits.
    pub fn new(config: PackerConfig) -> Self {
        Packer {
            config,
            sink: None,
            raw_len: 0,
            block_entities: 0,
            block_batches: 0,
            first_key: None,
            last_key: None,
            marks: Vec::new(),
            last_partition: None,
            began_inside: false,
            batch: Vec::with_capacity(MAX_BATCH_OPERATIONS),
            batch_bytes: 0,
            scratch: String::new(),
            zstd: None,
        }
    }

    /// Adds the next entity (keys must ascend). Returns a block when one was sealed.
    pub fn push(&mut self, entity: Entity) -> Option<SealedBlock> {
        let bytes = request_bytes(&entity);
        let mut sealed = None;
        if let Some(first) = self.batch.first()
            && (first.partition_key != entity.partition_key
                || self.batch.len() >= MAX_BATCH_OPERATIONS
                || self.batch_bytes + bytes > self.config.batch_bytes)
        {
            sealed = self.close_batch();
        }
        self.batch_bytes += bytes;
        self.batch.push(entity);
        sealed
    }

    /// Seals whatever is left: closing the last batch may seal the previous block and
    /// leave the batch in a new one, so up to two blocks come back, in order.
    pub fn finish(mut self) -> Vec<SealedBlock> {
        let mut out: Vec<SealedBlock> = self.close_batch().into_iter().collect();
        out.extend(self.seal());
        out
    }

    /// Moves the open batch into the block, sealing the block first if the batch would
    /// not fit.
    fn close_batch(&mut self) -> Option<SealedBlock> {
        if self.batch.is_empty() {
            return None;
        }
        let mut xml = std::mem::take(&mut self.scratch);
        xml.clear();
        write_batch(&mut xml, &self.batch);
        let sealed = if self.block_entities > 0
            && self.raw_len + xml.len() + FOOTER_RESERVE > self.config.block_bytes
        {
            self.seal()
        } else {
            None
        };
        if self.sink.is_none() {
            let mut header = String::with_capacity(256);
            write_header(&mut header, &self.config.table);
            let mut sink = BlockEncoder::new(
                self.config.compression,
                self.config.block_bytes,
                &mut self.zstd,
            );
            sink.write(header.as_bytes());
            self.raw_len = header.len();
            self.sink = Some(sink);
        }
        self.sink
            .as_mut()
            .expect("a block is open")
            .write(xml.as_bytes());
        self.raw_len += xml.len();
        let f = &self.batch[0];
        let starts_partition = self
            .last_partition
            .as_ref()
            .is_some_and(|pk| *pk != f.partition_key);
        if self.first_key.is_none() {
            self.first_key = Some(EntityKey::new(&f.partition_key, &f.row_key));
            self.began_inside = self
                .last_partition
                .as_ref()
                .is_some_and(|pk| *pk == f.partition_key);
        } else {
            let last_mark = self.marks.last().map_or(0, |m| m.before as usize);
            let since = self.block_entities - last_mark;
            // A mark where a partition starts lets the next backup's plan cut between
            // partitions (one query per task), so one is made at any partition start
            // half an interval on; otherwise one every interval, inside a partition if
            // need be. A block that began inside a partition marks where the next one
            // starts, however soon: its first part is then that partition's tail alone.
            let due = since >= MARK_ENTITIES
                || (starts_partition && 2 * since >= MARK_ENTITIES)
                || (starts_partition && self.began_inside && self.marks.is_empty());
            if due {
                self.marks.push(KeyMark {
                    key: EntityKey::new(&f.partition_key, &f.row_key),
                    before: self.block_entities as u64,
                    starts_partition,
                });
            }
        }
        if self.last_partition.as_ref() != Some(&f.partition_key) {
            self.last_partition = Some(f.partition_key.clone());
        }
        let l = self.batch.last().expect("batch is not empty");
        self.last_key = Some(EntityKey::new(&l.partition_key, &l.row_key));
        self.block_entities += self.batch.len();
        self.block_batches += 1;
        self.batch.clear();
        self.batch_bytes = 0;
        if xml.capacity() <= SCRATCH_KEEP {
            self.scratch = xml;
        }
        sealed
    }

    fn seal(&mut self) -> Option<SealedBlock> {
        if self.block_entities == 0 {
            return None;
        }
        let mut footer = String::with_capacity(FOOTER_RESERVE);
        write_footer(&mut footer, self.block_entities, self.block_batches);
        let mut sink = self.sink.take().expect("a block with entities is open");
        sink.write(footer.as_bytes());
        let raw_len = self.raw_len + footer.len();
        let data = Bytes::from(sink.finish(&mut self.zstd));
        let sha256 = hex(&Sha256::digest(&data));
        let block = SealedBlock {
            data,
            raw_len,
            entities: self.block_entities,
            batches: self.block_batches,
            first_key: self
                .first_key
                .take()
                .expect("a block with entities has a first key"),
            last_key: self
                .last_key
                .take()
                .expect("a block with entities has a last key"),
            marks: std::mem::take(&mut self.marks),
            sha256,
        };
        self.raw_len = 0;
        self.block_entities = 0;
        self.block_batches = 0;
        Some(block)
    }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::decode_block;
    use tablevault_azure::table::EdmValue;

    fn entities(partitions: usize, per: usize, payload: usize) -> Vec<Entity> {
        let mut v = Vec::new();
        for p in 0..partitions {
            for r in 0..per {
                v.push(
                    Entity::new(format!("p{p:04}"), format!("r{r:06}"))
                        .with("Data", EdmValue::String("x".repeat(payload))),
                );
            }
        }
        v
    }

    fn pack(config: PackerConfig, input: &[Entity]) -> Vec<SealedBlock> {
        let mut p = Packer::new(config);
        let mut out = Vec::new();
        for e in input {
            out.extend(p.push(e.clone()));
        }
        out.extend(p.finish());
        out
    }

    #[test]
    fn blocks_mark_a_key_about_every_thousand_entities() {
        // Partitions of 37 make batches of odd sizes; small blocks seal every ~2,600.
        let input = entities(200, 37, 10);
        let mut config = PackerConfig::new("T", Compression::None);
        config.block_bytes = 256 * 1024;
        let blocks = pack(config, &input);
        assert!(blocks.len() > 1);
        let mut seen = 0usize;
        for block in &blocks {
            let mut before = 0u64;
            for mark in &block.marks {
                let gap = (mark.before - before) as usize;
                // A partition start half an interval on, else a batch start an interval on.
                assert!(
                    (MARK_ENTITIES / 2..MARK_ENTITIES + 100).contains(&gap),
                    "{gap}"
                );
                // The mark is the key of the entity that many into the block.
                let at = &input[seen + mark.before as usize];
                assert_eq!(mark.key, EntityKey::new(&at.partition_key, &at.row_key));
                before = mark.before;
            }
            assert!(block.entities as u64 - before < (MARK_ENTITIES + 100) as u64);
            seen += block.entities;
        }
        assert_eq!(seen, input.len());
    }

    /// Marks fall at partition starts half an interval on (so the next backup's plan can
    /// cut between partitions and read each range with one query), else every ~1,000
    /// entities inside a partition; each says whether its key is the first of its
    /// partition. A block that began inside a partition marks the next partition's
    /// start, however soon.
    #[test]
    fn marks_fall_where_partitions_start_and_say_so() {
        for per in [300usize, 500, 700, 5_000] {
            let input = entities(40_000 / per, per, 10);
            let mut config = PackerConfig::new("T", Compression::None);
            config.block_bytes = 256 * 1024;
            let blocks = pack(config, &input);
            let mut seen = 0usize;
            for block in &blocks {
                let began_inside =
                    seen > 0 && input[seen - 1].partition_key == input[seen].partition_key;
                let mut before = 0usize;
                for (i, mark) in block.marks.iter().enumerate() {
                    let at = seen + mark.before as usize;
                    let starts = input[at - 1].partition_key != input[at].partition_key;
                    assert_eq!(mark.starts_partition, starts, "{per}: mark at {at}");
                    // A partition starts within 500 of any point.
                    if per <= 500 {
                        assert!(starts, "{per}: mark at {at} inside a partition");
                    }
                    let gap = mark.before as usize - before;
                    let least = if starts {
                        MARK_ENTITIES / 2
                    } else {
                        MARK_ENTITIES
                    };
                    if !(i == 0 && began_inside) {
                        assert!(
                            (least..MARK_ENTITIES + 100).contains(&gap),
                            "{per}: {gap} after the last mark"
                        );
                    }
                    before = mark.before as usize;
                }
                seen += block.entities;
            }
            assert_eq!(seen, input.len());
        }
    }

    #[test]
    fn batches_respect_partition_count_and_size_limits() {
        let input = entities(3, 250, 10);
        let blocks = pack(PackerConfig::new("T", Compression::None), &input);
        assert_eq!(blocks.len(), 1);
        let decoded = decode_block(&blocks[0].data).unwrap();
        let sizes: Vec<usize> = decoded.batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![100, 100, 50, 100, 100, 50, 100, 100, 50]);
        let all: Vec<Entity> = decoded.batches.into_iter().flatten().collect();
        assert_eq!(all, input);
        assert_eq!(blocks[0].entities, 750);
        assert_eq!(blocks[0].batches, 9);
        assert_eq!(blocks[0].first_key, EntityKey::new("p0000", "r000000"));
        assert_eq!(blocks[0].last_key, EntityKey::new("p0002", "r000249"));

        // A small batch budget splits batches by bytes.
        let mut cfg = PackerConfig::new("T", Compression::None);
        cfg.batch_bytes = 10_000;
        let blocks = pack(cfg, &entities(1, 100, 1000));
        let decoded = decode_block(&blocks[0].data).unwrap();
        assert!(decoded.batches.len() > 10, "{}", decoded.batches.len());
        for b in &decoded.batches {
            let bytes: usize = b.iter().map(request_bytes).sum();
            assert!(bytes <= 10_000, "{bytes}");
        }
    }

    #[test]
    fn blocks_respect_the_byte_budget_and_keep_every_entity_in_order() {
        let input = entities(7, 300, 500);
        for compression in [Compression::None, Compression::Zstd, Compression::Gzip] {
            let mut cfg = PackerConfig::new("T", compression);
            cfg.block_bytes = 100_000;
            let blocks = pack(cfg, &input);
            assert!(blocks.len() > 10, "{}", blocks.len());
            let mut all = Vec::new();
            for b in &blocks {
                assert!(
                    b.raw_len <= 100_000 + 60_000,
                    "one batch may overflow: {}",
                    b.raw_len
                );
                assert_eq!(hex(&Sha256::digest(&b.data)), b.sha256);
                let xml = compression.decompress(&b.data, 1 << 24).unwrap();
                assert_eq!(xml.len(), b.raw_len);
                let d = decode_block(&xml).unwrap();
                assert_eq!(d.entity_count(), b.entities);
                all.extend(d.batches.into_iter().flatten());
            }
            assert_eq!(all, input, "{compression}");
        }
    }

    #[test]
    fn finish_can_seal_two_blocks_and_empty_input_seals_none() {
        assert!(
            Packer::new(PackerConfig::new("T", Compression::None))
                .finish()
                .is_empty()
        );
        let mut cfg = PackerConfig::new("T", Compression::None);
        cfg.block_bytes = 2_000;
        let input = entities(2, 1, 1500);
        let blocks = pack(cfg, &input);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks.iter().map(|b| b.entities).sum::<usize>(), 2);
    }
}
