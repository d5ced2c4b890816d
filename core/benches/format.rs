//! CPU cost of the backup format, in entities per second on one core (criterion runs
//! single-threaded):
//!
//! * `block_encode`: pushing entities into the `Packer` and sealing blocks, uncompressed
//!   (the serialization alone), and with zstd (what a backup does after reading a page);
//! * `compress` / `decompress`: one full default-size block, each `Compression`;
//! * `restore`: decoding a block and building the entity group transaction bodies of its
//!   batches (what a restore worker does per entity before sending), from the XML and
//!   from the stored zstd bytes through the store's checks.
//!
//! Times are the benchmarking thread's CPU time (see [`Clock`]); `BENCH_CLOCK=wall`
//! measures wall-clock time instead. Run with `cargo bench -p tablevault-core --bench format`.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use tablevault_azure::table::{
    BatchOperation, EdmValue, Entity, batch_carries_keys, batch_request_body,
};
use tablevault_core::format::{
    Compression, MAX_BLOCK_BYTES, Packer, PackerConfig, SealedBlock, decode_block,
};
use tablevault_core::protocol::BlockRecord;
use tablevault_core::store::decode_checked;

/// Entities per benchmark input: more than one default block holds.
const ENTITIES: u64 = 10_000;
/// Rows per partition, so batches are full (100).
const PER_PARTITION: u64 = 1000;

/// The sample entity of `dev/src/sample.rs` (every Edm type), number `i` of a table with
/// `partitions` partitions, with the Timestamp and ETag the service adds when it is read.
fn sample_entity(i: u64, partitions: u64) -> Entity {
    let p = i % partitions.max(1);
    let payload: Vec<u8> = (0..(16 + i % 48)).map(|b| (b * 31 + i) as u8).collect();
    let notes = if i.is_multiple_of(10) {
        format!("Order {i} for customer {p}: ünïcödé ✓ 😀\r\nsecond line")
    } else {
        format!("Order {i} for customer {p}")
    };
    let mut e = Entity::new(format!("customer-{p:05}"), format!("order-{i:010}"))
        .with("Amount", EdmValue::Double(i as f64 * 1.25 + 0.01))
        .with("Quantity", EdmValue::Int32((i % 1000) as i32))
        .with("Total", EdmValue::Int64(i as i64 * 1_000_003))
        .with(
            "Created",
            EdmValue::DateTime(format!(
                "2024-{:02}-{:02}T{:02}:{:02}:{:02}.{:07}Z",
                1 + i % 12,
                1 + i % 28,
                i % 24,
                i % 60,
                (i / 60) % 60,
                (i * 7919) % 10_000_000
            )),
        )
        .with(
            "OrderId",
            EdmValue::Guid(format!("{:08x}-0000-4000-8000-{:012x}", i, i * 31)),
        )
        .with("Paid", EdmValue::Boolean(i.is_multiple_of(3)))
        .with("Notes", EdmValue::String(notes))
        .with("Payload", EdmValue::Binary(payload));
    let ts = format!(
        "2026-11-22T11:{:02}:{:02}.{:07}Z",
        (i / 60) % 60,
        i % 60,
        (i * 104_729) % 10_000_000
    );
    e.etag = Some(format!("W/\"datetime'{}'\"", ts.replace(':', "%3A")));
    e.timestamp = Some(ts);
    e
}

/// A table's worth of sample entities, in key order, as a backup reads them.
fn sample_table() -> Vec<Entity> {
    let partitions = ENTITIES / PER_PARTITION;
    let mut all: Vec<Entity> = (0..ENTITIES)
        .map(|i| sample_entity(i, partitions))
        .collect();
    all.sort_by(|a, b| (&a.partition_key, &a.row_key).cmp(&(&b.partition_key, &b.row_key)));
    all
}

fn pack(compression: Compression, entities: Vec<Entity>) -> Vec<SealedBlock> {
    let mut packer = Packer::new(PackerConfig::new("Orders", compression));
    let mut blocks = Vec::new();
    for e in entities {
        blocks.extend(packer.push(e));
    }
    blocks.extend(packer.finish());
    blocks
}

/// One full default-size block of sample entities: its XML and its counts.
fn full_block() -> SealedBlock {
    pack(Compression::None, sample_table()).swap_remove(0)
}

fn config() -> Criterion<Clock> {
    Criterion::default()
        .with_measurement(Clock::from_env())
        .sample_size(20)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5))
}

fn block_encode(c: &mut Criterion<Clock>) {
    let entities = sample_table();
    let raw: usize = pack(Compression::None, entities.clone())
        .iter()
        .map(|b| b.raw_len)
        .sum();
    eprintln!(
        "block_encode: {} entities, {raw} bytes of XML ({} per entity)",
        entities.len(),
        raw / entities.len()
    );
    let mut g = c.benchmark_group("block_encode");
    g.throughput(Throughput::ElementsAndBytes {
        elements: entities.len() as u64,
        bytes: raw as u64,
    });
    for compression in [Compression::None, Compression::Zstd] {
        g.bench_function(compression.as_str(), |b| {
            b.iter_batched(
                || entities.clone(),
                |input| pack(compression, input),
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

fn compression(c: &mut Criterion<Clock>) {
    let block = full_block();
    let xml = block.data.to_vec();
    for dir in ["compress", "decompress"] {
        let mut g = c.benchmark_group(dir);
        g.throughput(Throughput::ElementsAndBytes {
            elements: block.entities as u64,
            bytes: xml.len() as u64,
        });
        for compression in [Compression::None, Compression::Zstd, Compression::Gzip] {
            let stored = compression.compress(&xml);
            if dir == "compress" {
                eprintln!(
                    "{compression}: block of {} entities, {} bytes of XML stored in {} ({:.1}%)",
                    block.entities,
                    xml.len(),
                    stored.len(),
                    100.0 * stored.len() as f64 / xml.len() as f64
                );
                g.bench_function(compression.as_str(), |b| {
                    b.iter(|| compression.compress(black_box(&xml)))
                });
            } else {
                assert_eq!(compression.decompress(&stored, xml.len()).unwrap(), xml);
                g.bench_function(compression.as_str(), |b| {
                    b.iter(|| {
                        compression
                            .decompress(black_box(&stored), MAX_BLOCK_BYTES)
                            .unwrap()
                    })
                });
            }
        }
        g.finish();
    }
}

/// What a restore worker does with a decoded block's batches before sending them: keys
/// a change set cannot carry go alone, the rest become upserts in one multipart body.
fn batch_bodies(batches: Vec<Vec<Entity>>) -> usize {
    let endpoint = "https://target.table.core.windows.net";
    let mut bytes = 0;
    for batch in batches {
        let (grouped, single): (Vec<Entity>, Vec<Entity>) = batch
            .into_iter()
            .partition(|e| batch_carries_keys(&e.partition_key, &e.row_key));
        black_box(single);
        let ops: Vec<BatchOperation> = grouped
            .into_iter()
            .map(BatchOperation::InsertOrReplace)
            .collect();
        bytes += batch_request_body(
            endpoint,
            "Orders",
            &ops,
            "batch_0123456789abcdef0123456789abcdef",
            "changeset_0123456789abcdef0123456789abcdef",
        )
        .len();
    }
    bytes
}

fn restore(c: &mut Criterion<Clock>) {
    let block = full_block();
    let xml = block.data.to_vec();
    let stored = Compression::Zstd.compress(&xml);
    let record = BlockRecord {
        id: "00000000".into(),
        offset: 0,
        length: stored.len() as u64,
        raw_length: xml.len() as u64,
        entities: block.entities as u64,
        batches: block.batches as u64,
        sha256: tablevault_core::format::hex(&sha2_digest(&stored)),
        first_key: block.first_key.clone(),
        last_key: block.last_key.clone(),
        marks: block.marks.clone(),
    };
    decode_checked(&stored, "blob", &record, Compression::Zstd).unwrap();

    let mut g = c.benchmark_group("restore");
    g.throughput(Throughput::ElementsAndBytes {
        elements: block.entities as u64,
        bytes: xml.len() as u64,
    });
    g.bench_function("decode_block", |b| {
        b.iter(|| decode_block(black_box(&xml)).unwrap())
    });
    g.bench_function("decode_and_batch_bodies", |b| {
        b.iter(|| batch_bodies(decode_block(black_box(&xml)).unwrap().batches))
    });
    g.bench_function("checked_zstd_and_batch_bodies", |b| {
        b.iter(|| {
            let decoded =
                decode_checked(black_box(&stored), "blob", &record, Compression::Zstd).unwrap();
            batch_bodies(decoded.batches)
        })
    });
    g.finish();
}

fn sha2_digest(data: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(data).to_vec()
}

/// What the benchmarks time: the CPU time of the benchmarking thread (the default), so the
/// figures are per core even on a machine busy with other work, or with `BENCH_CLOCK=wall`
/// criterion's usual wall-clock time.
struct Clock {
    wall: bool,
}

impl Clock {
    fn from_env() -> Self {
        Clock {
            wall: std::env::var("BENCH_CLOCK").is_ok_and(|v| v == "wall"),
        }
    }

    fn now(&self) -> Duration {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        if self.wall {
            EPOCH.get_or_init(std::time::Instant::now).elapsed()
        } else {
            thread_cpu_time()
        }
    }
}

#[cfg(unix)]
fn thread_cpu_time() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `t` is, and reads nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(not(unix))]
fn thread_cpu_time() -> Duration {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(std::time::Instant::now).elapsed()
}

impl Measurement for Clock {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        self.now()
    }
    fn end(&self, start: Duration) -> Duration {
        self.now().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = block_encode, compression, restore
}
criterion_main!(benches);
