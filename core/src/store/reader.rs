//! Checking a block fetched from a backup: its SHA-256 against the record, bounded
//! decompression, a full decode, and its counts and key bounds against the record.
//! Nothing is returned from a block that fails any check.

use std::cmp::Ordering;

use sha2::{Digest, Sha256};
use tablevault_azure::table::Entity;

use super::StoreError;
use crate::format::{Compression, DecodedBlock, MAX_BLOCK_BYTES, decode_block, hex};
use crate::keys::{EntityKey, cmp_keys};
use crate::protocol::{BlobRecord, BlockRecord};

/// A block of `blob` read from its commit record, with the checks of
/// [`super::Store::read_block`]: the entry must be a well-formed inline blob
/// ([`BlobRecord::inline_bytes`]) and the block must lie inside its bytes. `None` for a
/// data blob, whose block is fetched.
pub(crate) fn read_inline(
    blob: &BlobRecord,
    block: &BlockRecord,
    compression: Compression,
) -> Result<Option<DecodedBlock>, StoreError> {
    let corrupt = |why: String| StoreError::Corrupt(format!("an inline blob {why}"));
    let bytes = match blob.inline_bytes() {
        Ok(None) => return Ok(None),
        Ok(Some(bytes)) => bytes,
        Err(why) => return Err(corrupt(why)),
    };
    let start = usize::try_from(block.offset).unwrap_or(usize::MAX);
    let end = start.saturating_add(usize::try_from(block.length).unwrap_or(usize::MAX));
    let Some(data) = bytes.get(start..end) else {
        return Err(corrupt(format!(
            "of {} bytes ends before block {} (bytes {} to {})",
            bytes.len(),
            block.id,
            block.offset,
            block.offset.saturating_add(block.length)
        )));
    };
    decode_checked(data, "an inline blob", block, compression).map(Some)
}

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
    // A block is one stretch of a key-ordered scan, so its keys rise strictly. Checked
    // here, where a block leaves the backup, so a block rewritten out of order (with a
    // matching record) is refused, not replayed or counted.
    let mut keys = decoded
        .batches
        .iter()
        .flatten()
        .map(|e| (e.partition_key.as_str(), e.row_key.as_str()));
    if let Some(mut previous) = keys.next() {
        for k in keys {
            let order = cmp_keys(previous.0, k.0).then_with(|| cmp_keys(previous.1, k.1));
            if order != Ordering::Less {
                return Err(corrupt(format!(
                    "entity ({:?}, {:?}) follows ({:?}, {:?}): keys are out of order",
                    k.0, k.1, previous.0, previous.1
                )));
            }
            previous = k;
        }
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

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use tablevault_azure::table::EdmValue;

    use super::*;
    use crate::format::block::{write_batch, write_footer, write_header};

    /// The stored bytes of a block of `batches` and a record that matches them.
    fn stored(batches: &[Vec<Entity>]) -> (Vec<u8>, BlockRecord) {
        let mut xml = String::new();
        write_header(&mut xml, "T");
        for b in batches {
            write_batch(&mut xml, b);
        }
        write_footer(&mut xml, batches.iter().map(Vec::len).sum(), batches.len());
        let data = Compression::Zstd.compress(xml.as_bytes());
        let key = |e: &Entity| EntityKey::new(&e.partition_key, &e.row_key);
        let record = BlockRecord {
            id: "00000000".into(),
            offset: 0,
            length: data.len() as u64,
            raw_length: xml.len() as u64,
            entities: batches.iter().map(Vec::len).sum::<usize>() as u64,
            batches: batches.len() as u64,
            sha256: hex(&Sha256::digest(&data)),
            first_key: key(&batches[0][0]),
            last_key: key(batches.last().unwrap().last().unwrap()),
            marks: Vec::new(),
        };
        (data, record)
    }

    fn e(pk: &str, rk: &str) -> Entity {
        Entity::new(pk, rk).with("x", EdmValue::Int32(1))
    }

    #[test]
    fn a_block_in_key_order_with_its_record_decodes() {
        let (data, record) = stored(&[vec![e("a", "1"), e("a", "2")], vec![e("b", "")]]);
        let block = decode_checked(&data, "blob", &record, Compression::Zstd).unwrap();
        assert_eq!(block.entity_count(), 3);
    }

    /// A block whose record matches it (checksum, counts, first and last key) but whose
    /// keys are not in order, as only a hand rewrite makes one, is refused.
    #[test]
    fn a_block_out_of_key_order_is_refused_though_its_record_matches() {
        for batches in [
            vec![
                vec![e("a", "1")],
                vec![e("c", "1")],
                vec![e("b", "1")],
                vec![e("d", "1")],
            ],
            vec![vec![e("a", "1")], vec![e("a", "1")]],
            vec![vec![e("a", "2"), e("a", "1"), e("a", "3")]],
            vec![
                vec![e("a", "1")],
                vec![e("b", "2")],
                vec![e("a", "9")],
                vec![e("c", "1")],
            ],
        ] {
            let (data, record) = stored(&batches);
            let err = decode_checked(&data, "blob", &record, Compression::Zstd).unwrap_err();
            assert!(err.to_string().contains("out of order"), "{err}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

        /// Whatever a commit record's inline blob holds (other text, a changed byte, the
        /// block placed or sized otherwise, a data blob named besides), it is read as
        /// the block that was written or refused as corrupt, never anything else and
        /// never a panic.
        #[test]
        fn any_inline_blob_is_read_exactly_or_refused(
            text in proptest::option::of("[A-Za-z0-9+/=*]{0,48}"),
            changed in proptest::option::of((proptest::prelude::any::<proptest::sample::Index>(), 1..=255u8)),
            length in proptest::option::of(0..=u64::MAX),
            offset in proptest::option::of(proptest::prop_oneof![0..64u64, proptest::prelude::Just(u64::MAX)]),
            block_length in proptest::option::of(proptest::prop_oneof![0..4096u64, proptest::prelude::Just(u64::MAX)]),
            named in proptest::prelude::any::<bool>(),
        ) {
            let (data, block) = stored(&[vec![e("a", "1"), e("a", "2")], vec![e("b", "")]]);
            let mut bytes = data.clone();
            if let Some((at, xor)) = changed {
                let i = at.index(bytes.len());
                bytes[i] ^= xor;
            }
            let mut blob = BlobRecord {
                name: if named { "c/data".into() } else { String::new() },
                entities: 3,
                length: length.unwrap_or(bytes.len() as u64),
                blocks: Vec::new(),
                inline: Some(text.unwrap_or_else(|| BASE64.encode(&bytes))),
            };
            let mut block = block;
            block.offset = offset.unwrap_or(0);
            block.length = block_length.unwrap_or(block.length);
            blob.blocks.push(block.clone());
            match read_inline(&blob, &block, Compression::Zstd) {
                Ok(None) => proptest::prop_assert!(false, "an inline blob read as a data blob"),
                Ok(Some(decoded)) => {
                    let keys: Vec<EntityKey> = decoded.batches.iter().flatten().map(|e| EntityKey::new(&e.partition_key, &e.row_key)).collect();
                    proptest::prop_assert_eq!(
                        keys,
                        vec![EntityKey::new("a", "1"), EntityKey::new("a", "2"), EntityKey::new("b", "")]
                    );
                    proptest::prop_assert!(!named);
                }
                Err(StoreError::Corrupt(_)) => {}
                Err(other) => proptest::prop_assert!(false, "not corrupt: {other}"),
            }
        }
    }
}
