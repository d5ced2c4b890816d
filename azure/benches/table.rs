//! CPU cost of the Table client's hot paths, in entities per second on one core
//! (criterion runs single-threaded):
//!
//! * `page_decode`: one Query Entities response page of 1000 entities, minimal metadata
//!   (what the client asks for), into typed entities;
//! * `batch_body`: entity group transaction request bodies for 1000 entities in change
//!   sets of 100 (what a restore sends).
//!
//! Times are the benchmarking thread's CPU time (see [`Clock`]); `BENCH_CLOCK=wall`
//! measures wall-clock time instead. Run with `cargo bench -p tablevault-azure --bench table`.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tablevault_azure::table::{
    BatchOperation, EdmValue, Entity, batch_request_body, entities_from_page_json,
};

/// Entities in a full page, the most the service returns.
const PAGE: u64 = 1000;

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

/// The first page of a table of `PAGE * partitions` sample entities, in key order.
fn sample_page() -> Vec<Entity> {
    let partitions = 10;
    let mut all: Vec<Entity> = (0..PAGE * partitions)
        .map(|i| sample_entity(i, partitions))
        .collect();
    all.sort_by(|a, b| (&a.partition_key, &a.row_key).cmp(&(&b.partition_key, &b.row_key)));
    all.truncate(PAGE as usize);
    all
}

fn push_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap());
}

/// The entities as the service returns them with `odata=minimalmetadata`: ETag, keys,
/// Timestamp, then the properties, annotated where JSON cannot tell the type (Int64,
/// DateTime, Guid, Binary); doubles are bare numbers.
fn page_json(entities: &[Entity]) -> String {
    let mut out = String::from(
        "{\"odata.metadata\":\"https://myaccount.table.core.windows.net/$metadata#Orders\",\"value\":[",
    );
    for (n, e) in entities.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str("{\"odata.etag\":");
        push_str(&mut out, e.etag.as_deref().unwrap());
        out.push_str(",\"PartitionKey\":");
        push_str(&mut out, &e.partition_key);
        out.push_str(",\"RowKey\":");
        push_str(&mut out, &e.row_key);
        out.push_str(",\"Timestamp\":");
        push_str(&mut out, e.timestamp.as_deref().unwrap());
        for (name, value) in &e.properties {
            if matches!(
                value,
                EdmValue::Int64(_)
                    | EdmValue::DateTime(_)
                    | EdmValue::Guid(_)
                    | EdmValue::Binary(_)
            ) {
                out.push_str(&format!(
                    ",\"{name}@odata.type\":\"{}\"",
                    value.edm_type().name()
                ));
            }
            out.push_str(&format!(",\"{name}\":"));
            match value {
                EdmValue::String(s) | EdmValue::DateTime(s) | EdmValue::Guid(s) => {
                    push_str(&mut out, s)
                }
                EdmValue::Boolean(b) => out.push_str(&b.to_string()),
                EdmValue::Int32(i) => out.push_str(&i.to_string()),
                EdmValue::Int64(i) => out.push_str(&format!("\"{i}\"")),
                EdmValue::Double(d) => out.push_str(&format!("{d:?}")),
                EdmValue::Binary(b) => {
                    use base64::Engine;
                    push_str(
                        &mut out,
                        &base64::engine::general_purpose::STANDARD.encode(b),
                    )
                }
            }
        }
        out.push('}');
    }
    out.push_str("]}");
    out
}

fn page_decode(c: &mut Criterion<Clock>) {
    let entities = sample_page();
    let body = page_json(&entities).into_bytes();
    // The benchmark measures what it claims: the page decodes back to the sample.
    assert_eq!(entities_from_page_json(&body).unwrap(), entities);
    eprintln!(
        "page_decode: {} entities, {} bytes of JSON ({} per entity)",
        entities.len(),
        body.len(),
        body.len() / entities.len()
    );
    let mut g = c.benchmark_group("page_decode");
    g.throughput(Throughput::ElementsAndBytes {
        elements: entities.len() as u64,
        bytes: body.len() as u64,
    });
    g.bench_function("minimalmetadata_1000", |b| {
        b.iter(|| entities_from_page_json(black_box(&body)).unwrap())
    });
    g.finish();
}

fn batch_body(c: &mut Criterion<Clock>) {
    let ops: Vec<BatchOperation> = sample_page()
        .into_iter()
        .map(BatchOperation::InsertOrReplace)
        .collect();
    let endpoint = "https://myaccount.table.core.windows.net";
    let bytes: usize = ops
        .chunks(100)
        .map(|c| batch_request_body(endpoint, "Orders", c, "batch_x", "changeset_x").len())
        .sum();
    eprintln!(
        "batch_body: {} entities, {bytes} bytes of request bodies ({} per entity)",
        ops.len(),
        bytes / ops.len()
    );
    let mut g = c.benchmark_group("batch_body");
    g.throughput(Throughput::ElementsAndBytes {
        elements: ops.len() as u64,
        bytes: bytes as u64,
    });
    g.bench_function("upsert_1000_in_10", |b| {
        b.iter(|| {
            for chunk in black_box(&ops).chunks(100) {
                black_box(batch_request_body(
                    endpoint,
                    "Orders",
                    chunk,
                    "batch_0123456789abcdef0123456789abcdef",
                    "changeset_0123456789abcdef0123456789abcdef",
                ));
            }
        })
    });
    g.finish();
}

fn config() -> Criterion<Clock> {
    Criterion::default()
        .with_measurement(Clock::from_env())
        .sample_size(20)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5))
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
    targets = page_decode, batch_body
}
criterion_main!(benches);
