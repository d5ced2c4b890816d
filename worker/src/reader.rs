//! Reading a backup back: commit records, and single blocks fetched with a ranged read,
//! checked against their recorded SHA-256, decompressed with a size bound, decoded in
//! full and checked against their recorded counts and keys. Nothing is returned from a
//! block that fails any check.

use sha2::{Digest, Sha256};
use tablevault_common::blob::BlobClient;
use tablevault_common::format::{Compression, DecodedBlock, MAX_BLOCK_BYTES, decode_block, hex};
use tablevault_common::job::{BlockRecord, CommitRecord};
use tablevault_common::keys::EntityKey;

/// Why a block or record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Storage failed (may be transient).
    #[error(transparent)]
    Storage(#[from] tablevault_common::Error),
    /// The data is damaged or not what the records say; retrying will not help.
    #[error("{0}")]
    Corrupt(String),
}

/// Reads a commit record.
pub async fn load_commit(blobs: &BlobClient, name: &str) -> Result<CommitRecord, ReadError> {
    let bytes = blobs.get(name).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ReadError::Corrupt(format!("commit record {name} is unreadable: {e}")))
}

/// Fetches one block with a ranged read and decodes it, verifying checksum, size, counts
/// and key bounds against its record.
pub async fn read_block(
    blobs: &BlobClient,
    blob: &str,
    block: &BlockRecord,
    compression: Compression,
) -> Result<DecodedBlock, ReadError> {
    let data = blobs.get_range(blob, block.offset, block.length).await?;
    decode_checked(&data, blob, block, compression)
}

/// The checks of [`read_block`] on bytes already fetched.
pub fn decode_checked(
    data: &[u8],
    blob: &str,
    block: &BlockRecord,
    compression: Compression,
) -> Result<DecodedBlock, ReadError> {
    let corrupt = |why: String| ReadError::Corrupt(format!("block {} of {blob}: {why}", block.id));
    let sum = hex(&Sha256::digest(data));
    if sum != block.sha256 {
        return Err(corrupt(format!(
            "checksum mismatch (recorded {}, found {sum})",
            block.sha256
        )));
    }
    let limit = (block.raw_length as usize).min(MAX_BLOCK_BYTES);
    let xml = compression
        .decompress(data, limit)
        .map_err(|e| corrupt(e.to_string()))?;
    if xml.len() as u64 != block.raw_length {
        return Err(corrupt(format!(
            "decompresses to {} bytes, recorded {}",
            xml.len(),
            block.raw_length
        )));
    }
    let decoded = decode_block(&xml).map_err(|e| corrupt(e.to_string()))?;
    if decoded.entity_count() as u64 != block.entities
        || decoded.batches.len() as u64 != block.batches
    {
        return Err(corrupt(format!(
            "holds {} entities in {} batches, recorded {} in {}",
            decoded.entity_count(),
            decoded.batches.len(),
            block.entities,
            block.batches
        )));
    }
    let first = decoded.batches.first().and_then(|b| b.first());
    let last = decoded.batches.last().and_then(|b| b.last());
    let key = |e: &tablevault_common::table::Entity| EntityKey::new(&e.partition_key, &e.row_key);
    if first.map(key).as_ref() != Some(&block.first_key)
        || last.map(key).as_ref() != Some(&block.last_key)
    {
        return Err(corrupt("first or last key differs from the record".into()));
    }
    Ok(decoded)
}
