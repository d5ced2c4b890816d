//! A deterministic sample table for the demo, the benchmark and tests: entities that use
//! every Edm type, spread over partitions, loaded with idempotent batches.

use futures::StreamExt;
use tablevault_azure::table::{BatchOperation, EdmValue, Entity, TableClient};

/// The sample entity number `i` of a table with `partitions` partitions.
pub fn sample_entity(i: u64, partitions: u64) -> Entity {
    let p = i % partitions.max(1);
    let payload: Vec<u8> = (0..(16 + i % 48)).map(|b| (b * 31 + i) as u8).collect();
    let notes = if i.is_multiple_of(10) {
        format!("Order {i} for customer {p}: ünïcödé ✓ 😀\r\nsecond line")
    } else {
        format!("Order {i} for customer {p}")
    };
    Entity::new(format!("customer-{p:05}"), format!("order-{i:010}"))
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
        .with("Payload", EdmValue::Binary(payload))
}

/// Loads entities `0..count` into `table` (created if missing) with `concurrency` batches
/// in flight. Upserts, so loading twice is harmless.
pub async fn load_sample(
    client: &TableClient,
    table: &str,
    count: u64,
    partitions: u64,
    concurrency: usize,
) -> tablevault_azure::Result<()> {
    client.create_table(table).await?;
    let partitions = partitions.max(1);
    let batches = (0..partitions).flat_map(move |p| {
        let rows: Vec<u64> = (p..count).step_by(partitions as usize).collect();
        rows.chunks(100)
            .map(|c| {
                c.iter()
                    .map(|&i| BatchOperation::InsertOrReplace(sample_entity(i, partitions)))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    });
    let mut results = futures::stream::iter(batches)
        .map(|ops| async move { client.submit_batch(table, &ops).await })
        .buffer_unordered(concurrency.max(1));
    while let Some(r) = results.next().await {
        r?;
    }
    Ok(())
}
