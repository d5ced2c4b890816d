//! Property tests of the format over its whole input space: any entity the format can
//! hold (every Edm type at any value, any string, service metadata included) round-trips
//! exactly through packing, compression and decoding; and arbitrary or damaged bytes
//! given to the decompressors and the decoder give an error, never a panic.

use proptest::prelude::*;
use tablevault_azure::table::{EdmValue, Entity};

use super::{Compression, FormatError, MAX_BLOCK_BYTES, Packer, PackerConfig, block, decode_block};
use crate::keys::EntityKey;

/// Any string, weighted towards the characters that break naive writers: controls, CR
/// and CRLF, markup, U+FFFE/U+FFFF, surrogate-pair characters.
fn any_string() -> impl Strategy<Value = String> {
    let nasty = prop_oneof![
        Just('\r'),
        Just('\n'),
        Just('\t'),
        Just('\u{0}'),
        Just('\u{1}'),
        Just('\u{1f}'),
        Just('\u{7f}'),
        Just('&'),
        Just('<'),
        Just('>'),
        Just('"'),
        Just('\''),
        Just(']'),
        Just('\u{FFFE}'),
        Just('\u{FFFF}'),
        Just('\u{FFFD}'),
        Just('\u{E000}'),
        Just('😀'),
        Just('\u{10FFFF}'),
        Just(' '),
    ];
    proptest::collection::vec(prop_oneof![3 => any::<char>(), 2 => nasty], 0..24)
        .prop_map(|cs| cs.into_iter().collect())
}

fn any_value() -> impl Strategy<Value = EdmValue> {
    prop_oneof![
        any_string().prop_map(EdmValue::String),
        any::<bool>().prop_map(EdmValue::Boolean),
        any::<i32>().prop_map(EdmValue::Int32),
        any::<i64>().prop_map(EdmValue::Int64),
        // Every bit pattern but NaN payloads: the service's JSON has one NaN ("NaN").
        any::<u64>().prop_map(|b| {
            let d = f64::from_bits(b);
            EdmValue::Double(if d.is_nan() { f64::NAN } else { d })
        }),
        prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(5e-324)
        ]
        .prop_map(EdmValue::Double),
        any_string().prop_map(EdmValue::DateTime),
        any_string().prop_map(EdmValue::Guid),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(EdmValue::Binary),
    ]
}

fn any_entity() -> impl Strategy<Value = Entity> {
    (
        // Few partition keys, so batches hold several entities.
        prop_oneof![Just(String::new()), Just("p".to_string()), any_string()],
        any_string(),
        proptest::option::of(any_string()),
        proptest::option::of(any_string()),
        proptest::collection::btree_map(any_string(), any_value(), 0..6),
    )
        .prop_map(|(pk, rk, timestamp, etag, props)| {
            let mut e = Entity::new(pk, rk);
            e.timestamp = timestamp;
            e.etag = etag;
            e.properties = props
                .into_iter()
                .filter(|(n, _)| {
                    !n.is_empty() && !matches!(n.as_str(), "PartitionKey" | "RowKey" | "Timestamp")
                })
                .collect();
            e
        })
}

fn key(e: &Entity) -> EntityKey {
    EntityKey::new(&e.partition_key, &e.row_key)
}

/// Packs entities (in key order, without duplicate keys) and decodes every block back.
fn round_trip(mut input: Vec<Entity>, compression: Compression) -> Vec<Entity> {
    input.sort_by_key(key);
    input.dedup_by_key(|e| key(e));
    let mut config = PackerConfig::new("T", compression);
    config.block_bytes = 4096; // many small blocks
    let mut packer = Packer::new(config);
    let mut blocks = Vec::new();
    for e in input {
        blocks.extend(packer.push(e));
    }
    blocks.extend(packer.finish());
    let mut out = Vec::new();
    for b in blocks {
        let xml = compression.decompress(&b.data, MAX_BLOCK_BYTES).unwrap();
        assert_eq!(xml.len(), b.raw_len);
        let decoded = decode_block(&xml).unwrap();
        let text = std::str::from_utf8(&xml).unwrap();
        // The writer's layout is always read by the fast reader, to what the general
        // reader makes of it.
        assert_eq!(block::decode_canonical(text).as_ref(), Some(&decoded));
        assert_eq!(block::decode_xml(text).as_ref(), Ok(&decoded));
        assert_eq!(decoded.entity_count(), b.entities);
        out.extend(decoded.batches.into_iter().flatten());
    }
    out
}

fn compressions() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Zstd),
        Just(Compression::Gzip)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_entity_round_trips_exactly(
        input in proptest::collection::vec(any_entity(), 0..40),
        compression in compressions(),
    ) {
        let mut expected = input.clone();
        expected.sort_by_key(key);
        expected.dedup_by_key(|e| key(e));
        let got = round_trip(input, compression);
        prop_assert_eq!(got, expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_are_refused_not_panicked_on(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode_block(&bytes);
        for c in [Compression::None, Compression::Zstd, Compression::Gzip] {
            let _ = c.decompress(&bytes, 1 << 16);
        }
    }

    #[test]
    fn damaged_blocks_are_refused_not_panicked_on(
        input in proptest::collection::vec(any_entity(), 1..6),
        cuts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        truncate in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let mut input = input;
        input.sort_by_key(key);
        input.dedup_by_key(|e| key(e));
        let mut packer = Packer::new(PackerConfig::new("T", Compression::None));
        let mut blocks = Vec::new();
        for e in input {
            blocks.extend(packer.push(e));
        }
        blocks.extend(packer.finish());
        let mut xml = blocks[0].data.to_vec();
        for (at, byte) in cuts {
            let i = at.index(xml.len());
            xml[i] = byte;
        }
        if let Some(t) = truncate {
            xml.truncate(t.index(xml.len()));
        }
        let decoded = decode_block(&xml);
        match &decoded {
            Ok(_) | Err(FormatError::Corrupt(_)) | Err(FormatError::UnsupportedVersion(_)) => {}
        }
        // The fast reader decides nothing alone: whatever it reads, the general reader
        // reads the same.
        if let Ok(text) = std::str::from_utf8(&xml)
            && let Some(fast) = block::decode_canonical(text)
        {
            prop_assert_eq!(block::decode_xml(text), Ok(fast));
        }
    }
}
