//! Exactness against the emulator over the whole input space: entities with keys drawn
//! from every code unit the service allows in keys (quotes, commas, percent signs, `+`,
//! spaces, astral characters, up to the emulator's key length) and values from every
//! code point, written by the batch path and by the single-entity path, must read back
//! exactly. Failing cases proptest finds are shrunk and kept as named regression tests.

use std::sync::OnceLock;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tablevault_azure::table::{
    BatchOperation, EdmValue, Entity, Query, TableClient, batch_carries_keys,
};
use tablevault_azure::{ClientOptions, StorageAccount};
use tablevault_tests::{TestEnv, env_number, unique_table};

/// One emulator for every case of this file (each case uses fresh tables).
fn env() -> &'static (tokio::runtime::Runtime, TestEnv) {
    static ENV: OnceLock<(tokio::runtime::Runtime, TestEnv)> = OnceLock::new();
    ENV.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        // Started on one of the runtime's workers, which live as long as the process:
        // the emulator dies with the thread that started it (`tablevault_dev::emulator`),
        // and this one serves every test thread of the file.
        let env = rt
            .block_on(async { tokio::spawn(TestEnv::start()).await })
            .unwrap();
        (rt, env)
    })
}

/// A character the service allows in keys, weighted towards the troublesome ones.
fn key_char() -> impl Strategy<Value = char> {
    let tricky = prop_oneof![
        Just('\''),
        Just(','),
        Just('%'),
        Just('+'),
        Just(' '),
        Just('('),
        Just(')'),
        Just('='),
        Just('&'),
        Just('{'),
        Just('}'),
        Just('"'),
        Just('\u{2028}'),
        Just('\u{2029}'),
        Just('\u{FEFF}'),
        Just('\u{FFFD}'),
        Just('😀'),
        Just('𝔘'),
        Just('é'),
    ];
    prop_oneof![3 => tricky, 2 => any::<char>()].prop_filter("allowed in keys", |c| {
        !matches!(c, '/' | '\\' | '#' | '?')
            && !('\u{0}'..='\u{1f}').contains(c)
            && !('\u{7f}'..='\u{9f}').contains(c)
    })
}

/// A key: short ones made of tricky characters, and now and then one at the service's
/// limit, 1 KiB (512 UTF-16 code units).
fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => proptest::collection::vec(key_char(), 0..12).prop_map(|v| v.into_iter().collect()),
        1 => (key_char(), 1usize..=512).prop_map(|(c, n)| {
            std::iter::repeat_n(c, n.min(512 / c.len_utf16())).collect()
        }),
    ]
}

/// Any string value: every code point, weighted towards separators and controls.
fn any_text() -> impl Strategy<Value = String> {
    let tricky = prop_oneof![
        Just('\u{0}'),
        Just('\r'),
        Just('\n'),
        Just('\u{2028}'),
        Just('\u{2029}'),
        Just('\u{85}'),
        Just('\u{FFFE}'),
        Just('\u{FFFF}'),
        Just('\u{1FFFF}'),
        Just('"'),
        Just('\\'),
        Just('{'),
        Just('}'),
        Just('-'),
    ];
    proptest::collection::vec(prop_oneof![2 => tricky, 3 => any::<char>()], 0..30)
        .prop_map(|v| v.into_iter().collect())
}

fn entities() -> impl Strategy<Value = Vec<Entity>> {
    (
        any_key(),
        proptest::collection::btree_map(any_key(), any_text(), 1..8),
    )
        .prop_map(|(pk, rows)| {
            rows.into_iter()
                .map(|(rk, text)| {
                    Entity::new(pk.clone(), rk)
                        .with("S", EdmValue::String(text))
                        .with("N", EdmValue::Int64(-1))
                })
                .collect()
        })
}

fn check(written: &[Entity], read: &[Entity]) -> Result<(), TestCaseError> {
    for e in written {
        let back = read
            .iter()
            .find(|r| r.partition_key == e.partition_key && r.row_key == e.row_key);
        prop_assert!(
            back.is_some(),
            "{:?}/{:?} is missing (stored under other keys?); read back: {:?}",
            e.partition_key,
            e.row_key,
            read.iter()
                .map(|r| (&r.partition_key, &r.row_key))
                .collect::<Vec<_>>()
        );
        prop_assert!(
            back.unwrap().same_data(e),
            "{:?}/{:?} differs",
            e.partition_key,
            e.row_key
        );
    }
    prop_assert_eq!(read.len(), written.len(), "entity count");
    Ok(())
}

/// How entities are written.
#[derive(Clone, Copy, Debug)]
enum Path {
    /// As restore writes them: one change set, except entities whose keys a change set
    /// cannot carry ([`batch_carries_keys`]), which go one request each.
    Restore,
    /// Every entity in one change set, whatever its keys (shows the emulator divergence).
    RawBatch,
    /// One request per entity.
    OneByOne,
}

/// A client that gives up quickly: the emulator never answers some requests it cannot
/// parse, and a case must fail rather than hang.
fn client(account: &StorageAccount) -> TableClient {
    let options = ClientOptions {
        request_timeout: Duration::from_secs(10),
        deadline: Duration::from_secs(12),
        ..ClientOptions::default()
    };
    TableClient::with_options(account, &options).unwrap()
}

async fn write(
    client: &TableClient,
    table: &str,
    entities: &[Entity],
    path: Path,
) -> Result<(), String> {
    let (grouped, single): (Vec<&Entity>, Vec<&Entity>) = match path {
        Path::Restore => entities
            .iter()
            .partition(|e| batch_carries_keys(&e.partition_key, &e.row_key)),
        Path::RawBatch => (entities.iter().collect(), Vec::new()),
        Path::OneByOne => (Vec::new(), entities.iter().collect()),
    };
    if !grouped.is_empty() {
        let ops: Vec<_> = grouped
            .into_iter()
            .cloned()
            .map(BatchOperation::InsertOrReplace)
            .collect();
        client
            .submit_batch(table, &ops)
            .await
            .map_err(|e| format!("batch refused: {e}"))?;
    }
    for e in single {
        client
            .upsert_entity(table, e, false)
            .await
            .map_err(|err| format!("upsert refused: {err}"))?;
    }
    Ok(())
}

/// Writes `entities` by `path` into a fresh table, reads the table back and compares.
fn round_trip(
    account: &StorageAccount,
    entities: &[Entity],
    path: Path,
) -> Result<(), TestCaseError> {
    let (rt, _) = env();
    rt.block_on(async {
        let client = client(account);
        let table = unique_table("ex");
        client.create_table(&table).await.unwrap();
        write(&client, &table, entities, path)
            .await
            .map_err(TestCaseError::fail)?;
        let read = client
            .pages(&table, Query::scan(None))
            .collect_entities()
            .await
            .map_err(|e| TestCaseError::fail(format!("reading back: {e}")))?;
        check(entities, &read)
    })
}

/// Cases per property (each writes a fresh table): `TABLEVAULT_EXACTNESS_CASES` overrides.
fn cases() -> u32 {
    env_number("TABLEVAULT_EXACTNESS_CASES", 64)
}

fn run(path: Path) {
    let account = env().1.account.clone();
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        max_shrink_iters: 200,
        ..Config::default()
    });
    runner
        .run(&entities(), |es| round_trip(&account, &es, path))
        .unwrap();
}

#[test]
fn any_legal_entity_round_trips_by_batch() {
    run(Path::Restore);
}

#[test]
fn any_legal_entity_round_trips_one_by_one() {
    run(Path::OneByOne);
}

/// One partition's entities, one string property each.
fn partition(pk: &str, rows: &[(&str, &str)]) -> Vec<Entity> {
    rows.iter()
        .map(|(rk, text)| Entity::new(pk, *rk).with("S", EdmValue::String(text.to_string())))
        .collect()
}

fn assert_round_trips(entities: Vec<Entity>, path: Path) {
    let account = env().1.account.clone();
    if let Err(e) = round_trip(&account, &entities, path) {
        panic!("{path:?}: {e}");
    }
}

/// Shrunk by the property above: a string value holding U+2028 (or U+2029) made the
/// emulator reject the change set; values are now written with those escaped.
#[test]
fn regression_line_separator_in_a_value() {
    for path in [Path::Restore, Path::RawBatch, Path::OneByOne] {
        assert_round_trips(
            partition("p", &[("a", "x\u{2028}y"), ("b", "\u{2029}")]),
            path,
        );
    }
}

/// Shrunk by the property above: a RowKey containing `',` made the emulator store the
/// entity under another PartitionKey (silently). Such entities go one request each.
#[test]
fn regression_quote_comma_in_a_row_key() {
    let entities = partition("p", &[("a',b", "1"), ("z", "2")]);
    assert_round_trips(entities.clone(), Path::Restore);
    assert_round_trips(entities.clone(), Path::OneByOne);
    let account = env().1.account.clone();
    assert!(
        round_trip(&account, &entities, Path::RawBatch).is_err(),
        "the emulator now reads this change set right: batch_carries_keys can be relaxed"
    );
}

/// Shrunk by the property above: a PartitionKey containing `RowKey='` (any case) made the
/// emulator read the RowKey from inside the PartitionKey.
#[test]
fn regression_row_key_marker_in_a_partition_key() {
    for pk in ["x rowkey='y", "ROWKEY="] {
        let entities = partition(pk, &[("r", "1"), ("s", "2")]);
        assert_round_trips(entities.clone(), Path::Restore);
        assert_round_trips(entities, Path::OneByOne);
    }
}

/// Shrunk by the property above: an empty PartitionKey with the RowKey `,` was stored
/// as PartitionKey `',RowKey=` (the RowKey's opening quote and comma end the greedy
/// PartitionKey pattern).
#[test]
fn regression_row_key_starting_with_a_comma() {
    let entities = partition("", &[(",", "1")]);
    assert_round_trips(entities.clone(), Path::Restore);
    assert_round_trips(entities.clone(), Path::OneByOne);
    let account = env().1.account.clone();
    assert!(round_trip(&account, &entities, Path::RawBatch).is_err());
}

/// The largest entities the service stores: 252 properties of every type, and one of
/// about 1 MiB on the wire (11 binary properties of 64 KiB and a 16,000-unit string),
/// with 1 KiB keys. (Azurite measures an entity by its JSON, base64 included, so it
/// refuses binary-heavy entities between about 0.75 and 1 MiB that Azure stores; see
/// docs/ARCHITECTURE.md.)
#[test]
fn the_largest_entities_round_trip() {
    let mut wide = Entity::new("w".repeat(512), "\u{1F600}".repeat(256));
    for i in 0..252 {
        let value = match i % 6 {
            0 => EdmValue::String(format!("v{i}\u{2028}")),
            1 => EdmValue::Int32(i32::MIN + i),
            2 => EdmValue::Int64(i64::MAX - i64::from(i)),
            3 => EdmValue::Double(f64::from(i) / 7.0),
            4 => EdmValue::Boolean(i % 2 == 0),
            _ => EdmValue::Binary(vec![i as u8; 16]),
        };
        wide = wide.with(format!("P{i:03}"), value);
    }
    let mut big = Entity::new("b", "big");
    for i in 0..11 {
        big = big.with(
            format!("Bin{i:02}"),
            EdmValue::Binary(vec![i as u8; 65_536]),
        );
    }
    big = big.with("Text", EdmValue::String("\u{2029}x".repeat(8_000)));
    for path in [Path::Restore, Path::OneByOne] {
        assert_round_trips(vec![wide.clone()], path);
        assert_round_trips(vec![big.clone()], path);
    }
}

/// Keys with line separators: the emulator's key patterns stop at them.
#[test]
fn regression_line_separator_in_keys() {
    let entities = partition("a',\u{2028}b", &[("r\u{2029}')", "1"), ("s", "2")]);
    assert_round_trips(entities.clone(), Path::Restore);
    assert_round_trips(entities, Path::OneByOne);
}
