//! Checking a block fetched from a backup: its SHA-256 against the record, bounded
//! decompression, a full decode, and its counts and key bounds against the record.
//! Nothing is returned from a block that fails any check.

use sha2::{Digest, Sha256};
use tablevault_azure::table::Entity;

use super::StoreError;
use crate::format::{Compression, DecodedBlock, MAX_BLOCK_BYTES, decode_block, hex};
use crate::keys::EntityKey;
use crate::protocol::BlockRecord;

/// The checks of [`super::Store::read_block`] on bytes already fetched.
pub fn decode_checked(
    data: &[u8],
    blob: &str,
    block: &BlockRecord,
    compression: Compression,
) -> Result<DecodedBlock, StoreError> {
    let corrupt = |why: String| StoreError::Corrupt(format!("block {} of {blob}: {why}", block.id));
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
    let key = |e: &Entity| EntityKey::new(&e.partition_key, &e.row_key);
    if first.map(key).as_ref() != Some(&block.first_key)
        || last.map(key).as_ref() != Some(&block.last_key)
    {
        return Err(corrupt("first or last key differs from the record".into()));
    }
    Ok(decoded)
}
